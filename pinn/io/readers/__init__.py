"""Readers and writers of the files a MiMiC QM/MM run leaves, with NumPy only (no TensorFlow).

- :mod:`pinn.io.readers.trr`: GROMACS ``.trr`` trajectories (coordinates, box, forces);
- :mod:`pinn.io.readers.mpt`: MiMiCPy ``.mpt`` topologies;
- :mod:`pinn.io.readers.energies`: CPMD ``ENERGIES`` files;
- :mod:`pinn.io.readers.ndx`: GROMACS index groups;
- :mod:`pinn.io.readers.cpmd`: CPMD input files (the QM atoms and their order).

Each converts to pinn's units on the way in (:mod:`pinn.units`) and raises
:class:`pinn.io.errors.DataError` naming the file, the frame and the problem.
"""
