"""A batch that runs out of memory (pinn.training.memory; injected by the PINN_TEST_OOM test hook) in one
process: the step is skipped and counted, logged with the batch's sizes, recorded in metrics.jsonl, not
taken for a divergence; max_oom_skips in a row write the checkpoint and stop.  Every way a step is made:
TensorFlow's whole step, the Numba engine's, a split step (accumulated batches), the Kalman filter's.
Two ranks: tests/parallel/test_parallel_stops.py."""
import pytest

from pinn.io import load_ase, sparse_batch
from pinn.models import potential_model
from pinn.training.memory import OutOfMemory
from pinn.training.metrics import read_metrics


def _params(model_dir, **model_params):
    return {"model_dir": str(model_dir), "precision": "float64", "seed": 3,
            "network": {"name": "PiNet", "params": {"atom_types": [29, 79], "rc": 4.5, "depth": 2, "pp_nodes": [8],
                                                    "pi_nodes": [8, 8], "ii_nodes": [8], "out_nodes": [8]}},
            "model": {"name": "potential_model",
                      "params": {"use_force": True, "learning_rate": 3e-3, "fit_e_dress": True,
                                 "fit_e_dress_batches": 2, "log_every_n_steps": 1, "tensorboard": False,
                                 "max_nonfinite_steps": 1, **model_params}}}


@pytest.mark.parametrize("way", ["tensorflow", "numba", "split", "ekf"])
def test_an_out_of_memory_step_is_skipped_named_and_recorded(alloy_xyz, tmp_path, monkeypatch, way):
    """Steps 2 and 3 run out of memory: five steps make three updates; the divergence guard, which
    rolls back after one non-finite step here, does not count them."""
    monkeypatch.setenv("PINN_TEST_OOM", "0:2,3")
    settings = {"tensorflow": {"engine": "tensorflow", "jit": False}, "numba": {"engine": "numba"},
                "split": {"engine": "tensorflow", "jit": False, "accumulate_batches": 2},
                "ekf": {"optimizer": "ekf", "engine": "tensorflow", "max_grad_norm": None}}[way]
    trainer = potential_model(_params(tmp_path / "model", **settings))
    data = load_ase(alloy_xyz).take(40).cache()
    batch = 2 if way == "ekf" else 5  # the EKF's Jacobian of 5 structures takes GBs (all rows at once)
    trainer.train(lambda: data.apply(sparse_batch(batch)).repeat(), max_steps=5)
    log = (tmp_path / "model" / "train.log").read_text()
    assert int(trainer.step) == 5
    if way != "ekf":
        assert int(trainer.optimizer.iterations) == 3
    structures = 2 * batch if way == "split" else batch
    assert f"step 2: out of memory on rank 0 in the gradients of its batch ({structures} structures, " in log
    assert "injected by PINN_TEST_OOM" in log and "atoms, " in log and " pairs" in log
    assert "rolled back" not in log and "non-finite" not in log
    records = {r["step"]: r for r in read_metrics(tmp_path / "model", "train")}
    assert [records[s].get("oom_skipped", 0) for s in range(1, 6)] == [0, 1, 1, 0, 0]
    assert "loss" in records[4] and "loss" not in records[2]
    assert "(1 steps skipped: out of memory)" in log


def test_too_many_in_a_row_write_the_checkpoint_and_stop(alloy_xyz, tmp_path, monkeypatch):
    monkeypatch.setenv("PINN_TEST_OOM", "0:3,4,5")
    trainer = potential_model(_params(tmp_path / "model", engine="tensorflow", jit=False, max_oom_skips=2))
    data = load_ase(alloy_xyz).take(40).cache()
    with pytest.raises(OutOfMemory) as stop:
        trainer.train(lambda: data.apply(sparse_batch(5)).repeat(), max_steps=8)
    message = str(stop.value)
    assert message.startswith("out of memory in 2 steps in a row (model.params.max_oom_skips 2) at step 4; the last "
                              "batches that did not fit: rank 0: 5 structures, "), message
    assert "ckpt-4" in message and "\n" not in message
    assert (tmp_path / "model" / "ckpt-4.index").exists()
    resumed = potential_model(_params(tmp_path / "model", engine="tensorflow", jit=False, max_oom_skips=2))
    assert int(resumed.step) == 4 and int(resumed.optimizer.iterations) == 2
