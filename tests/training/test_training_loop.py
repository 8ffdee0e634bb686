"""The training step's contract in one process: accumulation, the schedule, non-finite steps, stop signals."""
import os
import signal

import ase.io
import numpy as np
import pytest
import tensorflow as tf

from pinn import keys as K
from pinn.io.batch import batch_from_atoms
from pinn.models import potential_model
from pinn.training.guards import PREEMPTED_EXIT_CODE, LossJumpGuard, TrainingPreempted
from pinn.training.metrics import read_metrics
from pinn.training.schedule import LearningRate
from pinn.training.trainer import TrainingDiverged

from settings import small_net, training_params

RC = 4.5
NET = small_net([29, 79], rc=RC)
DEFAULTS = {"use_force": True, "use_stress": True, "learning_rate": 3e-3, "f_loss_multiplier": 10.0,
            "log_every_n_steps": 5, "save_checkpoint_steps": 5}


def _params(model_dir, **model_params):
    return training_params(model_dir, NET, DEFAULTS, **model_params)


def _batch(frames, nan=False):
    out = batch_from_atoms(frames, RC)
    out[K.E_DATA] = np.array([a.get_potential_energy() for a in frames], np.float32)
    out[K.F_DATA] = np.concatenate([a.get_forces() for a in frames]).astype(np.float32)
    out[K.S_DATA] = np.stack([a.get_stress(voigt=False) for a in frames]).astype(np.float32)
    if nan:
        out[K.E_DATA][0] = np.nan
    return out


def _dataset(batches):
    spec = {k: tf.TensorSpec((None,) + v.shape[1:], tf.as_dtype(v.dtype)) for k, v in batches[0].items()}
    return lambda: tf.data.Dataset.from_generator(lambda: iter(batches), output_signature=spec)


def _weights(model):
    return [v.numpy() for v in model.model.trainable_variables]


def test_accumulated_batches_equal_their_union(alloy_xyz, tmp_path):
    """k = 2 batches of 3 and 1 structures per step give the update of one batch of all 4."""
    frames = ase.io.read(alloy_xyz, ":40")
    parts, unions = [], []
    for i in range(10):
        a, b = frames[4 * i:4 * i + 3], frames[4 * i + 3:4 * i + 4]
        parts += [_batch(a), _batch(b)]
        unions.append(_batch(a + b))
    accumulated = potential_model(_params(tmp_path / "k2", accumulate_batches=2))
    accumulated.train(_dataset(parts), max_steps=10)
    union = potential_model(_params(tmp_path / "k1"))
    union.train(_dataset(unions), max_steps=10)
    assert int(accumulated.step) == int(union.step) == 10
    # float32 sums in another order (two compiled halves against one compiled whole): weights
    # that moved by up to 3e-2 agree to 1e-6; Adam's normalised steps carry the rounding along
    for a, b in zip(_weights(accumulated), _weights(union)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # the untrained and trained weights differ by far more than that
    fresh = potential_model(_params(tmp_path / "fresh"))
    assert max(np.abs(a - b).max() for a, b in zip(_weights(fresh), _weights(union))) > 1e-3


def test_mirrored_backend_on_one_device_trains_as_one_process(alloy_xyz, tmp_path):
    """``backend: mirrored`` where TensorFlow sees one device (this process's CPU): the variables are
    mirrored on it, ``engine: auto`` picks TensorFlow (the Numba engine would keep host copies of
    variables it cannot read), and 6 steps end where one process's end.  Two devices: test_parallel.py."""
    from pinn.parallel.mirrored import MirroredWorld, local_devices
    from pinn.params import resolve
    from pinn.physics.potential import PotentialModel
    from pinn.training.parts import assemble
    from pinn.training.trainer import Trainer
    frames = ase.io.read(alloy_xyz, ":24")
    batches = [_batch(frames[4 * i:4 * i + 4]) for i in range(6)]
    def params(model_dir, **changes):  # a network and loss the Numba engine trains (a hidden PI layer, no stress)
        return training_params(model_dir, small_net([29, 79], rc=RC, pi_nodes=[8, 8]), DEFAULTS, use_stress=False,
                               **changes)

    mirrored_params = resolve({**params(tmp_path / "mirrored"), "parallel": True,
                               "parallel_params": {"backend": "mirrored"}})
    devices = local_devices()
    assert len(devices) == 1, devices  # the test's premise: pytest's process has not split its CPU
    world = MirroredWorld(devices, mirrored_params["parallel_params"])
    mirrored = Trainer(assemble(mirrored_params, PotentialModel, world))
    assert type(mirrored.model.trainable_variables[0]).__name__ == "MirroredVariable"
    assert mirrored.backend.name == "tensorflow"
    mirrored.train(_dataset(batches), max_steps=6)
    one = potential_model(params(tmp_path / "one", engine="tensorflow"))
    one.train(_dataset(batches), max_steps=6)
    assert int(mirrored.step.numpy()) == int(one.step) == 6
    for a, b in zip(_weights(mirrored), _weights(one)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("batch_parts", [1, 2])
def test_an_input_that_ends_stops_training_with_a_checkpoint(batch_parts, alloy_xyz, tmp_path):
    """An input that ends before max_steps stops training after its last batch, with a progress
    line for every step and a checkpoint."""
    frames = ase.io.read(alloy_xyz, ":12")
    batches = [_batch(frames[3 * i:3 * i + 3]) for i in range(4)]
    model = potential_model(_params(tmp_path / "m", batch_parts=batch_parts, log_every_n_steps=1))
    model.train(_dataset(batches), max_steps=50)
    assert int(model.step) == 4
    assert tf.train.latest_checkpoint(str(tmp_path / "m")).endswith("ckpt-4")
    assert "an input ended at step 4 before max_steps 50" in open(tmp_path / "m" / "train.log").read()
    records = read_metrics(str(tmp_path / "m"), "train")
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    assert all(np.isfinite(r["F_MAE"]) and r["structures_per_s"] > 0 for r in records)

def test_learning_rate_scaling_and_warmup():
    """lr(step) = lr0 · ramp · rate^(step·k/decay_step), k = N when the rate is scaled."""
    linear = LearningRate(1e-3, decay_step=100, decay_rate=0.5, size=4, scaling="linear")
    assert float(linear(0)) == pytest.approx(4e-3)
    assert float(linear(25)) == pytest.approx(2e-3)  # 25 steps of 4 ranks = 100 single-rank steps
    sqrt = LearningRate(1e-3, decay_step=100, decay_rate=0.5, size=4, scaling="sqrt")
    assert float(sqrt(0)) == pytest.approx(2e-3) and float(sqrt(25)) == pytest.approx(1e-3)
    none = LearningRate(1e-3, decay_step=100, decay_rate=0.5, size=4, scaling="none")
    assert float(none(0)) == pytest.approx(1e-3) and float(none(100)) == pytest.approx(5e-4)
    warm = LearningRate(1e-3, decay_step=10 ** 9, decay_rate=0.5, size=4, scaling="linear",
                        parallel_warmup_steps=100)
    assert [float(warm(s)) for s in (0, 5, 25, 50)] == pytest.approx([1e-3, 1.6e-3, 4e-3, 4e-3], rel=1e-5)
    one = LearningRate(1e-3, decay_step=100, decay_rate=0.5, size=1, scaling="linear", parallel_warmup_steps=100)
    assert float(one(0)) == pytest.approx(1e-3) and float(one(100)) == pytest.approx(5e-4)
    assert "every 25 steps" in linear.describe()


def test_non_finite_steps_are_skipped_then_rolled_back_then_refused(alloy_xyz, tmp_path):
    frames = ase.io.read(alloy_xyz, ":40")
    good = [_batch(frames[2 * i:2 * i + 2]) for i in range(6)]
    bad = [_batch(frames[12 + 2 * i:14 + 2 * i], nan=True) for i in range(14)]
    model = potential_model(_params(tmp_path / "m", max_nonfinite_steps=2, max_rollbacks=2))
    with pytest.raises(TrainingDiverged, match="non-finite after 2 rollbacks"):
        model.train(_dataset(good + bad), max_steps=100)
    # steps 1-6 good, 7-8 skipped: the rollback returns to ckpt-5 (the latest), and the second one
    # too (ckpt-10 is written after it), so the weights are those after 5 good steps
    reference = potential_model(_params(tmp_path / "ref"))
    reference.train(_dataset(good), max_steps=5)
    for a, b in zip(_weights(model), _weights(reference)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-8)
    assert float(model.lr_factor) == pytest.approx(0.25)
    text = open(tmp_path / "m" / "train.log").read()
    assert text.count("rolled back to") == 2 and "update skipped on all ranks (2 in a row)" in text


def _guarded_losses(losses, factor=10.0, window=8, max_rollbacks=3):
    """Feed ``losses`` (of steps 1, 2, …) to a LossJumpGuard whose copies are the step numbers; returns
    [(step, copy's step)] of its rollbacks."""
    taken = {"step": 0}
    guard = LossJumpGuard(factor, window, max_rollbacks, take=lambda: taken["step"])
    rollbacks = []
    for step, loss in enumerate(losses, start=1):
        taken["step"] = step
        jump = guard.record(loss, step)
        if jump is not None:
            assert jump[0] == jump[1]  # the copy is the state of the step it names
            rollbacks.append((step, jump[0]))
    return rollbacks


def test_loss_jump_guard_acts_on_a_sustained_jump_only():
    rng = np.random.default_rng(0)
    steps = np.arange(1, 1001)
    falling = (1.0 + 50.0 / np.sqrt(steps)) * rng.lognormal(0.0, 0.5, steps.size)  # noisy batches, a falling loss
    spiky = falling.copy()
    spiky[[300, 301, 302, 600]] *= 1e4  # outlier batches (fewer than half the window in a row)
    assert _guarded_losses(falling) == [] and _guarded_losses(spiky) == []
    jumped = falling.copy()
    jumped[700:] *= 300.0  # from step 701 on, as after a blow-up
    rollbacks = _guarded_losses(jumped, max_rollbacks=1000)
    # seen when half the window is high; back to a copy confirmed by 2 × window healthy steps after it
    first, copy = rollbacks[0]
    assert 701 <= first <= 701 + 8 // 2 and copy <= 701 - 16 and copy % 16 == 0
    # the loss stays high (the data's, here): each rollback after a new window, to the same copy
    assert [c for _, c in rollbacks] == [copy] * len(rollbacks) and len(rollbacks) > 3
    with pytest.raises(TrainingDiverged, match="jumped to .* again after 3 rollbacks") as err:
        _guarded_losses(jumped, max_rollbacks=3)
    assert err.value.restore[:2] == (copy, copy)


def test_a_loss_jump_rolls_back_to_the_state_before_it(alloy_xyz, tmp_path):
    """Good batches, then labels × 1000 (a jump that stays): each jump restores the in-memory copy of
    step 8 (confirmed at step 12, the last good one) with the rate halved, the third raises."""
    frames = ase.io.read(alloy_xyz, ":40")
    good = [_batch(frames[2 * i:2 * i + 2]) for i in range(12)]
    bad = []
    for i in range(8):
        b = _batch(frames[24 + 2 * i:26 + 2 * i])
        for key in (K.E_DATA, K.F_DATA, K.S_DATA):
            b[key] = b[key] * 1000.0
        bad.append(b)
    mp = dict(loss_jump_window=2, loss_jump_factor=100.0, max_rollbacks=2, save_checkpoint_steps=100)
    model = potential_model(_params(tmp_path / "m", **mp))
    with pytest.raises(TrainingDiverged, match="step 17: the loss jumped .* again after 2 rollbacks"):
        model.train(_dataset(good + bad), max_steps=100)
    reference = potential_model(_params(tmp_path / "ref"))
    reference.train(_dataset(good), max_steps=8)
    for a, b in zip(_weights(model), _weights(reference)):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(model.optimizer.variables, reference.optimizer.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert float(model.lr_factor) == pytest.approx(0.25)
    text = open(tmp_path / "m" / "train.log").read()
    assert [line.split("pinn WARNING ")[-1].split(";")[0] for line in text.splitlines() if "jumped" in line] == \
        [f"step {s}: the loss jumped to" for s in (13, 15, 17)] or text.count("back to the state of step 8") == 3
    assert text.count("back to the state of step 8") == 3 and "training stops" in text


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGUSR1"])
def test_a_stop_signal_writes_a_checkpoint_and_exits_with_75(signame, alloy_xyz, tmp_path):
    frames = ase.io.read(alloy_xyz, ":40")
    batches = [_batch(frames[i:i + 1]) for i in range(40)]
    spec = {k: tf.TensorSpec((None,) + v.shape[1:], tf.as_dtype(v.dtype)) for k, v in batches[0].items()}

    def gen():
        for i, b in enumerate(batches):
            if i == 24:
                os.kill(os.getpid(), getattr(signal, signame))  # as Slurm would, in the middle of the run
            yield b

    model = potential_model(_params(tmp_path / "m", save_checkpoint_steps=1000))
    with pytest.raises(TrainingPreempted) as stop:
        model.train(lambda: tf.data.Dataset.from_generator(gen, output_signature=spec), max_steps=40)
    assert stop.value.code == PREEMPTED_EXIT_CODE and stop.value.signal_name == signame
    stopped_at = stop.value.step
    # the input runs ahead of training (prefetching: 8 or more batches before the first, compiling step
    # ends on a loaded machine), so the signal comes well before the last batch and well after the first
    assert 1 <= stopped_at < 40
    assert tf.train.latest_checkpoint(str(tmp_path / "m")).endswith(f"ckpt-{stopped_at}")
    assert signal.getsignal(getattr(signal, signame)) == signal.SIG_DFL  # the handler is gone after train()
    resumed = potential_model(str(tmp_path / "m"))
    assert int(resumed.step) == stopped_at
    assert f"stopped by {signame} at step" in open(tmp_path / "m" / "train.log").read()


def test_the_watchdog_ends_a_stalled_process():
    """A step that never finishes (a dead peer in a collective) ends the process with status 70 and a message."""
    import subprocess
    import sys
    code = ("import time\n"
            "from pinn.runtime.logs import setup_logging\n"
            "from pinn.training.guards import Watchdog\n"
            "setup_logging()\n"
            "with Watchdog(1.0, lambda: 'the last checkpoint is X') as dog:\n"
            "    dog.beat()\n"
            "    time.sleep(30)\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 70
    assert "no training step finished in" in run.stderr and "the last checkpoint is X" in run.stderr


def test_a_stop_signal_is_said_even_while_the_main_thread_is_held_in_an_op():
    """A rank held inside an op that never returns (a collective whose peer's node is gone) cannot run
    Python's signal handler before the launcher's SIGKILL; the line naming the last checkpoint comes
    from StopSignals' own thread at once, and only once for two signals."""
    import subprocess
    import sys
    import time
    code = ("import sys, tensorflow as tf\n"
            "from pinn.runtime.logs import setup_logging\n"
            "from pinn.training.guards import StopSignals\n"
            "setup_logging()\n"
            "queue = tf.queue.FIFOQueue(1, tf.float32)\n"
            "with StopSignals(lambda: 'the last checkpoint is X'):\n"
            "    print('held', flush=True)\n"
            "    queue.dequeue()\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "held\n"
        time.sleep(1)
        proc.send_signal(signal.SIGTERM)
        time.sleep(1)  # both pending at once, Linux would deliver SIGUSR1 (10) before SIGTERM (15)
        proc.send_signal(signal.SIGUSR1)
        time.sleep(2)
        assert proc.poll() is None  # still held: the handler itself cannot have run
    finally:
        proc.kill()
    err = proc.communicate()[1]
    assert err.count("received SIG") == 1, err
    assert "received SIGTERM: stopping after this step with a checkpoint (until then the last checkpoint is X)" in err


def test_scaling_line():
    from pinn.training.progress import scaling_line
    figures = np.array([[512.0, 0.12], [498.0, 0.14]])
    assert scaling_line(figures) == "ranks: 512, 498 structures/s; communication 12%, 14%"
    assert scaling_line(figures, 543.0).endswith("efficiency 93% of 2 × 543")


MODELS_IN_ONE_PROCESS = r"""
import gc, json, sys
from pinn.io import add_neighbors, load_ase, sparse_batch
from pinn.models import potential_model

data, folder, engine = sys.argv[1:4]
rss = []
for k in range(6):
    params = {"model_dir": f"{folder}/model-{k}", "seed": k,
              "network": {"name": "PiNet", "params": {"atom_types": [29, 79], "rc": 4.5, "depth": 2,
                          "pp_nodes": [8], "pi_nodes": [8, 8], "ii_nodes": [8], "out_nodes": [8]}},
              "model": {"name": "potential_model", "params": {"use_force": True, "engine": engine, "jit": False,
                        "progress_bar": "off", "tensorboard": False}}}
    model = potential_model(params)
    model.train(lambda: load_ase(data).apply(add_neighbors(4.5)).cache().repeat().apply(sparse_batch(8)), 5)
    model.evaluate(lambda: load_ase(data).take(16).apply(sparse_batch(8)))
    del model
    gc.collect()
    with open("/proc/self/statm") as f:
        rss.append(int(f.read().split()[1]) * 4096 / 2**20)
print(json.dumps(rss))
"""


@pytest.mark.parametrize("engine", ["tensorflow", "numba"])
def test_memory_stays_flat_model_after_model_in_one_process(engine, alloy_xyz, tmp_path):
    """Six models trained and evaluated one after another in one process (a committee, a warm-start chain, an
    active-learning loop): the resident memory after models 3..6 grows by less than 15 MB per model (0.29.0: the
    TensorFlow engine kept each model's graphs, ~40-80 MB per model of this size, through tf.custom_gradient's
    registry and its XLA-compiled update; benchmarks/bench_memory.py has the default network's figures)."""
    import json
    import subprocess
    import sys
    if not os.path.exists("/proc/self/statm"):
        pytest.skip("needs /proc (Linux)")
    out = subprocess.run([sys.executable, "-c", MODELS_IN_ONE_PROCESS, alloy_xyz, str(tmp_path), engine],
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    rss = json.loads(out.stdout.strip().splitlines()[-1])
    slope = np.polyfit(np.arange(2, len(rss)), rss[2:], 1)[0]
    assert slope < 15.0, f"{engine}: resident memory after each model {np.round(rss)} MB: {slope:.1f} MB per model"
