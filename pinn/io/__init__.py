"""Data loading: loaders produce ``tf.data.Dataset`` objects of structures keyed as in :mod:`pinn.keys`.

- :func:`load_ase`: any ASE-readable file, an ASE database, a list of ``Atoms``;
- :func:`load_numpy`: a dict of arrays;
- :func:`load_mimic`: the files a MiMiC QM/MM run leaves (``.mpt``, ``.trr``, ``ENERGIES``);
- :func:`distribute_data`: this rank's share of parallel file lists;
- :func:`list_loader`: write your own loader from a function of one item;
- :func:`sparse_batch`: batch structures of different sizes;
- :func:`add_neighbors`: precompute neighbor lists in the pipeline;
- :func:`split_batch`: a sparse batch in parts of consecutive structures;
- :func:`write_tfrecord` / :func:`load_tfrecord`: a preprocessed cache.

The file readers :mod:`pinn.io.trr`, :mod:`pinn.io.mpt`, :mod:`pinn.io.energies`
and :mod:`pinn.io.ndx` work on their own and do not import TensorFlow; the names
above are imported on first use, so ``import pinn.io.trr`` stays light.
"""
import importlib

_EXPORTS = {
    "DataError": "pinn.io.errors",
    "Frame": "pinn.io.base", "check_structure": "pinn.io.base", "list_loader": "pinn.io.base",
    "split_items": "pinn.io.base",
    "atoms_to_structure": "pinn.io.ase_data", "load_ase": "pinn.io.ase_data",
    "load_numpy": "pinn.io.numpy_data",
    "load_mimic": "pinn.io.mimic",
    "distribute_data": "pinn.io.distribute",
    "add_neighbors": "pinn.io.batch", "sparse_batch": "pinn.io.batch", "split_batch": "pinn.io.batch",
    "load_tfrecord": "pinn.io.tfrecord", "write_tfrecord": "pinn.io.tfrecord",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'pinn.io' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
