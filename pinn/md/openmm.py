"""A pinn potential in OpenMM (``openmm.PythonForce``), and ML/MM systems from a GROMACS topology.

::

    import openmm.app as app
    from pinn.md.openmm import create_mixed_system
    gro = app.GromacsGroFile("equilibrated.gro")
    top = app.GromacsTopFile("acetone.top", periodicBoxVectors=gro.getPeriodicBoxVectors(),
                             includeDir="/usr/share/gromacs/top")
    mm = top.createSystem(nonbondedMethod=app.PME, nonbondedCutoff=1.0 * openmm.unit.nanometer)
    ml_atoms = [a.index for a in top.topology.atoms() if a.residue.name == "ACT"]
    system = create_mixed_system(mm, top.topology, ml_atoms, "acetone.pinn")

:func:`pinn_force` is a force of the whole system or of a subset of its atoms (OpenMM hands the
subset's positions alone): positions nm → Å, the pinn calculator's energy (eV) and forces (eV/Å)
back in kJ/mol and kJ/mol/nm.  In a periodic system the calculator sees OpenMM's box (minimum
images; OpenMM may wrap atoms one by one).

:func:`create_mixed_system` with a committee (a list of model directories) drives the dynamics with the members'
mean; a :class:`~pinn.md.openmm_deviation.DeviationMonitor` writes their deviation at each step and stops the
run at the first step over a threshold.

:func:`create_mixed_system` is mechanical embedding, as openmm-ml's ``createMixedSystem``: in a
copy of an MM system it removes the bonded terms (bonds, angles, torsions, CMAP) and the
constraints whose atoms all lie in the ML region, sets every ML–ML pair of the
``NonbondedForce`` to an exclusion (no Coulomb or Lennard-Jones inside the region; with PME its
reciprocal part is taken back for those pairs as for any exclusion) and of a ``CustomNonbondedForce``
(a force field's own Lennard-Jones), keeps every ML–MM and MM–MM term, and adds the pinn force on the
ML atoms in its own force group.

Saving: OpenMM's ``XmlSerializer`` pickles the pinn force's computation into the XML, and
``XmlSerializer.deserialize`` unpickles it, which runs whatever code the file holds: load such XML only if you
wrote it yourself.  :func:`save_system` and :func:`load_system` (:mod:`pinn.md.openmm_files`) save and load a
system without pickle.  Either way the model is found by the absolute path it had when the force was built and
must still have the SHA-256 it had then.
"""
import logging

import numpy as np

from pinn.physics.embedding_kinds import MECHANICAL, embedding_of
from pinn.md.openmm_computation import (ANGSTROM_PER_NM, KJ_PER_MOL_PER_EV, EmbeddedComputation, PinnComputation,
                                        python_force)
from pinn.md.openmm_deviation import DeviationMonitor, DeviationStop
from pinn.md.openmm_files import load_system, save_system
from pinn.md.openmm_interpolation import BONDED_TERMS, LAMBDA, interpolated_system, refuse_a_committee

log = logging.getLogger("pinn")
__all__ = ["pinn_force", "create_mixed_system", "FrameCutter", "save_system", "load_system", "DeviationMonitor",
           "DeviationStop", "KJ_PER_MOL_PER_EV", "ANGSTROM_PER_NM"]


def pinn_force(model, numbers, particles=None, periodic=False, force_group=None, monitor=None, **calc_options):
    """An OpenMM force of a pinn potential.

    Args:
        model: what :func:`pinn.get_calc` takes, or an ASE calculator.
        numbers: the atomic numbers of the atoms the force acts on (of ``particles``, in their order).
        particles: the indices of those atoms in the system (``None``: all of it).
        periodic: whether the system is periodic (OpenMM then passes its box).
        force_group: the force's group (``None``: OpenMM's default, 0).
        monitor: a :class:`~pinn.md.openmm_deviation.DeviationMonitor` of a committee's deviation at each step
            (``model`` a committee), or ``None``.
        calc_options: passed on to :func:`pinn.get_calc`.

    Returns:
        ``openmm.PythonForce`` of a :class:`pinn.md.openmm_computation.PinnComputation`, which OpenMM keeps
        pickled: the system is saved (``XmlSerializer``, ``copy.deepcopy``, ``pickle``; without pickle:
        :func:`save_system`) when ``model`` is a model directory or file, or a committee's list of directories
        (kept as absolute paths with the model's SHA-256, checked when a restored force first makes its
        calculator), and refuses to be, naming the model, otherwise.

    Raises:
        ValueError: ``numbers`` and ``particles`` of different lengths; a ``monitor`` for a model that is no
            committee.
    """
    numbers = np.asarray(numbers, int)
    if particles is not None and len(particles) != len(numbers):
        raise ValueError(f"pinn_force: {len(numbers)} atomic numbers for {len(particles)} particles")
    computation = PinnComputation(model, numbers, periodic, calc_options)
    computation.calc  # made now: a bad model fails here, not at the first step
    computation.watch(monitor)
    return python_force(computation, particles, periodic, force_group)


def create_mixed_system(system, topology, ml_atoms, model, force_group=1, embedding=MECHANICAL.name, qm_charge=None,
                        cutoff=None, switch_width=0.1, monitor=None, interpolate=False, **calc_options):
    """An ML/MM system: ``system`` with the ML region's MM terms removed and a pinn force on it.

    Args:
        system: the MM ``openmm.System`` (e.g. of ``GromacsTopFile.createSystem``); not changed.
        topology: its ``openmm.app.Topology`` (the ML atoms' elements, the residues).
        ml_atoms: the indices of the ML region's atoms.
        model: a model directory or model file (the system can then be saved: :func:`save_system`), a committee
            (a list of model directories, or a directory of ``member-K``: the members' mean drives the dynamics),
            or what :func:`pinn.get_calc` takes, or an ASE calculator.
        force_group: the pinn force's group (its energy alone: ``getState(groups={force_group})``).
        embedding: ``'mechanical'`` (the module's description) or ``'electrostatic'``: the region's charges
            are the model's (a potential model with ``embedding: electrostatic``): they are zero in the
            ``NonbondedForce`` and in its exceptions with region atoms (Lennard-Jones kept), and the pinn force
            acts on the region and on the MM atoms whose charges it sees
            (:mod:`pinn.md.openmm_computation`).
        qm_charge: the region's charge (e) with electrostatic embedding; ``None``: the sum of the force field's
            charges of the region, rounded to an integer.
        cutoff: nm, in a periodic system with electrostatic embedding: the MM residues whose centre lies within
            it of the region's centre are seen; ``None``: the ``NonbondedForce``'s cutoff.
        switch_width: nm, the width of the shell below ``cutoff`` where a residue's charges are switched off.
        monitor: a :class:`~pinn.md.openmm_deviation.DeviationMonitor`: a committee's deviation at each step,
            written and, with its ``stop_above``, the stop at the first step over it; ``None``: none.
        interpolate: a system that goes over to ``system`` with the global parameter ``lambda_interpolate``
            (:mod:`pinn.md.openmm_interpolation`: 0 the force field, 1 the ML/MM system, linear in between; the
            interpolating force in ``force_group``); one model, not a committee.
        calc_options: passed on to :func:`pinn.get_calc`.

    Returns:
        a new ``openmm.System``.

    Raises:
        ValueError: an ML atom without an element, an index out of range, or no ML atoms; an unknown
            ``embedding``, or one the model does not have; with electrostatic embedding, a bond between the
            region and the MM atoms (the region must be whole molecules) or a system without
            ``NonbondedForce``; a ``monitor`` for a model that is no committee; ``interpolate`` with a committee
            or a monitor.
    """
    import openmm
    if interpolate and monitor is not None:
        raise ValueError("create_mixed_system: interpolate=True takes no monitor (the λ windows of a free energy "
                         "are sampled with one model)")
    try:
        kind = embedding_of(embedding)
    except ValueError as error:
        raise ValueError(f"create_mixed_system: {error}") from None
    ml = _ml_atoms(system, topology, ml_atoms, "create_mixed_system")
    atoms = list(topology.atoms())
    inside = set(ml)
    new = openmm.XmlSerializer.deserialize(openmm.XmlSerializer.serialize(system))
    removed = {"constraints": 0}
    for k in range(new.getNumConstraints() - 1, -1, -1):
        i, j, _ = new.getConstraintParameters(k)
        if i in inside and j in inside:
            new.removeConstraint(k)
            removed["constraints"] += 1
    nonbonded = None
    for force in new.getForces():
        name = type(force).__name__
        if name == "NonbondedForce":
            _exclude_pairs(force, ml)
            nonbonded = force
        elif name == "CustomNonbondedForce":
            count = _exclude_custom_pairs(force, ml)
            if count:
                removed["CustomNonbondedForce pairs"] = count
        else:
            count = _remove_bonded(force, inside)
            if count:
                removed[name] = count
    periodic = system.usesPeriodicBoundaryConditions()
    if not kind.sees_environment:
        computation = PinnComputation(model, [atoms[i].element.atomic_number for i in ml], periodic, calc_options)
        particles = ml
        described = "ML-ML nonbonded pairs excluded"
    else:
        computation, particles, described = _electrostatic(new, nonbonded, topology, ml, model, qm_charge, cutoff,
                                                           switch_width, calc_options)
    _check_model_embedding(computation.calc, kind)
    computation.watch(monitor)
    if interpolate:
        from pinn.committee import CommitteeCalc
        if isinstance(computation.calc, CommitteeCalc):
            refuse_a_committee(computation.calc.size, "create_mixed_system")
        computation.lambda_parameter = LAMBDA
        interpolated_system(system, new, ml, python_force(computation, particles, periodic, None), force_group)
        described += f"; interpolated to the force field by {LAMBDA}"
    else:
        new.addForce(python_force(computation, particles, periodic, force_group))
    log.info("ML/MM system: %d ML atoms of %d (%s embedding); removed inside the ML region: %s; %s", len(ml),
             system.getNumParticles(), kind.name, ", ".join(f"{n} {k}" for k, n in removed.items()), described)
    return new


def _ml_atoms(system, topology, ml_atoms, who):
    """The ML atoms' indices, sorted and checked (in range, with an element)."""
    ml = sorted({int(i) for i in ml_atoms})
    if not ml:
        raise ValueError(f"{who}: no ML atoms")
    if ml[0] < 0 or ml[-1] >= system.getNumParticles():
        raise ValueError(f"{who}: ML atom indices must lie in 0..{system.getNumParticles() - 1}")
    atoms = list(topology.atoms())
    missing = [i for i in ml if atoms[i].element is None]
    if missing:
        raise ValueError(f"{who}: atoms {missing[:5]} have no element in the topology")
    return ml


class FrameCutter:
    """The frames a model of an ML/MM system sees (what :func:`create_mixed_system` hands it at each step), without a
    model: to label an MM system's own configurations before any model exists.

    Args:
        system, topology, ml_atoms, embedding, qm_charge, cutoff, switch_width: as :func:`create_mixed_system`
            (``system`` is not changed).

    Call it with the positions of every atom of the system (nm, [n, 3]) and, for a periodic system, the box
    (nm, [3, 3] rows): an ``ase.Atoms`` in pinn's QM/MM convention (electrostatic embedding: the region made whole
    and the MM atoms it sees, with their charges, switched in a periodic system) or of the ML atoms alone
    (mechanical), positions in Å.
    """

    def __init__(self, system, topology, ml_atoms, embedding=MECHANICAL.name, qm_charge=None, cutoff=None,
                 switch_width=0.1):
        import openmm
        kind = embedding_of(embedding)
        ml = _ml_atoms(system, topology, ml_atoms, "FrameCutter")
        atoms = list(topology.atoms())
        periodic = system.usesPeriodicBoundaryConditions()
        if not kind.sees_environment:
            self.computation = PinnComputation(None, [atoms[i].element.atomic_number for i in ml], periodic)
            self.particles = np.asarray(ml)
            return
        copy = openmm.XmlSerializer.deserialize(openmm.XmlSerializer.serialize(system))
        nonbonded = next((f for f in copy.getForces() if isinstance(f, openmm.NonbondedForce)), None)
        inputs, self.particles, _ = _embedding_inputs(copy, nonbonded, topology, ml, qm_charge, cutoff, switch_width)
        self.computation = EmbeddedComputation(None, **inputs)

    def __call__(self, positions, box=None):
        positions = np.asarray(positions, np.float64)[self.particles] * ANGSTROM_PER_NM
        return self.computation.frame(positions, None if box is None else np.asarray(box, np.float64) * ANGSTROM_PER_NM)


def _check_model_embedding(calc, kind):
    has = embedding_of(getattr(calc, "embedding", MECHANICAL))
    if has is not kind:
        raise ValueError(f"create_mixed_system: embedding={kind.name!r}, but the model's embedding is {has.name!r} "
                         "(model.params.embedding)")


def _electrostatic(system, nonbonded, topology, ml, model, qm_charge, cutoff, switch_width, calc_options):
    """The region's charges moved from ``nonbonded`` (of ``system``, changed) to an
    :class:`~pinn.md.openmm_computation.EmbeddedComputation`: (computation, its particles, a log phrase)."""
    inputs, particles, described = _embedding_inputs(system, nonbonded, topology, ml, qm_charge, cutoff,
                                                      switch_width)
    computation = EmbeddedComputation(model, calc_options=calc_options, **inputs)
    computation.damping = _model_damping(computation.calc)
    return computation, particles, described


def _embedding_inputs(system, nonbonded, topology, ml, qm_charge, cutoff, switch_width):
    """The region's charges moved from ``nonbonded`` (of ``system``, changed): (the keyword arguments of an
    :class:`~pinn.md.openmm_computation.EmbeddedComputation` but its model, its particles, a log phrase)."""
    from openmm import unit
    if nonbonded is None:
        raise ValueError("create_mixed_system: embedding='electrostatic' takes the MM charges from the system's "
                         "NonbondedForce, and it has none")
    inside = set(ml)
    crossing = [(a.index, b.index) for a, b in topology.bonds() if (a.index in inside) != (b.index in inside)]
    if crossing:
        raise ValueError(f"create_mixed_system: embedding='electrostatic' needs a region of whole molecules; bonds "
                         f"{crossing[:3]} join it to MM atoms")
    n = system.getNumParticles()
    charges = np.array([nonbonded.getParticleParameters(i)[0].value_in_unit(unit.elementary_charge)
                        for i in range(n)])
    region_charge = float(np.round(charges[ml].sum())) if qm_charge is None else float(qm_charge)
    for i in ml:
        _, sigma, epsilon = nonbonded.getParticleParameters(i)
        nonbonded.setParticleParameters(i, 0.0, sigma, epsilon)
    for k in range(nonbonded.getNumExceptions()):
        i, j, _, sigma, epsilon = nonbonded.getExceptionParameters(k)
        if i in inside or j in inside:
            nonbonded.setExceptionParameters(k, i, j, 0.0, sigma, epsilon)
    periodic = system.usesPeriodicBoundaryConditions()
    qm = np.zeros(n, bool)
    qm[ml] = True
    particles = np.arange(n) if periodic else np.flatnonzero(qm | (charges != 0))
    atoms = list(topology.atoms())
    numbers = [atoms[i].element.atomic_number if atoms[i].element is not None else 0 for i in particles]
    residues = [atoms[i].residue.index for i in particles]
    cut = nonbonded.getCutoffDistance().value_in_unit(unit.nanometer) if cutoff is None else float(
        cutoff.value_in_unit(unit.nanometer) if hasattr(cutoff, "value_in_unit") else cutoff)
    width = float(switch_width.value_in_unit(unit.nanometer) if hasattr(switch_width, "value_in_unit")
                  else switch_width)
    inputs = {"numbers": numbers, "qm": qm[particles], "charges": charges[particles], "residues": residues,
              "qm_charge": region_charge, "periodic": periodic, "cutoff": cut * ANGSTROM_PER_NM,
              "switch_width": width * ANGSTROM_PER_NM}
    if periodic:
        described = (f"the model sees the MM residues within {cut:g} nm of the region's centre, switched off over "
                     f"the last {width:g} nm")
    else:
        described = f"the model sees all {len(particles) - len(ml)} charged MM atoms"
    return inputs, particles, described + f"; region charge {region_charge:g} e"


def _model_damping(calc):
    """``model.params.embedding_damping`` of the calculator's model (Å)."""
    return float(getattr(calc, "embedding_damping", 0.0))


def _exclude_pairs(force, ml):
    """Every pair of ``ml`` an exclusion (charge product, sigma, epsilon 0) in a NonbondedForce."""
    existing = {}
    for k in range(force.getNumExceptions()):
        i, j = force.getExceptionParameters(k)[:2]
        existing[(min(i, j), max(i, j))] = k
    for a, i in enumerate(ml):
        for j in ml[a + 1:]:
            k = existing.get((i, j))
            if k is None:
                force.addException(i, j, 0.0, 1.0, 0.0)
            else:
                force.setExceptionParameters(k, i, j, 0.0, 1.0, 0.0)


def _exclude_custom_pairs(force, ml):
    """Every pair of ``ml`` an exclusion of a CustomNonbondedForce (a force field's Lennard-Jones there: CHARMM's
    NBFIX, OpenFF's), as the NonbondedForce's pairs are; returns how many were added."""
    existing = {tuple(sorted(force.getExclusionParticles(k))) for k in range(force.getNumExclusions())}
    count = 0
    for a, i in enumerate(ml):
        for j in ml[a + 1:]:
            if (i, j) not in existing:
                force.addExclusion(i, j)
                count += 1
    return count


def _remove_cmap(force, inside):
    """Point the CMAP torsions whose 8 atoms all lie in ``inside`` to a map of zeros (added once); returns how
    many."""
    zero_map = None
    count = 0
    for k in range(force.getNumTorsions()):
        _, *indices = force.getTorsionParameters(k)
        if not all(i in inside for i in indices):
            continue
        if zero_map is None:
            zero_map = force.addMap(2, [0.0] * 4)
        force.setTorsionParameters(k, zero_map, *indices)
        count += 1
    return count


def _remove_bonded(force, inside):
    """Zero the bonded terms of ``force`` whose atoms all lie in ``inside``; returns how many.  OpenMM cannot
    remove a term, so it is set to zero strength (its atoms and periodicity kept)."""
    name = type(force).__name__
    if name == "CMAPTorsionForce":
        return _remove_cmap(force, inside)
    if name not in BONDED_TERMS:
        return 0
    number, getter, n_atoms, _ = BONDED_TERMS[name]
    count = 0
    for k in range(getattr(force, number)()):
        params = list(getattr(force, getter)(k))
        indices = params[:n_atoms]
        rest = params[n_atoms:]
        if not all(i in inside for i in indices):
            continue
        if name == "HarmonicBondForce":
            force.setBondParameters(k, *indices, rest[0], 0.0)
        elif name == "HarmonicAngleForce":
            force.setAngleParameters(k, *indices, rest[0], 0.0)
        elif name == "PeriodicTorsionForce":
            force.setTorsionParameters(k, *indices, rest[0], rest[1], 0.0)
        else:
            force.setTorsionParameters(k, *indices, *([0.0] * 6))
        count += 1
    return count
