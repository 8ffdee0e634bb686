"""Load the ANI-1 data set (HDF5 files of molecules and their conformers), as upstream PiNN's
``load_ani`` does (energies in Hartree, as upstream's; ``units='pinn'`` converts them to eV).

An ANI-1 file (``ani_gdb_s01.h5`` ... ``ani_gdb_s08.h5``; Smith, Isayev and Roitberg,
Sci. Data 4, 170193 (2017)) holds a group per molecule, such as ``gdb11_s01/gdb11_s01-0``,
with the datasets

- ``species`` [n_atoms]: element symbols (bytes), or ``atomic_numbers`` [n_atoms];
- ``coordinates`` [n_conformers, n_atoms, 3]: Å;
- ``energies`` [n_conformers]: Hartree;
- and others (``smiles``...), which are not read.

The data sets are split by molecule, as upstream PiNN splits them: the conformers of one
molecule all land in the same subset.
"""
import functools
import os

import numpy as np

from pinn import keys as K
from pinn.io.base import DataError, Frame, ItemReader
from pinn.io.readers.text import atomic_number
from pinn.io.splits import chosen_split, split_items
from pinn.units import HARTREE


def _h5py():
    try:
        import h5py
    except ImportError:
        raise ImportError("load_ani reads HDF5 files with h5py, which is not installed: pip install h5py "
                          "(or pinn's extra: pip install -e .[ani])") from None
    return h5py


def load_ani(filelist, split=False, shuffle=True, seed=0, splits=None, *, units="file"):
    """Load the conformers of ANI-1 HDF5 files.

    Args:
        filelist: an ANI-1 ``.h5`` file or a list of them.
        split, shuffle, seed, splits: as for :func:`pinn.io.load_ase`, but the items split and
            shuffled are the molecules (every conformer of a molecule lands in the same
            subset, in the file's order).  Upstream PiNN's ``cycle_length`` is not taken.
        units: ``'file'`` (upstream's: ``e_data`` in the files' Hartree) or ``'pinn'`` (eV: Hartree
            times :data:`pinn.units.HARTREE`).

    Returns:
        A ``tf.data.Dataset`` of structures (or a nested dict of them) with ``elems``,
        ``coord`` (Å) and ``e_data``, as float32 (no ``cell``: open molecules).

    Raises:
        ImportError: h5py is not installed.
        DataError: a missing file or one that is not HDF5, no molecule groups, a molecule
            whose datasets disagree in shape or that names an unknown element (naming the file
            and group), or a non-finite energy (naming the conformer, when it is read).
    """
    if units not in ("file", "pinn"):
        raise DataError(f"load_ani: units={units!r}; known: 'file' (upstream PiNN's: Hartree) or 'pinn' (eV)")
    factor = HARTREE if units == "pinn" else 1.0
    h5py = _h5py()
    split = chosen_split(split, splits, "load_ani")
    files = [os.fspath(filelist)] if isinstance(filelist, (str, os.PathLike)) else [os.fspath(f) for f in filelist]
    if not files:
        raise DataError("load_ani: the list of files is empty")
    molecules = [molecule for path in files for molecule in _molecules(h5py, path)]
    subsets = split_items(molecules, split, shuffle=shuffle, seed=seed)

    def conformers(group):
        return [Frame(f"{path}, {name}, conformer {i}", (path, name, i)) for path, name, n in group for i in range(n)]

    def read_ani_conformer(item):
        path, name, i = item.payload
        elems, coord, energies = _molecule(path, name, os.stat(path).st_mtime_ns)
        return {K.ELEMS: elems, K.COORD: coord[i], K.E_DATA: energies[i] * factor}

    return ItemReader(read_ani_conformer, "load_ani").datasets(_map(subsets, conformers))


def _map(tree, fn):
    return {k: _map(v, fn) for k, v in tree.items()} if isinstance(tree, dict) else fn(tree)


def _molecules(h5py, path):
    """[(path, group name, number of conformers)] of every molecule group of a file, checked."""
    if not os.path.isfile(path):
        raise DataError(f"{path}: no such file")
    found = []
    try:
        store = h5py.File(path, "r")
    except OSError as err:
        raise DataError(f"{path}: not an HDF5 file: {err}") from None
    with store:
        def visit(name, obj):
            if isinstance(obj, h5py.Group) and "coordinates" in obj and "energies" in obj:
                found.append((path, name, _checked(path, name, obj)))
        store.visititems(visit)
    if not found:
        raise DataError(f"{path}: no molecule groups (groups with 'species', 'coordinates' and 'energies')")
    return found


def _checked(path, name, group):
    where = f"{path}, {name}"
    if "species" not in group and "atomic_numbers" not in group:
        raise DataError(f"{where}: no 'species' (or 'atomic_numbers') dataset")
    n_atoms = len(_elements(group, where))
    coordinates = group["coordinates"]
    energies = group["energies"]
    if coordinates.ndim != 3 or coordinates.shape[1:] != (n_atoms, 3):
        raise DataError(f"{where}: 'coordinates' has shape {coordinates.shape}, expected [n_conformers, {n_atoms}, 3]")
    if energies.shape != coordinates.shape[:1]:
        raise DataError(f"{where}: 'energies' has shape {energies.shape}, but there are {coordinates.shape[0]} "
                        "conformers")
    return coordinates.shape[0]


def _elements(group, where):
    if "atomic_numbers" in group:
        return [int(z) for z in group["atomic_numbers"][()]]
    return [atomic_number(s.decode() if isinstance(s, bytes) else str(s), where) for s in group["species"][()]]


@functools.lru_cache(maxsize=8)
def _molecule(path, name, mtime):
    """(elements, coordinates Å, energies Hartree) of one molecule (``mtime``: the file's, so that a
    rewritten file is read again); the datasets read conformer by conformer keep the last few
    molecules, so each is read once per pass."""
    h5py = _h5py()
    with h5py.File(path, "r") as store:
        group = store[name]
        return (np.array(_elements(group, f"{path}, {name}"), np.int32), group["coordinates"][()],
                group["energies"][()])
