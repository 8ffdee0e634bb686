"""Data loading: loaders produce ``tf.data.Dataset`` objects of structures keyed as in :mod:`pinn.keys`.

- :func:`load_ase`: any ASE-readable file, an ASE database, a list of ``Atoms``;
- :func:`load_numpy`: a dict of arrays;
- :func:`list_loader`: write your own loader from a function of one item;
- :func:`sparse_batch`: batch structures of different sizes;
- :func:`add_neighbors`: precompute neighbor lists in the pipeline;
- :func:`write_tfrecord` / :func:`load_tfrecord`: a preprocessed cache.
"""
from pinn.io.base import DataError, Frame, check_structure, list_loader, split_items
from pinn.io.ase_data import atoms_to_structure, load_ase
from pinn.io.numpy_data import load_numpy
from pinn.io.batch import add_neighbors, sparse_batch
from pinn.io.tfrecord import load_tfrecord, write_tfrecord

__all__ = ["DataError", "Frame", "check_structure", "list_loader", "split_items", "atoms_to_structure",
           "load_ase", "load_numpy", "add_neighbors", "sparse_batch", "load_tfrecord", "write_tfrecord"]
