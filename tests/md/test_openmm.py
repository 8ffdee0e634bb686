"""OpenMM: a pinn force (openmm.PythonForce) and an ML/MM system from a GROMACS topology (acetone in
water, tests/data/mimic: the MiMiC acetone tutorial's system): the ML region's energy and forces are the ASE
calculator's, its MM terms are gone, ML-MM terms stay, and NVE with a small step conserves the total energy; a saved
system keeps its model by absolute path and hash, and save_system/load_system save it without pickle."""
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


@pytest.fixture(scope="module")
def two_model_files(tmp_path_factory, ethanol_model, ethanol_pinet2_model):
    """Two directories a/ and b/, each with a model file model.pinn: two different models at one relative path."""
    from pinn.models.export import export_model
    root = tmp_path_factory.mktemp("two-models")
    for name, model in (("a", ethanol_model), ("b", ethanol_pinet2_model)):
        (root / name).mkdir()
        export_model(model, str(root / name / "model.pinn"))
    return root


def _sha(path):
    import hashlib
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def _state(system, positions):
    state = _context(system, positions).getState(getEnergy=True, getForces=True)
    return (state.getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole),
            state.getForces(asNumpy=True).value_in_unit(unit.kilojoule_per_mole / unit.nanometer))


def test_a_relative_model_path_is_kept_absolute_and_its_model_checked(acetone_in_water, two_model_files, monkeypatch):
    """The user's case: a system built from "model.pinn" and restored (XmlSerializer, pickle) in another directory
    with another model.pinn keeps the first model (before: the other one's energy, silently); once the model at the
    absolute path is another, a restored system refuses, naming the path and both hashes; a missing one, the path."""
    import pickle

    from pinn.md.openmm import create_mixed_system
    gro, top, mm, ml = acetone_in_water
    a, b = two_model_files / "a", two_model_files / "b"
    monkeypatch.chdir(b)
    other = _energy(_context(create_mixed_system(mm, top.topology, ml, "model.pinn"), gro.positions), {1})
    monkeypatch.chdir(a)
    system = create_mixed_system(mm, top.topology, ml, "model.pinn")
    energy = _energy(_context(system, gro.positions), {1})
    assert abs(energy - other) > 0.1  # two different models
    xml, pickled = openmm.XmlSerializer.serialize(system), pickle.dumps(system)
    monkeypatch.chdir(b)
    for restored in (openmm.XmlSerializer.deserialize(xml), pickle.loads(pickled)):
        assert _energy(_context(restored, gro.positions), {1}) == pytest.approx(energy, rel=1e-12)
    saved, now = _sha(a / "model.pinn"), _sha(b / "model.pinn")
    shutil.copy(a / "model.pinn", a / "kept.pinn")
    try:
        shutil.copy(b / "model.pinn", a / "model.pinn")  # the model at a/model.pinn replaced
        for restored in (openmm.XmlSerializer.deserialize(xml), pickle.loads(pickled)):
            with pytest.raises(openmm.OpenMMException) as refused:
                _energy(_context(restored, gro.positions), {1})
            message = str(refused.value)
            assert "\n" not in message and str(a / "model.pinn") in message
            assert f"sha256 {saved[:12]} saved, {now[:12]} there now" in message
        os.remove(a / "model.pinn")
        with pytest.raises(openmm.OpenMMException, match=f"no model at {a / 'model.pinn'}$"):
            _energy(_context(openmm.XmlSerializer.deserialize(xml), gro.positions), {1})
    finally:
        shutil.copy(a / "kept.pinn", a / "model.pinn")


def test_save_system_and_load_system_round_trip_without_pickle(acetone_in_water, two_model_files, monkeypatch):
    """save_system/load_system: the system from "model.pinn" in a/, loaded in b/ (another model.pinn there), has
    the same forces in the same order and groups, the same energy and forces; the file's XML holds no PythonForce;
    a model replaced at the saved path is refused by load_system, naming it and both hashes."""
    import json

    from pinn.md.openmm import create_mixed_system, load_system, save_system
    gro, top, mm, ml = acetone_in_water
    a, b = two_model_files / "a", two_model_files / "b"
    monkeypatch.chdir(a)
    system = create_mixed_system(mm, top.topology, ml, "model.pinn", force_group=3)
    save_system(system, "system.json")
    energy, forces = _state(system, gro.positions)
    document = json.loads((a / "system.json").read_text())
    assert "PythonForce" not in document["system"]
    assert [f["model"] for f in document["forces"]] == [str(a / "model.pinn")]
    monkeypatch.chdir(b)
    loaded = load_system(a / "system.json")
    assert [(type(f).__name__, f.getForceGroup(), f.getName()) for f in loaded.getForces()] == \
        [(type(f).__name__, f.getForceGroup(), f.getName()) for f in system.getForces()]
    loaded_energy, loaded_forces = _state(loaded, gro.positions)
    assert loaded_energy == pytest.approx(energy, rel=1e-6)
    # the CPU platform's single-precision PME sums in the order its threads finish: two contexts of one system
    # differ by up to 1.2e-6 of the largest force (seen in CI, 2026-12-06); 1e-5 of it, while a wrong model or order
    # of forces differs by whole kJ/mol/nm
    np.testing.assert_allclose(loaded_forces, forces, rtol=0, atol=1e-5 * np.abs(forces).max())
    assert _energy(_context(loaded, gro.positions), {3}) == pytest.approx(
        _energy(_context(system, gro.positions), {3}), rel=1e-9)
    saved, now = _sha(a / "model.pinn"), _sha(b / "model.pinn")
    shutil.copy(a / "model.pinn", a / "kept.pinn")
    try:
        shutil.copy(b / "model.pinn", a / "model.pinn")
        with pytest.raises(ValueError, match=f"{a / 'model.pinn'} .*sha256 {saved[:12]} saved, {now[:12]} there now"):
            load_system(a / "system.json")
    finally:
        shutil.copy(a / "kept.pinn", a / "model.pinn")


class _WritesAFile:
    """What a crafted system file pickles: unpickled, it opens (creates) ``path``."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def _zero(state):
    return 0.0, np.zeros((1, 3))


def test_load_system_refuses_a_python_force_without_unpickling_it(tmp_path):
    """A file whose system XML holds a PythonForce (its pickle would create a marker file) is refused by
    load_system, which says why, and the marker is never made; OpenMM's own XML is refused as not pinn's file;
    save_system refuses a PythonForce that is not pinn's, naming it."""
    import json
    import pickle

    from pinn.md.openmm import load_system, save_system
    proof = tmp_path / "proof"
    pickle.loads(pickle.dumps(_WritesAFile(str(proof)))).close()
    assert proof.exists()  # the payload is live
    marker = tmp_path / "marker"
    system = openmm.System()
    system.addParticle(1.0)
    xml = openmm.XmlSerializer.serialize(system)
    force = (f'<Force forceGroup="0" function="{pickle.dumps(_WritesAFile(str(marker))).hex()}" name="pinn" '
             'type="PythonForce" usesPeriodic="0" version="2"><GlobalParameters/><Particles/></Force>')
    assert "<Forces/>" in xml
    crafted = xml.replace("<Forces/>", f"<Forces>{force}</Forces>")
    (tmp_path / "crafted.json").write_text(json.dumps({"format": "pinn-openmm-system", "version": 1,
                                                       "system": crafted, "forces": []}))
    (tmp_path / "crafted.xml").write_text(crafted)
    with pytest.raises(ValueError, match="holds a PythonForce .*which OpenMM unpickles, running code"):
        load_system(tmp_path / "crafted.json")
    with pytest.raises(ValueError, match="not a file of save_system"):
        load_system(tmp_path / "crafted.xml")
    assert not marker.exists()
    system.addForce(openmm.PythonForce(_zero))
    with pytest.raises(ValueError, match=r"force 0 \('PythonForce'\): a PythonForce of .*_zero, not pinn's"):
        save_system(system, tmp_path / "foreign.json")
    assert not (tmp_path / "foreign.json").exists()


def test_custom_nonbonded_pairs_in_the_region_are_excluded_and_come_back_with_lambda(ethanol_model):
    """A force field whose Lennard-Jones is a CustomNonbondedForce (as CHARMM's NBFIX and OpenFF's are): the ML/MM
    system excludes its pairs inside the region as it does the NonbondedForce's (before: counted twice, by the model
    and by the force field), and the interpolated system brings them back at λ = 0 exactly."""
    from openmm_water import water

    from pinn.md.openmm import create_mixed_system
    topology, mm, positions = water(app.PME)
    nonbonded = next(f for f in mm.getForces() if isinstance(f, openmm.NonbondedForce))
    lj = openmm.CustomNonbondedForce("4*epsilon*((sigma/r)^12-(sigma/r)^6); sigma=0.5*(sigma1+sigma2); "
                                     "epsilon=sqrt(epsilon1*epsilon2)")
    lj.addPerParticleParameter("sigma")
    lj.addPerParticleParameter("epsilon")
    lj.setNonbondedMethod(openmm.CustomNonbondedForce.CutoffPeriodic)
    lj.setCutoffDistance(nonbonded.getCutoffDistance())
    for i in range(mm.getNumParticles()):
        charge, sigma, epsilon = nonbonded.getParticleParameters(i)
        lj.addParticle([sigma, epsilon])
        nonbonded.setParticleParameters(i, charge, sigma, 0.0)
    for k in range(nonbonded.getNumExceptions()):
        lj.addExclusion(*nonbonded.getExceptionParameters(k)[:2])
    lj.setForceGroup(5)
    mm.addForce(lj)
    xyz = np.array(positions.value_in_unit(unit.nanometer))
    oxygens = xyz[0::3]
    box = np.diag(np.array(topology.getPeriodicBoxVectors().value_in_unit(unit.nanometer)))
    offset = oxygens[1:] - oxygens[0]
    nearest = 1 + int(np.argmin(np.linalg.norm(offset - box * np.round(offset / box), axis=1)))
    region = [0, 1, 2, 3 * nearest, 3 * nearest + 1, 3 * nearest + 2]  # two waters: their O–O pair is LJ
    mixed = create_mixed_system(mm, topology, region, ethanol_model, force_group=0)
    custom = next(f for f in mixed.getForces() if isinstance(f, openmm.CustomNonbondedForce))
    assert custom.getNumExclusions() == lj.getNumExclusions() + 9  # 15 region pairs, 6 inside the two waters
    r = np.linalg.norm(offset[nearest - 1] - box * np.round(offset[nearest - 1] / box))
    sigma, epsilon = lj.getParticleParameters(0)  # nm, kJ/mol
    pair = 4 * epsilon * ((sigma / r) ** 12 - (sigma / r) ** 6)
    assert abs(pair) > 1e-3  # the pair counts: the checks below can fail
    assert _energy(_context(mm, positions), {5}) - _energy(_context(mixed, positions), {5}) == \
        pytest.approx(pair, rel=1e-5)  # the CPU platform sums in single precision
    interpolated = create_mixed_system(mm, topology, region, ethanol_model, interpolate=True)
    for lam, reference in ((0.0, mm), (1.0, mixed)):
        context = _context(interpolated, positions)
        context.setParameter("lambda_interpolate", lam)
        energy, forces = _state_of(context)
        expected_energy, expected_forces = _state_of(_context(reference, positions))
        assert energy == pytest.approx(expected_energy, rel=1e-6)
        np.testing.assert_allclose(forces, expected_forces, rtol=0, atol=1e-5 * np.abs(expected_forces).max())


def _state_of(context):
    state = context.getState(getEnergy=True, getForces=True)
    return (state.getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole),
            state.getForces(asNumpy=True).value_in_unit(unit.kilojoule_per_mole / unit.nanometer))
