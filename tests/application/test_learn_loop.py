"""`pinn learn` on files on disk: TIP3P water from a PDB, one water QM, a committee of two electrostatic members
trained on synthetic QM/MM frames, PySCF (HF/STO-3G) as the oracle: round 0 trains, each round explores ML/MM MD
from the last accepted state, labels the selected frames, retrains warm-started; started again with more rounds,
the loop goes on after its last finished stage and labels no frame twice; a run file with a misspelt key is
refused with the nearest name."""
import json
import os

import numpy as np
import pytest
import yaml

pytest.importorskip("openmm", reason="OpenMM is not installed")
pytest.importorskip("pyscf", reason="PySCF is not installed")
from settings import qmmm_frame  # noqa: E402

from pinn.io import ase_files  # noqa: E402


@pytest.fixture(scope="module")
def loop_files(tmp_path_factory):
    """The run file's files: water.pdb (2 nm of TIP3P built by OpenMM), start.xyz (synthetic labelled frames)."""
    import openmm
    from openmm import app, unit
    folder = tmp_path_factory.mktemp("learn")
    forcefield = app.ForceField("amber14/tip3p.xml")
    modeller = app.Modeller(app.Topology(), [])
    modeller.addSolvent(forcefield, model="tip3p", boxSize=openmm.Vec3(2.0, 2.0, 2.0) * unit.nanometer)
    with open(folder / "water.pdb", "w") as f:
        app.PDBFile.writeFile(modeller.topology, modeller.positions, f)
    ase_files.write(str(folder / "start.xyz"), [qmmm_frame(seed) for seed in range(4)], format="extxyz")
    return folder


def run_file(folder, rounds, **changes):
    config = {
        "workdir": "loop",
        "initial": {"data": "start.xyz"},
        "committee": {"size": 2, "max_steps": 2, "batch_size": 2,
                      "params": {"precision": "float64", "network": {"name": "PiNet", "params": {
                          "atom_types": [1, 8], "rc": 4.0, "depth": 2, "pp_nodes": [8], "pi_nodes": [8],
                          "ii_nodes": [8], "out_nodes": [8], "out_units": 2}},
                          "model": {"name": "potential_model", "params": {
                              "embedding": "electrostatic", "use_force": True, "embedding_damping": 1.0,
                              "progress_bar": "off"}}}},
        "explorer": {"pdb": "water.pdb", "forcefield": ["amber14/tip3p.xml"], "qm": [0, 1, 2], "steps": 30,
                     "every": 10, "timestep_fs": 0.25, "platform": "Reference"},
        "select": {"low": 0.0, "high": 1.0e3, "abort": 1.0e4, "max_frames": 2, "min_spacing": 10},
        "oracle": {"pyscf": {"method": "HF", "basis": "sto-3g"}},
        "retrain": {"max_steps": 2},
        "stop": {"rounds": rounds},
    }
    config.update(changes)
    path = folder / "learn.yml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def test_the_loop_explores_labels_retrains_and_resumes(loop_files, capsys):
    from pinn.cli import main
    from pinn.io.model_devi import read_model_devi
    assert main(["learn", run_file(loop_files, rounds=1)]) == 0
    assert "1 rounds done (stop.rounds)" in capsys.readouterr().out
    loop = loop_files / "loop"
    state = json.loads((loop / "state.json").read_text())
    assert state == {"round": 1, "stage": "trained", "committee": 1, "time_ps": pytest.approx(30 * 0.00025)}
    for round_ in (0, 1):
        for member in (0, 1):
            assert (loop / f"round-{round_}" / "committee" / f"member-{member}" / "params.yml").exists()
    one = loop / "round-1"
    table = read_model_devi(one / "model_devi.out")
    assert table["step"].tolist() == [0, 10, 20, 30]  # the start, each chunk's end
    labels = ase_files.read(str(one / "labels.xyz"), index=":")
    selected = ase_files.read(str(one / "selected.xyz"), index=":")
    assert len(labels) == len(selected) == 2 and (one / "failed.txt").read_text() == ""
    for frame, label in zip(selected, labels):
        np.testing.assert_allclose(label.positions, frame.positions)
        assert label.arrays["qm"].sum() == 3 and np.isfinite(label.get_forces()).all()
    warm = yaml.safe_load(open(one / "committee" / "member-0" / "params.yml"))
    assert warm["model"]["params"]["init_model"] == str(loop / "round-0" / "committee" / "member-0")
    audit = json.loads((one / "audit.json").read_text())
    assert len(audit["max_error_f_qm"]) == 2 and all(e > 0 for e in audit["max_error_f_qm"])
    assert audit["max_devi_f_qm"] == pytest.approx([f.info["max_devi_f_qm"] for f in selected], rel=1e-6)
    assert main(["report", str(loop)]) == 0
    text = capsys.readouterr().out
    assert "1 rounds, 30 steps explored, 2 frames labelled (6.67 % of the steps)" in text
    assert (loop / "report" / "learning.png").stat().st_size > 10000
    stamp = (one / "labels.xyz").stat().st_mtime_ns
    # started again with two rounds: round 1 is not explored or labelled again; round 2 starts where round 1 ended
    assert main(["learn", run_file(loop_files, rounds=2)]) == 0
    assert (one / "labels.xyz").stat().st_mtime_ns == stamp
    two = read_model_devi(loop / "round-2" / "model_devi.out")
    assert two["step"][0] == 30 and json.loads((loop / "state.json").read_text())["round"] == 2


def test_a_run_file_with_a_misspelt_key_is_refused(loop_files):
    from pinn.learn.config import read_learn_file
    from pinn.schema import ParamsError
    path = run_file(loop_files, rounds=1, selct={"low": 0.1})
    with pytest.raises(ParamsError, match="selct: unknown key; did you mean `select`"):
        read_learn_file(path)
    path = run_file(loop_files, rounds=1, select={"low": 0.5, "high": 0.3})
    with pytest.raises(ParamsError, match="low < high < abort"):
        read_learn_file(path)


def test_a_round_stops_over_the_band_and_goes_back_from_a_blow_up(loop_files):
    """Without initial data, round 0 labels frames of the MM system's own MD; a step over select.high ends the round
    there, its frame is labelled (under abort) and the next round starts from the last accepted state; over abort (a
    blow-up) nothing of it is labelled and the committee stays."""
    from pinn.learn.explorer import load_state
    from pinn.learn.loop import learn
    select = {"low": 0.0, "high": 1e-6, "abort": 1.0e4, "max_frames": 2, "min_spacing": 10}
    # no initial data: round 0 labels 3 frames of the MM water's own MD, cut as the committee will see them
    assert "1 rounds done" in learn(run_file(loop_files, rounds=1, workdir="stops", select=select,
                                             initial={"frames": 3, "spacing": 10}))
    first = ase_files.read(str(loop_files / "stops" / "round-0" / "labels.xyz"), index=":")
    assert [f.info["step"] for f in first] == [10, 20, 30]
    assert all(f.arrays["qm"].sum() == 3 and len(f) > 3 and np.isfinite(f.get_forces()).all() for f in first)
    one = loop_files / "stops" / "round-1"
    record = json.loads((one / "exploration.json").read_text())
    assert record["stopped_at"] == 0 and record["selected"] == 1  # the first step is over 1e-6 eV/Å
    assert load_state(str(one / "state.npz"))["step"] == 0  # nothing accepted: the round before's state
    assert len(ase_files.read(str(one / "labels.xyz"), index=":")) == 1
    blow_up = {**select, "abort": 2e-6}
    assert "1 rounds done" in learn(run_file(loop_files, rounds=1, workdir="blow-up", select=blow_up))
    folder = loop_files / "blow-up"
    assert not (folder / "round-1" / "labels.xyz").exists()
    assert json.loads((folder / "state.json").read_text())["committee"] == 0


def test_a_blow_up_only_the_audit_sees_is_not_accepted(loop_files):
    """Members that agree where they are all wrong (trained on synthetic frames, labelled by PySCF): the round's
    deviation stays under select.high while the oracle's forces on the frames it chose lie further from the
    committee's than select.abort. Without the audit the round is accepted; with it (select.audit_blow_ups) the same
    round's MD is not: round-1/rejected.json names the frame, state.npz is where the round started, the loop's time
    goes back to 0, the labels are kept and trained on, round 2 starts again from the PDB's state, and the report
    says so."""
    from pinn.io.model_devi import read_model_devi
    from pinn.learn.explorer import load_state
    from pinn.learn.loop import learn
    from pinn.learn.report import loop_records, summary
    select = {"low": 0.0, "high": 1.0e3, "abort": 1.0e4, "max_frames": 2, "min_spacing": 10, "audit_blow_ups": False}
    committee = yaml.safe_load(open(run_file(loop_files, rounds=1)))["committee"]
    committee["max_steps"] = 40  # members that agree on the synthetic frames
    assert "1 rounds done" in learn(run_file(loop_files, rounds=1, workdir="unaudited", select=select,
                                             committee=committee))
    seen = loop_files / "unaudited" / "round-1"
    audit = json.loads((seen / "audit.json").read_text())
    deviation = float(read_model_devi(seen / "model_devi.out")["max_devi_f_qm"].max())
    error = max(audit["max_error_f_qm"])
    assert error > 2 * deviation, (error, deviation)  # the premise: the members agree where they are wrong
    assert not (seen / "rejected.json").exists()
    assert json.loads((loop_files / "unaudited" / "state.json").read_text())["time_ps"] > 0
    audited = {**select, "high": 1.1 * deviation, "abort": (deviation + error) / 2, "audit_blow_ups": True}
    assert "2 rounds done" in learn(run_file(loop_files, rounds=2, workdir="audited", select=audited,
                                             committee=committee))
    folder = loop_files / "audited"
    rejected = json.loads((folder / "round-1" / "rejected.json").read_text())
    assert rejected["max_error_f_qm"] > audited["abort"] and rejected["back_to_step"] == 0
    assert rejected["max_devi_f_qm"] < audited["high"]
    assert load_state(str(folder / "round-1" / "state.npz"))["step"] == 0
    assert read_model_devi(folder / "round-2" / "model_devi.out")["step"][0] == 0  # round 2 starts again
    trained_on = yaml.safe_load(open(folder / "round-1" / "train.yml"))["data"]["train"]
    assert str(folder / "round-1" / "labels.xyz") in trained_on
    rounds = loop_records(str(folder))
    assert rounds[0]["rejected"] is not None
    assert "not accepted: blow-ups their audit found" in summary(str(folder), rounds)


def test_a_loop_killed_in_each_stage_resumes_to_the_same_data(loop_files):
    """SIGTERM after a stage's files are written and before state.json says so (explored, labelled, after the first
    member's training), then `pinn learn` again: the same records, labels and members' weights as a loop that ran
    through (the same seeds)."""
    import signal
    import subprocess
    import sys
    import time

    def launch(workdir, pause=None):
        env = {**os.environ, "PINN_TEST_LEARN_PAUSE": pause or ""}
        return subprocess.Popen([sys.executable, "-m", "pinn.cli.commands", "learn",
                                 run_file(loop_files, rounds=1, workdir=workdir)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    through = launch("through")
    assert through.wait(timeout=600) == 0, through.stdout.read()[-3000:]
    marker = loop_files / "killed" / "paused"
    for pause in ("1:explored", "1:labelled", "1:member-0"):
        run = launch("killed", pause)
        deadline = time.monotonic() + 300
        while not marker.exists():
            assert run.poll() is None and time.monotonic() < deadline, run.stdout.read()[-3000:]
            time.sleep(0.2)
        run.send_signal(signal.SIGTERM)
        assert run.wait(timeout=60) == -signal.SIGTERM
        marker.unlink()
    last = launch("killed")
    assert last.wait(timeout=600) == 0, last.stdout.read()[-3000:]
    same_data(loop_files / "through" / "round-1", loop_files / "killed" / "round-1")


def same_data(a, b):
    """Two loops' rounds hold the same records and selection (to the digit), labels and members' weights (PySCF's
    SCF converges to 1e-9 Hartree: its energies agree to rounding between processes, not to the digit)."""
    import tensorflow as tf

    from pinn.files import checkpoint_dir
    for name in ("model_devi.out", "selected.xyz"):
        assert (a / name).read_text() == (b / name).read_text(), name
    mine, theirs = (ase_files.read(str(folder / "labels.xyz"), index=":") for folder in (b, a))
    assert len(mine) == len(theirs) > 0
    for x, y in zip(mine, theirs):
        assert x.get_potential_energy() == pytest.approx(y.get_potential_energy(), abs=1e-8)
        np.testing.assert_allclose(x.get_forces(), y.get_forces(), atol=1e-7)
    for member in ("member-0", "member-1"):
        mine = tf.train.load_checkpoint(checkpoint_dir.latest(str(b / "committee" / member)))
        theirs = tf.train.load_checkpoint(checkpoint_dir.latest(str(a / "committee" / member)))
        names = [n for n in theirs.get_variable_to_shape_map() if n.startswith("model/")]
        assert names
        for name in names:
            np.testing.assert_allclose(mine.get_tensor(name), theirs.get_tensor(name), rtol=1e-6, atol=1e-9,
                                       err_msg=f"{member} {name}")


def test_two_ranks_train_the_members_at_the_same_time(loop_files):
    """`mpirun -np 2 pinn learn`: rank 0 explores and labels, member 0 trains on rank 0 and member 1 on rank 1 at the
    same time; the records, labels and weights are those of one process."""
    import shutil
    import subprocess
    import sys

    from launching import ENV
    if shutil.which("mpirun") is None:
        pytest.skip("no mpirun (apt-get install openmpi-bin libopenmpi-dev)")
    alone = subprocess.run([sys.executable, "-m", "pinn.cli.commands", "learn",
                            run_file(loop_files, rounds=1, workdir="alone")], env=ENV, capture_output=True, text=True,
                           timeout=600)
    assert alone.returncode == 0, alone.stdout[-3000:] + alone.stderr[-3000:]
    path = run_file(loop_files, rounds=1, workdir="ranks")
    openmpi = ["--oversubscribe", "--bind-to", "none"] if "Open MPI" in subprocess.run(
        ["mpirun", "--version"], capture_output=True, text=True).stdout else []
    ranks = subprocess.run(["mpirun", "-np", "2", *openmpi, sys.executable, "-m", "pinn.cli.commands", "learn", path],
                           env=ENV, capture_output=True, text=True, timeout=900)
    assert ranks.returncode == 0, ranks.stdout[-3000:] + ranks.stderr[-3000:]
    assert ranks.stdout.count("pinn learn: 1 rounds done (stop.rounds)") == 2  # both ranks end alike
    for round_ in ("round-0", "round-1"):
        spans = [json.loads((loop_files / "ranks" / round_ / f"trained-member-{m}.json").read_text()) for m in (0, 1)]
        assert [s["rank"] for s in spans] == [0, 1]
        assert spans[0]["start"] < spans[1]["end"] and spans[1]["start"] < spans[0]["end"]  # at the same time
    same_data(loop_files / "alone" / "round-1", loop_files / "ranks" / "round-1")


def test_a_system_without_mm_learns_from_an_ase_calculator(tmp_path):
    """Distillation: copper explored by ASE's Langevin MD with a committee of two mechanical PiNets, labelled by
    EMT (the ASE oracle), two rounds, the second from the first's last accepted step."""
    from ase.build import bulk
    from ase.calculators.emt import EMT

    from pinn.io.model_devi import read_model_devi
    from pinn.learn.loop import learn
    from pinn.learn.oracles import ASEOracle
    frames = []
    for seed in range(8):
        atoms = bulk("Cu", "fcc", a=3.6, cubic=True) * (2, 1, 1)
        atoms.rattle(0.05, seed=seed)
        frames.append(atoms)
    with_stress = frames[0].copy()
    with_stress.calc = EMT()
    with_stress.get_stress()
    ase_files.write(str(tmp_path / "stress.xyz"), with_stress, format="extxyz")
    frames = [atoms for _, atoms in ASEOracle(EMT()).label(frames).labelled]  # energy and forces, as the loop's
    ase_files.write(str(tmp_path / "start.xyz"), frames, format="extxyz")
    ase_files.write(str(tmp_path / "cu.xyz"), bulk("Cu", "fcc", a=3.6, cubic=True) * (2, 1, 1), format="extxyz")
    config = {"workdir": "loop", "initial": {"data": "start.xyz"},
              "committee": {"size": 2, "max_steps": 40, "batch_size": 4,
                            "params": {"network": {"name": "PiNet", "params": {
                                "atom_types": [29], "rc": 4.0, "depth": 2, "pp_nodes": [8], "pi_nodes": [8],
                                "ii_nodes": [8], "out_nodes": [8]}},
                                "model": {"name": "potential_model", "params": {
                                    "use_force": True, "progress_bar": "off", "learning_rate": 3e-3}}}},
              "explorer": {"start": "cu.xyz", "steps": 40, "every": 10, "timestep_fs": 2.0, "temperature_k": 600},
              "select": {"low": 0.0, "high": 50.0, "abort": 100.0, "max_frames": 3, "min_spacing": 10},
              "oracle": {"ase": "emt"}, "retrain": {"max_steps": 40}, "stop": {"rounds": 2}}
    (tmp_path / "learn.yml").write_text(yaml.safe_dump({**config, "initial": {"data": "stress.xyz"}}))
    with pytest.raises(ValueError, match="stress.xyz holds stress labels"):
        learn(str(tmp_path / "learn.yml"))
    (tmp_path / "learn.yml").write_text(yaml.safe_dump(config))
    assert "2 rounds done" in learn(str(tmp_path / "learn.yml"))
    loop = tmp_path / "loop"
    warm = yaml.safe_load(open(loop / "round-2" / "committee" / "member-1" / "params.yml"))
    assert warm["model"]["params"]["init_model"] == str(loop / "round-1" / "committee" / "member-1")
    fresh_config = {**config, "workdir": "fresh", "retrain": {"max_steps": 40, "warm_start": False},
                    "stop": {"rounds": 1}}
    (tmp_path / "fresh.yml").write_text(yaml.safe_dump(fresh_config))
    assert "1 rounds done" in learn(str(tmp_path / "fresh.yml"))
    fresh = yaml.safe_load(open(tmp_path / "fresh" / "round-1" / "committee" / "member-1" / "params.yml"))
    assert fresh["model"]["params"]["init_model"] is None  # retrain.warm_start: false
    for round_ in (1, 2):
        table = read_model_devi(loop / f"round-{round_}" / "model_devi.out")
        assert len(table["step"]) == 5 and np.all(table["max_devi_f_mm"] == 0)
        labels = ase_files.read(str(loop / f"round-{round_}" / "labels.xyz"), index=":")
        assert len(labels) == 3
        for label in labels:
            reference = label.copy()
            reference.calc = EMT()
            np.testing.assert_allclose(label.get_forces(), reference.get_forces(), atol=1e-6)
    assert read_model_devi(loop / "round-2" / "model_devi.out")["step"][0] == 40
