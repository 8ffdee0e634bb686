"""A committee in ML/MM (create_mixed_system with a list of model directories) on flexible TIP3P water, one water
the QM region: the force is the members' mean (electrostatic embedding with NoCutoff and PME, and mechanical);
the DeviationMonitor's model_devi.out equals `pinn devi` on the frames it wrote; its stop lands on the first step
over the threshold, with the context at that step."""
import numpy as np
import pytest

openmm = pytest.importorskip("openmm", reason="OpenMM is not installed (pip install 'pinn[md]' or openmm)")
from openmm import app, unit  # noqa: E402
from openmm_water import context_of, pinn_state, train_electrostatic_water_model, water  # noqa: E402

QM = [0, 1, 2]


@pytest.fixture(scope="module")
def members(tmp_path_factory):
    """Three electrostatic members: one trained 2 steps by `pinn train`, two of other seeds trained 1 step (the
    same layout, other weights: they disagree)."""
    return [train_electrostatic_water_model(tmp_path_factory.mktemp(f"member-{seed}"), seed=seed, steps=2 - bool(seed))
            for seed in range(3)]


@pytest.fixture(scope="module")
def mechanical_members(members, tmp_path_factory):
    """Mechanical members of the same data: the electrostatic members' params with embedding: mechanical, saved
    untrained (seeds 0-2)."""
    from pinn.models import get_model
    from pinn.params import read_params
    out = []
    for seed, member in enumerate(members):
        params = dict(read_params(member))
        params["model"] = {**params["model"], "params": {**params["model"]["params"], "embedding": "mechanical",
                                                         "embedding_damping": 0.0}}
        params.update(model_dir=str(tmp_path_factory.mktemp("mechanical") / "model"), seed=seed)
        model = get_model(params)
        model.save()
        model.close()
        out.append(params["model_dir"])
    return out


@pytest.mark.parametrize("method, embedding", [("NoCutoff", "electrostatic"), ("PME", "electrostatic"),
                                               ("NoCutoff", "mechanical")])
def test_the_committees_force_is_the_members_mean(members, mechanical_members, method, embedding):
    from pinn.md.openmm import create_mixed_system
    models = members if embedding == "electrostatic" else mechanical_members
    topology, mm, positions = water(getattr(app, method))
    results = []
    for model in [models] + [[m] for m in models]:
        system = create_mixed_system(mm, topology, QM, model if len(model) > 1 else model[0], embedding=embedding)
        results.append(pinn_state(context_of(system, positions), forces=True))
    energy, forces = results[0]
    members_energy = np.array([e for e, _ in results[1:]])
    members_forces = np.stack([f for _, f in results[1:]])
    assert energy == pytest.approx(members_energy.mean(), abs=1e-6)
    np.testing.assert_allclose(forces, members_forces.mean(axis=0), atol=1e-6)
    assert np.abs(members_forces - members_forces.mean(axis=0)).max() > 1e-2  # the members disagree


def run_monitored(system_of, positions, steps, tmp_path, name, **options):
    """A monitored run of ``steps`` steps from ``positions`` at 300 K (seeded); returns (monitor, context)."""
    from pinn.md.openmm import DeviationMonitor
    monitor = DeviationMonitor(tmp_path / f"{name}.out", frames=tmp_path / f"{name}.xyz", **options)
    system = system_of(monitor)
    integrator = openmm.VerletIntegrator(0.0005)
    topology = app.Topology()
    simulation = app.Simulation(topology, system, integrator, openmm.Platform.getPlatformByName("Reference"))
    simulation.context.setPositions(positions)
    simulation.context.setVelocitiesToTemperature(300 * unit.kelvin, 7)
    stop = monitor.run(simulation, steps)
    monitor.close()
    return monitor, simulation.context, stop


def test_the_monitor_writes_what_pinn_devi_finds_and_stops_at_the_first_step_over(members, tmp_path):
    from pinn.cli import main
    from pinn.io import ase_files
    from pinn.io.model_devi import read_model_devi
    from pinn.md.openmm import create_mixed_system
    topology, mm, positions = water(app.PME)

    def system_of(monitor):
        return create_mixed_system(mm, topology, QM, members, embedding="electrostatic", monitor=monitor)
    monitor, context, stop = run_monitored(system_of, positions, 12, tmp_path, "free")
    assert stop is None and monitor.steps_seen == 12  # steps 0..11 evaluated; step 12's at the next step
    table = read_model_devi(tmp_path / "free.out")
    assert table["step"].tolist() == list(range(12))
    frames = ase_files.read(str(tmp_path / "free.xyz"), index=":")
    assert len(frames) == 12 and all(f.arrays["qm"].sum() == 3 for f in frames)
    assert main(["devi", *members, str(tmp_path / "free.xyz"), "-o", str(tmp_path / "devi.out")]) == 0
    devi = read_model_devi(tmp_path / "devi.out")
    for column in ("max_devi_f", "min_devi_f", "avg_devi_f", "devi_e"):  # the frames in extxyz: 1e-8 Å rounding
        np.testing.assert_allclose(devi[column], table[column], rtol=1e-5, atol=1e-8, err_msg=column)
    qm_devi = table["max_devi_f_qm"]
    assert np.all(table["max_devi_f"] >= qm_devi) and np.all(table["max_devi_f_mm"] > 0)
    # the first step that sets a new high after step 2: the threshold between it and the highs before it
    first = next(k for k in range(3, 12) if qm_devi[k] > qm_devi[:k].max())
    threshold = float((qm_devi[:first].max() + qm_devi[first]) / 2)
    monitor, context, stop = run_monitored(system_of, positions, 12, tmp_path, "stopped", stop_above=threshold)
    assert stop is not None and stop.step == first and monitor.stopped is stop
    assert stop.deviation["max_devi_f_qm"] == pytest.approx(qm_devi[first], rel=1e-6)  # the file: 7 digits
    state = context.getState(getPositions=True)
    assert state.getStepCount() == first
    here = state.getPositions(asNumpy=True).value_in_unit(unit.angstrom)[QM]
    np.testing.assert_allclose(stop.atoms.positions[:3] - stop.atoms.positions[0],
                               here - here[0], atol=1e-9)  # the frame of that step (the region made whole)
    assert read_model_devi(tmp_path / "stopped.out")["step"].tolist() == list(range(first + 1))


def test_the_monitor_refuses_what_it_cannot_watch(members, tmp_path):
    from pinn.md.openmm import DeviationMonitor, create_mixed_system
    (tmp_path / "exists.out").write_text("kept\n")
    with pytest.raises(FileExistsError, match="exists.out exists"):
        DeviationMonitor(tmp_path / "exists.out")
    assert (tmp_path / "exists.out").read_text() == "kept\n"
    for bad in ({"every": 0}, {"stop_above": -1.0}, {"stop_above": float("nan")}):
        with pytest.raises(ValueError, match="DeviationMonitor"):
            DeviationMonitor(tmp_path / "x.out", **bad)
    topology, mm, _ = water(app.NoCutoff)
    with pytest.raises(ValueError, match="a committee of two or more members"):
        create_mixed_system(mm, topology, QM, members[0], embedding="electrostatic",
                            monitor=DeviationMonitor(tmp_path / "one.out"))
    assert not (tmp_path / "one.out").exists()


@pytest.mark.parametrize("method", ["PME", "NoCutoff"])
def test_the_frame_cutter_gives_the_frame_the_committee_sees(members, mechanical_members, tmp_path, method):
    """FrameCutter, without a model, cuts the frame a mixed system's committee sees at the same positions: the region
    made whole and the MM atoms it sees with their (switched) charges, or the ML atoms alone (mechanical)."""
    from pinn.io import ase_files
    from pinn.md.openmm import DeviationMonitor, FrameCutter, create_mixed_system
    topology, mm, positions = water(getattr(app, method))
    xyz = np.array(positions.value_in_unit(unit.nanometer))
    box = np.array(topology.getPeriodicBoxVectors().value_in_unit(unit.nanometer)) if method == "PME" else None
    for embedding, models in (("electrostatic", members), ("mechanical", mechanical_members)):
        monitor = DeviationMonitor(tmp_path / f"{method}-{embedding}.out", frames=tmp_path / f"{method}-{embedding}.xyz")
        system = create_mixed_system(mm, topology, QM, models, embedding=embedding, monitor=monitor)
        context_of(system, positions).getState(getEnergy=True)
        monitor.close()
        seen = ase_files.read(str(tmp_path / f"{method}-{embedding}.xyz"))
        cut = FrameCutter(mm, topology, QM, embedding=embedding)(xyz, box)
        assert len(cut) == len(seen) and (cut.numbers == seen.numbers).all()
        np.testing.assert_allclose(cut.positions, seen.positions, atol=1e-7)  # the file: 8 decimals
        if embedding == "electrostatic":
            assert (cut.arrays["qm"] == seen.arrays["qm"]).all() and cut.info["charge"] == seen.info["charge"]
            np.testing.assert_allclose(cut.get_initial_charges(), seen.get_initial_charges(), atol=1e-7)
            assert len(cut) > 3
        else:
            assert len(cut) == 3
