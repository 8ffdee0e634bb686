"""An ML/MM system that goes over to its force field: one global parameter, ``lambda_interpolate``, mixes the two
linearly, as openmm-ml's ``createMixedSystem(..., interpolate=True)`` does::

    U(λ) = U_rest + λ (U_pinn + U_nonbonded,ML/MM) + (1 − λ) (U_region,MM + U_nonbonded,MM)

- U_rest: every force of the ML/MM system but its ``NonbondedForce`` (the MM terms that both ends share: the
  bonded terms outside the region, the other forces);
- U_pinn: the pinn force (mechanical or electrostatic embedding);
- U_nonbonded,ML/MM and U_nonbonded,MM: the ML/MM system's ``NonbondedForce`` (ML–ML pairs excluded; with
  electrostatic embedding the region's charges zero) and the force field's own;
- U_region,MM: the force field's bonded terms (bonds, angles, torsions, CMAP) whose atoms all lie in the region
  and its CustomNonbondedForce's pairs there, the terms the ML/MM system removed.

At λ = 0 the energy and forces are the force field's exactly, at λ = 1 the ML/MM system's; in between the linear
mix, and dU/dλ = (U_pinn + U_nonbonded,ML/MM) − (U_region,MM + U_nonbonded,MM), which OpenMM reports
(``context.getState(getParameterDerivatives=True).getEnergyParameterDerivatives()['lambda_interpolate']``) for
thermodynamic integration.  The interpolated terms sit in one ``openmm.CustomCVForce`` (its collective variables:
``ml``, ``nonbonded_ml``, ``nonbonded_mm``, ``mm_K`` per bonded force); with both nonbonded forces in it each step
costs a second nonbonded evaluation.  The pinn force declares the parameter and refuses a value outside [0, 1].
"""
import copy

#: the global parameter of an interpolated system (openmm-ml's name)
LAMBDA = "lambda_interpolate"

#: the bonded forces whose terms inside the region an ML/MM system removes (and an interpolated one brings back
#: with 1 − λ): their count and parameter methods, atoms per term and the method that adds a term
BONDED_TERMS = {
    "HarmonicBondForce": ("getNumBonds", "getBondParameters", 2, "addBond"),
    "HarmonicAngleForce": ("getNumAngles", "getAngleParameters", 3, "addAngle"),
    "PeriodicTorsionForce": ("getNumTorsions", "getTorsionParameters", 4, "addTorsion"),
    "RBTorsionForce": ("getNumTorsions", "getTorsionParameters", 4, "addTorsion"),
}


def interpolated_system(mm, mixed, ml_atoms, ml_force, force_group=None):
    """The ML/MM system ``mixed`` turned into one that goes over to ``mm`` with ``lambda_interpolate`` (see the
    module).

    Args:
        mm: the force field's ``openmm.System`` (not changed).
        mixed: the ML/MM system without its pinn force (its region's MM terms removed); changed: its
            ``NonbondedForce`` moves into the interpolating force.
        ml_atoms: the region's atom indices.
        ml_force: the pinn force (``openmm.PythonForce`` whose computation declares ``lambda_interpolate``); not
            yet in a system.
        force_group: the interpolating force's group (``None``: 0).

    Returns:
        ``mixed``, with a ``CustomCVForce`` named ``"pinn interpolation"`` added (energy parameter derivative
        ``lambda_interpolate`` declared), and one more per CustomNonbondedForce, (1 − λ) times its region pairs
        (in a context of their own: OpenMM wants the exclusions of one context's nonbonded forces alike).

    Raises:
        ValueError: a pinn force that does not declare ``lambda_interpolate``; more than one ``NonbondedForce``.
    """
    import openmm
    if LAMBDA not in _declared(ml_force):
        raise ValueError(f"interpolated_system: the pinn force must declare {LAMBDA} (its computation's "
                         "lambda_parameter), so that it refuses a value outside [0, 1]")
    inside = {int(i) for i in ml_atoms}
    ml_terms, mm_terms = ["ml"], []
    interpolation = openmm.CustomCVForce("")
    interpolation.setName("pinn interpolation")
    interpolation.addGlobalParameter(LAMBDA, 1.0)
    interpolation.addCollectiveVariable("ml", ml_force)
    mixed_nonbonded = _nonbonded(mixed)
    mm_nonbonded = _nonbonded(mm)
    if (mixed_nonbonded is None) != (mm_nonbonded is None):
        raise ValueError("interpolated_system: the ML/MM system and the force field must both have a NonbondedForce "
                         "or both none")
    if mixed_nonbonded is not None:
        index, force = mixed_nonbonded
        nonbonded_ml = copy.deepcopy(force)
        nonbonded_mm = _with_exceptions_of(mm_nonbonded[1], nonbonded_ml)
        interpolation.addCollectiveVariable("nonbonded_ml", nonbonded_ml)
        interpolation.addCollectiveVariable("nonbonded_mm", nonbonded_mm)
        mixed.removeForce(index)  # after the copies: removing it frees the force
        ml_terms.append("nonbonded_ml")
        mm_terms.append("nonbonded_mm")
    pair_forces = []
    for force in mm.getForces():
        region = region_terms(force, inside)
        if region is None:
            continue
        if isinstance(region, openmm.CustomNonbondedForce):  # apart: OpenMM wants the exclusions of a context's
            pair_forces.append(_fading(region, force_group))  # nonbonded forces alike, and these differ
            continue
        name = f"mm_{len(mm_terms)}"
        interpolation.addCollectiveVariable(name, region)
        mm_terms.append(name)
    expression = f"{LAMBDA}*({'+'.join(ml_terms)})"
    if mm_terms:
        expression += f"+(1-{LAMBDA})*({'+'.join(mm_terms)})"
    interpolation.setEnergyFunction(expression)
    interpolation.addEnergyParameterDerivative(LAMBDA)
    if force_group is not None:
        interpolation.setForceGroup(int(force_group))
    mixed.addForce(interpolation)
    for force in pair_forces:
        mixed.addForce(force)
    return mixed


def _fading(region, force_group):
    """A CustomCVForce of (1 − λ) times the region's pairs of a CustomNonbondedForce (their own context)."""
    import openmm
    fading = openmm.CustomCVForce(f"(1-{LAMBDA})*pairs")
    fading.setName("pinn interpolation: CustomNonbondedForce pairs")
    fading.addGlobalParameter(LAMBDA, 1.0)
    fading.addCollectiveVariable("pairs", region)
    fading.addEnergyParameterDerivative(LAMBDA)
    if force_group is not None:
        fading.setForceGroup(int(force_group))
    return fading


def refuse_a_committee(size, who):
    """An interpolated system takes one model: a committee of ``size`` members is refused (ValueError)."""
    raise ValueError(f"{who}: interpolate=True takes one model, not a committee of {size}: the λ windows of a free "
                     "energy would sample the members' mean, whose deviation no monitor sees there; give one member's "
                     "directory")


def region_terms(force, inside):
    """A new force of the MM terms of ``force`` that the ML/MM system removed inside ``inside``: the bonded terms
    whose atoms all lie there (its maps too, for CMAP), or a CustomNonbondedForce's pairs there (a copy of it on
    the region alone, without its long-range correction, which the ML/MM system keeps whole); ``None``: another
    force, or no such term.

    Raises:
        ValueError: a CustomNonbondedForce with interaction groups of its own.
    """
    import openmm
    name = type(force).__name__
    if name == "CustomNonbondedForce":
        if force.getNumInteractionGroups():
            raise ValueError("interpolated_system: a CustomNonbondedForce with interaction groups of its own; pinn "
                             "interpolates its region pairs through one group of the region")
        region = copy.deepcopy(force)
        region.addInteractionGroup(sorted(inside), sorted(inside))
        region.setUseLongRangeCorrection(False)
        return region
    if name == "CMAPTorsionForce":
        region = openmm.CMAPTorsionForce()
        for k in range(force.getNumMaps()):
            region.addMap(*force.getMapParameters(k))
        for k in range(force.getNumTorsions()):
            map_index, *indices = force.getTorsionParameters(k)
            if all(i in inside for i in indices):
                region.addTorsion(map_index, *indices)
        count = region.getNumTorsions()
    elif name in BONDED_TERMS:
        number, getter, n_atoms, adder = BONDED_TERMS[name]
        region = type(force)()
        for k in range(getattr(force, number)()):
            parameters = list(getattr(force, getter)(k))
            if all(i in inside for i in parameters[:n_atoms]):
                getattr(region, adder)(*parameters)
        count = getattr(region, number)()
    else:
        return None
    if not count:
        return None
    region.setUsesPeriodicBoundaryConditions(force.usesPeriodicBoundaryConditions())
    return region


def _with_exceptions_of(force, other):
    """A copy of NonbondedForce ``force`` with an exception for every pair that is one in ``other`` and not in it,
    holding the pair's own interaction (q_i q_j, the combined σ and ε): the same energy for pairs within the cutoff
    (an exception's Coulomb is 1/r in full, PME's reciprocal part taken back), and the exceptions of one context's
    nonbonded forces alike, as OpenMM's CPU and GPU platforms want."""
    import math

    from openmm import unit
    aligned = copy.deepcopy(force)
    have = {tuple(sorted(aligned.getExceptionParameters(k)[:2])) for k in range(aligned.getNumExceptions())}
    for k in range(other.getNumExceptions()):
        i, j = sorted(other.getExceptionParameters(k)[:2])
        if (i, j) in have:
            continue
        qi, si, ei = aligned.getParticleParameters(i)
        qj, sj, ej = aligned.getParticleParameters(j)
        epsilon = math.sqrt(ei.value_in_unit(unit.kilojoule_per_mole) * ej.value_in_unit(unit.kilojoule_per_mole))
        aligned.addException(i, j, qi * qj, (si + sj) / 2, epsilon)
        have.add((i, j))
    return aligned


def _nonbonded(system):
    """(index, force) of the system's one ``NonbondedForce``, or ``None``."""
    import openmm
    found = [(k, f) for k, f in enumerate(system.getForces()) if isinstance(f, openmm.NonbondedForce)]
    if len(found) > 1:
        raise ValueError("interpolated_system: more than one NonbondedForce")
    return found[0] if found else None


def _declared(force):
    """The global parameters a ``PythonForce`` declares."""
    return set(dict(force.getGlobalParameters()))
