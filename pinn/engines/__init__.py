"""Compiled CPU engines for PiNet and PiNet2 potentials, an optimisation of the TensorFlow networks.

The MD kernels run PiNet and PiNet2 (their blocks, activations, cutoffs and radial bases; PiNet2 at each
rank, weighted or not), the training kernels PiNet and PiNet2 (tanh); every other network (BPNN, LJ) and
every model but the potential run in TensorFlow, and :func:`pinn.engines.lowering.capability` says why,
naming the setting.

- :mod:`pinn.engines.lowering`: whether an engine can run a model, and the model's weights
  lowered to NumPy arrays (the one boundary between TensorFlow modules and the kernels);
- :mod:`pinn.engines.md`: energy, forces and stress for MD (:class:`~pinn.engines.md.FastPiNet`);
- :mod:`pinn.engines.gradients`: the training loss and its gradients
  (:class:`~pinn.engines.gradients.TrainingEngine`);
- :mod:`pinn.engines.host_optimizer`: the update of a one-process numba step on the host;
- :mod:`pinn.engines.heap`: the C library's heap kept mapped between the engines' calls;
- :mod:`pinn.engines.exported`: the lowered weights in a NumPy file beside a checkpoint;
- :mod:`pinn.md.velocities`: thermal velocities for the start of an MD run (ASE, any model);
- :mod:`pinn.engines.numba`: the kernels themselves (NumPy and Numba only), and the layout of the
  arrays they read, with named columns and codes (:mod:`pinn.engines.numba.layout`).

Every network exists fully in TensorFlow; a model an engine cannot run runs in TensorFlow.
"""
