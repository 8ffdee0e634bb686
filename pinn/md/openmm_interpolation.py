"""An ML/MM system that goes over to its force field: one global parameter, ``lambda_interpolate``, mixes the two
linearly, as openmm-ml's ``createMixedSystem(..., interpolate=True)`` does::

    U(λ) = U_rest + λ (U_pinn + U_nonbonded,ML/MM) + (1 − λ) (U_region,MM + U_nonbonded,MM)

- U_rest: every force of the ML/MM system but its ``NonbondedForce`` (the MM terms that both ends share: the
  bonded terms outside the region, the other forces);
- U_pinn: the pinn force (mechanical or electrostatic embedding);
- U_nonbonded,ML/MM and U_nonbonded,MM: the ML/MM system's ``NonbondedForce`` (ML–ML pairs excluded; with
  electrostatic embedding the region's charges zero) and the force field's own;
- U_region,MM: the force field's bonded terms (bonds, angles, torsions, CMAP) whose atoms all lie in the region,
  the terms the ML/MM system removed.

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

#: the bonded forces whose region terms come back with 1 − λ: their count and parameter methods, atoms per term
#: and the method that adds a term
_BONDED = {
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
        ``lambda_interpolate`` declared).

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
        interpolation.addCollectiveVariable("nonbonded_ml", copy.deepcopy(force))
        mixed.removeForce(index)
        interpolation.addCollectiveVariable("nonbonded_mm", copy.deepcopy(mm_nonbonded[1]))
        ml_terms.append("nonbonded_ml")
        mm_terms.append("nonbonded_mm")
    for force in mm.getForces():
        region = region_terms(force, inside)
        if region is not None:
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
    return mixed


def region_terms(force, inside):
    """A new force of the bonded terms of ``force`` whose atoms all lie in ``inside`` (its maps too, for CMAP), or
    ``None``: not a bonded force of the list, or no such term."""
    import openmm
    name = type(force).__name__
    if name == "CMAPTorsionForce":
        region = openmm.CMAPTorsionForce()
        for k in range(force.getNumMaps()):
            region.addMap(*force.getMapParameters(k))
        for k in range(force.getNumTorsions()):
            map_index, *indices = force.getTorsionParameters(k)
            if all(i in inside for i in indices):
                region.addTorsion(map_index, *indices)
        count = region.getNumTorsions()
    elif name in _BONDED:
        number, getter, n_atoms, adder = _BONDED[name]
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
