"""Readers (and writers) of files, with NumPy only (no TensorFlow), each module named for the files it reads.

The files a MiMiC QM/MM run leaves:

- :mod:`pinn.io.readers.trr`: GROMACS ``.trr`` trajectories (coordinates, box, forces);
- :mod:`pinn.io.readers.mpt`: MiMiCPy ``.mpt`` topologies;
- :mod:`pinn.io.readers.energies`: CPMD ``ENERGIES`` files;
- :mod:`pinn.io.readers.ndx`: GROMACS index groups;
- :mod:`pinn.io.readers.cpmd`: CPMD input files (the QM atoms and their order).

The formats upstream PiNN reads (their loaders, by upstream's module names, are in :mod:`pinn.io`):

- :mod:`pinn.io.readers.qm9_xyz`: QM9's per-molecule ``.xyz`` files;
- :mod:`pinn.io.readers.runner_data`: RuNNer's ``input.data``;
- :mod:`pinn.io.readers.deepmd_system`: DeePMD-kit's data systems;
- :mod:`pinn.io.readers.cp2k_files`: a CP2K run's output, xyz trajectory and ``.cell`` file;
- :mod:`pinn.io.readers.qm7b_xyz`: the QM7b polarizability xyz files;
- :mod:`pinn.io.readers.text`: what the text readers share.

Each converts to pinn's units on the way in (:mod:`pinn.units`) and raises
:class:`pinn.io.errors.DataError` naming the file, the frame and the problem.
"""
