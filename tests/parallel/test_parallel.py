"""Parallel training on real ranks, compared with one process: Horovod's (horovodrun --gloo and mpirun)
and MPI's without Horovod (mpirun, ``parallel_params.backend: mpi``).

The training script is tests/parallel/parallel_train.py, run unchanged with 1 process
and with 2.  Neither Horovod nor MPI is mocked.
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

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "parallel_train.py")
LAUNCHERS = {
    "horovodrun-gloo": (lambda: shutil.which("horovodrun") and horovod_has("gloo"),
                        ["horovodrun", "-np", "2", "--gloo"]),
    "mpirun": (lambda: shutil.which("mpirun") and horovod_has("mpi"),
               ["mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none"]),
    # the script's own option picks the backend: mpirun starts it as ["--backend", "mpi"] below
    "mpirun-mpi4py": (lambda: shutil.which("mpirun") and importlib.util.find_spec("mpi4py") is not None,
                      ["mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none"]),
}
#: extra arguments of the training script per launcher
SCRIPT_ARGS = {"mpirun-mpi4py": ["--backend", "mpi"]}
CONTROLLER = {"horovodrun-gloo": "controller Gloo", "mpirun": "controller MPI", "mpirun-mpi4py": "no Horovod"}
#: what carries the step's exchange (parallel_params.host_exchange: auto) under each launcher
EXCHANGE = {"horovodrun-gloo": "host arrays over TCP sockets to rank 0",
            "mpirun": "host arrays over MPI (" if importlib.util.find_spec("mpi4py") else "host arrays over Horovod",
            "mpirun-mpi4py": "MPI through mpi4py"}


@pytest.fixture(params=sorted(LAUNCHERS))
def launcher(request):
    available, command = LAUNCHERS[request.param]
    if not available():
        pytest.skip(f"{request.param}: launcher, Horovod controller or mpi4py not installed")
    return request.param, command + [sys.executable, SCRIPT] + SCRIPT_ARGS.get(request.param, [])


@pytest.fixture
def one_launcher():
    """The first launcher that works (Gloo first), for tests whose subject is not the controller: the
    controllers are compared in test_two_ranks_equal_one_process_on_the_union."""
    for name in sorted(LAUNCHERS):
        available, command = LAUNCHERS[name]
        if available():
            return name, command + [sys.executable, SCRIPT] + SCRIPT_ARGS.get(name, [])
    pytest.skip("no launcher with a Horovod controller installed")


def _run(command, workdir, tag, *args, timeout=600, env=None):
    """The training script (``command``: a launcher's, ending in the script and its backend; ``[]``: one
    process) in ``workdir`` (``env``: more environment variables)."""
    command = command or [sys.executable, SCRIPT]
    run = subprocess.run(command + [str(workdir), tag, *args], env={**ENV, **(env or {})}, cwd=workdir,
                         capture_output=True, text=True, timeout=timeout)
    return run, run.stdout + run.stderr


def _load(workdir, tag, rank):
    out = np.load(os.path.join(workdir, f"{tag}.rank{rank}.npz"), allow_pickle=True)
    return {"weights": [np.asarray(w, dtype=float) for w in out["weights"]],
            "average": [np.asarray(w, dtype=float) for w in out["average"]],
            "optimizer": [np.asarray(w, dtype=float) for w in out["optimizer"]],
            "step": int(out["step"]), "lr": float(out["lr"]), "size": int(out["size"]),
            "metrics": json.loads(str(out["metrics"])), "writes": json.loads(str(out["writes"])),
            "read": json.loads(str(out["read"]))}


NAN_STEPS = ["--nan-steps", "7", "12", "13", "14"]  # one skip, then three in a row: a rollback to step 10


def _assert_ranks_match(ranks, reference, steps, rtol, atol, optimizer_rtol=None):
    """Both ranks of a 2-rank run at ``steps``: bitwise equal to each other (weights, Adam's state,
    the weight average), and equal to the 1-process ``reference`` within ``rtol``/``atol`` (Adam's
    state within ``optimizer_rtol``; None: only the weights and the average are compared)."""
    assert [r["size"] for r in ranks] == [2, 2] and [r["step"] for r in ranks] == [steps, steps]
    for key in ("weights", "optimizer", "average"):
        for a, b in zip(ranks[0][key], ranks[1][key]):
            np.testing.assert_array_equal(a, b, err_msg=key)
    for key in ("weights", "average"):
        for a, b in zip(ranks[0][key], reference[key]):
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=key)
    if optimizer_rtol is not None:
        for a, b in zip(ranks[0]["optimizer"], reference["optimizer"]):
            np.testing.assert_allclose(a, b, rtol=optimizer_rtol, atol=atol, err_msg="optimizer")


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    """The reference: one process (parallel=True, alone) on the union batches.  The 2-rank runs scale the
    learning rate linearly (×2, decay twice as fast per step), so the reference is given 2× the rate and
    half the decay step."""
    workdir = tmp_path_factory.mktemp("one")
    run, output = _run([], workdir, "one", "--steps", "20", "--lr", "2e-3", "--decay-step", "10", *NAN_STEPS)
    assert run.returncode == 0, output[-4000:]
    return _load(workdir, "one", 0), output, workdir


def reference_dir(one_process):
    return one_process[2] / "model"


def test_one_process_asked_to_be_parallel_says_so(one_process):
    result, output, _ = one_process
    assert result["size"] == 1
    assert "this is the only process: nothing runs in parallel" in output


def test_two_ranks_equal_one_process_on_the_union(launcher, one_process, tmp_path):
    """20 steps in two launches (a restart at step 10), unequal batches read from files on disk, a NaN on
    rank 1 and a rollback: both ranks end bitwise equal to each other and equal to the 1-process run to
    float32 rounding.  Each rank read its own files (distribute_data, then load_ase and a plain
    ase.io.read), whatever the launcher: ASE's MPI-aware reading, which gave both ranks rank 0's
    frames under mpirun before 0.17.0, is off in a parallel world."""
    name, command = launcher
    reference = one_process[0]
    common = ["--lr", "1e-3", "--decay-step", "20", *NAN_STEPS]
    first, out1 = _run(command, tmp_path, "two", "--steps", "10", *common)
    assert first.returncode == 0, out1[-4000:]
    second, out2 = _run(command, tmp_path, "two", "--steps", "20", *common)
    assert second.returncode == 0, out2[-4000:]
    ranks = [_load(tmp_path, "two", r) for r in range(2)]
    assert_each_rank_read_its_own_files([r["read"][0] for r in ranks], tmp_path / "data-cuau")
    assert [r["read"][0]["share"] for r in ranks] == [r["share"] for r in reference["read"]]  # the union's shares
    _assert_ranks_match(ranks, reference, 20, rtol=1e-5, atol=1e-6, optimizer_rtol=1e-4)
    # the learning rate: 1e-3 × 2 ranks × 0.5^(2·20/20) × 0.5 (the rollback) on both sides
    assert ranks[0]["lr"] == pytest.approx(2.5e-4, rel=1e-6) and reference["lr"] == pytest.approx(2.5e-4, rel=1e-6)
    # validation: 8 structures cut 5 + 3; every rank reports the numbers of the whole set
    assert ranks[0]["metrics"] == ranks[1]["metrics"]
    for key, value in reference["metrics"].items():
        assert ranks[0]["metrics"][key] == pytest.approx(value, rel=1e-5), key
    # validation during training: the same records and predictions as the 1-process run, rank 0's files only
    from pinn.training.metrics import read_eval_predictions, read_metrics
    evals = read_metrics(tmp_path / "model", "eval")
    reference_evals = read_metrics(reference_dir(one_process), "eval")
    assert [e["step"] for e in evals] == [e["step"] for e in reference_evals] == [5, 10, 15, 20]
    for mine, theirs in zip(evals, reference_evals):
        assert mine["best"] == theirs["best"]
        for key in ("loss", "E_RMSE", "F_RMSE", "S_RMSE"):
            assert mine[key] == pytest.approx(theirs[key], rel=1e-4), key
    predictions, reference_predictions = (read_eval_predictions(d) for d in (tmp_path / "model",
                                                                                reference_dir(one_process)))
    assert predictions["energy_ref"].shape == (8,) and predictions["forces_ref"].shape[1] == 3
    for key, value in reference_predictions.items():
        np.testing.assert_allclose(predictions[key], value, rtol=1e-4, atol=1e-5, err_msg=key)
    assert (tmp_path / "model" / "best" / "best.json").exists()
    # rank 1 wrote nothing into model_dir; rank 0 wrote the log and checkpoints (these records are the
    # resumed run's: params.yml, as stored already, is not written again)
    assert ranks[1]["writes"] == []
    assert "Checkpoint.write" in ranks[0]["writes"]
    assert not any("params.yml" in w for w in ranks[0]["writes"])
    # what the log says
    assert CONTROLLER[name] in out1 and EXCHANGE[name] in out1 and "rank 1: host" in out1
    assert "ASE's file I/O is per rank" in out1
    assert "step 8: non-finite loss or gradient (from rank 1); update skipped on all ranks" in out1
    assert "restored" in out2 and "(step 10)" in out2
    assert "rolled back to" in out2 and "ckpt-10" in out2
    assert "structures/s; communication" in out2
    log = open(tmp_path / "model" / "train.log").read()
    assert "step 20/20" in log and "pinn[rank 1]" not in log


def test_mirrored_two_devices_equal_one_process_on_the_union(one_process, tmp_path):
    """``parallel_params.backend: mirrored``: one process, the CPU split into 2 logical devices, each
    device given one rank's part of every step (the same files, NaN steps and restart at step 10 as
    the ranks above): the weights, Adam's state and the average equal the 1-process run on the union
    batches to float32 rounding; the learning rate scales with the 2 devices; validation, the best
    checkpoint and the rollback are the same."""
    reference = one_process[0]
    common = ["--backend", "mirrored", "--lr", "1e-3", "--decay-step", "20", *NAN_STEPS]
    first, out1 = _run([], tmp_path, "two", "--steps", "10", *common)
    assert first.returncode == 0, out1[-4000:]
    second, out2 = _run([], tmp_path, "two", "--steps", "20", *common)
    assert second.returncode == 0, out2[-4000:]
    mine = _load(tmp_path, "two", 0)
    assert mine["size"] == 1 and mine["step"] == reference["step"] == 20
    for key in ("weights", "average", "optimizer"):
        for a, b in zip(mine[key], reference[key]):
            np.testing.assert_allclose(a, b, rtol=1e-5 if key != "optimizer" else 1e-4, atol=1e-6, err_msg=key)
    assert mine["lr"] == pytest.approx(2.5e-4, rel=1e-6)  # 1e-3 × 2 devices × 0.5^(2·20/20) × 0.5 (the rollback)
    for key, value in reference["metrics"].items():
        assert mine["metrics"][key] == pytest.approx(value, rel=1e-5), key
    from pinn.training.metrics import read_metrics
    evals, reference_evals = (read_metrics(d, "eval") for d in (tmp_path / "model", reference_dir(one_process)))
    assert [(e["step"], e["best"]) for e in evals] == [(e["step"], e["best"]) for e in reference_evals]
    assert "in one process on 2 device(s) (MirroredStrategy" in out1 and "/device:CPU:1" in out1
    assert "on 2 devices of one process; learning rate 0.001 × 2 = 0.002" in out1
    assert "fitted e_dress on 6 batches" in out1  # fit_e_dress_batches (3) per device
    assert "step 8: non-finite loss or gradient; update skipped" in out1
    assert "restored" in out2 and "(step 10)" in out2 and "rolled back to" in out2


def test_mirrored_accumulation_mixed_precision_and_out_of_memory(tmp_path):
    """The mirrored backend with ``accumulate_batches: 2`` (4 batches a step: 2 per device), mixed_float16
    (its loss scale a mirrored variable) and an out-of-memory error at step 4: the step is skipped and
    the run ends equal to one process on the same union batches, given the same error."""
    args = ["--steps", "6", "--accumulate", "2", "--precision", "mixed_float16", "--jit", "off", "--lr", "1e-3",
            "--decay-step", "20"]
    (tmp_path / "one").mkdir()
    one, out_one = _run([], tmp_path / "one", "one", *args, "--lr-scaling", "none", env={"PINN_TEST_OOM": "0:4"})
    assert one.returncode == 0, out_one[-4000:]
    two, out_two = _run([], tmp_path, "two", *args, "--backend", "mirrored", "--lr-scaling", "none",
                        env={"PINN_TEST_OOM": "0:4"})
    assert two.returncode == 0, out_two[-4000:]
    for out in (out_one, out_two):
        assert "step 4: out of memory on rank 0 in the gradients of its batch" in out, out[-3000:]
    reference, mine = _load(tmp_path / "one", "one", 0), _load(tmp_path, "two", 0)
    assert mine["step"] == reference["step"] == 6
    for key in ("weights", "average"):  # float16 products summed in another order: 1.7e-5 apart at most (measured)
        for a, b in zip(mine[key], reference[key]):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=5e-5, err_msg=key)


def test_ranks_whose_weights_differ_are_stopped(one_launcher, tmp_path):
    """The ranks compare checksums of their weights every log_every_n_steps (5) steps in the step's
    exchange: a weight changed on rank 1 alone (after step 5) stops both ranks at step 10."""
    name, command = one_launcher
    run, out = _run(command, tmp_path, "perturbed", "--steps", "12", "--perturb-rank1", "--jit", "off")
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
    run, out = _run(command, tmp_path, "diverged", "--steps", "60", "--jit", "off", "--nan-steps", *nan_steps,
                    timeout=240)
    assert run.returncode != 0
    assert out.count("TrainingDiverged: step 18: the loss stayed non-finite after 3 rollbacks") == 2, out[-4000:]


def test_out_of_memory_on_one_rank_skips_the_step_on_both(one_launcher, tmp_path):
    """Rank 1 runs out of memory (PINN_TEST_OOM) at step 4, then at steps 9-11: each step is skipped on
    both ranks (no rank waits; the weights stay equal: checked at steps 5 and 10), step 5 resets the
    count, and the third in a row (max_oom_skips 3) writes the checkpoint of step 11 and stops both ranks
    with one line naming rank 1's batch."""
    name, command = one_launcher
    run, out = _run(command, tmp_path, "oom", "--steps", "14", "--jit", "off", "--max-oom-skips", "3",
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
    run, out = _run(command, tmp_path, "overflow", "--steps", "6", "--jit", "off", "--precision", "mixed_float16",
                    env={"PINN_TEST_OVERFLOW": "1:4"}, timeout=300)
    assert run.returncode == 0, out[-4000:]
    assert out.count("step 4: the scaled gradients overflowed (rank 1); the step is skipped on every rank") == 1
    assert "overflowed (rank 0)" not in out and "non-finite" not in out
    ranks = [_load(tmp_path, "overflow", r) for r in (0, 1)]
    for key in ("weights", "optimizer", "average"):
        for a, b in zip(ranks[0][key], ranks[1][key]):
            np.testing.assert_array_equal(a, b, err_msg=key)
    import tensorflow as tf
    reader = tf.train.load_checkpoint(str(tmp_path / "model" / "ckpt-6"))
    assert reader.get_tensor("optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE") == 5
    assert reader.get_tensor("loss_scale/scale/.ATTRIBUTES/VARIABLE_VALUE") == 32.0


def test_numba_engine_two_ranks_equal_one_process(one_launcher, tmp_path):
    """The numba engine's gradients on every rank, one allreduce per step (through Horovod's collectives,
    host_exchange: horovod, where Horovod runs; else MPI alone; the TCP and MPI exchanges are in the test
    above), the host
    update on every rank, with a NaN on rank 1 at step 8 and a loss jump at step 11 (back to the state
    of step 6, kept in memory on every rank): both ranks end bitwise equal to each other and equal to one
    process on the union."""
    name, command = one_launcher
    args = ["--steps", "12", "--engine", "numba", "--nan-steps", "7", "--jump-steps", "10"]
    (tmp_path / "one").mkdir()
    one, out_one = _run([], tmp_path / "one", "one", "--lr", "2e-3", "--decay-step", "10", *args)
    assert one.returncode == 0, out_one[-4000:]
    horovod = name != "mpirun-mpi4py"  # where Horovod runs, its own collectives carry the exchange here
    two, out_two = _run(command, tmp_path, "two", "--lr", "1e-3", "--decay-step", "20", *args,
                        *(["--host-exchange", "horovod"] if horovod else []))
    assert two.returncode == 0, out_two[-4000:]
    assert ("host arrays over Horovod" if horovod else "MPI through mpi4py") in out_two
    assert "gradients by the numba engine" in out_one
    # each of the 2 ranks takes its share of the cores (this machine has 2)
    assert f"gradients by the numba engine ({max(1, (os.cpu_count() or 2) // 2)} thread(s))" in out_two
    assert "step 8: non-finite loss or gradient (from rank 1); update skipped on all ranks" in out_two
    for out in (out_one, out_two):  # step 8 was skipped: the copy of step 6 is the last confirmed one
        assert out.count("the loss jumped") == 1 and "back to the state of step 6, learning rate × 0.5" in out
    reference = _load(tmp_path / "one", "one", 0)
    ranks = [_load(tmp_path, "two", r) for r in range(2)]
    # float32 sums in another order (one call on the union, or two halves and an allreduce), through
    # 12 Adam steps: 1.5e-5 relative at worst (float64, the engine's steps equal TensorFlow's to 1e-9:
    # test_fast_train.py)
    _assert_ranks_match(ranks, reference, 12, rtol=5e-5, atol=1e-6)
    for key, value in reference["metrics"].items():
        assert ranks[0]["metrics"][key] == pytest.approx(value, rel=1e-5), key


#: (network, model, precision) of the union-batch check beyond PiNet's potential: PiNet2's vector features and
#: p3 (atomic dipoles) with the bond charges of its pair head in a dipole model on QEq water clusters.  One
#: launch covers PiNet2's variables and the dipole family's loss on ranks; a PiNet2 potential on ranks
#: (``("PiNet2", "potential_model", "float32")``, also passing) adds no mechanism and ~50 s to the suite
PINET2_CASES = [("PiNet2", "AD_BC_R_dipole_model", "float64"), ("PiNet2", "pol_acks2_model", "float64")]
#: the validation metric each model's runs must agree on
METRIC_OF = {"potential_model": "E_RMSE", "AD_BC_R_dipole_model": "D_RMSE", "pol_acks2_model": "alpha_per_atom_RMSE"}


@pytest.mark.parametrize("case", PINET2_CASES, ids=["-".join(c[:2]) for c in PINET2_CASES])
def test_pinet2_two_ranks_equal_one_process(one_launcher, tmp_path, case):
    """pol_acks2_model on PiNet2 (Coulomb kernel, pair outputs, dense per-structure matrices; QM7b files read
    with load_qm7b by each rank), and AD_BC_R_dipole_model on PiNet2 (rank 3) with out_extra {p3: 1} (the
    magnitude loss and the bond charges' regularisation, whose counts are the world's): 6 steps on unequal
    union batches (without XLA), with validation at step 5; both ranks end bitwise equal to each other
    and equal to one process on the union.  The dipole model runs in float64 and is held to 1e-10: in
    float32 its 6 Adam steps grow the rounding of the sums' order from 2e-7 (1 step) to 1.4e-5 relative
    in the validation D_MAE, in float64 the runs agree to 2e-14 (measured)."""
    name, command = one_launcher
    network, model, precision = case
    rtol, atol = (1e-5, 1e-6) if precision == "float32" else (1e-10, 1e-12)
    args = ["--steps", "6", "--arch", network, "--model", model, "--precision", precision, "--jit", "off"]
    (tmp_path / "one").mkdir()
    one, out_one = _run([], tmp_path / "one", "one", "--lr", "2e-3", "--decay-step", "10", *args)
    assert one.returncode == 0, out_one[-4000:]
    two, out_two = _run(command, tmp_path, "two", "--lr", "1e-3", "--decay-step", "20", *args)
    assert two.returncode == 0, out_two[-4000:]
    assert CONTROLLER[name] in out_two and "step 6/6" in out_two
    reference = _load(tmp_path / "one", "one", 0)
    ranks = [_load(tmp_path, "two", r) for r in range(2)]
    _assert_ranks_match(ranks, reference, 6, rtol=rtol, atol=atol, optimizer_rtol=10 * rtol)
    assert ranks[0]["lr"] == pytest.approx(reference["lr"], rel=1e-6)
    assert ranks[0]["metrics"] == ranks[1]["metrics"]
    assert METRIC_OF[model] in reference["metrics"]
    for key, value in reference["metrics"].items():
        assert ranks[0]["metrics"][key] == pytest.approx(value, rel=rtol), key


def _start_long_run(command, workdir, tag, *args, env=None, wait_rank=1):
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
    proc, pid1, log = _start_long_run(command, tmp_path, "term", *options)
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
    resumed, out = _run(command, tmp_path, "term", "--steps", str(stopped_at + 5), *options)
    assert resumed.returncode == 0, out[-4000:]
    assert f"(step {stopped_at})" in out and f"step {stopped_at + 5}/{stopped_at + 5}" in out
    ranks = [_load(tmp_path, "term", r) for r in range(2)]
    for a, b in zip(ranks[0]["weights"], ranks[1]["weights"]):
        np.testing.assert_array_equal(a, b)


def test_a_killed_rank_ends_the_job_in_bounded_time(launcher, tmp_path):
    """mpirun: rank 1 dies at a quiet moment.  horovodrun: rank 0 dies inside a save (held there by
    PINN_TEST_SLOW_SAVE, after the checkpoint's files are written and before the state file names
    them), and the relaunch resumes from a whole checkpoint."""
    name, command = launcher
    in_save = name.startswith("horovodrun")
    model_dir = tmp_path / "model"
    if in_save:
        from pinn.files import checkpoint_dir as ckdir
        proc, pid, log = _start_long_run(command, tmp_path, "kill", "--stall-timeout", "60", "--jit", "off",
                                         "--save-every", "15", env=dict(ENV, PINN_TEST_SLOW_SAVE="1.5"), wait_rank=0)

        def inside_a_save():
            state = ckdir.read_state(model_dir) if (model_dir / "checkpoint").exists() else None
            named = ckdir.step_of(state[0]) if state else -1
            return any(ckdir.step_of(p) > max(named, 0) for p in ckdir.on_disk(model_dir))
        wait_for(lambda: inside_a_save() or proc.poll() is not None, 120, "a save of step 15 or later")
        assert proc.poll() is None, proc.stdout.read()[-4000:]
    else:
        proc, pid, log = _start_long_run(command, tmp_path, "kill", "--stall-timeout", "60", "--jit", "off")
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
        resumed, out = _run(command, tmp_path, "kill", "--steps", str(resumed_from + 5), "--jit", "off")
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
    command = LAUNCHERS["mpirun"][1] + [sys.executable, SCRIPT, str(tmp_path), "nompi4py", "--steps", "1", "--jit", "off"]
    run = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-4000:]
    assert "host arrays over Horovod" in output
    assert output.count("mpi4py is not installed, so every step's exchange goes through Horovod's collectives") == 1
    assert_each_rank_read_its_own_files([_load(tmp_path, "nompi4py", r)["read"][0] for r in range(2)],
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
    assert "Horovod is installed but does not import (ModuleNotFoundError: import of horovod.tensorflow halted" in output
    assert "parallel training goes on without it (MPI alone where mpi4py is installed)" in output
    assert "MPI through mpi4py" in output and "no Horovod" in output
