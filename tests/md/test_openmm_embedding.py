"""OpenMM with electrostatic embedding (create_mixed_system(..., embedding="electrostatic")) on flexible TIP3P water
built by OpenMM itself, one water the QM region: its charges leave the NonbondedForce for the model, which sees
every charged MM atom (NoCutoff; the force equals get_calc on that QM/MM frame) or the MM waters within the cutoff,
switched off smoothly (PME; forces equal finite differences, also in the switching shell); NVE conserves the
energy; the mixed system is saved and restored (XmlSerializer, deepcopy, pickle) and refuses to be for a model in
memory; a CMAP torsion inside the region is switched off."""
import copy
import re
import os
import pickle

import numpy as np
import pytest
import yaml

openmm = pytest.importorskip("openmm", reason="OpenMM is not installed (pip install 'pinn[md]' or openmm)")
from openmm import app, unit  # noqa: E402
from openmm_water import (BOX_NM, CUTOFF_NM, context_of, pinn_state,  # noqa: E402
                          train_electrostatic_water_model, water)

EV = 96.48533212331002  # kJ/mol
PLATFORM = "CPU"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """An electrostatic PiNet (float64) trained 2 steps by `pinn train` on synthetic QM/MM frames."""
    return train_electrostatic_water_model(tmp_path_factory.mktemp("es-model"))


def test_no_cutoff_force_is_the_calculators_on_the_qmmm_frame(model_dir):
    """NoCutoff: the QM water's charges are 0 in the NonbondedForce (its LJ kept), and the pinn force is get_calc's
    energy and forces of the QM/MM frame of every atom (qm, the force field's MM charges, region charge 0)."""
    from ase import Atoms

    import pinn
    from pinn.md.openmm import create_mixed_system
    topology, mm, positions = water(app.NoCutoff)
    qm = [0, 1, 2]
    system = create_mixed_system(mm, topology, qm, model_dir, embedding="electrostatic")
    nonbonded = next(f for f in system.getForces() if isinstance(f, openmm.NonbondedForce))
    original = next(f for f in mm.getForces() if isinstance(f, openmm.NonbondedForce))
    for i in qm:
        charge, sigma, epsilon = nonbonded.getParticleParameters(i)
        assert charge.value_in_unit(unit.elementary_charge) == 0 and sigma == original.getParticleParameters(i)[1]
    energy, forces = pinn_state(context_of(system, positions), forces=True)
    xyz = np.array(positions.value_in_unit(unit.angstrom))
    atoms = Atoms(numbers=[a.element.atomic_number for a in topology.atoms()], positions=xyz)
    atoms.arrays["qm"] = np.arange(len(atoms)) < 3
    atoms.set_initial_charges([original.getParticleParameters(i)[0].value_in_unit(unit.elementary_charge)
                               for i in range(len(atoms))])
    atoms.calc = pinn.get_calc(model_dir)
    assert energy == pytest.approx(atoms.get_potential_energy() * EV, rel=1e-9)
    np.testing.assert_allclose(forces, atoms.get_forces() * EV * 10, rtol=1e-6, atol=1e-5)
    assert np.abs(forces[3:]).max() > 0  # the QM charges pull on the MM waters


@pytest.fixture(scope="module")
def pme_system(model_dir):
    from pinn.md.openmm import create_mixed_system
    topology, mm, positions = water(app.PME)
    return create_mixed_system(mm, topology, [0, 1, 2], model_dir, embedding="electrostatic"), positions, topology


def test_pme_forces_are_minus_the_gradient_also_in_the_switching_shell(pme_system):
    """PME: the model sees the waters whose centre lies within 0.9 nm of the QM water's centre, switched off over
    the last 0.1 nm; the forces on a QM atom, on an atom of a water in the switching shell and on one beyond the
    cutoff are central differences of the energy."""
    system, positions, topology = pme_system
    xyz = np.array(positions.value_in_unit(unit.nanometer))
    box = BOX_NM
    centre = xyz[:3].mean(axis=0)
    centres = xyz.reshape(-1, 3, 3).mean(axis=1)
    offset = centres - centre
    distance = np.linalg.norm(offset - box * np.round(offset / box), axis=1)
    shell = int(np.flatnonzero((distance > CUTOFF_NM - 0.1) & (distance < CUTOFF_NM))[0])
    beyond = int(np.flatnonzero(distance > CUTOFF_NM + 0.05)[0])
    context = context_of(system, positions)
    _, forces = pinn_state(context, forces=True)
    h = 1e-5  # nm
    for atom in (1, 3 * shell, 3 * shell + 2, 3 * beyond):
        for axis in range(3):
            shifted = []
            for sign in (1, -1):
                moved = xyz.copy()
                moved[atom, axis] += sign * h
                context.setPositions(moved)
                shifted.append(pinn_state(context))
            assert -(shifted[0] - shifted[1]) / (2 * h) == pytest.approx(forces[atom, axis], abs=2e-3, rel=1e-5)
    assert np.abs(forces[3 * shell:3 * shell + 3]).max() > 0 and np.abs(forces[3 * beyond]).max() == 0


def nve_drift(system, positions, velocities):
    """(max − min of the total energy over 200 Verlet steps of 0.25 fs, the last kinetic energy), kJ/mol."""
    integrator = openmm.VerletIntegrator(0.00025)
    context = openmm.Context(system, integrator, openmm.Platform.getPlatformByName(PLATFORM))
    context.setPositions(positions)
    context.setVelocities(velocities)
    totals = []
    for _ in range(20):
        integrator.step(10)
        state = context.getState(getEnergy=True)
        total = state.getPotentialEnergy() + state.getKineticEnergy()
        totals.append(total.value_in_unit(unit.kilojoule_per_mole))
    return max(totals) - min(totals), state.getKineticEnergy().value_in_unit(unit.kilojoule_per_mole)


def test_nve_conserves_the_energy(pme_system):
    """200 steps of 0.25 fs from a minimised box at 300 K: the ML/MM water (PME, the QM water by the model) keeps
    its total energy as well as the MM water alone does from the same state (the Verlet fluctuation of flexible
    water, ~0.3 % of the kinetic energy; a force that is not −∇E, or one that jumps, would add to it)."""
    system, _, _ = pme_system
    _, mm, positions = water(app.PME)
    context = context_of(mm, positions)
    openmm.LocalEnergyMinimizer.minimize(context, 10.0, 200)
    context.setVelocitiesToTemperature(300, 3)
    state = context.getState(getPositions=True, getVelocities=True)
    start = state.getPositions(), state.getVelocities()
    drift_mm, _ = nve_drift(mm, *start)
    drift, kinetic = nve_drift(system, *start)
    print(f"NVE, 200 steps of 0.25 fs: drift {drift:.4f} kJ/mol with the model (electrostatic embedding, PME), "
          f"{drift_mm:.4f} for the MM water alone; kinetic {kinetic:.0f} kJ/mol")
    assert drift < 1.5 * drift_mm + 0.5


def test_the_mixed_system_is_saved_and_restored(pme_system, model_dir):
    """XmlSerializer, copy.deepcopy and pickle keep the pinn force (the model by its directory): the same energy;
    the saved system goes into create_mixed_system again; a force of a model in memory refuses to be saved,
    naming what to pass."""
    import pinn
    from pinn.md.openmm import create_mixed_system, pinn_force
    from pinn.md.openmm_computation import PinnComputation
    system, positions, topology = pme_system
    energy = pinn_state(context_of(system, positions))
    restored = openmm.XmlSerializer.deserialize(openmm.XmlSerializer.serialize(system))
    for copied in (restored, copy.deepcopy(system), pickle.loads(pickle.dumps(system))):
        assert pinn_state(context_of(copied, positions)) == pytest.approx(energy, rel=1e-12)
    mechanical_mm = water(app.NoCutoff)[1]
    with pytest.raises(ValueError, match="model's embedding is 'electrostatic'"):
        create_mixed_system(mechanical_mm, topology, [0, 1, 2], model_dir)
    in_memory = openmm.System()
    for _ in range(3):
        in_memory.addParticle(1.0)
    calc = pinn.get_calc(model_dir)
    in_memory.addForce(pinn_force(calc, [8, 1, 1]))
    with pytest.raises(Exception, match="PythonForce"):  # OpenMM's message; pinn's is in the log and here:
        openmm.XmlSerializer.serialize(in_memory)
    with pytest.raises(pickle.PicklingError, match="build it from the model directory or model file"):
        pickle.dumps(PinnComputation(calc, [8, 1, 1]))


def test_cmap_inside_the_region_is_switched_off(model_dir):
    """A CMAP torsion whose atoms all lie in the region points to a map of zeros; one reaching outside is kept."""
    from pinn.md.openmm import create_mixed_system
    topology, mm, positions = water(app.NoCutoff)
    cmap = openmm.CMAPTorsionForce()
    level = cmap.addMap(4, list(np.linspace(1.0, 5.0, 16)))
    cmap.addTorsion(level, 0, 1, 2, 3, 1, 2, 3, 4)  # atoms 0-4: QM region below
    cmap.addTorsion(level, 3, 4, 5, 6, 4, 5, 6, 7)  # reaches outside
    cmap.setForceGroup(2)
    mm.addForce(cmap)
    system = create_mixed_system(mm, topology, [0, 1, 2, 3, 4, 5], model_dir, embedding="electrostatic")
    context = context_of(system, positions)
    before = context_of(mm, positions)
    kept = context.getState(getEnergy=True, groups={2}).getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole)
    total = before.getState(getEnergy=True, groups={2}).getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole)
    forces = [f for f in system.getForces() if isinstance(f, openmm.CMAPTorsionForce)][0]
    assert forces.getTorsionParameters(0)[0] != level and forces.getTorsionParameters(1)[0] == level
    assert 0 < kept < total


def retrained(model_dir, target, steps=3):
    """A copy of ``model_dir`` at ``target`` trained on to step ``steps`` by `pinn train` (another model)."""
    import shutil

    from pinn.cli import main
    run = yaml.safe_load(open(os.path.join(os.path.dirname(model_dir), "run.yml")))
    shutil.copytree(model_dir, target)
    run["model_dir"] = str(target)
    run["train"]["max_steps"] = steps
    (target.parent / "run.yml").write_text(yaml.safe_dump(run))
    assert main(["train", str(target.parent / "run.yml")]) == 0
    return target


def _all_state(system, positions):
    state = context_of(system, positions).getState(getEnergy=True, getForces=True)
    return (state.getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole),
            state.getForces(asNumpy=True).value_in_unit(unit.kilojoule_per_mole / unit.nanometer))


def test_a_saved_system_loads_elsewhere_and_refuses_a_retrained_model(model_dir, tmp_path, monkeypatch):
    """Electrostatic embedding (PME), the model given as the relative path "model": save_system in a/, load_system
    (and XmlSerializer) in b/, where "model" is another (retrained) model, give the same energy and forces; once
    a/model is retrained (its latest checkpoint another), both refuse, naming a/model and both hashes."""
    import shutil

    from pinn.md.openmm import create_mixed_system, load_system, save_system
    from pinn.md.openmm_computation import model_sha256
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    shutil.copytree(model_dir, a / "model")
    retrained(model_dir, b / "model")
    topology, mm, positions = water(app.PME)
    monkeypatch.chdir(b)
    other = pinn_state(context_of(create_mixed_system(mm, topology, [0, 1, 2], "model", embedding="electrostatic"),
                                  positions))
    monkeypatch.chdir(a)
    system = create_mixed_system(mm, topology, [0, 1, 2], "model", embedding="electrostatic")
    energy, forces = _all_state(system, positions)
    assert abs(pinn_state(context_of(system, positions)) - other) > 1e-3  # two different models
    save_system(system, "system.json")
    xml = openmm.XmlSerializer.serialize(system)
    monkeypatch.chdir(b)
    for restored in (load_system(a / "system.json"), openmm.XmlSerializer.deserialize(xml)):
        restored_energy, restored_forces = _all_state(restored, positions)
        assert restored_energy == pytest.approx(energy, rel=1e-6)
        np.testing.assert_allclose(restored_forces, forces, rtol=1e-6, atol=1e-6)
    saved = model_sha256(str(a / "model"))
    for name in os.listdir(b / "model"):  # a/model retrained: b's checkpoint there too, and the latest
        if name.startswith("ckpt-3") or name == "checkpoint":
            shutil.copy(b / "model" / name, a / "model" / name)
    now = model_sha256(str(a / "model"))
    assert now == model_sha256(str(b / "model")) != saved
    expected = f"{a / 'model'} .*sha256 {saved[:12]} saved, {now[:12]} there now"
    with pytest.raises(ValueError, match=expected):
        load_system(a / "system.json")
    with pytest.raises(openmm.OpenMMException, match=expected):
        pinn_state(context_of(openmm.XmlSerializer.deserialize(xml), positions))


def test_save_system_refuses_what_it_cannot_describe(model_dir, tmp_path):
    """A pinn force of a model in memory, or with a calc option that is not JSON, is refused by name."""
    import pathlib

    import pinn
    from pinn.md.openmm import pinn_force, save_system
    system = openmm.System()
    for _ in range(3):
        system.addParticle(1.0)
    system.addForce(pinn_force(model_dir, [8, 1, 1], directory=pathlib.Path(".")))
    with pytest.raises(ValueError, match=r"force 0 \('pinn'\): .*option directory=<pathlib.PosixPath> is not JSON"):
        save_system(system, tmp_path / "system.json")
    system.removeForce(0)
    system.addForce(pinn_force(pinn.get_calc(model_dir), [8, 1, 1]))
    with pytest.raises(ValueError, match="cannot be pickled .*build it from the model directory or model file"):
        save_system(system, tmp_path / "system.json")
    assert not (tmp_path / "system.json").exists()


@pytest.mark.parametrize("case", ["MM atom on a QM atom", "NaN MM charge"])
def test_a_bad_frame_is_refused_with_the_loaders_line(model_dir, case):
    """What inference refuses (pinn.io.atoms_input) reaches OpenMM's caller as the loaders' line, where the pinn
    force gave an infinite or NaN energy."""
    from pinn.md.openmm import create_mixed_system
    topology, mm, positions = water(app.NoCutoff)
    xyz = positions.value_in_unit(unit.nanometer)
    if case == "MM atom on a QM atom":
        xyz[5] = xyz[1]
        line = "atoms 1 and 5 are at the same position"
    else:
        nonbonded = next(f for f in mm.getForces() if isinstance(f, openmm.NonbondedForce))
        charge, sigma, epsilon = nonbonded.getParticleParameters(5)
        nonbonded.setParticleParameters(5, float("nan"), sigma, epsilon)
        line = "non-finite values in 'mm_charge' (first at index [5])"
    system = create_mixed_system(mm, topology, [0, 1, 2], model_dir, embedding="electrostatic")
    with pytest.raises(openmm.OpenMMException, match=re.escape(line)):
        pinn_state(context_of(system, xyz * unit.nanometer))
