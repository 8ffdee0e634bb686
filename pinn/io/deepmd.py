"""Load DeePMD-kit data systems (``deepmd/npy`` and ``deepmd/raw``), as upstream PiNN's ``load_deepmd`` does."""
import glob
import os

import numpy as np

from pinn import keys as K
from pinn.io.base import DataError, Frame, ItemReader
from pinn.io.readers.deepmd_system import DeepmdSystem
from pinn.io.splits import chosen_split, split_items


def load_deepmd(systems, type_map=None, pbc=True, shuffle=True, seed=0, splits=None, *, split=False):
    """Load the frames of DeePMD-kit systems.

    Args:
        systems: a system directory (with ``type.raw``), a directory whose subdirectories
            (at any depth) are systems, or a list of either; the frames of every system, in order.
        type_map: the elements of the type indices of ``type.raw`` when a system has no
            ``type_map.raw`` (or to check it): a list of symbols (type ``i`` is
            ``type_map[i]``, DeePMD-kit's form), a dict symbol or atomic number → type index
            (upstream PiNN's form), or a file of symbols one per line; ``None``/``True``: each
            system's ``type_map.raw``.
        pbc: ``False`` loads every frame as an open system; a system with an empty ``nopbc``
            file is open anyway.
        shuffle, seed: as for :func:`pinn.io.load_ase` (frames are the items).
        splits, split: the split (upstream PiNN's ``load_deepmd`` has none; give one of the two).

    Returns:
        A ``tf.data.Dataset`` of structures (or a nested dict of them): ``elems``, ``coord``
        (Å), ``cell`` (Å) and ``pbc`` (all true for a periodic system), and of the labels every
        system has: ``e_data`` (eV, ``energy``), ``f_data`` (eV/Å, ``force``), ``s_data``
        (eV/Å³, −``virial``/volume in ASE's sign convention; periodic systems), as float32.
        DeePMD-kit's units are pinn's: nothing else is converted.

    Raises:
        DataError: no systems found, systems that differ in labels or periodicity, and
            everything :class:`pinn.io.readers.deepmd_system.DeepmdSystem` refuses (naming the file).
    """
    split = chosen_split(split, splits, "load_deepmd")
    loaded = [DeepmdSystem(path, type_map=type_map, pbc=pbc) for path in _system_dirs(systems)]
    first = loaded[0]
    for system in loaded[1:]:
        if (system.labels, system.periodic) != (first.labels, first.periodic):
            raise DataError(f"{system.path}: labels {list(system.labels)}, periodic {system.periodic}; but "
                            f"{first.path}: labels {list(first.labels)}, periodic {first.periodic}: the systems of "
                            "one data set need the same")
    items = [Frame(f"{system.set_name(k)}, frame {i}", (s, k, i))
             for s, system in enumerate(loaded) for k, i in system.frames]
    if not items:
        raise DataError(f"load_deepmd: the systems {[s.path for s in loaded]} have no frames")

    def read_deepmd_frame(item):
        s, k, i = item.payload
        frame = loaded[s].read(k, i)
        out = {K.ELEMS: frame["elems"], K.COORD: frame["coord"]}
        if "cell" in frame:
            out[K.CELL] = frame["cell"]
            out[K.PBC] = np.ones(3, bool)
        for key, name in ((K.E_DATA, "energy"), (K.F_DATA, "forces"), (K.S_DATA, "stress")):
            if name in frame:
                out[key] = frame[name]
        return out

    return ItemReader(read_deepmd_frame, "load_deepmd").datasets(split_items(items, split, shuffle=shuffle, seed=seed))


def _system_dirs(systems):
    paths = [systems] if isinstance(systems, (str, os.PathLike)) else list(systems)
    if not paths:
        raise DataError("load_deepmd: the list of systems is empty")
    found = []
    for path in map(os.fspath, paths):
        if os.path.isfile(os.path.join(path, "type.raw")) or not os.path.isdir(path):
            found.append(path)  # a system (or a missing path, which DeepmdSystem names)
            continue
        below = sorted(os.path.dirname(p) for p in glob.glob(os.path.join(path, "**", "type.raw"), recursive=True))
        if not below:
            raise DataError(f"{path}: neither a DeePMD-kit system (no type.raw) nor a directory of systems")
        found += below
    return found
