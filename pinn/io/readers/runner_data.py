"""A reader for RuNNer's ``input.data`` files (NumPy only).

A file holds structures, each a block of keyword lines in any order between ``begin`` and
``end``::

    begin
    comment any text
    lattice  ax ay az                      three lines for a periodic structure, none otherwise
    lattice  bx by bz
    lattice  cx cy cz
    atom  x y z  El  q  e_atom  fx fy fz   one line per atom
    energy  E
    charge  Q                              the total charge
    end

RuNNer works in atomic units: positions and lattice vectors in bohr, energies in Hartree,
forces in Hartree/bohr, charges in e.  A ``begin`` line may name the atom columns after x, y,
z and the element (RuNNer 2 and ASE write ``begin position(3) element charge atom_energy
forces(3)``); a name ``name(k)`` takes k columns.  Upstream PiNN adds three optional kinds of
lines and columns, read here too: ``stress`` (three lines of a 3×3 tensor, written by its
``write_runner``), ``energy_weight`` and three force weights after the forces of an atom line.
"""
import re

import numpy as np

from pinn import units
from pinn.io.errors import DataError
from pinn.io.readers.text import atomic_number, existing_file, to_float, to_floats

#: the atom columns after x, y, z and the element when the ``begin`` line names none
DEFAULT_LAYOUT = (("charge", 1), ("atom_energy", 1), ("forces", 3))
_COLUMN = re.compile(r"([\w\-]+)\((\d+)\)$")
#: column names meaning the atomic charge and the forces (RuNNer's, ASE's spellings)
_CHARGE_NAMES = ("charge", "charges", "initial_charges")
_FORCE_NAMES = ("force", "forces")

#: how the file's numbers become the dataset's: factors per quantity.  'upstream' (upstream PiNN's
#: reading of RuNNer's atomic units: lengths bohr → Å, energies stay Hartree, forces Hartree/bohr →
#: Hartree/Å), 'atomic' (bohr, Hartree → pinn's Å, eV, eV/Å), 'ase' (the file is in Å and eV already)
UNITS = {
    "upstream": {"length": units.BOHR, "energy": 1.0, "force": 1.0 / units.BOHR, "stress": units.BOHR ** 3},
    "atomic": {"length": units.BOHR, "energy": units.HARTREE, "force": units.HARTREE_PER_BOHR,
               # upstream PiNN's stress lines: its write_runner divides eV/Å³ by bohr³/Å³, its reader undoes it
               "stress": units.BOHR ** 3},
    "ase": {"length": 1.0, "energy": 1.0, "force": 1.0, "stress": 1.0},
}


def scan_runner(path):
    """Where each structure of an ``input.data`` file begins.

    Args:
        path: the file.

    Returns:
        list of ``(byte offset, line number)`` of each ``begin`` line, in file order.

    Raises:
        DataError: missing or empty file, no ``begin`` line.
    """
    path = existing_file(path)
    starts = []
    offset = 0
    with open(path, "rb") as f:
        for number, line in enumerate(f, 1):
            if line.split(None, 1)[:1] == [b"begin"]:
                starts.append((offset, number))
            offset += len(line)
    if not starts:
        raise DataError(f"{path}: no 'begin' line (not a RuNNer input.data file)")
    return starts


def read_runner_frame(path, offset, line_number, file_units="upstream"):
    """Read the structure whose ``begin`` line is at ``offset`` (see :func:`scan_runner`).

    Args:
        path: the file.
        offset, line_number: byte offset and line number of the ``begin`` line.
        file_units: a key of :data:`UNITS`: ``'upstream'`` (bohr → Å, Hartree kept, as upstream
            PiNN reads the file), ``'atomic'`` (bohr, Hartree → Å, eV) or ``'ase'`` (Å, eV as written).

    Returns:
        dict with ``'elems'`` [n] int32, ``'coord'`` [n, 3] Å, ``'cell'`` [3, 3] Å or None (no
        ``lattice`` lines), ``'energy'`` (Hartree for 'upstream', eV otherwise) or None,
        ``'forces'`` [n, 3] (Hartree/Å, or eV/Å) or None (a layout without forces),
        ``'charges'`` [n] e or None, ``'stress'`` [3, 3] (upstream's lines × bohr³) or None,
        ``'energy_weight'`` (1 without the line) and ``'force_weights'`` [n, 3] (ones where an
        atom line has none).

    Raises:
        DataError: a line of unknown keyword, a line with too few or non-numeric fields, an
            unknown element, one or two ``lattice`` lines (not three), a second ``energy``,
            no ``atom`` lines, no ``end`` before the next ``begin`` or the end of the file;
            the message names the file and line.
    """
    factors = UNITS[file_units]
    frame_where = f"{path}, structure at line {line_number}"
    with open(path, "rb") as f:
        f.seek(offset)
        begin = f.readline().decode("utf-8", "replace")
        layout = _layout(begin, f"{path}, line {line_number}")
        width = sum(n for _, n in layout)
        elems = []
        coord = []
        forces = []
        charges = []
        weights = []
        lattice = []
        stress = []
        energy = None
        energy_weight = 1.0
        ended = False
        for number, raw in enumerate(f, line_number + 1):
            fields = raw.decode("utf-8", "replace").split()
            where = f"{path}, line {number}"
            if not fields:
                continue
            key = fields[0]
            if key == "end":
                ended = True
                break
            if key == "begin":
                raise DataError(f"{frame_where}: no 'end' before the next 'begin' on line {number}")
            if key == "atom":
                if len(fields) < 5 + width:
                    raise DataError(f"{where}: an atom line needs x y z, the element and {width} columns "
                                    f"({_names(layout)}), got {len(fields) - 1} fields")
                coord.append(to_floats(fields[1:4], where, "coordinates"))
                elems.append(atomic_number(fields[4], where))
                columns = _columns(fields[5:5 + width], layout, where)
                if "charge" in columns:
                    charges.append(columns["charge"][0])
                if "forces" in columns:
                    forces.append(columns["forces"])
                rest = fields[5 + width:]
                weights.append(to_floats(rest[:3], where, "force weights") if len(rest) >= 3 else [1.0, 1.0, 1.0])
            elif key == "lattice":
                lattice.append(_vector(fields, where))
            elif key == "stress":
                stress.append(_vector(fields, where))
            elif key == "energy":
                if energy is not None:
                    raise DataError(f"{where}: a second 'energy' line in the structure")
                energy = _scalar(fields, where)
            elif key == "energy_weight":
                energy_weight = _scalar(fields, where)
            elif key == "charge":
                _scalar(fields, where)  # the total charge: checked, not used
            elif key != "comment":
                raise DataError(f"{where}: unknown keyword {key!r} (RuNNer's are begin, comment, lattice, atom, "
                                "energy, charge, end)")
    if not ended:
        raise DataError(f"{frame_where}: no 'end' before the end of the file")
    if not elems:
        raise DataError(f"{frame_where}: no 'atom' lines")
    if len(lattice) not in (0, 3):
        raise DataError(f"{frame_where}: {len(lattice)} 'lattice' lines; a periodic structure has 3")
    if len(stress) not in (0, 3):
        raise DataError(f"{frame_where}: {len(stress)} 'stress' lines; a stress tensor has 3")
    return {
        "elems": np.array(elems, np.int32),
        "coord": np.array(coord) * factors["length"],
        "cell": np.array(lattice) * factors["length"] if lattice else None,
        "energy": energy * factors["energy"] if energy is not None else None,
        "forces": np.array(forces) * factors["force"] if forces else None,
        "charges": np.array(charges, np.float64) if charges else None,
        "stress": np.array(stress) * factors["stress"] if stress else None,
        "energy_weight": energy_weight,
        "force_weights": np.array(weights, np.float64),
    }


def _layout(begin, where):
    """[(name, columns)] of the atom columns after the element, from a ``begin`` line."""
    fields = begin.split()[1:]
    if not fields:
        return DEFAULT_LAYOUT
    layout = []
    for field in fields[2:]:  # the first two are the position(3) and the element
        match = _COLUMN.match(field)
        name, count = (match.group(1), int(match.group(2))) if match else (field, 1)
        if name in _CHARGE_NAMES:
            name = "charge"
        elif name in _FORCE_NAMES:
            name = "forces"
        layout.append((name, count))
    if dict(layout).get("forces", 3) != 3 or dict(layout).get("charge", 1) != 1:
        raise DataError(f"{where}: the begin line gives forces other than 3 columns or a charge other than 1")
    return tuple(layout)


def _names(layout):
    return ", ".join(f"{name}({n})" if n > 1 else name for name, n in layout)


def _columns(fields, layout, where):
    out = {}
    start = 0
    for name, count in layout:
        if name in ("charge", "forces"):
            out[name] = to_floats(fields[start:start + count], where, name)
        start += count
    return out


def _vector(fields, where):
    if len(fields) < 4:
        raise DataError(f"{where}: {fields[0]!r} needs three numbers, got {len(fields) - 1}")
    return to_floats(fields[1:4], where, "numbers")


def _scalar(fields, where):
    if len(fields) < 2:
        raise DataError(f"{where}: {fields[0]!r} needs a number")
    return to_float(fields[1], where)
