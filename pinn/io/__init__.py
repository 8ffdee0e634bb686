"""Data loading: loaders produce ``tf.data.Dataset`` objects of structures keyed as in :mod:`pinn.keys`.

- :func:`load_ase`: any ASE-readable file (or a list of them), an ASE database, a list of ``Atoms``;
- :func:`load_numpy`: a dict of arrays;
- :func:`load_mimic`: the files a MiMiC QM/MM run leaves (``.mpt``, ``.trr``, ``ENERGIES``);
- upstream PiNN's format loaders, giving the values upstream gives (``units=`` converts):
  :func:`load_qm9` (QM9 ``.xyz``),
  :func:`load_ani` (ANI-1 HDF5, needs h5py), :func:`load_cp2k` (CP2K output, trajectory, cell
  file), :func:`load_deepmd` (DeePMD-kit systems), :func:`load_runner` (RuNNer ``input.data``),
  :func:`load_qm7b` (QM7b polarizabilities);
- :func:`load_ds`: upstream PiNN's one loader for every format, by name or guessed from the file name;
- :func:`distribute_data`: this rank's share of parallel file lists;
- :func:`list_loader`: write your own loader from a function of one item;
- :func:`sparse_batch`: batch structures of different sizes;
- :func:`add_neighbors`: precompute neighbor lists in the pipeline;
- :func:`with_cell_and_pbc`: ``cell`` and ``pbc`` for structures whose loader gave none (molecules,
  a cell without ``pbc``), as the models read them;
- :func:`split_batch`: a sparse batch in parts of consecutive structures;
- :func:`write_tfrecord` / :func:`load_tfrecord`: a preprocessed cache.

The file readers in :mod:`pinn.io.readers` (trr, mpt, ENERGIES, ndx, CPMD, QM9, RuNNer,
DeePMD-kit, CP2K, QM7b) work on
their own with NumPy and do not import TensorFlow; the names above are imported on
first use, so ``import pinn.io.readers.trr`` stays light.
"""
from pinn.runtime.lazy import lazy_exports

_EXPORTS = {
    "DataError": "pinn.io.errors",
    "Frame": "pinn.io.base", "check_structure": "pinn.io.structure", "list_loader": "pinn.io.base",
    "split_items": "pinn.io.splits",
    "atoms_to_structure": "pinn.io.ase_structure", "load_ase": "pinn.io.ase_data",
    "load_numpy": "pinn.io.numpy_data",
    "load_mimic": "pinn.io.mimic",
    "load_qm9": "pinn.io.qm9", "load_ani": "pinn.io.ani", "load_cp2k": "pinn.io.cp2k",
    "load_deepmd": "pinn.io.deepmd", "load_runner": "pinn.io.runner", "load_qm7b": "pinn.io.qm7b",
    "distribute_data": "pinn.io.distribute",
    "add_neighbors": "pinn.io.batch", "sparse_batch": "pinn.io.batch", "split_batch": "pinn.io.batch",
    "with_cell_and_pbc": "pinn.io.batch",
    "load_tfrecord": "pinn.io.tfrecord", "write_tfrecord": "pinn.io.tfrecord",
    "load_ds": "pinn.io.formats",
    "qm_region": "pinn.io.qmmm",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
