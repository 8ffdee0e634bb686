"""CPMD files of a MiMiC run: the ``&MIMIC OVERLAPS`` of the input, the atom order, ``FTRAJECTORY``.

CPMD lists atoms in its own order: the QM atoms species by species as in
``&ATOMS``, then the MM atoms.  ``&MIMIC OVERLAPS`` maps each QM atom to its
GROMACS index (lines ``2 <gromacs id> 1 <cpmd id>``, 1-based; code 2 is
GROMACS, code 1 is CPMD).  The MM atoms follow as one CPMD species per GROMACS
atom type, the species in the order in which the types first occur in the
system (the order grompp numbers them), the atoms of a species in GROMACS
order.  This reproduces the mapping of a real MiMiC run (acetone in water,
``andrrizzi/tfep`` test data) exactly.  grompp merges atom types whose
parameters are identical, which an ``.mpt`` does not record; for such systems
pass the order explicitly (``load_mimic(..., cpmd_order=...)``).  When forces
come from ``FTRAJECTORY``, :func:`pinn.io.load_mimic` checks the mapped
CPMD positions against the trr positions, so a wrong order is an error, not
wrong data.

``FTRAJECTORY`` (``TRAJECTORY FORCES`` in ``&CPMD``) has one line per atom and
stored step: ``NFI x y z vx vy vz fx fy fz`` in atomic units (bohr,
bohr/a.u. time, Hartree/bohr), CPMD order, all atoms (QM and MM).  In a MiMiC
run the positions are translated (CPMD centres the QM region); the forces are
the total QM/MM forces.  A restarted run appends a line ``<<<<<<  NEW DATA
>>>>>>`` and then its own steps; a step written twice is taken from its last
occurrence.
"""
import logging
import os

import numpy as np

from pinn.io.errors import DataError

log = logging.getLogger(__name__)

GROMACS_CODE = 2
CPMD_CODE = 1


def read_overlaps(path):
    """Read ``&MIMIC`` ``OVERLAPS`` from a CPMD input file.

    Args:
        path: the CPMD input (``cpmd.inp``).

    Returns:
        int64 array [n_overlaps, 2] of **0-based** (GROMACS index, CPMD index)
        pairs, in file order.

    Raises:
        DataError: no ``&MIMIC`` section or no ``OVERLAPS`` in it, a count
            that does not match the lines, codes other than 1 and 2, repeated
            indices.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise DataError(f"{path}: no such file")
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    section = None
    for i, line in enumerate(lines):
        word = line.strip().upper()
        if word.startswith("&MIMIC"):
            section = i
        elif section is not None and word.startswith("&END"):
            break
        elif section is not None and word.startswith("OVERLAPS"):
            return _parse_overlaps(path, lines, i)
    where = "no &MIMIC section" if section is None else "no OVERLAPS keyword in its &MIMIC section"
    raise DataError(f"{path}: {where}; the GROMACS-CPMD atom mapping cannot be read")


def _parse_overlaps(path, lines, at):
    try:
        count = int(lines[at + 1].split()[0])
    except (IndexError, ValueError):
        raise DataError(f"{path}: line {at + 2}: expected the number of OVERLAPS after the keyword") from None
    pairs = []
    for k in range(count):
        number = at + 3 + k
        try:
            code_a, id_a, code_b, id_b = (int(v) for v in lines[number - 1].split()[:4])
        except (IndexError, ValueError):
            raise DataError(f"{path}: line {number}: OVERLAPS line {k + 1} of {count} should read "
                            "'2 <gromacs atom> 1 <cpmd atom>'") from None
        if {code_a, code_b} != {GROMACS_CODE, CPMD_CODE}:
            raise DataError(f"{path}: line {number}: OVERLAPS codes {code_a}, {code_b}; expected 2 "
                            "(GROMACS) and 1 (CPMD)")
        gmx, cpmd = (id_a, id_b) if code_a == GROMACS_CODE else (id_b, id_a)
        if gmx < 1 or cpmd < 1:
            raise DataError(f"{path}: line {number}: OVERLAPS atom numbers start at 1")
        pairs.append((gmx - 1, cpmd - 1))
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    for col, program in ((0, "GROMACS"), (1, "CPMD")):
        values, counts = np.unique(pairs[:, col], return_counts=True)
        if np.any(counts > 1):
            raise DataError(f"{path}: OVERLAPS maps {program} atom {int(values[counts > 1][0]) + 1} twice")
    return pairs


def gromacs_to_cpmd_order(atom_types, overlaps):
    """The CPMD index of every GROMACS atom in a MiMiC run.

    Args:
        atom_types: GROMACS atom type of every atom, GROMACS order (the
            ``'type'`` column of :func:`pinn.io.readers.mpt.read_mpt`).
        overlaps: [n_qm, 2] 0-based (GROMACS, CPMD) pairs of the QM atoms, from
            :func:`read_overlaps`.

    Returns:
        int64 array ``order`` with ``order[gromacs_index] = cpmd_index`` (0-based),
        a permutation of ``range(natoms)``.

    Raises:
        DataError: OVERLAPS outside the system, or QM atoms that do not take
            the first CPMD indices.
    """
    types = np.asarray(atom_types).astype(str)
    natoms = len(types)
    overlaps = np.asarray(overlaps, dtype=np.int64).reshape(-1, 2)
    n_qm = len(overlaps)
    if n_qm and (overlaps.max() >= natoms or overlaps.min() < 0):
        raise DataError(f"OVERLAPS refer to atom {int(overlaps.max()) + 1}, but the system has {natoms} atoms")
    if n_qm and set(overlaps[:, 1].tolist()) != set(range(n_qm)):
        raise DataError(f"the {n_qm} QM atoms of OVERLAPS must take CPMD atoms 1..{n_qm}")
    order = np.full(natoms, -1, dtype=np.int64)
    order[overlaps[:, 0]] = overlaps[:, 1]
    is_mm = order < 0
    # MM species: one per atom type, in order of first occurrence in the whole system
    _, first, species = np.unique(types, return_index=True, return_inverse=True)
    rank_of_species = np.argsort(np.argsort(first))
    mm = np.flatnonzero(is_mm)
    mm_sorted = mm[np.lexsort((mm, rank_of_species[species.reshape(-1)[mm]]))]
    order[mm_sorted] = n_qm + np.arange(len(mm_sorted))
    return order


class FTrajectory:
    """Random access to the steps of a CPMD ``FTRAJECTORY`` file.

    Args:
        path: the file.
        natoms: atoms per step (all atoms, QM and MM).

    Opening indexes the file in one pass (byte offset of every step), so
    :meth:`read` seeks straight to a step.  ``steps`` is the sorted array of
    the NFI values present.

    Raises:
        DataError: missing or empty file, a step whose line count is not
            ``natoms``, lines that are not 10 numbers; naming file and line.
    """

    def __init__(self, path, natoms):
        self.path = os.fspath(path)
        self.natoms = int(natoms)
        if not os.path.isfile(self.path):
            raise DataError(f"{self.path}: no such file")
        self._offsets = self._index()
        self.steps = np.array(sorted(self._offsets), dtype=np.int64)

    def _index(self):
        offsets = {}
        replaced = 0
        current = None
        start = 0
        count = 0
        first_line = 0

        def close(lineno):
            nonlocal replaced
            if current is None:
                return
            if count != self.natoms:
                raise DataError(f"{self.path}: step {current} (from line {first_line}) has {count} atom lines, "
                                f"expected {self.natoms} (all QM and MM atoms)")
            replaced += current in offsets
            offsets[current] = start

        offset = 0
        with open(self.path, "rb") as f:
            for lineno, line in enumerate(f, 1):
                here, offset = offset, offset + len(line)
                head = line.split(None, 1)
                if not head:
                    continue
                if head[0].startswith(b"<"):  # '<<<<<<  NEW DATA  >>>>>>' after a restart
                    close(lineno)
                    current = None
                    continue
                try:
                    step = int(head[0])
                except ValueError:
                    raise DataError(f"{self.path}: line {lineno}: {line[:40]!r} does not start with a step "
                                    "number") from None
                if step != current or count == self.natoms:
                    close(lineno)
                    current = step
                    start = here
                    count = 0
                    first_line = lineno
                count += 1
            close(None)
        if not offsets:
            raise DataError(f"{self.path}: no steps (empty file)")
        if replaced:
            log.info("%s: %d steps appear more than once (a restarted run); the last occurrence is used",
                     self.path, replaced)
        return offsets

    def read(self, step):
        """Positions, velocities and forces of one step, CPMD order, atomic units.

        Args:
            step: the NFI value.

        Returns:
            (positions [natoms, 3] bohr, velocities [natoms, 3], forces
            [natoms, 3] Hartree/bohr), float64.
        """
        if step not in self._offsets:
            raise DataError(f"{self.path}: no step {step} (steps {int(self.steps[0])}..{int(self.steps[-1])})")
        with open(self.path, "rb") as f:
            f.seek(self._offsets[step])
            lines = [f.readline() for _ in range(self.natoms)]
        try:
            table = np.array(b" ".join(lines).split(), dtype=np.float64).reshape(self.natoms, 10)
        except ValueError:
            raise DataError(f"{self.path}: step {step}: the atom lines are not 10 numbers each "
                            "(NFI x y z vx vy vz fx fy fz)") from None
        return table[:, 1:4], table[:, 4:7], table[:, 7:10]


def write_ftrajectory(path, steps, positions, forces, velocities=None):
    """Write a CPMD ``FTRAJECTORY`` file (the inverse of :class:`FTrajectory`): per step one line per atom,
    ``NFI x y z vx vy vz fx fy fz``, atomic units, CPMD's atom order.

    Args:
        path: file to write (replaced).
        steps: [n] the NFI values.
        positions: [n, natoms, 3] bohr.
        forces: [n, natoms, 3] Hartree/bohr.
        velocities: [n, natoms, 3] atomic units (default zeros).

    Returns:
        ``path``.
    """
    positions = np.asarray(positions, dtype=np.float64)
    forces = np.asarray(forces, dtype=np.float64)
    velocities = np.zeros_like(positions) if velocities is None else np.asarray(velocities, dtype=np.float64)
    with open(path, "w") as f:
        for step, x, v, g in zip(steps, positions, velocities, forces):
            for row in np.hstack([x, v, g]):
                f.write(f"{int(step):10d}" + "".join(f"  {value:22.14E}" for value in row) + "\n")
    return path
