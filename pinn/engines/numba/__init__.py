"""The Numba kernels: :mod:`~pinn.engines.numba.md_kernels` (PiNet's forward pass and its
derivative by the positions), :mod:`~pinn.engines.numba.pinet2_kernels` (PiNet2's),
:mod:`~pinn.engines.numba.train_kernels` (the weight gradients of PiNet's energy and force loss)
and :mod:`~pinn.io.verlet_filter` (pairs within the cutoff).  They import NumPy and Numba only."""
