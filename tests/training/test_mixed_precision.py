"""Mixed precision (``precision: mixed_bfloat16 | mixed_float16``): float32 weights, optimizer and sums,
the layers' matrix products in the low precision (pinn.networks.layers), and mixed_float16's dynamic loss
scale (pinn.training.loss_scale): an overflow (injected by PINN_TEST_OVERFLOW) skips exactly that step
and halves the scale, finite steps grow it, a resumed run restores it.  Two ranks:
tests/parallel/test_parallel_stops.py."""
import numpy as np
import pytest
import tensorflow as tf

from pinn.io import load_ase, sparse_batch
from pinn.models import potential_model
from pinn.networks.layers import Dense, computing_in
from pinn.params import ParamsError
from pinn.training.metrics import read_metrics


def _params(model_dir, precision, **model_params):
    return {"model_dir": str(model_dir), "precision": precision, "seed": 3,
            "network": {"name": "PiNet", "params": {"atom_types": [29, 79], "rc": 4.5, "depth": 2, "pp_nodes": [16],
                                                    "pi_nodes": [16, 16], "ii_nodes": [16], "out_nodes": [16]}},
            "model": {"name": "potential_model",
                      "params": {"use_force": True, "learning_rate": 3e-3, "fit_e_dress": True, "fit_e_dress_batches": 10,
                                 "engine": "tensorflow", "log_every_n_steps": 1, "tensorboard": False, **model_params}}}


def test_layers_multiply_in_the_low_precision_and_return_float32():
    rng = np.random.RandomState(0)
    x = tf.constant(rng.randn(50, 16), tf.float32)
    with computing_in(tf.bfloat16):
        hidden = Dense(16, 8, np.random.RandomState(1))
        output = Dense(16, 8, np.random.RandomState(1), output=True)
    plain = Dense(16, 8, np.random.RandomState(1))
    exact = plain(x).numpy()
    low = hidden(x)
    assert low.dtype == tf.float32 and hidden.kernel.dtype == tf.float32
    error = np.abs(low.numpy() - exact).max() / np.abs(exact).max()
    assert 1e-4 < error < 2e-2, error  # bfloat16's 8 bits of mantissa, not float32's
    np.testing.assert_array_equal(output(x).numpy(), exact)  # a network's output units stay in float32


@pytest.fixture(scope="module")
def errors_after_training(alloy_xyz, tmp_path_factory):
    """Force and energy RMSE on the training frames after the same 40 steps in float32 and in each mixed
    precision (without XLA, whose compilations per batch size are not the subject: 104 s in the suite with
    them, 63 s alone without)."""
    data = load_ase(alloy_xyz).take(60).cache()
    out = {}
    for precision in ("float32", "mixed_bfloat16", "mixed_float16"):
        model_dir = tmp_path_factory.mktemp(precision) / "model"
        out[precision + "_dir"] = model_dir
        trainer = potential_model(_params(model_dir, precision, log_every_n_steps=10, jit=False))
        trainer.train(lambda: data.apply(sparse_batch(6)).repeat(), max_steps=40)
        assert all(v.dtype == tf.float32 for v in list(trainer.model.trainable_variables) + trainer.optimizer.variables[1:])
        out[precision] = trainer.evaluate(lambda: data.apply(sparse_batch(10)))
    return out


@pytest.mark.parametrize("precision", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision_trains_within_a_factor_of_float32(errors_after_training, precision):
    """Forces within 1.25× and energies within 3× of float32's error after the same 40 steps, on both
    stacks (measured: TensorFlow 2.15 bf16 1.12×/1.44×, fp16 0.96×/0.99× (benchmarks/bench_mixed_precision.py);
    TensorFlow 2.21 bf16 1.15×/2.25×, fp16 1.01×/1.76×: the energy error after 40 steps moves with the
    stack's arithmetic, the forces' does not; this fixture's runs, without XLA, on TensorFlow 2.15: bf16
    0.98×/1.66×, fp16 1.12×/0.62×)."""
    mine, reference = errors_after_training[precision], errors_after_training["float32"]
    assert mine["F_RMSE"] < 1.25 * reference["F_RMSE"], (mine, reference)
    assert mine["E_RMSE"] < 3.0 * reference["E_RMSE"], (mine, reference)


def test_a_mixed_run_warm_starts_from_a_float32_one(errors_after_training, tmp_path):
    """The weights are float32 in both: init_model takes them."""
    source = errors_after_training["float32_dir"]
    trainer = potential_model(_params(tmp_path / "model", "mixed_bfloat16", init_model=str(source)))
    reference = potential_model(_params(source, "float32"))
    for mine, theirs in zip(trainer.model.trainable_variables, reference.model.trainable_variables):
        assert mine.dtype == theirs.dtype == tf.float32
    assert trainer.model.network.compute_dtype == tf.bfloat16


def test_an_overflow_skips_that_step_and_halves_the_scale_which_a_resume_restores(alloy_xyz, tmp_path,
                                                                                    monkeypatch):
    """Scale 64, growth after 3 applied steps: steps 1-3 grow it to 128, the overflow injected at step 4
    skips that step alone and halves it to 64, steps 5 and 6 count towards the next growth."""
    monkeypatch.setenv("PINN_TEST_OVERFLOW", "0:4")
    params = _params(tmp_path / "model", "mixed_float16", loss_scale_initial=64.0, loss_scale_growth_interval=3)
    trainer = potential_model(params)
    data = load_ase(alloy_xyz).take(40).cache()
    trainer.train(lambda: data.apply(sparse_batch(5)).repeat(), max_steps=6)
    assert int(trainer.step) == 6 and int(trainer.optimizer.iterations) == 5
    scale = trainer.state.loss_scale
    assert float(scale.scale) == 64.0 and int(scale.finite_steps) == 2
    records = {r["step"]: r for r in read_metrics(tmp_path / "model", "train")}
    assert [records[s].get("overflow_skipped", 0) for s in range(1, 7)] == [0, 0, 0, 1, 0, 0]
    log = (tmp_path / "model" / "train.log").read_text()
    assert "step 4: the scaled gradients overflowed (rank 0); the step is skipped on every rank and the loss " \
           "scale halved" in log and "non-finite" not in log
    monkeypatch.delenv("PINN_TEST_OVERFLOW")
    resumed = potential_model(params)
    assert int(resumed.step) == 6 and float(resumed.state.loss_scale.scale) == 64.0
    assert int(resumed.state.loss_scale.finite_steps) == 2


def test_what_cannot_run_in_mixed_precision_says_so(tmp_path):
    with pytest.raises(ParamsError, match=r"precision: 'mixed_bfloat16'; the EKF solves with the Jacobian"):
        potential_model(_params(tmp_path / "ekf", "mixed_bfloat16", optimizer="ekf", max_grad_norm=None))
    with pytest.raises(ParamsError, match=r"model.params.engine: precision mixed_bfloat16: .* trains with the tensorflow"):
        potential_model(_params(tmp_path / "numba", "mixed_bfloat16", engine="numba"))
    auto = potential_model(_params(tmp_path / "auto", "mixed_bfloat16", engine="auto"))
    assert auto.engine is None  # the tensorflow engine
    with pytest.raises(ParamsError, match="precision"):
        potential_model(_params(tmp_path / "bad", "mixed_float64"))
