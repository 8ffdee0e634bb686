"""Compiled CPU engines for PiNet potentials, an optimisation of the TensorFlow networks.

- :mod:`pinn.engines.lowering`: whether an engine can run a model, and the model's weights
  lowered to NumPy arrays (the one boundary between TensorFlow modules and the kernels);
- :mod:`pinn.engines.md`: energy, forces and stress for MD (:class:`~pinn.engines.md.FastPiNet`);
- :mod:`pinn.engines.training`: the training loss and its gradients
  (:class:`~pinn.engines.training.TrainingEngine`);
- :mod:`pinn.engines.host_optimizer`: the update of a one-process numba step on the host;
- :mod:`pinn.engines.exported`: the lowered weights in a NumPy file beside a checkpoint;
- :mod:`pinn.engines.numba`: the kernels themselves (NumPy and Numba only).

Every network exists fully in TensorFlow; a model an engine cannot run runs in TensorFlow.
"""
