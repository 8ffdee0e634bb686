"""Readers for the files of CP2K runs (NumPy only): the output log, the xyz trajectory, the ``.cell`` file.

From the output (the log CP2K writes to stdout), one entry per force evaluation:

- the energy, ``ENERGY| Total FORCE_EVAL ( QS ) energy [a.u.]:  -17.15`` (``(a.u.)`` before
  CP2K 7, ``[hartree]`` since 2025), Hartree;
- the forces (``&FORCE_EVAL / &PRINT / &FORCES``), Hartree/bohr, as the block
  ``ATOMIC FORCES in [a.u.]`` with the rows ``atom kind element x y z`` (until CP2K 2024)
  or ``FORCES| Atomic forces [hartree/bohr]`` with the rows ``FORCES| atom x y z |f|``;
- the stress tensor (``&PRINT / &STRESS_TENSOR``), as ``STRESS| Analytical stress tensor
  [GPa]`` (or ``[bar]``, or ``Numerical``) with the rows ``STRESS| x sxx sxy sxz`` ..., or
  as the older ``STRESS TENSOR [GPa]`` block with the rows ``X sxx sxy sxz`` ...  CP2K's
  sign is the opposite of ASE's.

From the position trajectory (``PROJECT-pos-1.xyz``): elements and positions (Å) of each
frame.  From the ``.cell`` file (``PROJECT-1.cell``): per line ``step time Ax Ay Az Bx By Bz
Cx Cy Cz volume``, Å; lines starting with ``#`` are comments.

Every reader converts to pinn's units: eV, eV/Å, eV/Å³ in ASE's sign convention.
"""
import mmap
import re

import numpy as np

from pinn import units
from pinn.io.errors import DataError
from pinn.io.readers.text import atomic_number, existing_file, to_float, to_floats

_ENERGY = re.compile(rb"^ *ENERGY\| Total FORCE_EVAL.*$", re.M)
_FORCES = re.compile(rb"^ *(?:ATOMIC FORCES in \[a\.u\.\]|FORCES\| Atomic forces \[hartree/bohr\])", re.M)
_STRESS = re.compile(rb"^ *(?:STRESS\| (?:Analytical|Numerical) stress tensor|STRESS TENSOR) \[(\w+)\]", re.M)
#: stress units CP2K prints → eV/Å³
STRESS_UNITS = {"GPa": units.GPA, "bar": units.BAR}


def _mapped(path):
    path = existing_file(path)
    with open(path, "rb") as f:
        return path, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def _line_numbers(data, offsets):
    """1-based line number of each (sorted) byte offset."""
    numbers = []
    line = 1
    last = 0
    for offset in offsets:
        line += data[last:offset].count(b"\n")
        last = offset
        numbers.append(line)
    return numbers


def scan_cp2k_output(path):
    """The energies and where the force and stress blocks are, of a CP2K output.

    Args:
        path: the output file.

    Returns:
        dict with ``'energy'``: list of ``(energy in eV, line number)``; ``'forces'`` and
        ``'stress'``: lists of ``(byte offset, line number)`` of each block's title line; in
        file order.

    Raises:
        DataError: missing or empty file; an energy line whose unit is not a.u./hartree or
            whose value is not a number (the message names the line).
    """
    path, data = _mapped(path)
    with data:
        energy_matches = [(m.start(), m.group(0)) for m in _ENERGY.finditer(data)]
        force_offsets = [m.start() for m in _FORCES.finditer(data)]
        stress_offsets = [m.start() for m in _STRESS.finditer(data)]
        energy_lines = _line_numbers(data, [start for start, _ in energy_matches])
        force_lines = _line_numbers(data, force_offsets)
        stress_lines = _line_numbers(data, stress_offsets)
    energies = []
    for (_, text), number in zip(energy_matches, energy_lines):
        line = text.decode("ascii", "replace")
        where = f"{path}, line {number}"
        if not re.search(r"[\[(](a\.u\.|hartree)[\])]", line):
            raise DataError(f"{where}: energy in an unknown unit (expected [a.u.], (a.u.) or [hartree]): "
                            f"{line.strip()!r}")
        energies.append((to_float(line.split()[-1], where, "an energy") * units.HARTREE, number))
    return {"energy": energies, "forces": list(zip(force_offsets, force_lines)),
            "stress": list(zip(stress_offsets, stress_lines))}


def read_cp2k_forces(path, offset, line_number):
    """The forces of the block at ``offset`` (see :func:`scan_cp2k_output`).

    Returns:
        [n_atoms, 3] eV/Å (float64).

    Raises:
        DataError: a row with too few fields or fields that are not numbers, a block without
            rows or without its end (``SUM OF ATOMIC FORCES`` / ``FORCES| Sum``); the message
            names the file and line.
    """
    forces = []
    with open(path, "rb") as f:
        f.seek(offset)
        title = f.readline().decode("ascii", "replace")
        new_style = "FORCES|" in title
        for number, raw in enumerate(f, line_number + 1):
            line = raw.decode("ascii", "replace")
            fields = line.split()
            where = f"{path}, line {number}"
            if not fields:
                continue
            if new_style:
                if fields[:2] == ["FORCES|", "Sum"]:
                    break
                if fields[:2] == ["FORCES|", "Atom"] or fields == ["FORCES|"]:
                    continue
                if fields[:1] != ["FORCES|"] or len(fields) < 5:
                    raise DataError(f"{where}: expected a row 'FORCES| atom x y z |f|' or 'FORCES| Sum', "
                                    f"got {line.strip()[:60]!r}")
                forces.append(to_floats(fields[2:5], where, "forces"))
            else:
                if fields[0] == "#":
                    continue
                if line.lstrip().startswith("SUM OF ATOMIC FORCES"):
                    break
                if len(fields) < 6:
                    raise DataError(f"{where}: expected a row 'atom kind element x y z' or 'SUM OF ATOMIC FORCES', "
                                    f"got {line.strip()[:60]!r}")
                forces.append(to_floats(fields[3:6], where, "forces"))
        else:
            raise DataError(f"{path}, line {line_number}: the force block has no end")
    if not forces:
        raise DataError(f"{path}, line {line_number}: the force block has no rows")
    return np.array(forces) * units.HARTREE_PER_BOHR


def read_cp2k_stress(path, offset, line_number):
    """The stress tensor of the block at ``offset`` (see :func:`scan_cp2k_output`).

    Returns:
        [3, 3] eV/Å³ in ASE's sign convention (CP2K's tensor negated).

    Raises:
        DataError: a unit other than GPa and bar, fewer than the three rows x, y, z with
            three numbers each; the message names the file and line.
    """
    with open(path, "rb") as f:
        f.seek(offset)
        title = f.readline().decode("ascii", "replace")
        unit = re.search(r"\[(\w+)\]", title).group(1)
        if unit not in STRESS_UNITS:
            raise DataError(f"{path}, line {line_number}: stress in {unit}; known units: {sorted(STRESS_UNITS)}")
        rows = {}
        for number, raw in enumerate(f, line_number + 1):
            fields = raw.decode("ascii", "replace").split()
            if fields[:1] == ["STRESS|"]:
                fields = fields[1:]
            label = fields[0].lower() if fields else ""
            if label in ("x", "y", "z") and len(fields) == 4:
                rows[label] = to_floats(fields[1:], f"{path}, line {number}", "stress components")
                if len(rows) == 3:
                    break
            if number > line_number + 8:
                break
    if len(rows) != 3:
        raise DataError(f"{path}, line {line_number}: the stress block lacks its rows x, y, z")
    return -np.array([rows["x"], rows["y"], rows["z"]]) * STRESS_UNITS[unit]


def scan_xyz(path):
    """Where each frame of an xyz trajectory begins.

    Returns:
        list of ``(byte offset, line number)`` of each frame's atom-count line.

    Raises:
        DataError: missing or empty file, a count line that is not a number, a last frame
            with fewer lines than its count announces.
    """
    path = existing_file(path)
    frames = []
    offset = 0
    expect_count = True
    remaining = 0
    number = 0
    with open(path, "rb") as f:
        for number, line in enumerate(f, 1):
            if expect_count:
                if not line.strip():
                    offset += len(line)
                    continue
                try:
                    remaining = int(line.split()[0]) + 1  # the comment line and the atoms
                except ValueError:
                    raise DataError(f"{path}, line {number}: {line.strip()[:40]!r} is not the number of atoms of a "
                                    "frame") from None
                frames.append((offset, number))
                expect_count = False
            else:
                remaining -= 1
                expect_count = remaining == 0
            offset += len(line)
    if not expect_count:
        raise DataError(f"{path}: the frame at line {frames[-1][1]} is cut short ({remaining} lines missing)")
    return frames


def read_xyz_frame(path, offset, line_number):
    """Elements and positions of the xyz frame at ``offset`` (see :func:`scan_xyz`).

    Returns:
        dict with ``'elems'`` [n] int32 and ``'coord'`` [n, 3] Å.

    Raises:
        DataError: an atom line without an element and three numbers, an unknown element.
    """
    with open(path, "rb") as f:
        f.seek(offset)
        n_atoms = int(f.readline().split()[0])
        f.readline()
        elems = []
        coord = []
        for number in range(line_number + 2, line_number + 2 + n_atoms):
            fields = f.readline().decode("utf-8", "replace").split()
            where = f"{path}, line {number}"
            if len(fields) < 4:
                raise DataError(f"{where}: an atom line needs an element and x, y, z")
            elems.append(atomic_number(fields[0], where))
            coord.append(to_floats(fields[1:4], where, "coordinates"))
    return {"elems": np.array(elems, np.int32), "coord": np.array(coord, np.float64)}


def read_cell_file(path):
    """The cells of a CP2K ``.cell`` file.

    Returns:
        [n_frames, 3, 3] Å, rows a, b, c.

    Raises:
        DataError: missing or empty file, a line without the 11 columns or with text that
            is not a number (the message names the line).
    """
    path = existing_file(path)
    cells = []
    with open(path, encoding="ascii", errors="replace") as f:
        for number, line in enumerate(f, 1):
            fields = line.split()
            if not fields or fields[0].startswith("#"):
                continue
            if len(fields) < 11:
                raise DataError(f"{path}, line {number}: {len(fields)} columns; a .cell line has step, time, Ax ... Cz "
                                "and the volume")
            cells.append(to_floats(fields[2:11], f"{path}, line {number}", "cell components"))
    if not cells:
        raise DataError(f"{path}: no cell lines")
    return np.array(cells).reshape(-1, 3, 3)
