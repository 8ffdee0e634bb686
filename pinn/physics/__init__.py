"""The ``Model`` classes: what a network's output means, and the loss of fitting it.

A model holds a network (:mod:`pinn.networks`) and turns its per-atom outputs into physics: energies,
forces and stress (:class:`~pinn.physics.potential.PotentialModel`, a QM region in MM charges included:
:mod:`pinn.physics.embedding`), charges and dipoles (:class:`~pinn.physics.dipole.DipoleModel` and
upstream PiNN 2.x's variants, :mod:`pinn.physics.dipole_variants`), polarizabilities
(:mod:`pinn.physics.polarizability`); and into the loss terms that fit them to data.
:mod:`pinn.physics.registry` names them (``build_model(params)``).

This folder sits below the engines that lower a model and the training loop that fits it
(``docs/architecture.md``); upstream PiNN's model functions that build a model for training
(``potential_model``, ``dipole_model``, ``get_model``) are in :mod:`pinn.models`.
"""
