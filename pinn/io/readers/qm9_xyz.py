"""A reader for the QM9 data set's per-molecule ``.xyz`` files (NumPy only).

Each file of QM9 (Ramakrishnan et al., Sci. Data 1, 140022 (2014)) is an extended xyz::

    5                                     number of atoms n
    gdb 1  157.7118  157.70997 ... 6.469  tag, index and 15 properties (tab separated)
    C  -0.0126981359  1.0858041578  0.0080009958  -0.535689     n lines: element, x, y, z (Å),
    H   0.002150416  -0.0060313176  0.0019761204   0.133921     Mulliken charge (e)
    ...
    1341.307  1341.3284 ...               harmonic frequencies (cm⁻¹)
    C                                     SMILES (GDB-17, relaxed)
    InChI=1S/CH4/h1H4  InChI=1S/CH4/h1H4  InChI (GDB-17, relaxed)

Numbers may carry Mathematica's exponent, ``1.2345*^-6``.  The reader gives the properties in
the file's units; :data:`PROPERTIES` has the factors into pinn's (``load_qm9(units='pinn')``).
"""
import numpy as np

from pinn import units
from pinn.io.errors import DataError
from pinn.io.readers.text import atomic_number, existing_file, to_float

#: the properties of the second line: name → (column, unit in the file, factor into pinn's units, unit after
#: conversion); column 0 is the tag ``gdb`` (not a number)
PROPERTIES = {
    "index": (1, "1", 1.0, "1"),
    "A": (2, "GHz", 1.0, "GHz"), "B": (3, "GHz", 1.0, "GHz"), "C": (4, "GHz", 1.0, "GHz"),
    "mu": (5, "debye", units.DEBYE, "e·Å"),
    "alpha": (6, "bohr³", units.BOHR ** 3, "Å³"),
    "homo": (7, "Hartree", units.HARTREE, "eV"), "lumo": (8, "Hartree", units.HARTREE, "eV"),
    "gap": (9, "Hartree", units.HARTREE, "eV"),
    "r2": (10, "bohr²", units.BOHR ** 2, "Å²"),
    "zpve": (11, "Hartree", units.HARTREE, "eV"),
    "U0": (12, "Hartree", units.HARTREE, "eV"), "U": (13, "Hartree", units.HARTREE, "eV"),
    "H": (14, "Hartree", units.HARTREE, "eV"), "G": (15, "Hartree", units.HARTREE, "eV"),
    "Cv": (16, "cal/(mol·K)", 1.0, "cal/(mol·K)"),
}


def read_qm9(path):
    """Read one QM9 molecule.

    Args:
        path: the ``.xyz`` file.

    Returns:
        dict with ``'elems'`` [n] int32, ``'coord'`` [n, 3] Å (float64), ``'charges'`` [n]
        Mulliken charges (e) and ``'properties'``: dict name → value in the file's unit (see
        :data:`PROPERTIES`: energies in Hartree, ``mu`` in debye, ``alpha`` in bohr³, ``r2`` in
        bohr²).

    Raises:
        DataError: a missing or empty file, a first line that is not a number of atoms, a
            property line without the 17 fields, fewer atom lines than announced, an
            unknown element or a field that is not a number; the message names the file and
            line.
    """
    path = existing_file(path)
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    try:
        n_atoms = int(lines[0].split()[0])
    except (IndexError, ValueError):
        raise DataError(f"{path}, line 1: {lines[0][:40]!r} is not the number of atoms") from None
    if n_atoms <= 0:
        raise DataError(f"{path}, line 1: the number of atoms must be positive, got {n_atoms}")
    fields = lines[1].split() if len(lines) > 1 else []
    if len(fields) < 17:
        raise DataError(f"{path}, line 2: the property line has {len(fields)} fields, QM9 has 17 "
                        "(tag, index, A, B, C, mu, alpha, homo, lumo, gap, r2, zpve, U0, U, H, G, Cv)")
    properties = {name: to_float(fields[column], f"{path}, line 2, property {name}")
                  for name, (column, _, _, _) in PROPERTIES.items()}
    if len(lines) < 2 + n_atoms:
        raise DataError(f"{path}: announces {n_atoms} atoms on line 1 but has {max(len(lines) - 2, 0)} lines after "
                        "the property line")
    elems = []
    coord = []
    charges = []
    for number, line in enumerate(lines[2:2 + n_atoms], 3):
        where = f"{path}, line {number}"
        atom = line.split()
        if len(atom) < 4:
            raise DataError(f"{where}: an atom line needs an element and x, y, z, got {line[:60]!r}")
        elems.append(atomic_number(atom[0], where))
        coord.append([to_float(x, where, "a coordinate") for x in atom[1:4]])
        charges.append(to_float(atom[4], where, "a Mulliken charge") if len(atom) > 4 else np.nan)
    return {"elems": np.array(elems, np.int32), "coord": np.array(coord, np.float64),
            "charges": np.array(charges, np.float64), "properties": properties}
