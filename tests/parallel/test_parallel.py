"""Parallel training on real ranks equals one process on the union of the ranks' batches: Horovod's
(horovodrun --gloo and mpirun) and MPI's without Horovod (mpirun, ``parallel_params.backend: mpi``),
the mirrored backend, the numba engine, PiNet2's dipole and polarizability models.  How a parallel
job stops (signals, a killed rank, errors on one rank) is in test_parallel_stops.py.

The training script is tests/parallel/parallel_train.py, run unchanged with 1 process
and with 2.  Neither Horovod nor MPI is mocked.
"""
import os

import numpy as np
import pytest
from launching import assert_each_rank_read_its_own_files
from training_runs import CONTROLLER, EXCHANGE, LAUNCHERS, command_of, load_rank, run_training

NAN_STEPS = ["--nan-steps", "7", "12", "13", "14"]  # one skip, then three in a row: a rollback to step 10

pytestmark = pytest.mark.hpc  # real launchers: ./run_tests.sh -m hpc


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


#: the launcher of the XLA-compiled step on ranks (test_xla_compiled_step_on_two_ranks_equals_one_process): it runs
#: on both stacks (MPI alone).  The union tests train without XLA, against a reference without it: XLA compiles
#: ~25 s a process on 2 cores, each launch anew, and what they test is the launchers' exchange, not XLA (with XLA
#: on every launch the mpirun-mpi4py union test took 299 s of the suite; benchmarks/results/0.30.0-dev-suite-time)
XLA_LAUNCHER = "mpirun-mpi4py"


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    """The reference: one process (parallel=True, alone) on the union batches without XLA, 20 steps with the NaN
    steps.  The 2-rank runs scale the learning rate linearly (×2, decay twice as fast per step), so the
    reference is given 2× the rate and half the decay step.  Returns (rank 0's results, the output, the work
    directory)."""
    workdir = tmp_path_factory.mktemp("one")
    run, output = run_training([], workdir, "one", "--steps", "20", "--lr", "2e-3", "--decay-step", "10",
                               "--jit", "off", *NAN_STEPS)
    assert run.returncode == 0, output[-4000:]
    assert "gradients by TensorFlow (XLA)" not in output, output[-4000:]
    return load_rank(workdir, "one", 0), output, workdir


def reference_dir(reference):
    return reference[2] / "model"


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
    one = one_process
    reference = one[0]
    common = ["--lr", "1e-3", "--decay-step", "20", "--jit", "off", *NAN_STEPS]
    first, out1 = run_training(command, tmp_path, "two", "--steps", "10", *common)
    assert first.returncode == 0, out1[-4000:]
    second, out2 = run_training(command, tmp_path, "two", "--steps", "20", *common)
    assert second.returncode == 0, out2[-4000:]
    ranks = [load_rank(tmp_path, "two", r) for r in range(2)]
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
    reference_evals = read_metrics(reference_dir(one), "eval")
    assert [e["step"] for e in evals] == [e["step"] for e in reference_evals] == [5, 10, 15, 20]
    for mine, theirs in zip(evals, reference_evals):
        assert mine["best"] == theirs["best"]
        for key in ("loss", "E_RMSE", "F_RMSE", "S_RMSE"):
            assert mine[key] == pytest.approx(theirs[key], rel=1e-4), key
    predictions, reference_predictions = (read_eval_predictions(d) for d in (tmp_path / "model", reference_dir(one)))
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
    assert "gradients by TensorFlow (XLA)" not in out1
    assert "ASE's file I/O is per rank" in out1
    assert "step 8: non-finite loss or gradient (from rank 1); update skipped on all ranks" in out1
    assert "restored" in out2 and "(step 10)" in out2
    assert "rolled back to" in out2 and "ckpt-10" in out2
    assert "structures/s; communication" in out2
    log = open(tmp_path / "model" / "train.log").read()
    assert "step 20/20" in log and "pinn[rank 1]" not in log


def test_xla_compiled_step_on_two_ranks_equals_one_process(tmp_path):
    """PiNet's default step (``jit`` unset: XLA-compiled, on batches padded to buckets) on 2 ranks under
    mpirun with MPI alone, 4 steps with a NaN on rank 1 at step 3: both ranks end bitwise equal to each other
    and equal to one process on the union batches, compiled alike, to float32 rounding."""
    available, _ = LAUNCHERS[XLA_LAUNCHER]
    if not available():
        pytest.skip(f"{XLA_LAUNCHER}: mpirun or mpi4py not installed")
    args = ["--steps", "4", "--jit", "auto", "--nan-steps", "2"]
    (tmp_path / "one").mkdir()
    one, out_one = run_training([], tmp_path / "one", "one", "--lr", "2e-3", "--decay-step", "10", *args)
    assert one.returncode == 0, out_one[-4000:]
    two, out_two = run_training(command_of(XLA_LAUNCHER), tmp_path, "two", "--lr", "1e-3", "--decay-step", "20",
                                *args)
    assert two.returncode == 0, out_two[-4000:]
    for out in (out_one, out_two):
        assert "gradients by TensorFlow (XLA)" in out, out[-4000:]
    assert CONTROLLER[XLA_LAUNCHER] in out_two and EXCHANGE[XLA_LAUNCHER] in out_two
    assert "step 3: non-finite loss or gradient (from rank 1); update skipped on all ranks" in out_two
    reference = load_rank(tmp_path / "one", "one", 0)
    ranks = [load_rank(tmp_path, "two", r) for r in range(2)]
    _assert_ranks_match(ranks, reference, 4, rtol=1e-5, atol=1e-6, optimizer_rtol=1e-4)
    assert ranks[0]["lr"] == pytest.approx(reference["lr"], rel=1e-6)


def test_mirrored_two_devices_equal_one_process_on_the_union(one_process, tmp_path):
    """``parallel_params.backend: mirrored``: one process, the CPU split into 2 logical devices, each
    device given one rank's part of every step (the same files, NaN steps and restart at step 10 as
    the ranks above): the weights, Adam's state and the average equal the 1-process run on the union
    batches to float32 rounding; the learning rate scales with the 2 devices; validation, the best
    checkpoint and the rollback are the same.  Without XLA, against the reference without it (XLA on
    ranks: test_xla_compiled_step_on_two_ranks_equals_one_process)."""
    one = one_process
    reference = one[0]
    common = ["--backend", "mirrored", "--lr", "1e-3", "--decay-step", "20", "--jit", "off", *NAN_STEPS]
    first, out1 = run_training([], tmp_path, "two", "--steps", "10", *common)
    assert first.returncode == 0, out1[-4000:]
    second, out2 = run_training([], tmp_path, "two", "--steps", "20", *common)
    assert second.returncode == 0, out2[-4000:]
    mine = load_rank(tmp_path, "two", 0)
    assert mine["size"] == 1 and mine["step"] == reference["step"] == 20
    for key in ("weights", "average", "optimizer"):
        for a, b in zip(mine[key], reference[key]):
            np.testing.assert_allclose(a, b, rtol=1e-5 if key != "optimizer" else 1e-4, atol=1e-6, err_msg=key)
    assert mine["lr"] == pytest.approx(2.5e-4, rel=1e-6)  # 1e-3 × 2 devices × 0.5^(2·20/20) × 0.5 (the rollback)
    for key, value in reference["metrics"].items():
        assert mine["metrics"][key] == pytest.approx(value, rel=1e-5), key
    from pinn.training.metrics import read_metrics
    evals, reference_evals = (read_metrics(d, "eval") for d in (tmp_path / "model", reference_dir(one)))
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
    one, out_one = run_training([], tmp_path / "one", "one", *args, "--lr-scaling", "none",
                                env={"PINN_TEST_OOM": "0:4"})
    assert one.returncode == 0, out_one[-4000:]
    two, out_two = run_training([], tmp_path, "two", *args, "--backend", "mirrored", "--lr-scaling", "none",
                        env={"PINN_TEST_OOM": "0:4"})
    assert two.returncode == 0, out_two[-4000:]
    for out in (out_one, out_two):
        assert "step 4: out of memory on rank 0 in the gradients of its batch" in out, out[-3000:]
    reference, mine = load_rank(tmp_path / "one", "one", 0), load_rank(tmp_path, "two", 0)
    assert mine["step"] == reference["step"] == 6
    for key in ("weights", "average"):  # float16 products summed in another order: 1.7e-5 apart at most (measured)
        for a, b in zip(mine[key], reference[key]):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=5e-5, err_msg=key)


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
    one, out_one = run_training([], tmp_path / "one", "one", "--lr", "2e-3", "--decay-step", "10", *args)
    assert one.returncode == 0, out_one[-4000:]
    horovod = name != "mpirun-mpi4py"  # where Horovod runs, its own collectives carry the exchange here
    two, out_two = run_training(command, tmp_path, "two", "--lr", "1e-3", "--decay-step", "20", *args,
                        *(["--host-exchange", "horovod"] if horovod else []))
    assert two.returncode == 0, out_two[-4000:]
    assert ("host arrays over Horovod" if horovod else "MPI through mpi4py") in out_two
    assert "gradients by the numba engine" in out_one
    # each of the 2 ranks takes its share of the cores (this machine has 2)
    assert f"gradients by the numba engine ({max(1, (os.cpu_count() or 2) // 2)} thread(s))" in out_two
    assert "step 8: non-finite loss or gradient (from rank 1); update skipped on all ranks" in out_two
    for out in (out_one, out_two):  # step 8 was skipped: the copy of step 6 is the last confirmed one
        assert out.count("the loss jumped") == 1 and "back to the state of step 6, learning rate × 0.5" in out
    reference = load_rank(tmp_path / "one", "one", 0)
    ranks = [load_rank(tmp_path, "two", r) for r in range(2)]
    # float32 sums in another order (one call on the union, or two halves and an allreduce), through
    # 12 Adam steps: 1.5e-5 relative at worst (float64, the engine's steps equal TensorFlow's to 1e-9:
    # test_fast_train.py)
    _assert_ranks_match(ranks, reference, 12, rtol=5e-5, atol=1e-6)
    for key, value in reference["metrics"].items():
        assert ranks[0]["metrics"][key] == pytest.approx(value, rel=1e-5), key


def _six_steps_on_one_and_two(launcher, tmp_path, args):
    """parallel_train.py with ``args`` (6 steps) in one process (lr 2e-3) and on the launcher's 2 ranks (lr 1e-3,
    scaled ×2), both run to the end: (output of one, output of two, the one process's record, the ranks')."""
    name, command = launcher
    (tmp_path / "one").mkdir()
    one, out_one = run_training([], tmp_path / "one", "one", "--lr", "2e-3", "--decay-step", "10", *args)
    assert one.returncode == 0, out_one[-4000:]
    two, out_two = run_training(command, tmp_path, "two", "--lr", "1e-3", "--decay-step", "20", *args)
    assert two.returncode == 0, out_two[-4000:]
    assert CONTROLLER[name] in out_two and "step 6/6" in out_two
    return out_one, out_two, load_rank(tmp_path / "one", "one", 0), [load_rank(tmp_path, "two", r) for r in range(2)]


def test_electrostatic_embedding_two_ranks_equal_one_process(one_launcher, tmp_path):
    """A potential model with electrostatic embedding (model.params.embedding) on QM/MM frames in extended XYZ
    (the QM waters' network, their conserved charges in the MM charges' potential, forces on QM and MM atoms):
    6 float64 steps on unequal union batches with validation at step 5; both ranks end equal to each other and
    to one process on the union."""
    args = ["--steps", "6", "--embedding", "electrostatic", "--precision", "float64", "--jit", "off"]
    out_one, _, reference, ranks = _six_steps_on_one_and_two(one_launcher, tmp_path, args)
    assert "since model.params.embedding 'electrostatic'" in out_one
    _assert_ranks_match(ranks, reference, 6, rtol=1e-10, atol=1e-12, optimizer_rtol=1e-9)
    assert ranks[0]["metrics"] == ranks[1]["metrics"]
    for key in ("E_RMSE", "F_RMSE"):
        assert ranks[0]["metrics"][key] == pytest.approx(reference["metrics"][key], rel=1e-10), key


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
    network, model, precision = case
    rtol, atol = (1e-5, 1e-6) if precision == "float32" else (1e-10, 1e-12)
    args = ["--steps", "6", "--arch", network, "--model", model, "--precision", precision, "--jit", "off"]
    _, _, reference, ranks = _six_steps_on_one_and_two(one_launcher, tmp_path, args)
    _assert_ranks_match(ranks, reference, 6, rtol=rtol, atol=atol, optimizer_rtol=10 * rtol)
    assert ranks[0]["lr"] == pytest.approx(reference["lr"], rel=1e-6)
    assert ranks[0]["metrics"] == ranks[1]["metrics"]
    assert METRIC_OF[model] in reference["metrics"]
    for key, value in reference["metrics"].items():
        assert ranks[0]["metrics"][key] == pytest.approx(value, rel=rtol), key
