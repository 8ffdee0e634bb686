"""A reader for CPMD ``ENERGIES`` files.

CPMD writes one line per MD step, without a header.  Standard CP and BO
molecular dynamics (Fortran format ``I10,F12.8,F9.3,3F18.10,E15.6,F9.2``)
write 8 columns::

    NFI  EKINC  TEMPP  EKS  ECLASSIC  EHAM  DIS  TCPU

and BO dynamics with diagonalisation (``tdiag``) write 6::

    NFI  TEMPP  EKS  ECLASSIC  DIS  TCPU

NFI is the step number, EKINC the fictitious electronic kinetic energy, TEMPP
the ionic temperature (K), EKS the Kohn–Sham potential energy (in a MiMiC run
the total QM + MM + QM/MM potential energy), ECLASSIC = EKS + ionic kinetic
energy, EHAM = ECLASSIC + EKINC (the conserved quantity), DIS the mean-square
displacement (bohr²) and TCPU the time of the step (s).  Energies are in
Hartree; this reader does not convert them.

CPMD appends to ``ENERGIES`` when a run is restarted, so a step number may
appear again: the later line wins (it belongs to the run that continued), and
a log line says how many lines were replaced.
"""
import logging
import os

import numpy as np

from pinn.io.errors import DataError

log = logging.getLogger(__name__)

#: column names of the known layouts, by number of columns
LAYOUTS = {
    8: ("NFI", "EKINC", "TEMPP", "EKS", "ECLASSIC", "EHAM", "DIS", "TCPU"),
    6: ("NFI", "TEMPP", "EKS", "ECLASSIC", "DIS", "TCPU"),
}


def last_occurrence(keys):
    """Indices of the last occurrence of each distinct key, ordered by key.

    Args:
        keys: 1-d array (e.g. step numbers of a file a restarted run appended to).

    Returns:
        (distinct keys sorted, int64 index of the last occurrence of each).
    """
    keys = np.asarray(keys)
    distinct, last_from_end = np.unique(keys[::-1], return_index=True)
    return distinct, len(keys) - 1 - last_from_end


def read_energies(path, columns=None):
    """Read a CPMD ``ENERGIES`` file.

    Args:
        path: the file.
        columns: column names for a layout other than the 8- and 6-column
            ones (the first must be ``'NFI'``); by default the layout is told
            from the number of columns.

    Returns:
        dict of numpy arrays keyed by column name, one entry per distinct step,
        sorted by step: ``'NFI'`` (int64) and float64 columns in CPMD units
        (energies in Hartree, TEMPP in K, DIS in bohr², TCPU in s).

    Raises:
        DataError: missing or empty file, lines with different numbers of
            columns, an unknown layout, ``****`` (a Fortran field overflow) or
            text that is not a number; the message names the file, line and
            column.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise DataError(f"{path}: no such file")
    with open(path, "r", encoding="ascii", errors="replace") as f:
        lines = [line for line in f.read().splitlines()]
    rows = [(number, line.split()) for number, line in enumerate(lines, 1) if line.strip()]
    if not rows:
        raise DataError(f"{path}: no energy lines (empty file)")
    width = len(rows[0][1])
    for number, fields in rows:
        if len(fields) != width:
            raise DataError(f"{path}: line {number} has {len(fields)} columns, line {rows[0][0]} has {width}")
        for col, field in enumerate(fields):
            if "*" in field:
                raise DataError(f"{path}: line {number}, column {col + 1}: {field!r} is a Fortran overflow "
                                "(the value did not fit its output field), so this line cannot be read")
    if columns is None:
        if width not in LAYOUTS:
            raise DataError(f"{path}: {width} columns per line is not a known ENERGIES layout "
                            f"({sorted(LAYOUTS)} are); pass columns=[...] naming them")
        columns = LAYOUTS[width]
    columns = tuple(columns)
    if len(columns) != width or columns[0] != "NFI":
        raise DataError(f"{path}: columns={list(columns)} must name all {width} columns, NFI first")
    try:
        table = np.array([fields for _, fields in rows], dtype=np.float64)
    except ValueError:
        for number, fields in rows:
            for col, field in enumerate(fields):
                try:
                    float(field)
                except ValueError:
                    raise DataError(f"{path}: line {number}, column {col + 1}: {field!r} is not a "
                                    "number") from None
        raise
    nfi = table[:, 0]
    if np.any(nfi != np.round(nfi)):
        bad = int(np.flatnonzero(nfi != np.round(nfi))[0])
        raise DataError(f"{path}: line {rows[bad][0]}: step number {rows[bad][1][0]!r} is not an integer")
    nfi = nfi.astype(np.int64)
    steps, keep = last_occurrence(nfi)  # the last line of each step wins
    replaced = len(nfi) - len(steps)
    if replaced:
        log.info("%s: %d lines repeat an earlier step (a restarted run appended to the file); "
                 "the later line of each step is used", path, replaced)
    out = {"NFI": steps}
    for col, name in enumerate(columns[1:], 1):
        out[name] = table[keep, col]
    return out


def write_energies(path, nfi, eks, temperature=None, kinetic=None, tcpu=0.0):
    """Write an 8-column CPMD ``ENERGIES`` file in CPMD's format (``I10,F12.8,F9.3,3F18.10,E15.6,F9.2``).

    Args:
        path: file to write (replaced).
        nfi: step numbers.
        eks: potential energies, Hartree (EKS).
        temperature: ionic temperatures, K (default 0).
        kinetic: ionic kinetic energies, Hartree, so that ECLASSIC = EKS + kinetic (default 0).
        tcpu: seconds per step for the last column.

    Returns:
        ``path``.
    """
    nfi = np.asarray(nfi, dtype=np.int64)
    eks = np.asarray(eks, dtype=np.float64)
    temperature = np.zeros(len(nfi)) if temperature is None else np.asarray(temperature, dtype=np.float64)
    kinetic = np.zeros(len(nfi)) if kinetic is None else np.asarray(kinetic, dtype=np.float64)
    with open(path, "w") as f:
        for n, e, t, k in zip(nfi, eks, temperature, kinetic):
            f.write(f"{n:10d}{0.0:12.8f}{t:9.3f}{e:18.10f}{e + k:18.10f}{e + k:18.10f}{0.0:15.6E}{tcpu:9.2f}\n")
    return path
