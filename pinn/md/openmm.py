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

:func:`create_mixed_system` is mechanical embedding, as openmm-ml's ``createMixedSystem``: in a
copy of an MM system it removes the bonded terms (bonds, angles, torsions, CMAP) and the
constraints whose atoms all lie in the ML region, sets every ML–ML pair of the
``NonbondedForce`` to an exclusion (no Coulomb or Lennard-Jones inside the region; with PME its
reciprocal part is taken back for those pairs as for any exclusion), keeps every ML–MM and MM–MM
term, and adds the pinn force on the ML atoms in its own force group.
"""
import logging

import numpy as np

log = logging.getLogger("pinn")

#: kJ/mol per eV (CODATA 2018, as ASE's units)
KJ_PER_MOL_PER_EV = 96.48533212331002
#: Å per nm
ANGSTROM_PER_NM = 10.0


def pinn_force(model, numbers, particles=None, periodic=False, force_group=None, **calc_options):
    """An OpenMM force of a pinn potential.

    Args:
        model: what :func:`pinn.get_calc` takes, or an ASE calculator.
        numbers: the atomic numbers of the atoms the force acts on (of ``particles``, in their order).
        particles: the indices of those atoms in the system (``None``: all of it).
        periodic: whether the system is periodic (OpenMM then passes its box).
        force_group: the force's group (``None``: OpenMM's default, 0).
        calc_options: passed on to :func:`pinn.get_calc`.

    Returns:
        ``openmm.PythonForce``; its computation keeps the calculator as ``force_computation.calc``.

    Raises:
        ValueError: ``numbers`` and ``particles`` of different lengths.
    """
    import openmm
    from ase import Atoms
    from ase.calculators.calculator import Calculator

    from pinn.calculator import get_calc
    numbers = np.asarray(numbers, int)
    if particles is not None and len(particles) != len(numbers):
        raise ValueError(f"pinn_force: {len(numbers)} atomic numbers for {len(particles)} particles")
    calc = model if isinstance(model, Calculator) else get_calc(model, **calc_options)
    atoms = Atoms(numbers=numbers, pbc=periodic)
    atoms.calc = calc

    def compute(state):
        atoms.positions = state.getPositions(asNumpy=True)._value * ANGSTROM_PER_NM
        if periodic:
            atoms.cell = state.getPeriodicBoxVectors(asNumpy=True)._value * ANGSTROM_PER_NM
        energy = atoms.get_potential_energy() * KJ_PER_MOL_PER_EV
        forces = atoms.get_forces() * (KJ_PER_MOL_PER_EV * ANGSTROM_PER_NM)
        return energy, forces

    compute.calc = calc
    force = openmm.PythonForce(compute)
    force.setName("pinn")
    force.setUsesPeriodicBoundaryConditions(bool(periodic))
    if particles is not None:
        force.setParticles([int(i) for i in particles])
    if force_group is not None:
        force.setForceGroup(int(force_group))
    return force


def create_mixed_system(system, topology, ml_atoms, model, force_group=1, **calc_options):
    """An ML/MM system: ``system`` with the ML region's MM terms removed and a pinn force on it.

    Args:
        system: the MM ``openmm.System`` (e.g. of ``GromacsTopFile.createSystem``); not changed.
        topology: its ``openmm.app.Topology`` (the ML atoms' elements).
        ml_atoms: the indices of the ML region's atoms.
        model: what :func:`pinn.get_calc` takes, or an ASE calculator.
        force_group: the pinn force's group (its energy alone: ``getState(groups={force_group})``).
        calc_options: passed on to :func:`pinn.get_calc`.

    Returns:
        a new ``openmm.System``.

    Raises:
        ValueError: an ML atom without an element, an index out of range, or no ML atoms.
    """
    import openmm
    ml = sorted({int(i) for i in ml_atoms})
    if not ml:
        raise ValueError("create_mixed_system: no ML atoms")
    if ml[0] < 0 or ml[-1] >= system.getNumParticles():
        raise ValueError(f"create_mixed_system: ML atom indices must lie in 0..{system.getNumParticles() - 1}")
    atoms = list(topology.atoms())
    missing = [i for i in ml if atoms[i].element is None]
    if missing:
        raise ValueError(f"create_mixed_system: atoms {missing[:5]} have no element in the topology")
    inside = set(ml)
    new = openmm.XmlSerializer.deserialize(openmm.XmlSerializer.serialize(system))
    removed = {"constraints": 0}
    for k in range(new.getNumConstraints() - 1, -1, -1):
        i, j, _ = new.getConstraintParameters(k)
        if i in inside and j in inside:
            new.removeConstraint(k)
            removed["constraints"] += 1
    for force in new.getForces():
        name = type(force).__name__
        if name == "NonbondedForce":
            _exclude_pairs(force, ml)
        else:
            count = _remove_bonded(force, inside)
            if count:
                removed[name] = count
    new.addForce(pinn_force(model, [atoms[i].element.atomic_number for i in ml], ml,
                            periodic=system.usesPeriodicBoundaryConditions(), force_group=force_group,
                            **calc_options))
    log.info("ML/MM system: %d ML atoms of %d; removed inside the ML region: %s; ML-ML nonbonded pairs excluded",
             len(ml), system.getNumParticles(), ", ".join(f"{n} {k}" for k, n in removed.items()))
    return new


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


#: bonded forces: (their count method, their parameters method, atoms per term)
_BONDED = {
    "HarmonicBondForce": ("getNumBonds", "getBondParameters", 2),
    "HarmonicAngleForce": ("getNumAngles", "getAngleParameters", 3),
    "PeriodicTorsionForce": ("getNumTorsions", "getTorsionParameters", 4),
    "RBTorsionForce": ("getNumTorsions", "getTorsionParameters", 4),
}


def _remove_bonded(force, inside):
    """Zero the bonded terms of ``force`` whose atoms all lie in ``inside``; returns how many.  OpenMM cannot
    remove a term, so it is set to zero strength (its atoms and periodicity kept)."""
    name = type(force).__name__
    if name == "CMAPTorsionForce":
        for k in range(force.getNumTorsions()):
            _, *indices = force.getTorsionParameters(k)
            if all(i in inside for i in indices):
                raise ValueError("create_mixed_system: a CMAP torsion lies inside the ML region; OpenMM cannot "
                                 "switch one off (choose an ML region without CMAP terms)")
        return 0
    if name not in _BONDED:
        return 0
    number, getter, n_atoms = _BONDED[name]
    count = 0
    for k in range(getattr(force, number)()):
        params = list(getattr(force, getter)(k))
        indices, rest = params[:n_atoms], params[n_atoms:]
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
