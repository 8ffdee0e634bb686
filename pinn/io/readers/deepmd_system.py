"""A reader for DeePMD-kit's data systems (NumPy only): the ``deepmd/npy`` and ``deepmd/raw`` layouts.

A *system* is a directory of frames that share their atoms (number, order and types)::

    type.raw          the type index of each atom (integers from 0), one system-wide line
    type_map.raw      optional: the name of each type, one per line (O, H, ...)
    nopbc             optional, empty: the system is not periodic
    set.000/          deepmd/npy: one or more sets of frames, each with
        coord.npy     [n_frames, 3·n_atoms] Å
        box.npy       [n_frames, 9] Å, rows a, b, c (XX XY XZ YX ... ZZ); not with nopbc
        energy.npy    [n_frames] eV
        force.npy     [n_frames, 3·n_atoms] eV/Å
        virial.npy    [n_frames, 9] eV
    set.001/ ...

or, in the ``deepmd/raw`` layout, the same arrays as text files in the system directory
(``coord.raw``, ``box.raw``, ``energy.raw``, ``force.raw``, ``virial.raw``; one frame per
line).  DeePMD-kit's units are pinn's (Å, eV, eV/Å); the virial W (eV) becomes the stress
−W/V (eV/Å³, ASE's sign convention), V the volume of the box.
"""
import glob
import os

import numpy as np

from pinn.io.errors import DataError
from pinn.io.readers.text import atomic_number

#: the per-frame arrays: name → (columns per frame, given n_atoms)
_ARRAYS = {"coord": lambda n: 3 * n, "box": lambda n: 9, "energy": lambda n: 1, "force": lambda n: 3 * n,
           "virial": lambda n: 9}
#: label arrays, loaded when every set of the system has them
LABELS = ("energy", "force", "virial")


class DeepmdSystem:
    """One DeePMD-kit system: its atoms, its sets of frames, and each frame on demand.

    Args:
        path: the system directory.
        type_map: the element of each type index, when the system has no ``type_map.raw`` or
            to check it: a list of element symbols (DeePMD-kit's ``type_map``: type ``i`` is
            ``type_map[i]``), a dict element symbol or atomic number → type index (upstream
            PiNN's form), or the name of a file of symbols one per line.  ``None``: the system's
            ``type_map.raw``.
        pbc: ``False`` reads every frame as an open system (no box), as does a ``nopbc`` file.

    Attributes:
        path: the directory.
        elems: [n_atoms] int32 atomic numbers.
        periodic: whether frames have a box.
        labels: the label arrays every set has (a subset of :data:`LABELS`).
        frames: list of ``(set index, frame index in the set)`` of every frame, in order.

    Raises:
        DataError: no ``type.raw`` or a bad one, no way to tell the elements, a ``type_map``
            that disagrees with ``type_map.raw``, no sets and no ``coord.raw``, arrays of the
            wrong shape or with different numbers of frames, a set without ``box`` in a
            periodic system, sets with different labels; the message names the file.
    """

    def __init__(self, path, type_map=None, pbc=True):
        self.path = os.fspath(path)
        if not os.path.isdir(self.path):
            raise DataError(f"{self.path}: no such directory (a DeePMD-kit system is a directory with type.raw)")
        self.elems = self._elements(type_map)
        n_atoms = len(self.elems)
        self.periodic = bool(pbc) and not os.path.exists(os.path.join(self.path, "nopbc"))
        set_dirs = sorted(d for d in glob.glob(os.path.join(self.path, "set.*")) if os.path.isdir(d))
        if set_dirs:
            self._sets = [self._npy_set(d, n_atoms) for d in set_dirs]
        elif os.path.exists(os.path.join(self.path, "coord.raw")):
            self._sets = [self._raw_set(n_atoms)]
        else:
            raise DataError(f"{self.path}: no set.* directories (deepmd/npy) and no coord.raw (deepmd/raw)")
        self.labels = tuple(name for name in LABELS if all(name in s["arrays"] for s in self._sets))
        for s in self._sets:
            extra = [name for name in LABELS if name in s["arrays"] and name not in self.labels]
            if extra:
                missing = next(other["where"] for other in self._sets
                               if not all(name in other["arrays"] for name in extra))
                raise DataError(f"{s['where']}: has {extra}, which {missing} lacks; every set of a system needs the "
                                "same labels")
        self.frames = [(k, i) for k, s in enumerate(self._sets) for i in range(s["n_frames"])]

    def _elements(self, type_map):
        type_file = os.path.join(self.path, "type.raw")
        if not os.path.isfile(type_file):
            raise DataError(f"{type_file}: no such file (every DeePMD-kit system has one)")
        with open(type_file) as f:
            text = f.read().split()
        try:
            types = np.array([int(t) for t in text], np.int64)
        except ValueError:
            raise DataError(f"{type_file}: type indices must be integers, got {text[:5]}") from None
        if len(types) == 0:
            raise DataError(f"{type_file}: no atoms")
        if types.min() < 0:
            raise DataError(f"{type_file}: type indices start at 0, got {int(types.min())}")
        map_file = os.path.join(self.path, "type_map.raw")
        from_file = _read_type_map(map_file) if os.path.isfile(map_file) else None
        given = _given_type_map(type_map)
        if from_file is None and given is None:
            raise DataError(f"{type_file}: atom types are indices and the system has no type_map.raw: give "
                            "type_map=['O', 'H', ...] (the element of each type)")
        for t in np.unique(types):
            found = [m for m in (from_file, given) if m is not None and t in m]
            if not found:
                source = map_file if from_file is not None and given is None else "type_map"
                raise DataError(f"{type_file}: type {int(t)} has no element in {source}")
            if len(found) == 2 and found[0][t] != found[1][t]:
                raise DataError(f"{map_file}: type {int(t)} is element {found[0][t]}, but type_map= says "
                                f"{found[1][t]}")
        table = dict(given or {})
        table.update(from_file or {})
        return np.array([table[t] for t in types], np.int32)

    def _npy_set(self, directory, n_atoms):
        arrays = {}
        n_frames = None
        for name, width in _ARRAYS.items():
            file = os.path.join(directory, f"{name}.npy")
            if not os.path.isfile(file):
                continue
            try:
                array = np.load(file, mmap_mode="r")
            except (OSError, ValueError) as err:
                raise DataError(f"{file}: not a NumPy .npy file: {err}") from None
            n_frames = self._check(file, name, array, width(n_atoms), n_frames)
            arrays[name] = array
        return self._finish_set(directory, arrays, n_frames)

    def _raw_set(self, n_atoms):
        arrays = {}
        n_frames = None
        for name, width in _ARRAYS.items():
            file = os.path.join(self.path, f"{name}.raw")
            if not os.path.isfile(file):
                continue
            try:
                array = np.loadtxt(file, ndmin=2)
            except ValueError as err:
                raise DataError(f"{file}: not a table of numbers: {err}") from None
            if name == "energy" and array.shape[0] == 1 and n_frames not in (None, 1):
                array = array.T  # energies written on one line
            n_frames = self._check(file, name, array, width(n_atoms), n_frames)
            arrays[name] = array
        return self._finish_set(self.path, arrays, n_frames)

    def _check(self, file, name, array, width, n_frames):
        rows = array.shape[0] if array.ndim else 0
        columns = int(np.prod(array.shape[1:])) if array.ndim > 1 else 1
        if array.ndim == 0 or columns != width:
            raise DataError(f"{file}: shape {array.shape}, expected [n_frames, {width}] for {name} "
                            f"({len(self.elems)} atoms in type.raw)")
        if n_frames is not None and rows != n_frames:
            raise DataError(f"{file}: {rows} frames, but coord has {n_frames}")
        return rows

    def _finish_set(self, where, arrays, n_frames):
        if "coord" not in arrays:
            raise DataError(f"{where}: no coord.npy / coord.raw")
        if self.periodic and "box" not in arrays:
            raise DataError(f"{where}: no box (box.npy / box.raw) in a periodic system (an empty 'nopbc' file marks "
                            "an open one, or pass pbc=False)")
        return {"where": where, "arrays": arrays, "n_frames": n_frames}

    def set_name(self, set_index):
        """The directory of a set (``.../set.000``), or the system's for the ``deepmd/raw`` layout."""
        return self._sets[set_index]["where"]

    def read(self, set_index, frame):
        """One frame.

        Args:
            set_index, frame: as in :attr:`frames`.

        Returns:
            dict with ``'elems'``, ``'coord'`` [n, 3] Å, ``'cell'`` [3, 3] Å (periodic
            systems), and the labels the system has: ``'energy'`` eV, ``'forces'`` [n, 3]
            eV/Å, ``'stress'`` [3, 3] eV/Å³ (−virial/volume; periodic systems only).

        Raises:
            DataError: a periodic frame whose box has no volume when the stress is asked.
        """
        arrays = self._sets[set_index]["arrays"]
        n_atoms = len(self.elems)
        out = {"elems": self.elems, "coord": np.asarray(arrays["coord"][frame], np.float64).reshape(n_atoms, 3)}
        if self.periodic:
            out["cell"] = np.asarray(arrays["box"][frame], np.float64).reshape(3, 3)
        if "energy" in self.labels:
            out["energy"] = float(np.asarray(arrays["energy"][frame]).reshape(-1)[0])
        if "force" in self.labels:
            out["forces"] = np.asarray(arrays["force"][frame], np.float64).reshape(n_atoms, 3)
        if "virial" in self.labels and self.periodic:
            volume = abs(np.linalg.det(out["cell"]))
            if volume < 1e-9:
                raise DataError(f"{self._sets[set_index]['where']}: frame {frame} has a box without volume; the "
                                "stress (virial/volume) is undefined")
            out["stress"] = -np.asarray(arrays["virial"][frame], np.float64).reshape(3, 3) / volume
        return out


def _read_type_map(path):
    with open(path) as f:
        names = f.read().split()
    return {i: atomic_number(name, f"{path}, line {i + 1}") for i, name in enumerate(names)}


def _given_type_map(type_map):
    """{type index: atomic number} from the ``type_map`` argument, or None."""
    if type_map is None or type_map is True:
        return None
    if isinstance(type_map, (str, os.PathLike)):
        path = os.fspath(type_map)
        if not os.path.isfile(path):
            raise DataError(f"{path}: no such file (type_map= names a file of element symbols)")
        return _read_type_map(path)
    if isinstance(type_map, dict):
        table = {}
        for element, index in type_map.items():
            number = element if isinstance(element, (int, np.integer)) else atomic_number(str(element), "type_map")
            table[int(index)] = int(number)
        return table
    return {i: atomic_number(str(name), "type_map") for i, name in enumerate(type_map)}
