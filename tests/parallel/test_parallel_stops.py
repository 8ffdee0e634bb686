"""How a parallel training job stops, on real ranks: a SIGTERM to one rank (a checkpoint, then a relaunch
resumes), a killed rank (the job ends in bounded time, the checkpoints whole), an exception, an
out-of-memory error or an overflow on one rank, weights that differ between ranks, and launchers or
Horovod builds that cannot run the job.

The training script is tests/parallel/parallel_train.py.  Neither Horovod nor MPI is mocked.
"""
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from launching import ENV, assert_each_rank_read_its_own_files, horovod_has, wait_for, without_modules
from training_runs import LAUNCHERS, SCRIPT, load_rank, run_training

pytestmark = pytest.mark.hpc  # real launchers: ./run_tests.sh -m hpc


def test_ranks_whose_weights_differ_are_stopped(one_launcher, tmp_path):
    """The ranks compare checksums of their weights every log_every_n_steps (5) steps in the step's
    exchange: a weight changed on rank 1 alone (after step 5) stops both ranks at step 10."""
    name, command = one_launcher
    run, out = run_training(command, tmp_path, "perturbed", "--steps", "12", "--perturb-rank1", "--jit", "off")
    assert run.returncode != 0
    assert "step 10: the weights differ between ranks (checksums" in out, out[-4000:]
    assert "step 10/12" not in out


def test_an_exception_on_every_rank_ends_the_job(one_launcher, tmp_path):
    """TrainingDiverged on both ranks (NaN energies on rank 1 from step 6 on): both print it and exit with
    status 1 at once; the interpreter's own exit hung in Horovod's shutdown until the launcher's timeout."""
    name, command = one_launcher
    if name.startswith("mpirun"):  # each rank's lines whole: untagged, the two tracebacks interleaved mid-line
        command = command[:1] + ["--tag-output"] + command[1:]
    nan_steps = [str(s) for s in range(6, 60)]
    run, out = run_training(command, tmp_path, "diverged", "--steps", "60", "--jit", "off", "--nan-steps", *nan_steps,
                    timeout=240)
    assert run.returncode != 0
    assert out.count("TrainingDiverged: step 18: the loss stayed non-finite after 3 rollbacks") == 2, out[-4000:]


def test_out_of_memory_on_one_rank_skips_the_step_on_both(one_launcher, tmp_path):
    """Rank 1 runs out of memory (PINN_TEST_OOM) at step 4, then at steps 9-11: each step is skipped on
    both ranks (no rank waits; the weights stay equal: checked at steps 5 and 10), step 5 resets the
    count, and the third in a row (max_oom_skips 3) writes the checkpoint of step 11 and stops both ranks
    with one line naming rank 1's batch."""
    name, command = one_launcher
    run, out = run_training(command, tmp_path, "oom", "--steps", "14", "--jit", "off", "--max-oom-skips", "3",
                    env={"PINN_TEST_OOM": "1:4,9,10,11"}, timeout=300)
    assert run.returncode == 1, out[-4000:]
    assert "step 4: out of memory on rank 1 in the gradients of its batch (" in out and " atoms" in out
    assert out.count("step 4: out of memory on rank 1; the step is skipped on every rank (1 in a row, at most 3)") \
        == 1  # rank 0's line
    stop = re.findall(r"out of memory in 3 steps in a row \(model.params.max_oom_skips 3\) at step 11; the last "
                      r"batches that did not fit: rank 1: \d+ structures, \d+ atoms", out)
    assert len(stop) == 2, out[-4000:]  # one line from each rank
    assert "weights differ" not in out and "step 12/" not in out
    records = [json.loads(line) for line in open(tmp_path / "model" / "metrics.jsonl")]
    skipped = {r["step"]: r.get("oom_skipped", 0) for r in records if r["kind"] == "train"}
    assert skipped == {5: 1, 10: 2}, skipped
    import tensorflow as tf
    reader = tf.train.load_checkpoint(str(tmp_path / "model" / "ckpt-11"))
    assert reader.get_tensor("optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE") == 11 - 4


def test_an_overflow_on_one_rank_skips_the_step_on_both_and_halves_both_scales(one_launcher, tmp_path):
    """mixed_float16, loss scale 64: rank 1's scaled gradients overflow at step 4 (PINN_TEST_OVERFLOW):
    both ranks skip step 4 alone and halve their scale; they end bitwise equal, with scale 32 in the
    checkpoint."""
    name, command = one_launcher
    run, out = run_training(command, tmp_path, "overflow", "--steps", "6", "--jit", "off",
                            "--precision", "mixed_float16",
                            env={"PINN_TEST_OVERFLOW": "1:4"}, timeout=300)
    assert run.returncode == 0, out[-4000:]
    assert out.count("step 4: the scaled gradients overflowed (rank 1); the step is skipped on every rank") == 1
    assert "overflowed (rank 0)" not in out and "non-finite" not in out
    ranks = [load_rank(tmp_path, "overflow", r) for r in (0, 1)]
    for key in ("weights", "optimizer", "average"):
        for a, b in zip(ranks[0][key], ranks[1][key]):
            np.testing.assert_array_equal(a, b, err_msg=key)
    import tensorflow as tf
    reader = tf.train.load_checkpoint(str(tmp_path / "model" / "ckpt-6"))
    assert reader.get_tensor("optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE") == 5
    assert reader.get_tensor("loss_scale/scale/.ATTRIBUTES/VARIABLE_VALUE") == 32.0


def _start_longrun(command, workdir, tag, *args, env=None, wait_rank=1):
    """A run that would not end by itself (without XLA: what is tested is how it stops), once at step 10;
    returns the process, rank ``wait_rank``'s pid and rank 0's log."""
    proc = subprocess.Popen(command + [str(workdir), tag, "--steps", "100000",
                                       "--save-every", "100000", *args],
                            env=env or ENV, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log = workdir / "model" / "train.log"
    wait_for(lambda: log.exists() and "step 10/" in log.read_text() or proc.poll() is not None, 300,
              "10 training steps")
    assert proc.poll() is None, proc.stdout.read()[-4000:]
    pid = int((workdir / f"{tag}.rank{wait_rank}.pid").read_text())
    return proc, pid, log


def _latest_step(model_dir):
    import tensorflow as tf
    latest = tf.train.latest_checkpoint(str(model_dir))
    return int(latest.rsplit("-", 1)[1]), latest


def test_sigterm_writes_a_checkpoint_and_the_next_launch_resumes(launcher, tmp_path):
    """Also runs with 2 accumulated batches per step, fp16 gradient compression and a 1 MB fusion buffer."""
    name, command = launcher
    options = ["--accumulate", "2", "--compression", "fp16", "--fusion-mb", "1", "--jit", "off"]
    proc, pid1, log = _start_longrun(command, tmp_path, "term", *options)
    os.kill(pid1, signal.SIGTERM)  # one rank only: the ranks must agree among themselves
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert "received SIGTERM" in output
    text = log.read_text()
    assert "stopped by" in text and "launch the same command again" in text, text[-3000:]
    stopped_at, latest = _latest_step(tmp_path / "model")
    assert f"at step {stopped_at};" in text
    # every rank left quietly through the same door (horovodrun's own traceback about the exit code aside)
    ranks_output = "\n".join(line for line in output.splitlines() if line.startswith("[")) \
        if name.startswith("horovodrun") else output
    assert "Traceback" not in ranks_output, output[-4000:]
    resumed, out = run_training(command, tmp_path, "term", "--steps", str(stopped_at + 5), *options)
    assert resumed.returncode == 0, out[-4000:]
    assert f"(step {stopped_at})" in out and f"step {stopped_at + 5}/{stopped_at + 5}" in out
    ranks = [load_rank(tmp_path, "term", r) for r in range(2)]
    for a, b in zip(ranks[0]["weights"], ranks[1]["weights"]):
        np.testing.assert_array_equal(a, b)


def test_a_time_budget_stops_every_rank_at_the_same_step(one_launcher, tmp_path):
    """train(max_time=20) with max_steps far away: the ranks agree on the clock (the slowest rank's, one allreduce
    at steps both compute alike), stop at the same step with the same weights, inside the budget (the last
    checkpoint's elapsed_s, counted from the training's start). One launcher: the agreement is the world's allreduce,
    which test_parallel.py checks under each."""
    import tensorflow as tf
    name, command = one_launcher
    run, out = run_training(command, tmp_path, "budget", "--steps", "1000000", "--jit", "off", "--max-time", "20",
                            timeout=300)
    assert run.returncode == 0, out[-4000:]
    ranks = [load_rank(tmp_path, "budget", r) for r in range(2)]
    assert 1 < ranks[0]["step"] == ranks[1]["step"] < 1000000
    assert f"time budget: steps ended at step {ranks[0]['step']} at " in out, out[-4000:]
    for a, b in zip(ranks[0]["weights"], ranks[1]["weights"]):
        np.testing.assert_array_equal(a, b)
    reader = tf.train.load_checkpoint(str(tmp_path / "model" / f"ckpt-{ranks[0]['step']}"))
    assert 0 < reader.get_tensor("elapsed_s/.ATTRIBUTES/VARIABLE_VALUE") <= 20.0


def test_a_killed_rank_ends_the_job_in_bounded_time(launcher, tmp_path):
    """mpirun: rank 1 dies at a quiet moment.  horovodrun: rank 0 dies inside a save (held there by
    PINN_TEST_SLOW_SAVE, after the checkpoint's files are written and before the state file names
    them), and the relaunch resumes from a whole checkpoint."""
    name, command = launcher
    in_save = name.startswith("horovodrun")
    model_dir = tmp_path / "model"
    if in_save:
        from pinn.files import checkpoint_dir as ckdir
        proc, pid, log = _start_longrun(command, tmp_path, "kill", "--stall-timeout", "60", "--jit", "off",
                                         "--save-every", "15", env=dict(ENV, PINN_TEST_SLOW_SAVE="1.5"), wait_rank=0)

        def inside_a_save():
            state = ckdir.read_state(model_dir) if (model_dir / "checkpoint").exists() else None
            named = ckdir.step_of(state[0]) if state else -1
            return any(ckdir.step_of(p) > max(named, 0) for p in ckdir.on_disk(model_dir))
        wait_for(lambda: inside_a_save() or proc.poll() is not None, 120, "a save of step 15 or later")
        assert proc.poll() is None, proc.stdout.read()[-4000:]
    else:
        proc, pid, log = _start_longrun(command, tmp_path, "kill", "--stall-timeout", "60", "--jit", "off")
    t0 = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    output, _ = proc.communicate(timeout=180)
    elapsed = time.monotonic() - t0
    assert proc.returncode != 0
    assert elapsed < 120, f"the job took {elapsed:.0f} s to end after a rank died"
    # mpirun may return while the rank it terminated is still ending: the lock is that rank's until then
    _wait_for_the_lock_holder_to_end(model_dir)
    # rank 0's latest checkpoint is whole and loads
    step, latest = _latest_step(model_dir)
    from pinn.models import potential_model
    model = potential_model(str(model_dir))
    assert int(model.step) >= step
    if in_save:  # the checkpoint written but not yet named is whole too: the relaunch resumes from it
        resumed_from = int(model.step)
        assert resumed_from > step
        model.close()  # gives the model directory's lock back for the relaunch
        resumed, out = run_training(command, tmp_path, "kill", "--steps", str(resumed_from + 5), "--jit", "off")
        assert resumed.returncode == 0, out[-4000:]
        assert f"(step {resumed_from})" in out and f"step {resumed_from + 5}/{resumed_from + 5}" in out


def _wait_for_the_lock_holder_to_end(model_dir, timeout=60):
    """Wait until the process named by ``model_dir``'s lock file (if any) has ended."""
    import json
    from pinn.files import lock as dirlock
    path = model_dir / dirlock.LOCK_NAME
    if not path.exists():
        return
    holder = json.loads(path.read_text())
    wait_for(lambda: not dirlock._alive(holder["pid"], holder.get("process_start")), timeout,
             f"rank 0 (pid {holder['pid']}) to end")


def test_a_launcher_without_horovod_ranks_is_refused(tmp_path):
    """srun (here: its environment) started 2 processes but Horovod sees 1: refuse, do not train twice."""
    env = dict(ENV, SLURM_NTASKS="2")
    run = subprocess.run([sys.executable, SCRIPT, str(tmp_path), "alone", "--steps", "1"], env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode != 0
    assert "the launcher started 2 processes but Horovod sees 1" in run.stderr or \
        "the launcher started 2 processes but MPI sees 1" in run.stderr
    assert not (tmp_path / "model" / "checkpoint").exists()


@pytest.mark.skipif(not (shutil.which("mpirun") and horovod_has("mpi")), reason="mpirun and Horovod's MPI controller")
def test_mpirun_without_mpi4py_warns_of_the_slow_exchange(tmp_path):
    """Horovod's MPI controller where mpi4py is not installed (HPC module stacks): the step's exchange falls back
    to Horovod's collectives, and rank 0 warns with the fix; each rank read its own files (mpirun without
    mpi4py, where ASE's reading is not MPI-aware to begin with)."""
    env = dict(ENV, PYTHONPATH=without_modules(tmp_path, "mpi4py"))
    command = LAUNCHERS["mpirun"][1] + [sys.executable, SCRIPT, str(tmp_path), "nompi4py", "--steps", "1",
                                        "--jit", "off"]
    run = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-4000:]
    assert "host arrays over Horovod" in output
    assert output.count("mpi4py is not installed, so every step's exchange goes through Horovod's collectives") == 1
    assert_each_rank_read_its_own_files([load_rank(tmp_path, "nompi4py", r)["read"][0] for r in range(2)],
                                        tmp_path / "data-cuau")


@pytest.mark.skipif(importlib.util.find_spec("horovod") is None or importlib.util.find_spec("mpi4py") is None,
                    reason="Horovod and mpi4py are needed")
def test_a_horovod_that_does_not_import_is_named(tmp_path):
    """A broken Horovod build (here: horovod.tensorflow does not import) is named in a WARNING, and training
    goes on through MPI alone; before 0.17.0 the reason was logged at DEBUG only."""
    env = dict(ENV, PYTHONPATH=without_modules(tmp_path, "horovod.tensorflow"))
    run = subprocess.run([sys.executable, SCRIPT, str(tmp_path), "broken", "--steps", "1", "--jit", "off"], env=env,
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-4000:]
    assert "Horovod is installed but does not import (ModuleNotFoundError: import of horovod.tensorflow " \
           "halted" in output
    assert "parallel training goes on without it (MPI alone where mpi4py is installed)" in output
    assert "MPI through mpi4py" in output and "no Horovod" in output
