"""One writer per model directory (pinn.files.lock, pinn.training.claim): real processes, files on disk.

Two `pinn train` on one directory (the second refused in one line naming the first, which finishes
intact), a lock left by a SIGKILLed run taken over, a refused run that leaves every file as it was,
the lock released after an exception, by close() and garbage collection, and at the exit status 75
of a stop signal; the staleness rules of pinn.files.lock itself (another host's heartbeat, a reused
pid, a copied directory) without TensorFlow.
"""
import gc
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest
import yaml

from launching import wait_for
from pinn.cli import main
from pinn.demo import make_dipole_dataset
from pinn.files import lock as dirlock
from pinn.files.lock import LOCK_NAME, ModelDirLocked, lock_model_dir
from settings import small_net

PINN = os.path.join(os.path.dirname(sys.executable), "pinn")
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1")
HOST = socket.gethostname()


@pytest.fixture(scope="module")
def water(tmp_path_factory):
    """20 water clusters with dipoles and charges (a dipole model trains on TensorFlow: nothing compiles)."""
    path = tmp_path_factory.mktemp("lock-data") / "water.xyz"
    make_dipole_dataset(str(path), n_frames=20, seed=0)
    return str(path)


def _params(model_dir, **changes):
    """A dipole model's params: 2 steps between records and validations, no XLA."""
    options = {"use_charge": True, "log_every_n_steps": 2, "eval_every_n_steps": 2, "progress_bar": "off",
               "jit": False, "lr_schedule": "exponential", "lr_warmup_steps": 0, "ema_decay": None}
    params = {"model_dir": str(model_dir), "network": {"name": "PiNet", "params": small_net([1, 8], rc=4.0)},
              "model": {"name": "dipole_model", "params": options}}
    params.update(changes)
    return params


def _run_file(directory, water, model_dir, max_steps=4, **changes):
    """``directory/run.yml``: the params of :func:`_params`, 8 training and 2 validation structures, batches of 4."""
    config = {**_params(model_dir, **changes), "data": {"train": water, "split": {"train": 8, "eval": 2},
                                                          "batch_size": 4},
              "train": {"max_steps": max_steps}}
    path = os.path.join(directory, "run.yml")
    with open(path, "w") as f:
        yaml.safe_dump(config, f)
    return path


def _snapshot(folder):
    """{relative path: bytes} of every file under ``folder``."""
    files = {}
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                files[os.path.relpath(path, folder)] = f.read()
    return files


# ------------------------------------------------------------------ `pinn train` processes
def test_a_second_run_is_refused_naming_the_first_which_finishes_intact(water, tmp_path):
    """Two `pinn train run.yml` started together: the one that takes the lock first is held (SIGSTOP) until
    the other has ended, so that the other surely meets it alive; then it goes on and finishes."""
    model_dir = tmp_path / "model"
    _run_file(tmp_path, water, model_dir)
    runs = [subprocess.Popen([PINN, "train", "run.yml"], cwd=tmp_path, env=ENV, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        wait_for(lambda: (model_dir / LOCK_NAME).exists() or any(r.poll() is not None for r in runs), 180,
                 "a run's lock")
        pid = json.loads((model_dir / LOCK_NAME).read_text())["pid"]
        first, second = runs if runs[0].pid == pid else runs[::-1]
        first.send_signal(signal.SIGSTOP)
        err = second.communicate(timeout=300)[1].strip().splitlines()
    finally:
        for run in runs:
            run.send_signal(signal.SIGCONT)
    out, first_err = first.communicate(timeout=300)
    assert first.returncode == 0, out + first_err
    assert second.returncode == 1 and len(err) == 1, err
    assert err[0].startswith(f"pinn train: error: {os.path.realpath(model_dir)}: in use by another run: "
                             f"pid {first.pid} on host {HOST}, started 20"), err
    assert "command 'pinn train run.yml'" in err[0] and f"delete {os.path.realpath(model_dir / LOCK_NAME)}" in err[0]
    # the first run's directory: its records once each, its checkpoints, no lock left
    with open(model_dir / "metrics.jsonl") as f:
        records = [json.loads(line) for line in f]
    assert [(r["kind"], r["step"]) for r in records] == [("train", 2), ("eval", 2), ("train", 4), ("eval", 4)]
    assert (model_dir / "ckpt-4.index").exists() and not (model_dir / LOCK_NAME).exists()
    assert (model_dir / "train.log").read_text().count("training PiNet from step 0") == 1


def _trained(water, model_dir):
    """A dipole model trained one step in this process (closed)."""
    from pinn.io import load_ase, sparse_batch
    from pinn.models import dipole_model
    model = dipole_model(_params(model_dir))
    model.train(lambda: load_ase(water).repeat().apply(sparse_batch(4)), max_steps=1)
    model.close()


def test_a_lock_left_by_a_killed_run_is_taken_over(water, tmp_path):
    from pinn.models import get_model
    model_dir = tmp_path / "model"
    _run_file(tmp_path, water, model_dir)
    killed = subprocess.Popen([PINN, "train", "run.yml"], cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    wait_for(lambda: (model_dir / LOCK_NAME).exists() or killed.poll() is not None, 180, "the run's lock")
    killed.kill()
    killed.wait()
    assert (model_dir / LOCK_NAME).exists()  # SIGKILL: nothing released it
    model = get_model(_params(model_dir))
    log = (model_dir / "train.log").read_text()
    line = f"{os.path.realpath(model_dir)}: taking over the lock of pid {killed.pid} on host {HOST}, which is no " \
           "longer running"
    assert line in log and log.count("taking over") == 1
    assert json.loads((model_dir / LOCK_NAME).read_text())["pid"] == os.getpid()
    model.close()
    assert not (model_dir / LOCK_NAME).exists()


def test_a_refused_run_leaves_the_directory_as_it_was(water, tmp_path, capsys):
    """A run whose params name another model than model_dir holds is refused before it writes anything:
    params.yml, train.log and every other file stay byte for byte."""
    model_dir = tmp_path / "model"
    _trained(water, model_dir)
    before = _snapshot(model_dir)
    for changes, difference in (({"precision": "float64"}, "precision float32 there, float64 here"),
                                ({"network": {"name": "PiNet", "params": small_net([1, 8], rc=4.0, depth=3)}},
                                 "depth 2 there, 3 here")):
        capsys.readouterr()
        assert main(["train", _run_file(tmp_path, water, model_dir, **changes)]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "model_dir holds another model than the given params" in err[0], err
        assert difference in err[0]
        assert _snapshot(model_dir) == before
    # refused later, at the restore (no best checkpoint to restore): params.yml, given other settings, stays too
    from pinn.models import get_model
    params = _params(model_dir)
    params["model"]["params"]["learning_rate"] = 1e-4
    with pytest.raises(ValueError, match="no best checkpoint"):
        get_model(params, checkpoint="best")
    assert (model_dir / "params.yml").read_bytes() == before["params.yml"]


def test_the_lock_is_released_after_an_exception_by_close_and_by_collection(water, tmp_path):
    from pinn.models import dipole_model, get_model
    lock = tmp_path / "model" / LOCK_NAME
    # `pinn train` whose data fail after the model is built (an element the network does not know)
    run = _run_file(tmp_path, water, tmp_path / "model", network={"name": "PiNet", "params": small_net([1])})
    assert main(["train", run]) == 1
    # the run was refused by its data: no params.yml (it would hold the next run to this network), no lock
    assert not (tmp_path / "model" / "params.yml").exists() and not lock.exists()
    # the Python API: a model holds its directory until close() (or until it is collected)
    model = dipole_model(_params(tmp_path / "api"))
    assert (tmp_path / "api" / LOCK_NAME).exists()
    with pytest.raises(RuntimeError, match="an input that fails"):
        model.train(lambda: (_ for _ in ()).throw(RuntimeError("an input that fails")), max_steps=2)
    assert (tmp_path / "api" / LOCK_NAME).exists()
    model.close()
    assert not (tmp_path / "api" / LOCK_NAME).exists()
    with pytest.raises(RuntimeError, match="train: this model was closed"):
        model.train(lambda: None, max_steps=2)
    model = dipole_model(_params(tmp_path / "api"))
    assert (tmp_path / "api" / LOCK_NAME).exists()
    del model
    gc.collect()
    assert not (tmp_path / "api" / LOCK_NAME).exists()
    # a model that is not built (no best checkpoint to restore) holds nothing
    with pytest.raises(ValueError, match="no best checkpoint"):
        get_model(_params(tmp_path / "api"), checkpoint="best")
    assert not (tmp_path / "api" / LOCK_NAME).exists()


STOPPED_SCRIPT = """
import os, signal, sys
import tensorflow as tf
from pinn.io import load_ase, sparse_batch
from pinn.models import dipole_model
params = {params!r}
model = dipole_model(params)
batches = list(load_ase({water!r}).apply(sparse_batch(4)).as_numpy_iterator())
spec = load_ase({water!r}).apply(sparse_batch(4)).element_spec

def stopped_midway():  # as Slurm would, in the middle of the run
    for i in range(100):
        if i == 3:
            os.kill(os.getpid(), signal.SIGTERM)
        yield batches[i % len(batches)]

model.train(lambda: tf.data.Dataset.from_generator(stopped_midway, output_signature=spec), max_steps=100)
"""


def test_a_run_stopped_by_a_signal_releases_the_lock(water, tmp_path):
    """An input script of the README's form (the model kept to the end) stopped by SIGTERM: exit status 75
    with its checkpoint, and the lock released by the interpreter's exit."""
    model_dir = tmp_path / "model"
    script = tmp_path / "train.py"
    script.write_text(STOPPED_SCRIPT.format(params=_params(model_dir), water=water))
    run = subprocess.run([PINN, "train", str(script)], cwd=tmp_path, env=ENV, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 75, run.stdout + run.stderr
    assert "stopped by SIGTERM at step" in (model_dir / "train.log").read_text()
    assert not (model_dir / LOCK_NAME).exists()


def _mpirun_available():
    import importlib.util
    from launching import horovod_has
    return shutil.which("mpirun") and (importlib.util.find_spec("mpi4py") is not None or horovod_has("mpi"))


@pytest.mark.skipif(not _mpirun_available(), reason="mpirun with mpi4py or Horovod's MPI controller")
def test_two_ranks_refused_together(water, tmp_path):
    """`mpirun -np 2 pinn train` on a directory another process holds: rank 0 (which alone writes, and so
    alone locks) names the holder, rank 1 learns of it, both end at once and nothing is written."""
    from launching import ENV as LAUNCH_ENV
    model_dir = tmp_path / "model"
    _run_file(tmp_path, water, model_dir, parallel=True)
    held = lock_model_dir(model_dir)
    try:
        run = subprocess.run(["mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none", PINN, "train", "run.yml"],
                             cwd=tmp_path, env=LAUNCH_ENV, capture_output=True, text=True, timeout=300)
        assert sorted(os.listdir(model_dir)) == [LOCK_NAME]
    finally:
        held.release()
    out = run.stdout + run.stderr  # the ranks' lines may interleave
    assert run.returncode != 0 and out.count("pinn train: error:") == 2 and "Traceback" not in out, out
    assert f"pinn train: error: {model_dir}: in use by another run: pid {os.getpid()} on host {HOST}" in out
    assert f"pinn train: error: rank 1: rank 0 could not take {model_dir} for this run (see its error)" in out


# ------------------------------------------------------------------ the lock file's rules, without TensorFlow
def _foreign_lock(folder, **record):
    """Write a lock file of another holder into ``folder`` (its inode unless given)."""
    content = {"host": "node-elsewhere", "pid": 4321, "process_start": 1, "boot_id": "other-boot",
               "started": "2030-01-01T00:00:00+00:00", "command": "pinn train run.yml", "token": "theirs",
               "dir_id": dirlock._dir_id(folder), **record}
    (folder / LOCK_NAME).write_text(json.dumps(content))
    return folder / LOCK_NAME


def test_another_hosts_lock_is_stale_without_heartbeat(tmp_path):
    path = _foreign_lock(tmp_path)
    with pytest.raises(ModelDirLocked, match="in use by another run: pid 4321 on host node-elsewhere, started "
                       "2030-01-01T00:00:00"):
        lock_model_dir(tmp_path)
    old = time.time() - dirlock.STALE_AFTER_S - 60
    os.utime(path, (old, old))
    lock = lock_model_dir(tmp_path)
    assert lock.note.startswith(f"{os.path.realpath(tmp_path)}: taking over the lock of pid 4321 on host "
                                "node-elsewhere, whose heartbeat stopped")
    assert json.loads(path.read_text())["pid"] == os.getpid()
    lock.release()
    assert not path.exists()


def test_the_holder_touches_its_lock_file(tmp_path):
    lock = lock_model_dir(tmp_path, heartbeat_s=0.2)
    try:
        old = time.time() - 1000
        os.utime(lock.path, (old, old))
        wait_for(lambda: time.time() - os.stat(lock.path).st_mtime < 100, 10, "a heartbeat")
    finally:
        lock.release()


def test_a_reused_pid_a_copied_directory_and_this_process_own_locks(tmp_path):
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        start = dirlock._process_start(sleeper.pid)
        _foreign_lock(tmp_path, **dirlock._here(), pid=sleeper.pid, process_start=start)
        with pytest.raises(ModelDirLocked, match=f"pid {sleeper.pid} on host {HOST}"):
            lock_model_dir(tmp_path)
        _foreign_lock(tmp_path, **dirlock._here(), pid=sleeper.pid, process_start=start - 1)
        lock = lock_model_dir(tmp_path)  # the pid runs, but started later: another process
        assert lock.note.endswith(f"pid {sleeper.pid} on host {HOST}, which is no longer running")
    finally:
        sleeper.kill()
        sleeper.wait()
    again = lock_model_dir(tmp_path)  # this process's second hold shares the file
    assert again.note is None
    lock.release()
    assert (tmp_path / LOCK_NAME).exists()
    copy = tmp_path.parent / (tmp_path.name + "-copy")
    shutil.copytree(tmp_path, copy)  # with the live lock file in it
    copied = lock_model_dir(copy)  # replaced without a word
    assert copied.note is None and json.loads((copy / LOCK_NAME).read_text())["dir_id"] == dirlock._dir_id(copy)
    again.release()
    copied.release()
    assert not (tmp_path / LOCK_NAME).exists() and not (copy / LOCK_NAME).exists()


def test_a_zombie_holder_is_gone(tmp_path):
    """A holder that ended but was never reaped (an orphaned rank of a killed job, in a container whose first
    process reaps nothing) still answers kill(pid, 0): its lock is stale all the same."""
    zombie = subprocess.Popen(["true"])
    try:
        wait_for(lambda: open(f"/proc/{zombie.pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z", 30,
                 "the child to end (unreaped)")
        _foreign_lock(tmp_path, **dirlock._here(), pid=zombie.pid, process_start=dirlock._process_start(zombie.pid))
        lock = lock_model_dir(tmp_path)
        assert lock.note.endswith(f"pid {zombie.pid} on host {HOST}, which is no longer running")
        lock.release()
    finally:
        zombie.wait()
