"""OpenMM: a pinn force (openmm.PythonForce) and an ML/MM system from a GROMACS topology (acetone in
water, tests/data/mimic: the MiMiC acetone tutorial's system): the ML region's energy and forces are the ASE calculator's, its MM
terms are gone, ML-MM terms stay, and NVE with a small step conserves the total energy."""
import gzip
import os
import shutil

import numpy as np
import pytest

from pinn import get_calc

openmm = pytest.importorskip("openmm", reason="OpenMM is not installed (pip install 'pinn[md]' or openmm): the "
                             "OpenMM tests are skipped")
from openmm import app, unit  # noqa: E402

SYSTEM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "mimic")
GROMACS_TOP = "/usr/share/gromacs/top"
EV = 96.48533212331002  # kJ/mol


@pytest.fixture(scope="module")
def acetone_in_water(tmp_path_factory):
    if not os.path.isdir(os.path.join(GROMACS_TOP, "amber03.ff")):
        pytest.skip(f"GROMACS's amber03.ff is not in {GROMACS_TOP} (apt-get install gromacs)")
    here = tmp_path_factory.mktemp("acetone")
    for name in ("acetone.top", "acetone.itp"):
        shutil.copy(os.path.join(SYSTEM, name), here / name)
    with gzip.open(os.path.join(SYSTEM, "equilibrated.gro.gz")) as packed:
        (here / "equilibrated.gro").write_bytes(packed.read())
    gro = app.GromacsGroFile(str(here / "equilibrated.gro"))
    top = app.GromacsTopFile(str(here / "acetone.top"), periodicBoxVectors=gro.getPeriodicBoxVectors(),
                             includeDir=GROMACS_TOP)
    mm = top.createSystem(nonbondedMethod=app.PME, nonbondedCutoff=1.0 * unit.nanometer)
    ml = [a.index for a in top.topology.atoms() if a.residue.name == "ACT"]
    return gro, top, mm, ml


def _context(system, positions):
    context = openmm.Context(system, openmm.VerletIntegrator(0.00025), openmm.Platform.getPlatformByName("CPU"))
    context.setPositions(positions)
    return context


def _energy(context, groups=-1):
    return context.getState(getEnergy=True, groups=groups).getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole)


def test_the_ml_region_is_the_calculators_and_its_mm_terms_are_gone(acetone_in_water, ethanol_model):
    from ase import Atoms
    from pinn.md.openmm import create_mixed_system
    gro, top, mm, ml = acetone_in_water
    assert len(ml) == 10 and mm.getNumParticles() == 1528
    system = create_mixed_system(mm, top.topology, ml, ethanol_model)
    context = _context(system, gro.positions)
    state = context.getState(getEnergy=True, getForces=True, getPositions=True, groups={1})
    positions = state.getPositions(asNumpy=True).value_in_unit(unit.angstrom)[ml]
    box = state.getPeriodicBoxVectors(asNumpy=True).value_in_unit(unit.angstrom)
    atoms = Atoms(numbers=[6, 6, 6, 8, 1, 1, 1, 1, 1, 1], positions=positions, cell=box, pbc=True)
    calc = get_calc(ethanol_model)
    assert state.getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole) == pytest.approx(
        calc.get_potential_energy(atoms) * EV, rel=1e-9)
    forces = state.getForces(asNumpy=True).value_in_unit(unit.kilojoule_per_mole / unit.angstrom)
    np.testing.assert_allclose(forces[ml], calc.get_forces(atoms) * EV, rtol=1e-6, atol=1e-6)
    assert np.all(forces[len(ml):] == 0), "the pinn force acts on the ML atoms alone"
    # no MM term inside the ML region: its bonds have zero force constants, its pairs are exclusions
    inside = set(ml)
    for force in system.getForces():
        if isinstance(force, openmm.HarmonicBondForce):
            assert all(force.getBondParameters(k)[3].value_in_unit(force.getBondParameters(k)[3].unit) == 0
                       for k in range(force.getNumBonds()) if set(force.getBondParameters(k)[:2]) <= inside)
        if isinstance(force, openmm.NonbondedForce):
            pairs = {tuple(sorted(force.getExceptionParameters(k)[:2])): force.getExceptionParameters(k)
                     for k in range(force.getNumExceptions())}
            for a, i in enumerate(ml):
                for j in ml[a + 1:]:
                    assert pairs[(i, j)][2].value_in_unit(unit.elementary_charge ** 2) == 0
                    assert pairs[(i, j)][4].value_in_unit(unit.kilojoule_per_mole) == 0


def test_ml_mm_interactions_stay_and_nve_conserves_the_energy(acetone_in_water, ethanol_model):
    from pinn.md.openmm import create_mixed_system
    gro, top, mm, ml = acetone_in_water
    system = create_mixed_system(mm, top.topology, ml, ethanol_model)
    # mechanical embedding: the ML region's charges and Lennard-Jones still act on the water
    no_embedding = create_mixed_system(mm, top.topology, ml, ethanol_model)
    for force in no_embedding.getForces():
        if isinstance(force, openmm.NonbondedForce):
            for i in ml:
                force.setParticleParameters(i, 0.0, 1.0, 0.0)
    with_mm, without = _context(system, gro.positions), _context(no_embedding, gro.positions)
    assert abs(_energy(with_mm, {0}) - _energy(without, {0})) > 10.0  # kJ/mol: acetone's solvation
    integrator = openmm.VerletIntegrator(0.00025)  # 0.25 fs
    context = openmm.Context(system, integrator, openmm.Platform.getPlatformByName("CPU"))
    context.setPositions(gro.positions)
    context.setVelocitiesToTemperature(300, 7)
    totals = []
    for _ in range(20):
        integrator.step(10)
        state = context.getState(getEnergy=True)
        totals.append((state.getPotentialEnergy() + state.getKineticEnergy()).value_in_unit(unit.kilojoule_per_mole))
    kinetic = state.getKineticEnergy().value_in_unit(unit.kilojoule_per_mole)
    drift = max(totals) - min(totals)
    print(f"NVE, 200 steps of 0.25 fs: total energy within {drift:.3f} kJ/mol (kinetic {kinetic:.0f} kJ/mol)")
    assert drift < 1e-3 * kinetic
