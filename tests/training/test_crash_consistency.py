"""A run survives any crash: damaged files never block a resume, saves never destroy the last good
state, a full disk stops cleanly, and SIGKILL at random moments (many times) loses nothing.

The 2-rank case (rank 0 killed inside a save) is in tests/parallel/test_parallel_stops.py.
"""
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

import crash_train
from launching import ENV
from pinn.files import checkpoint_dir as ckdir
from pinn.files import durable
from pinn.models import potential_model
from pinn.params import ParamsError, read_params
from pinn.inference.checkpoint_reader import NoIntactCheckpoint
from pinn.training.checkpoint_files import SAVE_FAILED_EXIT_CODE

HERE = os.path.dirname(os.path.abspath(__file__))


# ------------------------------------------------------------------ files, without TensorFlow
def test_replacing_leaves_the_old_file_or_the_new_one(tmp_path):
    path = tmp_path / "f.txt"
    durable.write_atomic(path, "old\n")
    with pytest.raises(RuntimeError):
        with durable.replacing(path) as f:
            f.write("half of the new")
            raise RuntimeError("killed")
    assert path.read_text() == "old\n" and os.listdir(tmp_path) == ["f.txt"]  # no temporary file left
    durable.write_atomic(path, b"new\n")
    assert path.read_text() == "new\n"


def test_an_appended_line_after_a_torn_one_starts_a_line_of_its_own(tmp_path):
    path = tmp_path / "metrics.jsonl"
    durable.append_line(path, json.dumps({"step": 1}))
    with open(path, "a") as f:
        f.write('{"step": 2, "lo')  # a crash in the middle of a line
    durable.append_line(path, json.dumps({"step": 3}))
    from pinn.training.metrics import read_metrics
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 3]


def test_a_folder_is_replaced_whole_and_a_crash_between_the_renames_is_recovered(tmp_path):
    dest, new = tmp_path / "best", tmp_path / "best.new"
    dest.mkdir()
    (dest / "a").write_text("old")
    new.mkdir()
    (new / "a").write_text("new")
    durable.replace_dir(new, dest)
    assert (dest / "a").read_text() == "new" and sorted(os.listdir(tmp_path)) == ["best"]
    os.replace(dest, str(dest) + ".old")  # the crash: the old one renamed, the new one not yet in place
    assert durable.existing_dir(dest) == str(dest) + ".old"
    assert durable.recover_dir(dest) and (dest / "a").read_text() == "new"


def test_the_state_file_is_tensorflows_and_a_torn_one_is_not_trusted(tmp_path):
    for step in (3, 6, 9):
        for suffix in (".index", ".data-00000-of-00001"):
            (tmp_path / f"ckpt-{step}{suffix}").write_bytes(b"x")
    ckdir.write_state(tmp_path, [str(tmp_path / "ckpt-3"), str(tmp_path / "ckpt-6")])
    state = tf.train.get_checkpoint_state(str(tmp_path))
    assert state.model_checkpoint_path.endswith("ckpt-6") and len(state.all_model_checkpoint_paths) == 2
    assert ckdir.read_state(tmp_path) == (str(tmp_path / "ckpt-6"), [str(tmp_path / f"ckpt-{s}") for s in (3, 6)])
    # a checkpoint on disk that the state file does not name yet (a crash inside a save) is a candidate
    assert ckdir.candidates(tmp_path) == ([str(tmp_path / f"ckpt-{s}") for s in (9, 6, 3)], None)
    text = (tmp_path / "checkpoint").read_text()
    (tmp_path / "checkpoint").write_text(text[:25])  # torn
    with pytest.raises(ckdir.StateFileError, match="checkpoint"):
        ckdir.read_state(tmp_path)
    paths, problem = ckdir.candidates(tmp_path)
    assert len(paths) == 3 and "line 1 is not a state entry" in problem
    assert ckdir.latest(tmp_path) == str(tmp_path / "ckpt-9")


# ------------------------------------------------------------------ a damaged model directory
@pytest.fixture(scope="module")
def trained(alloy_xyz, tmp_path_factory):
    """A crash_train model trained to step 12 (checkpoints 6, 9, 12 kept) with a best checkpoint."""
    model_dir = tmp_path_factory.mktemp("crash") / "model"
    model = potential_model(crash_train.params(model_dir))
    model.train(crash_train.train_input(alloy_xyz), max_steps=12, eval_fn=_validation(alloy_xyz))
    return str(model_dir)


def _validation(data):
    from pinn.io import load_ase, sparse_batch
    return lambda: load_ase(data).take(8).apply(sparse_batch(4))


@pytest.fixture
def model_dir(trained, tmp_path):
    copy = tmp_path / "model"
    shutil.copytree(trained, copy)
    return str(copy)


def _params(model_dir):
    return crash_train.params(model_dir)


def test_a_truncated_newest_checkpoint_is_passed_over_everywhere(model_dir, alloy_xyz, caplog, capsys):
    """The issue's case: the newest data file cut to 100 bytes.  Resume, `pinn eval` and get_calc use
    the newest intact one, with one warning; the next save moves the damaged files aside."""
    os.truncate(os.path.join(model_dir, "ckpt-12.data-00000-of-00001"), 100)
    caplog.set_level(logging.WARNING, logger="pinn")
    model = potential_model(_params(model_dir))
    assert int(model.step) == 9
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "ckpt-12 is damaged" in warnings[0] and "using" in warnings[0] \
        and warnings[0].endswith("ckpt-9, the newest intact checkpoint")
    from pinn.cli import main
    assert main(["eval", model_dir, alloy_xyz]) == 0
    assert "checkpoint ckpt-9, step 9" in capsys.readouterr().out
    import pinn
    calc = pinn.get_calc(model_dir)
    assert calc._engine.handle.checkpoint.endswith("ckpt-9")
    model.train(crash_train.train_input(alloy_xyz), max_steps=15)
    assert sorted(os.listdir(os.path.join(model_dir, "damaged"))) == ["ckpt-12.data-00000-of-00001",
                                                                      "ckpt-12.index"]
    assert [ckdir.step_of(p) for p in ckdir.read_state(model_dir)[1]] == [9, 12, 15]
    assert int(potential_model(model_dir).step) == 15  # the new ckpt-12 and ckpt-15 are whole


def test_no_intact_checkpoint_is_a_one_line_error_with_exit_status_1(model_dir, alloy_xyz, capsys):
    for path in ckdir.on_disk(model_dir):
        os.truncate(path + ".data-00000-of-00001", 50)
    with pytest.raises(NoIntactCheckpoint) as stop:
        potential_model(model_dir)
    message = stop.value.code
    assert isinstance(message, str) and "\n" not in message  # SystemExit(str): printed, exit status 1
    assert message.startswith(f"no intact checkpoint in {model_dir}: ckpt-12, ckpt-9, ckpt-6 damaged (")
    from pinn.cli import main
    assert main(["eval", model_dir, alloy_xyz]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("pinn eval: error: no intact checkpoint in") and "Traceback" not in "".join(err)


def test_damaged_state_params_best_and_engine_weights_files(model_dir, alloy_xyz, caplog):
    caplog.set_level(logging.WARNING, logger="pinn")
    state = os.path.join(model_dir, "checkpoint")
    with open(state, "r+") as f:
        f.truncate(20)
    assert int(potential_model(model_dir).step) == 12  # found on disk
    assert "using the checkpoints found beside it" in caplog.text
    # params.yml: the stored copy is the only one an evaluation has: a one-line ParamsError naming it
    params_yml = os.path.join(model_dir, "params.yml")
    with open(params_yml, "w") as f:
        f.write("network: {name: PiNet, params: [\n")
    with pytest.raises(ParamsError, match="params.yml: damaged"):
        read_params(model_dir)
    # a training run has its params: it writes the file again
    caplog.clear()
    potential_model(_params(model_dir))
    assert "params.yml is damaged" in caplog.text and read_params(model_dir)["network"]["name"] == "PiNet"
    # best.json damaged: a warning; the best value (in the checkpoint) is kept
    with open(os.path.join(model_dir, "best", "best.json"), "w") as f:
        f.write('{"step": 1')
    caplog.clear()
    model = potential_model(_params(model_dir))
    assert "best.json is damaged" in caplog.text and np.isfinite(float(model.early_stopping.best))
    # a crash between the two renames of best/: best.old is used, and put back at the next save
    os.replace(os.path.join(model_dir, "best"), os.path.join(model_dir, "best.old"))
    from pinn.models import get_model
    assert int(get_model(model_dir, checkpoint="best").step) in (3, 6, 9, 12)
    # engine-weights.npz damaged: ignored with a warning, written again from the checkpoint
    import pinn
    from ase.io import read
    atoms = read(alloy_xyz, 0)
    atoms.calc = pinn.get_calc(model_dir)
    energy = atoms.get_potential_energy()
    weights = os.path.join(model_dir, "engine-weights.npz")
    assert os.path.exists(weights)
    os.truncate(weights, os.path.getsize(weights) // 2)
    caplog.clear()
    atoms.calc = pinn.get_calc(model_dir)
    assert "engine-weights.npz is damaged" in caplog.text
    assert atoms.get_potential_energy() == pytest.approx(energy, rel=1e-6)
    atoms.calc = pinn.get_calc(model_dir)
    assert atoms.calc._engine.handle is None  # the file was written again: no TensorFlow load this time


def test_non_finite_or_missing_values_make_a_checkpoint_damaged(model_dir, caplog):
    model = potential_model(model_dir)
    weight = model.model.trainable_variables[0]
    weight.assign(tf.fill(weight.shape, np.nan))
    with pytest.raises(RuntimeError, match="does not verify .*holds non-finite values"):
        model.store.save(13)  # refused at save: never made the latest
    assert not os.path.exists(os.path.join(model_dir, "ckpt-13.index"))
    tf.train.Checkpoint(**model.store.parts).write(os.path.join(model_dir, "ckpt-14"))  # written behind its back
    weight.assign(tf.zeros(weight.shape))
    tf.train.Checkpoint(model=model.model).write(os.path.join(model_dir, "ckpt-15"))  # lacks the optimizer
    caplog.set_level(logging.WARNING, logger="pinn")
    assert int(potential_model(model_dir).step) == 12
    assert "ckpt-15 is damaged (AssertionError" in caplog.text
    assert "ckpt-14 is damaged (" in caplog.text and "holds non-finite values" in caplog.text


def test_a_full_disk_stops_training_with_exit_status_74(alloy_xyz, tmp_path, caplog):
    """model_dir on a 1 MB tmpfs (these machines run as root); the disk fills between two saves."""
    mount = tmp_path / "small"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
                      capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        model_dir = mount / "model"
        model = potential_model(_params(model_dir))
        model.train(crash_train.train_input(alloy_xyz), max_steps=6)
        free = durable.free_bytes(mount)
        with open(mount / "filler", "wb") as f:
            f.write(b"\0" * (free - 20000))  # room for params.yml and log lines, not for a checkpoint
        caplog.set_level(logging.ERROR, logger="pinn")
        with pytest.raises(SystemExit) as stop:
            model.train(crash_train.train_input(alloy_xyz), max_steps=12)
        assert stop.value.code == SAVE_FAILED_EXIT_CODE
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1 and errors[0].startswith(f"cannot write {model_dir}/ckpt-9.index: no space left "
                                                         f"on device (")
        assert "free; it needs about" in errors[0] and f"{model_dir}/ckpt-6 is intact" in errors[0]
        assert not [p for p in os.listdir(model_dir) if p.startswith("ckpt-9")]  # the partial files are gone
        assert int(potential_model(str(model_dir)).step) == 6
    finally:
        logger = logging.getLogger("pinn")
        for handler in [h for h in logger.handlers if getattr(h, "baseFilename", "").startswith(str(mount))]:
            logger.removeHandler(handler)  # train.log open on the mount would keep it busy
            handler.close()
        subprocess.run(["umount", "-l", str(mount)], check=False)


# ------------------------------------------------------------------ fault injection
def _on_disk_steps(model_dir):
    return [ckdir.step_of(p) for p in ckdir.on_disk(model_dir)]


def _state_latest_step(model_dir):
    try:
        state = ckdir.read_state(model_dir)
    except ckdir.StateFileError:
        return None
    return ckdir.step_of(state[0]) if state else None


def _wait(predicate, proc, timeout=120):
    """Poll every 20 ms until ``predicate()``; False if the process ended first."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            return False
        if predicate():
            return True
        time.sleep(0.02)
    raise AssertionError("timed out")


def test_sigkill_at_random_moments_and_inside_saves_loses_nothing(alloy_xyz, tmp_path):
    """3 kills of a 1-process run: at a random moment of training, inside a save after its files are
    written (before the state file names them), and after the state file names them (before the
    oldest is deleted), in a random order (4 of each until 0.30: 200 s of the suite's time; 2 of each:
    104 s); ``PINN_TEST_SLOW_SAVE`` holds each save there long enough.  After every kill the run is
    launched again; at the end it equals an uninterrupted run."""
    model_dir, log_path = tmp_path / "model", tmp_path / "model" / "train.log"
    max_steps = 150
    rng = random.Random(1234)
    env = dict(ENV, PINN_TEST_SLOW_SAVE="0.25")
    command = [sys.executable, os.path.join(HERE, "crash_train.py"), str(model_dir), alloy_xyz, str(max_steps)]
    modes = ["random", "files written", "state written"]
    rng.shuffle(modes)
    reported = 0  # the newest checkpoint step a killed run had logged as written
    landed = {mode: 0 for mode in set(modes)}
    for mode in modes:
        offset = log_path.stat().st_size if log_path.exists() else 0
        newest_before = max(_on_disk_steps(model_dir), default=-1)
        with open(tmp_path / "run.out", "w") as out:
            proc = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            def log_text():
                if not log_path.exists():
                    return ""
                with open(log_path) as f:
                    f.seek(offset)
                    return f.read()
            assert _wait(lambda: "training PiNet from step" in log_text(), proc), (tmp_path / "run.out").read_text()
            if mode == "random":  # after the first steps (traced by then), at any moment of steps and saves
                assert _wait(lambda: " INFO step " in log_text(), proc), (tmp_path / "run.out").read_text()
                time.sleep(rng.uniform(0.3, 2.0))
                hit = True
            elif mode == "files written":  # a checkpoint newer than any before is on disk, unnamed
                hit = _wait(lambda: max(_on_disk_steps(model_dir), default=-1) > max(newest_before,
                                                                                      _state_latest_step(model_dir) or -1),
                            proc)
            else:  # named by the state file, the oldest not yet deleted
                hit = _wait(lambda: (_state_latest_step(model_dir) or -1) > newest_before
                            and len(_on_disk_steps(model_dir)) > crash_train.KEEP, proc)
            assert proc.poll() is None, f"the run ended before the kill ({mode}): {log_text()[-3000:]}"
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=60)
            landed[mode] += hit
        finally:
            if proc.poll() is None:
                proc.kill()
        text = log_text()
        restored = [int(line.rsplit("(step ", 1)[1].rstrip(")")) for line in text.splitlines()
                    if " restored " in line and "(step " in line]
        assert (restored[0] if restored else 0) >= reported, f"resumed before the reported ckpt-{reported}"
        written = [ckdir.step_of(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if " INFO checkpoint " in line]
        reported = max([reported] + written)
    assert landed == {mode: modes.count(mode) for mode in set(modes)}  # every kill landed where it was aimed
    assert 0 < reported < max_steps
    final = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=300)
    assert final.returncode == 0, final.stdout[-3000:] + final.stderr[-3000:]
    resumed = potential_model(str(model_dir))
    assert int(resumed.step) == max_steps
    reference = potential_model(crash_train.params(tmp_path / "reference"))
    reference.train(crash_train.train_input(alloy_xyz), max_steps=max_steps)
    for a, b in zip(resumed.model.trainable_variables, reference.model.trainable_variables):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    assert len(_on_disk_steps(model_dir)) <= crash_train.KEEP + 1
