"""A reader for the QM7b polarizability files (NumPy only): xyz frames with the tensor on the comment line.

Each frame (the QM7b molecules with the polarizabilities of Wilkins et al., PNAS 116, 3401
(2019), as upstream PiNN reads them)::

    5
    Properties=species:S:1:pos:R:3 b3lyp_pol="xx yy zz xy xz yz" ccsd_pol="..."
    C   0.00000   0.00000   0.00000       element, x, y, z (Å)
    H   0.62910   0.62910   0.62910
    ...

The tensor is six numbers in the order xx, yy, zz, xy, xz, yz (or nine, a full 3×3 tensor
row by row) and is returned as written: pinn declares no unit for polarizabilities.
"""
import re

import numpy as np

from pinn.io.errors import DataError
from pinn.io.readers.text import atomic_number, existing_file, to_floats


def read_qm7b(path, key="b3lyp_pol"):
    """Read every frame of a QM7b polarizability file.

    Args:
        path: the xyz file.
        key: the comment-line entry holding the tensor (``b3lyp_pol``; ``ccsd_pol`` where the
            file has it).

    Returns:
        list of dicts with ``'elems'`` [n] int32, ``'coord'`` [n, 3] Å, ``'ptensor'`` [3, 3]
        (symmetric, as written) and ``'line'`` (the line number of the frame's atom count).

    Raises:
        DataError: a count line that is not a number, a frame cut short, a comment line
            without ``key="..."`` of 6 or 9 numbers, an atom line without an element and
            three numbers; the message names the file and line.
    """
    path = existing_file(path)
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    pattern = re.compile(re.escape(key) + r'="([^"]*)"')
    frames = []
    at = 0
    while at < len(lines):
        if not lines[at].strip():
            at += 1
            continue
        try:
            n_atoms = int(lines[at].split()[0])
        except ValueError:
            raise DataError(f"{path}, line {at + 1}: {lines[at].strip()[:40]!r} is not the number of atoms of a "
                            "frame") from None
        if at + 2 + n_atoms > len(lines):
            raise DataError(f"{path}, line {at + 1}: the frame announces {n_atoms} atoms but the file ends first")
        match = pattern.search(lines[at + 1])
        where = f"{path}, line {at + 2}"
        if not match:
            raise DataError(f"{where}: no {key}=\"...\" on the comment line")
        values = to_floats(match.group(1).split(), where, f"{key} components")
        if len(values) == 6:
            xx, yy, zz, xy, xz, yz = values
            tensor = np.array([[xx, xy, xz], [xy, yy, yz], [xz, yz, zz]])
        elif len(values) == 9:
            tensor = np.array(values).reshape(3, 3)
        else:
            raise DataError(f"{where}: {key} has {len(values)} numbers; expected 6 (xx yy zz xy xz yz) or 9")
        elems = []
        coord = []
        for number in range(at + 3, at + 3 + n_atoms):
            fields = lines[number - 1].split()
            if len(fields) < 4:
                raise DataError(f"{path}, line {number}: an atom line needs an element and x, y, z")
            elems.append(atomic_number(fields[0], f"{path}, line {number}"))
            coord.append(to_floats(fields[1:4], f"{path}, line {number}", "coordinates"))
        frames.append({"elems": np.array(elems, np.int32), "coord": np.array(coord), "ptensor": tensor,
                       "line": at + 1})
        at += 2 + n_atoms
    if not frames:
        raise DataError(f"{path}: no frames")
    return frames
