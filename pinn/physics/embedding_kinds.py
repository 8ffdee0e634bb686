"""How a potential model's QM region meets its MM environment (``model.params.embedding``): the kinds, each
saying what it can do, read from the params in one place (:func:`embedding_of`).

Everyone else asks the kind, never the name: what the calculator gives (:attr:`Embedding.gives`), whether a
model of it sees QM/MM frames whole or their QM region alone (:attr:`Embedding.sees_environment`), whether XLA
compiles its step (:attr:`Embedding.compiles_with_xla`), what it needs of the network
(:attr:`Embedding.network_needs`), whether D3 may be added beside it (:attr:`Embedding.takes_dispersion`).
The potential model of each kind: :data:`pinn.physics.embedded_potential.POTENTIAL_KINDS`, chosen once by
:func:`pinn.physics.registry.model_class`.

A new kind (a polarizable embedding, say) is one more :class:`Embedding` here, its model class beside
``embedded_potential.py`` and its entry in ``POTENTIAL_KINDS``; docs/architecture.md lists the files it touches.

Standard library only (``pinn.physics`` imports nothing on its own): the calculator of a model file reads it without
TensorFlow.
"""
import dataclasses

#: the params key that names the kind
KEY = "embedding"


@dataclasses.dataclass(frozen=True)
class Embedding:
    """One kind of embedding and what a model of it can do.

    Attributes:
        name: its name in ``model.params.embedding``.
        sees_environment: the model takes QM/MM frames whole (the MM atoms' charges act on the region; forces
            on every atom); otherwise it sees a QM region alone, and QM/MM frames are cut to their region for it.
        gives: the properties its calculator gives (ASE's names).
        compiles_with_xla: whether XLA can compile its training step and predictions (fixed pair shapes).
        network_needs: network params it needs ({key: value}), set by :func:`pinn.params.resolve` where the
            params leave them unset.
        takes_dispersion: whether D3 may be summed beside it (a QM/MM frame's D3 is not the region's).
        damped: whether ``model.params.embedding_damping`` means anything to it.
        what: one line for messages and the docs.
    """

    name: str
    sees_environment: bool
    gives: tuple
    compiles_with_xla: bool
    network_needs: tuple
    takes_dispersion: bool
    damped: bool
    what: str

    @property
    def gives_stress(self):
        return "stress" in self.gives

    @property
    def gives_atomic_energies(self):
        return "energies" in self.gives

    def __str__(self):
        return self.name


MECHANICAL = Embedding(
    "mechanical", sees_environment=False, gives=("energy", "free_energy", "energies", "forces", "stress"),
    compiles_with_xla=True, network_needs=(), takes_dispersion=True, damped=False,
    what="the network sees the QM atoms alone; QM/MM frames are cut to their region")
ELECTROSTATIC = Embedding(
    "electrostatic", sees_environment=True, gives=("energy", "free_energy", "forces", "charges"),
    compiles_with_xla=False, network_needs=(("out_units", 2),), takes_dispersion=False, damped=True,
    what="the energy in the field of the MM point charges: the network's atomic charges, conserved, times the MM "
         "charges' Coulomb potential; forces on QM and MM atoms; two outputs per atom (energy, charge)")

#: the kinds by name
KINDS = {kind.name: kind for kind in (MECHANICAL, ELECTROSTATIC)}


def embedding_of(options):
    """The kind that model options name.

    Args:
        options: ``model.params`` or engine weights (a dict; without ``embedding``, or with ``None``:
            mechanical), a kind's name, or an :class:`Embedding` (returned as it is).

    Returns:
        :class:`Embedding`.

    Raises:
        ValueError: a name that is no kind, naming the kinds.
    """
    if isinstance(options, Embedding):
        return options
    name = options if isinstance(options, str) else (options or {}).get(KEY) or MECHANICAL.name
    try:
        return KINDS[name]
    except (KeyError, TypeError):
        raise ValueError(f"embedding {name!r}: not one of {sorted(KINDS)}") from None
