"""Load RuNNer ``input.data`` files, as upstream PiNN's ``load_runner`` does, in pinn's units."""
import os

import numpy as np

from pinn import keys as K
from pinn.io.base import DataError, Frame, ItemReader
from pinn.io.readers.runner_data import UNITS, read_runner_frame, scan_runner
from pinn.io.splits import chosen_split, split_items

#: upstream PiNN's weights, given with ``weights=True``: key → (shape, dtype)
WEIGHTS = {"e_weight": ((), "float"), "f_weights": ((None, 3), "float")}


def load_runner(flist, split=False, shuffle=True, seed=0, splits=None, *, units="upstream", weights=False):
    """Load the structures of RuNNer ``input.data`` files.

    Args:
        flist: a file or a list of files; the structures of every file, in order.
        split, shuffle, seed, splits: as for :func:`pinn.io.load_ase` (structures are the items).
        units: how the file's numbers become the dataset's: ``'upstream'`` (the default, upstream
            PiNN's reading of RuNNer's atomic units: lengths bohr → Å, energies kept in Hartree,
            forces Hartree/bohr → Hartree/Å), ``'atomic'`` (bohr, Hartree → pinn's Å, eV, eV/Å)
            or ``'ase'`` (the file is in Å, eV, eV/Å already, as some n2p2 data are written).
        weights: also give upstream PiNN's weights, ``e_weight`` [] (the ``energy_weight``
            line, 1 without it) and ``f_weights`` [n_atoms, 3] (three columns after the forces
            of an atom line, 1 without them); per-atom ``f_weights`` is in
            :func:`pinn.io.sparse_batch`'s default ``atomic_props``.

    Returns:
        A ``tf.data.Dataset`` of structures (or a nested dict of them): ``elems``, ``coord``
        (Å), ``cell`` (Å) and ``pbc`` (periodic when the structure has ``lattice`` lines),
        ``e_data`` (Hartree with ``units='upstream'``, eV otherwise), ``f_data`` (Hartree/Å,
        or eV/Å), ``q_data`` (e, the atomic charge column), ``s_data`` (only from upstream
        PiNN's non-standard ``stress`` lines, read as upstream reads them), as float32; the
        first structure fixes which keys every structure must have.

    Raises:
        DataError: a missing file or one without ``begin``; a bad structure names the file
            and line (the first structure at once, the others when the dataset is iterated).
    """
    if units not in UNITS:
        raise DataError(f"load_runner: units={units!r}; known: {sorted(UNITS)}")
    split = chosen_split(split, splits, "load_runner")
    files = [os.fspath(flist)] if isinstance(flist, (str, os.PathLike)) else [os.fspath(f) for f in flist]
    if not files:
        raise DataError("load_runner: the list of files is empty")
    items = [Frame(f"{path}, structure at line {line}", (path, offset, line))
             for path in files for offset, line in scan_runner(path)]

    def read_runner_structure(item):
        frame = read_runner_frame(*item.payload, file_units=units)
        out = {K.ELEMS: frame["elems"], K.COORD: frame["coord"]}
        if frame["cell"] is not None:
            out[K.CELL] = frame["cell"]
            out[K.PBC] = np.ones(3, bool)
        for key, name in ((K.E_DATA, "energy"), (K.F_DATA, "forces"), (K.Q_DATA, "charges"), (K.S_DATA, "stress")):
            if frame[name] is not None:
                out[key] = frame[name]
        if weights:
            out["e_weight"] = frame["energy_weight"]
            out["f_weights"] = frame["force_weights"]
        return out

    reader = ItemReader(read_runner_structure, "load_runner", extra=WEIGHTS if weights else None)
    return reader.datasets(split_items(items, split, shuffle=shuffle, seed=seed))
