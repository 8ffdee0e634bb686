"""Load the output of MiMiC QM/MM runs: ``.mpt`` topology, GROMACS ``.trr``, CPMD ``ENERGIES``.

See ``docs/mimic.md`` for the physics of what these files contain.  In short:

- elements come from the ``.mpt`` (GROMACS atom order);
- coordinates and the box come from the ``.trr`` (nm -> Å);
- the energy of the frame at GROMACS step ``s`` is the ``ENERGIES`` line with
  ``NFI == s + nfi_offset`` (Hartree -> eV), by default the ``EKS`` column,
  which in MiMiC is the total QM + MM + QM/MM potential energy;
- forces come from the ``.trr`` by default (kJ mol⁻¹ nm⁻¹ -> eV/Å), which in a
  MiMiC run are the MM force-field forces only, or from CPMD's ``FTRAJECTORY``
  (total QM/MM forces, Hartree/bohr -> eV/Å, mapped from CPMD to GROMACS atom
  order), or are not loaded;
- with ``mm_energies`` (GROMACS's energy file) the frames are QM/MM frames
  (docs/qmmm.md): every atom, the QM region, the ``.mpt``'s MM charges, EKS
  minus GROMACS's potential energy and ``FTRAJECTORY`` minus the trr forces.

Everything that can be checked without reading coordinates is checked when
:func:`load_mimic` is called (headers, atom counts, blocks present, pairing),
so a bad file fails at once with a message naming it; the frames themselves
are read lazily while the dataset is iterated.
"""
import collections
import logging
import os

import numpy as np

from pinn import keys as K
from pinn import units
from pinn.io.base import Frame, list_loader
from pinn.io.errors import DataError
from pinn.io.qmmm_atoms import region_charge_problem
from pinn.io.readers.cpmd import FTrajectory, gromacs_to_cpmd_order, read_overlaps
from pinn.io.readers.energies import last_occurrence, read_energies
from pinn.io.readers.mpt import read_mpt
from pinn.io.readers.ndx import read_ndx
from pinn.io.readers.trr import TRRFile

log = logging.getLogger(__name__)

FORCE_SOURCES = ("auto", "trr", "ftrajectory", "none")


def load_mimic(mpt, trr, energies, split=False, shuffle=True, seed=0, *, splits=None, energy_column="EKS",
               nfi_offset=0, forces="auto", ftrajectory=None, cpmd_input=None, cpmd_order=None,
               select=None, skip_incomplete=False, allow_truncated=False, position_tolerance=1e-3,
               qm=None, mm_energies=None, qm_charge=0.0):
    """Datasets from MiMiC QM/MM runs.

    Args:
        mpt, trr, energies: one file each, or parallel lists of files (one
            ``.mpt``, ``.trr`` and CPMD ``ENERGIES`` per run or chunk; an
            ``.mpt`` may be repeated).
        split, shuffle, seed: as for the other loaders (see
            :func:`pinn.io.split_items`); frames of all files are pooled first.
        splits: upstream PiNN's name of ``split`` (give one of the two).
        energy_column: the ``ENERGIES`` column used as the label (default
            ``'EKS'``, the potential energy).
        nfi_offset: the frame at trr step ``s`` takes the energy (and
            ``FTRAJECTORY`` step) ``NFI == s + nfi_offset``.  0 is MiMiC's
            alignment; the 2020 loader effectively used 1 for ``nstxout = 1``.
        forces: ``'auto'`` (``FTRAJECTORY`` when given, else the trr),
            ``'trr'``, ``'ftrajectory'`` or ``'none'`` (energy only, no
            ``f_data``).  With ``'auto'`` and no ``FTRAJECTORY``, a warning
            says that trr forces are the MM forces only; ``forces='trr'``
            given explicitly loads the same forces without it.
        ftrajectory: CPMD ``FTRAJECTORY`` file(s), parallel to ``trr``.
        cpmd_input: the CPMD input(s) whose ``&MIMIC OVERLAPS`` map QM atoms;
            one file for all runs or a parallel list.  Needed for
            ``FTRAJECTORY`` forces unless ``cpmd_order`` is given.
        cpmd_order: optional explicit map, ``cpmd_order[gromacs_index] =
            cpmd_index`` (0-based, all atoms), instead of the one derived from
            OVERLAPS and the ``.mpt`` atom types.
        select: atoms to keep (coordinates, elements and forces; the energy
            stays that of the whole system, see the docs): ``None`` (all), a
            sequence of 0-based GROMACS indices, ``(ndx_file, group_name)``, or
            ``{'resname': name_or_names}``.
        skip_incomplete: skip (and count) frames without positions, or
            without forces when forces come from the trr, instead of failing.
        allow_truncated: drop an incomplete last trr frame instead of failing.
        position_tolerance: largest difference (Å) allowed between trr
            positions and mapped ``FTRAJECTORY`` positions (after removing
            CPMD's overall translation) before a frame is refused as a
            mismatched pair; ``None`` disables the check.
        mm_energies: GROMACS's energy file(s) of the runs (``.edr`` or the
            ``.xvg`` of ``gmx energy``), parallel to ``trr``: gives QM/MM frames
            (docs/qmmm.md), whose energy is ``EKS`` minus GROMACS's potential
            energy of the same step and whose forces are ``FTRAJECTORY`` minus
            the trr forces (both needed, unless ``forces='none'``): the QM
            region's energy and forces in the MM charges' field.
        qm: the QM region of QM/MM frames, as ``select`` takes atoms; default
            the GROMACS atoms of the ``&MIMIC OVERLAPS`` of ``cpmd_input``.
        qm_charge: the QM region's total charge, e (CPMD's ``&SYSTEM CHARGE``).

    Returns:
        A ``tf.data.Dataset`` of structures, or a nested dict of them (with
        ``split``).  Each structure has ``elems``, ``coord`` (Å), ``cell``
        (Å), ``pbc``, ``e_data`` (eV) and, unless ``forces='none'``,
        ``f_data`` (eV/Å), as float32; QM/MM frames (``mm_energies``) also
        ``qm``, ``mm_charge`` (the ``.mpt`` charges of the MM atoms, e) and
        ``qm_charge`` (e).

    Raises:
        DataError: lists of different lengths, missing or malformed files,
            atom counts that differ between ``.mpt`` and trr, a frame without
            positions or forces, a run in which no frame has an energy line;
            for QM/MM frames a source that is missing (the MM energies, the
            ``FTRAJECTORY`` or trr forces, the QM region); messages name the
            file and frame.
    """
    runs = _runs(mpt, trr, energies, ftrajectory, cpmd_input, mm_energies)
    if forces not in FORCE_SOURCES:
        raise DataError(f"load_mimic: forces={forces!r}; allowed: {list(FORCE_SOURCES)}")
    qmmm = mm_energies is not None
    if qmmm:
        charge_problem = region_charge_problem(qm_charge, "load_mimic: qm_charge")
        if charge_problem:
            raise DataError(charge_problem)
        forces = _qmmm_forces(forces, ftrajectory, energy_column, select)
    elif qm is not None:
        raise DataError("load_mimic: qm= makes QM/MM frames, whose energy is EKS minus GROMACS's MM energy: give "
                        "mm_energies=<the runs' .edr or gmx energy .xvg>")
    trr_by_default = forces == "auto" and ftrajectory is None  # trr forces the caller did not ask for
    if forces == "auto":
        forces = "ftrajectory" if ftrajectory is not None else "trr"
    if forces == "ftrajectory" and ftrajectory is None:
        raise DataError("load_mimic: forces='ftrajectory' needs ftrajectory=<FTRAJECTORY file(s)>")
    reader = _FrameReader(forces, position_tolerance, qm_charge if qmmm else None)
    items = []
    stats = _Skipped()
    topologies = {}
    energy_tables = {}
    selections = {}
    for run in runs:
        if run.mpt not in topologies:
            topologies[run.mpt] = read_mpt(run.mpt)
        topology = topologies[run.mpt]
        if run.energies not in energy_tables:
            energy_tables[run.energies] = read_energies(run.energies)
        table = energy_tables[run.energies]
        if energy_column not in table:
            raise DataError(f"{run.energies}: no column {energy_column!r}; columns: {list(table)}")
        if run.mpt not in selections:  # runs usually share one .mpt: select once
            atoms = _selection(select, topology)
            selections[run.mpt] = atoms, topology.atomic_numbers[atoms]
        atoms, elems = selections[run.mpt]
        order = None
        ftraj = None
        region = _qm_region(qm, run, topology) if qmmm else None
        if forces in ("ftrajectory", "qmmm"):
            order = _cpmd_order(run, topology, cpmd_order)
            ftraj = FTrajectory(run.ftrajectory, topology.natoms)
        with TRRFile(run.trr, allow_truncated=allow_truncated) as trr:
            index = trr.index
        run_id = reader.add_run(run, index, elems, atoms, order, ftraj, region, topology)
        paired = _pair_frames(run, run_id, index, topology, table[energy_column] * units.HARTREE,
                              table["NFI"], nfi_offset, forces, ftraj, skip_incomplete, stats)
        items += _minus_mm_energies(run, index, paired, stats) if qmmm else paired
    _log_summary(runs, items, stats, forces, energy_column, select, trr_by_default)
    if not items:
        raise DataError("load_mimic: no frame could be paired with an energy in any run")

    @list_loader
    def read_mimic_frame(item):
        return reader.read(item.payload)
    return read_mimic_frame(items, split=split, shuffle=shuffle, seed=seed, splits=splits)


# -- inputs -------------------------------------------------------------------

_Run = collections.namedtuple("_Run", "mpt trr energies ftrajectory cpmd_input mm_energies")


def _as_list(value, what):
    if value is None:
        return None
    if isinstance(value, (str, os.PathLike)):
        return [os.fspath(value)]
    try:
        values = [os.fspath(v) for v in value]
    except TypeError:
        raise DataError(f"load_mimic: {what} must be a file name or a list of them, got {value!r}") from None
    if not values:
        raise DataError(f"load_mimic: the list of {what} files is empty")
    return values


def _runs(mpt, trr, energies, ftrajectory, cpmd_input, mm_energies):
    lists = {"mpt": _as_list(mpt, "mpt"), "trr": _as_list(trr, "trr"), "energies": _as_list(energies, "energies"),
             "ftrajectory": _as_list(ftrajectory, "ftrajectory"), "cpmd_input": _as_list(cpmd_input, "cpmd_input"),
             "mm_energies": _as_list(mm_energies, "mm_energies")}
    n = len(lists["trr"])
    if lists["cpmd_input"] is not None and len(lists["cpmd_input"]) == 1:
        lists["cpmd_input"] = lists["cpmd_input"] * n  # one CPMD input for every run
    lengths = {k: len(v) for k, v in lists.items() if v is not None}
    if len(set(lengths.values())) != 1:
        raise DataError(f"load_mimic: the file lists must have equal lengths (one entry per run), got {lengths}")
    return [_Run(*(lists[k][i] if lists[k] is not None else None for k in _Run._fields)) for i in range(n)]


def _selection(select, topology):
    """0-based GROMACS indices of the selected atoms, sorted, or a slice of all atoms."""
    n = topology.natoms
    if select is None:
        return np.arange(n)
    if isinstance(select, dict):
        unknown = set(select) - {"resname"}
        if unknown:
            raise DataError(f"load_mimic: select={select!r}: only {{'resname': ...}} is a dict selection")
        names = select["resname"]
        names = [names] if isinstance(names, str) else list(names)
        atoms = np.flatnonzero(np.isin(topology["resname"], names))
        what = f"residue names {names}"
    elif isinstance(select, (tuple, list)) and len(select) == 2 and isinstance(select[1], str):  # YAML: a list
        groups = read_ndx(select[0])
        if select[1] not in groups:
            raise DataError(f"{select[0]}: no group [ {select[1]} ]; groups: {list(groups)}")
        atoms = groups[select[1]]
        what = f"group [ {select[1]} ] of {select[0]}"
    else:
        try:
            atoms = np.asarray(select, dtype=np.int64).reshape(-1)
        except (TypeError, ValueError):
            raise DataError(f"load_mimic: select={select!r} is not an index list, (ndx_file, group) or "
                            "{'resname': ...}") from None
        what = "the index list"
    if len(atoms) == 0:
        raise DataError(f"{topology.path}: select: {what} matches no atom")
    if atoms.min() < 0 or atoms.max() >= n:
        raise DataError(f"{topology.path}: select: {what} refers to atom index {int(atoms.max())}, "
                        f"but the system has {n} atoms (indices are 0-based)")
    if len(np.unique(atoms)) != len(atoms):
        raise DataError(f"{topology.path}: select: {what} lists an atom more than once")
    return np.sort(atoms)


def _qmmm_forces(forces, ftrajectory, energy_column, select):
    """The force source of QM/MM frames: ``'qmmm'`` (FTRAJECTORY minus the trr's) or ``'none'``."""
    if select is not None:
        raise DataError("load_mimic: QM/MM frames (mm_energies=) keep every atom; select= cannot be combined with "
                        "them (the region is qm=)")
    if energy_column != "EKS":
        raise DataError(f"load_mimic: QM/MM frames take EKS minus GROMACS's MM energy, not {energy_column!r}")
    if forces == "none":
        return "none"
    if forces != "auto":
        raise DataError(f"load_mimic: forces={forces!r}: the forces of QM/MM frames are FTRAJECTORY's minus the "
                        "trr's (forces='auto'), or none (forces='none')")
    if ftrajectory is None:
        raise DataError("load_mimic: QM/MM frames need CPMD's total forces, ftrajectory=<FTRAJECTORY file(s)>, "
                        "besides the trr's MM forces (or forces='none' for energies only)")
    return "qmmm"


def _qm_region(qm, run, topology):
    """Bool mask (GROMACS order) of the QM atoms: ``qm`` as a selection, else the run's OVERLAPS."""
    mask = np.zeros(topology.natoms, bool)
    if qm is not None:
        mask[_selection(qm, topology)] = True
        return mask
    if run.cpmd_input is None:
        raise DataError("load_mimic: QM/MM frames need the QM region: qm=<selection> or cpmd_input=<CPMD input "
                        "whose &MIMIC OVERLAPS list the QM atoms>")
    overlaps = read_overlaps(run.cpmd_input)
    if overlaps[:, 0].max() >= topology.natoms:
        raise DataError(f"{run.cpmd_input}: OVERLAPS name GROMACS atom {int(overlaps[:, 0].max()) + 1}, but "
                        f"{topology.path} has {topology.natoms} atoms")
    mask[overlaps[:, 0]] = True
    return mask


def _minus_mm_energies(run, index, items, stats):
    """``items`` whose energy (EKS) is given GROMACS's MM energy of the same frame subtracted (paired by the
    trr frame's time, which GROMACS's energy file records alike); frames without one are counted and left
    out."""
    from pinn.io.mm_energies import read_mm_energies
    times, energies = read_mm_energies(run.mm_energies)
    order = np.argsort(times, kind="stable")
    times, energies = times[order], energies[order]
    paired = []
    for item in items:
        run_id, i, eks, step = item.payload
        t = float(index["time"][i])
        k = int(np.searchsorted(times, t))
        near = [j for j in (k - 1, k) if 0 <= j < len(times) and abs(times[j] - t) <= 1e-6 * max(1.0, abs(t))]
        if not near:
            stats["no MM energy"] += 1
            continue
        paired.append(Frame(item.source, (run_id, i, eks - float(energies[near[-1]]), step)))
    if items and not paired:
        raise DataError(f"{run.mm_energies}: no MM energy at the time of any frame of {run.trr} (trr times "
                        f"{float(index['time'].min())}..{float(index['time'].max())}, energy file "
                        f"{float(times.min())}..{float(times.max())}); are these files from the same run?")
    return paired


def _cpmd_order(run, topology, explicit):
    if explicit is not None:
        order = np.asarray(explicit, dtype=np.int64).reshape(-1)
        if len(order) != topology.natoms or not np.array_equal(np.sort(order), np.arange(topology.natoms)):
            raise DataError(f"load_mimic: cpmd_order must be a permutation of 0..{topology.natoms - 1} "
                            f"(one CPMD index per GROMACS atom of {topology.path})")
        return order
    if run.cpmd_input is None:
        raise DataError("load_mimic: FTRAJECTORY forces need cpmd_input=<CPMD input with &MIMIC OVERLAPS> "
                        "(or cpmd_order=) to map CPMD atoms to GROMACS atoms")
    try:
        return gromacs_to_cpmd_order(topology["type"], read_overlaps(run.cpmd_input))
    except DataError as err:
        raise DataError(f"{run.cpmd_input} with {topology.path}: {err}") from None


# -- pairing ------------------------------------------------------------------

def _pair_frames(run, run_id, index, topology, energy_ev, nfi, nfi_offset, forces, ftraj, skip_incomplete, stats):
    """Items (one per usable trr frame) of one run; counts what was skipped in ``stats``."""
    wrong = np.flatnonzero(index["natoms"] != topology.natoms)
    if len(wrong):
        i = int(wrong[0])
        raise DataError(f"{run.trr}: frame {i} (step {int(index['step'][i])}) has {int(index['natoms'][i])} "
                        f"atoms, but {run.mpt} has {topology.natoms}")
    steps = index["step"]
    # a step written twice (appended restart): the later frame wins
    keep = np.zeros(len(steps), bool)
    keep[last_occurrence(steps)[1]] = True
    stats["repeated step"] += int((~keep).sum())
    needed = ["x"] + (["f"] if forces in ("trr", "qmmm") else [])
    for block in needed:
        missing = keep & (index[f"{block}_size"] == 0)
        if missing.any() and not skip_incomplete:
            i = int(np.flatnonzero(missing)[0])
            what = "positions (x)" if block == "x" else "forces (f)"
            raise DataError(f"{run.trr}: frame {i} (step {int(steps[i])}) has no {what}; "
                            f"{int(missing.sum())} of {len(steps)} frames lack them (check nst{block}out, or "
                            "pass skip_incomplete=True to use only complete frames)")
        stats[f"no {block}"] += int(missing.sum())
        keep &= ~missing
    wanted = steps + nfi_offset
    where = np.searchsorted(nfi, wanted)
    has_energy = (where < len(nfi)) & (nfi[np.minimum(where, len(nfi) - 1)] == wanted)
    if not (has_energy & keep).any() and keep.any():
        raise DataError(f"{run.energies}: no energy line for any frame of {run.trr}: trr steps "
                        f"{int(steps.min())}..{int(steps.max())} (+ nfi_offset {nfi_offset}) vs NFI "
                        f"{int(nfi.min())}..{int(nfi.max())}; are these files from the same run?")
    no_energy = keep & ~has_energy
    stats["no energy"] += int(no_energy.sum())
    stats.missing_steps.extend(int(s) for s in steps[no_energy][:5 - len(stats.missing_steps)])
    keep &= has_energy
    if ftraj is not None:
        has_forces = np.isin(wanted, ftraj.steps)
        stats["no FTRAJECTORY step"] += int((keep & ~has_forces).sum())
        keep &= has_forces
        if not keep.any():
            raise DataError(f"{run.ftrajectory}: no FTRAJECTORY step matches a frame of {run.trr} "
                            f"(FTRAJECTORY steps {int(ftraj.steps[0])}..{int(ftraj.steps[-1])}, "
                            f"every {int(np.diff(ftraj.steps).min()) if len(ftraj.steps) > 1 else '-'}; "
                            "write the trr and FTRAJECTORY at common steps)")
    return [Frame(f"{run.trr}, frame {i} (step {int(steps[i])})",
                  (run_id, i, float(energy_ev[where[i]]), int(wanted[i])))
            for i in np.flatnonzero(keep)]


class _Skipped(collections.Counter):
    """Counts of skipped frames by reason, and the first steps that had no energy line."""

    def __init__(self):
        super().__init__()
        self.missing_steps = []


def _log_summary(runs, items, stats, forces, energy_column, select, trr_by_default):
    skipped = []
    if stats["no energy"]:
        skipped.append(f"{stats['no energy']} without an energy line (first steps {stats.missing_steps}; "
                       "step 0, the initial configuration, never has one)")
    for key, text in (("no x", "without positions"), ("no f", "without forces"),
                      ("repeated step", "repeating a step (the later frame is used)"),
                      ("no FTRAJECTORY step", "without an FTRAJECTORY step"),
                      ("no MM energy", "without a GROMACS energy")):
        if stats[key]:
            skipped.append(f"{stats[key]} {text}")
    log.info("load_mimic: %d frames from %d run(s); energy %s (Hartree -> eV)%s; forces: %s%s",
             len(items), len(runs), energy_column,
             " minus GROMACS's MM energy (QM/MM frames)" if runs[0].mm_energies is not None else "",
             {"trr": "trr (kJ/mol/nm -> eV/Å)", "ftrajectory": "FTRAJECTORY (Hartree/bohr -> eV/Å)",
              "qmmm": "FTRAJECTORY minus trr (the QM region's pull, eV/Å)", "none": "not loaded"}[forces],
             "; skipped " + ", ".join(skipped) if skipped else "")
    if forces == "trr" and trr_by_default:  # forces='trr' given explicitly: the caller has chosen them
        log.warning("load_mimic: trr forces of a MiMiC run are the GROMACS (MM force-field) forces only, "
                    "not the gradient of the QM/MM energy %s; see docs/mimic.md before training on them",
                    energy_column)
    if select is not None:
        log.warning("load_mimic: atom selection %r keeps a subset of atoms, but the energy label stays that "
                    "of the whole QM/MM system; see docs/mimic.md", select)


# -- lazy reading -------------------------------------------------------------

class _FrameReader:
    """Reads paired frames on demand, keeping a few trr files open."""

    MAX_OPEN = 16

    def __init__(self, forces, position_tolerance, qm_charge=None):
        self.forces = forces
        self.position_tolerance = position_tolerance
        self.qm_charge = qm_charge  # None: not QM/MM frames
        self.runs = []
        self.open = collections.OrderedDict()

    def add_run(self, run, index, elems, atoms, order, ftraj, region=None, topology=None):
        """Register a run; ``region`` (bool per atom, QM/MM frames) takes the MM charges from ``topology``."""
        charges = None if region is None else np.where(region, 0.0, np.asarray(topology["charge"], dtype=float))
        self.runs.append((run, index, elems, atoms, order, ftraj, region, charges))
        return len(self.runs) - 1

    def _trr(self, run_id):
        trr = self.open.pop(run_id, None)
        if trr is None:
            run, index = self.runs[run_id][:2]
            trr = TRRFile(run.trr, index=index)
            if len(self.open) >= self.MAX_OPEN:
                self.open.popitem(last=False)[1].close()
        self.open[run_id] = trr
        return trr

    def read(self, payload):
        run_id, i, energy, step = payload
        run, _, elems, atoms, order, ftraj, region, charges = self.runs[run_id]
        with_f = self.forces in ("trr", "qmmm")
        frame = self._trr(run_id).read_frame(i, blocks=("box", "x", "f") if with_f else ("box", "x"))
        box = frame["box"] if frame["box"] is not None else np.zeros((3, 3))
        coord = frame["x"].astype(np.float64) * units.NM
        cell = box.astype(np.float64) * units.NM
        periodic = bool(np.any(cell))
        structure = {K.ELEMS: elems, K.COORD: coord[atoms], K.CELL: cell, K.PBC: np.full(3, periodic),
                     K.E_DATA: energy}
        if self.forces == "trr":
            structure[K.F_DATA] = frame["f"][atoms].astype(np.float64) * units.KJ_PER_MOL_NM
        elif self.forces in ("ftrajectory", "qmmm"):
            positions, _, forces = ftraj.read(step)
            self._check_positions(run, i, step, positions[order] * units.BOHR, coord, cell, periodic)
            structure[K.F_DATA] = forces[order][atoms] * units.HARTREE_PER_BOHR
            if self.forces == "qmmm":  # the QM region's forces: the total minus GROMACS's (MM force field)
                structure[K.F_DATA] = structure[K.F_DATA] - frame["f"][atoms].astype(np.float64) * units.KJ_PER_MOL_NM
        if region is not None:
            structure.update({K.QM: region, K.MM_CHARGE: charges, K.QM_CHARGE: float(self.qm_charge)})
        return structure

    def _check_positions(self, run, i, step, cpmd, trr, cell, periodic):
        if self.position_tolerance is None:
            return
        shift = cpmd - trr
        shift -= shift[0]  # CPMD translates the whole system (it centres the QM region)
        if periodic:
            frac = np.linalg.solve(cell.T, shift.T).T
            shift = (frac - np.round(frac)) @ cell
        worst = float(np.abs(shift).max())
        if worst > self.position_tolerance:
            atom = int(np.argmax(np.abs(shift).max(axis=1)))
            raise DataError(f"{run.ftrajectory}, step {step} vs {run.trr}, frame {i}: positions differ by up to "
                            f"{worst:.3g} Å (GROMACS atom {atom + 1}) after removing the overall shift; the "
                            "atom mapping (cpmd_input / cpmd_order) or the step pairing (nfi_offset) is wrong")


def mimic_trajectory(mpt, trr, select=None, allow_truncated=False):
    """The frames of a MiMiC run's GROMACS trr as ASE ``Atoms`` (no labels): what a model sees of them.

    Args:
        mpt: the run's MiMiCPy topology (elements of the atoms).
        trr: its GROMACS trajectory.
        select: the atoms to keep, as :func:`load_mimic`'s ``select`` (e.g. the QM region a model was
            trained on): ``None`` (all), 0-based GROMACS indices, ``(ndx_file, group)`` or
            ``{'resname': ...}``.
        allow_truncated: pass over an incomplete last frame instead of failing.

    Yields:
        ``(step, time, atoms)``: the trr's step and time (ps), and the selected atoms with positions
        and cell in Å (periodic where the frame has a box).

    Raises:
        DataError: naming the file and frame (a frame without positions, atom counts that differ).
    """
    from ase import Atoms
    topology = read_mpt(mpt)
    atoms_index = _selection(select, topology)
    numbers = topology.atomic_numbers[atoms_index]
    with TRRFile(trr, allow_truncated=allow_truncated) as frames:
        for i in range(len(frames)):
            frame = frames.read_frame(i, blocks=("box", "x"))
            if frame["natoms"] != topology.natoms:
                raise DataError(f"{trr}, frame {i}: {frame['natoms']} atoms, but {mpt} has {topology.natoms}")
            if frame["x"] is None:
                raise DataError(f"{trr}, frame {i} (step {frame['step']}): no positions")
            cell = (frame["box"] if frame["box"] is not None else np.zeros((3, 3))).astype(np.float64) * units.NM
            positions = frame["x"][atoms_index].astype(np.float64) * units.NM
            yield frame["step"], frame["time"], Atoms(numbers=numbers, positions=positions, cell=cell,
                                                      pbc=bool(np.any(cell)))
