"""Training features: schedules, epochs, the weight average, validation, best checkpoint, early stopping, logs."""
import io
import json

import numpy as np
import pytest
import tensorflow as tf

from pinn.inference.handle import load_for_inference
from pinn.io import load_ase, sparse_batch
from pinn.models import get_model, potential_model
from pinn.params import ParamsError
from pinn.physics.loss_weights import piecewise_linear
from pinn.training.metrics import read_eval_predictions, read_metrics
from pinn.training.progress import ProgressBar
from pinn.training.schedule import LearningRate

from settings import small_net, training_params

NET = small_net([29, 79])
DEFAULTS = {"use_force": True, "fit_e_dress": True, "learning_rate": 3e-3, "f_loss_multiplier": 10.0,
            "log_every_n_steps": 5, "save_checkpoint_steps": 10, "progress_bar": "off"}


def _params(model_dir, **model_params):
    return training_params(model_dir, NET, DEFAULTS, **model_params)


def _inputs(path, n=40):
    data = lambda: load_ase(path, split={"train": 3, "vali": 1}, seed=0)  # noqa: E731
    train = lambda: data()["train"].take(n).cache().shuffle(64, seed=1).apply(sparse_batch(6))  # noqa: E731
    vali = lambda: data()["vali"].take(12).apply(sparse_batch(6))  # noqa: E731
    return train, vali


def _trainable(model):
    return [v.numpy().copy() for v in model.model.trainable_variables]


# ------------------------------------------------------------------ schedules
def test_learning_rate_schedules():
    step = LearningRate(1.0, "step", decay_step=10, decay_rate=0.1, boundaries=[5, 20])
    assert [float(step(s)) for s in (0, 4, 5, 19, 20, 100)] == pytest.approx([1, 1, 0.1, 0.1, 0.01, 0.01])
    stair = LearningRate(1.0, "step", decay_step=10, decay_rate=0.5)
    assert [float(stair(s)) for s in (0, 9, 10, 25)] == pytest.approx([1, 1, 0.5, 0.25])
    cosine = LearningRate(1.0, "cosine", min_factor=0.1, total_steps=100)
    assert [float(cosine(s)) for s in (0, 50, 100, 150)] == pytest.approx([1.0, 0.55, 0.1, 0.1], abs=1e-6)
    warm = LearningRate(1.0, "cosine", total_steps=110, warmup_steps=10)
    # linear warmup over 10 steps, then the cosine over the remaining 100
    assert [float(warm(s)) for s in (0, 4, 9, 10, 60, 110)] == pytest.approx([0.1, 0.5, 1, 1, 0.5, 0], abs=1e-6)
    constant = LearningRate(0.3, "constant")
    assert float(constant(12345)) == pytest.approx(0.3)
    # with 4 ranks and linear scaling every step stands for 4 single-rank steps
    scaled = LearningRate(1.0, "step", decay_step=8, decay_rate=0.5, size=4, scaling="linear")
    assert [float(scaled(s)) for s in (0, 1, 2)] == pytest.approx([4, 4, 2])
    assert "at steps every 2" in scaled.describe()


def test_piecewise_weight_schedule_and_huber(tmp_path):
    points = [[0, 1.0], [10, 5.0], [30, 1.0]]
    values = [float(piecewise_linear(tf.constant(x, tf.float64), points)) for x in (-5, 0, 5, 10, 20, 30, 99)]
    assert values == pytest.approx([1, 1, 3, 5, 3, 1, 1])
    model = potential_model(_params(tmp_path / "m", loss_type="huber", huber_delta={"forces": 0.5},
                                    loss_weight_schedule={"forces": points}))
    err = tf.constant([0.1, -0.5, 2.0, -3.0])
    np.testing.assert_allclose(model.model.penalty(err, "forces").numpy(),
                               [0.01, 0.25, 2 * 0.5 * 2.0 - 0.25, 2 * 0.5 * 3.0 - 0.25], rtol=1e-6)
    np.testing.assert_allclose(model.model.penalty(err, "energy").numpy(), [0.01, 0.25, 2.0 * 2 - 1, 4.0 * 1.5 - 1],
                               rtol=1e-6)  # δ = 1 for terms not named
    weights = model.model.loss_weights(tf.constant(5.0, tf.float64))
    assert float(weights["forces"]) == pytest.approx(3.0) and weights["energy"] == 1.0
    with pytest.raises(ParamsError, match="loss_weight_schedule: forces: steps must increase"):
        potential_model(_params(tmp_path / "x", loss_weight_schedule={"forces": [[10, 1.0], [0, 2.0]]}))
    with pytest.raises(ParamsError, match="loss_weight_schedule.stress: not a loss term"):
        potential_model(_params(tmp_path / "y", loss_weight_schedule={"stress": [[0, 1.0]]}))
    with pytest.raises(ParamsError, match="lr_schedule: 'linear' is not one of"):
        potential_model(_params(tmp_path / "z", lr_schedule="linear"))


# ---------------------------------------------------------------------- epochs
def test_training_length_in_epochs(alloy_xyz, tmp_path):
    train, vali = _inputs(alloy_xyz, n=30)  # 30 structures, batches of 6: 5 steps per epoch
    model = potential_model(_params(tmp_path / "m", lr_schedule="cosine", lr_warmup_steps=3, lr_min_factor=0.0))
    model.train(train, max_epochs=3, eval_fn=vali)
    assert int(model.step) == 15
    assert float(model.current_learning_rate()) == pytest.approx(0.0, abs=1e-9)  # the cosine ends at max_steps
    records = read_metrics(tmp_path / "m", "train")
    assert [r["epoch"] for r in records] == [1.0, 2.0, 3.0]
    assert "epoch 3.00" in (tmp_path / "m" / "train.log").read_text()
    with pytest.raises(ValueError, match="repeats forever"):
        model.train(lambda: train().repeat(), max_epochs=5)


# ---------------------------------------------------------------- weight average
def test_weight_average_is_checkpointed_apart_and_resume_continues_raw_weights(alloy_xyz, tmp_path):
    train, vali = _inputs(alloy_xyz)
    params = _params(tmp_path / "m", ema_decay=0.8)
    model = potential_model(params)
    model.train(lambda: train().repeat(), max_steps=10)
    raw, average = _trainable(model), [v.numpy().copy() for v in model.ema.shadow]
    assert max(np.abs(a - b).max() for a, b in zip(raw, average)) > 1e-4
    # the checkpoint holds both, under their own names
    reader = tf.train.load_checkpoint(str(tmp_path / "m"))
    names = reader.get_variable_to_shape_map()
    stored_average = [reader.get_tensor(f"weight_average/shadow/{i}/.ATTRIBUTES/VARIABLE_VALUE")
                      for i in range(len(average))]
    for a, b in zip(stored_average, average):
        np.testing.assert_array_equal(a, b)
    assert any(n.startswith("model/") for n in names)
    # evaluation uses the average, and leaves the raw weights in place
    result = model.evaluate(vali)
    for a, b in zip(_trainable(model), raw):
        np.testing.assert_array_equal(a, b)
    # a resumed model holds the raw weights and the same average
    resumed = potential_model(str(tmp_path / "m"))
    for a, b in zip(_trainable(resumed), raw):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(resumed.ema.shadow, average):
        np.testing.assert_array_equal(a.numpy(), b)
    assert resumed.evaluate(vali) == pytest.approx(result)
    # loaded for inference (no Trainer): the average in the model's variables, the same figures
    loaded = load_for_inference(tmp_path / "m")
    assert loaded.averaged and loaded.frozen and loaded.step == 10
    for a, b in zip(loaded.model.trainable_variables, average):
        np.testing.assert_array_equal(a.numpy(), b)
    assert loaded.evaluate(vali) == pytest.approx(result)
    # …and goes on exactly as an uninterrupted run
    resumed.train(lambda: train().repeat(), max_steps=20)
    straight = potential_model(_params(tmp_path / "straight", ema_decay=0.8))
    straight.train(lambda: train().repeat(), max_steps=20)
    for a, b in zip(_trainable(resumed), _trainable(straight)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    for a, b in zip(resumed.ema.shadow, straight.ema.shadow):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-7)
    # evaluating with the average gives what a model holding the average gives
    swapped = potential_model(_params(tmp_path / "swapped"))
    swapped.model.e_dress.assign(straight.model.e_dress)
    for v, a in zip(swapped.model.trainable_variables, straight.ema.shadow):
        v.assign(a)
    assert swapped.evaluate(vali)["F_RMSE"] == pytest.approx(straight.evaluate(vali)["F_RMSE"], rel=1e-6)


# ------------------------------------------- validation, best checkpoint, early stopping
def test_validation_best_checkpoint_and_early_stopping(alloy_xyz, tmp_path):
    train, vali = _inputs(alloy_xyz)
    # a huge min_delta: only the first evaluation counts as an improvement, so with patience 2
    # training stops at the third evaluation (step 15 of 100)
    model = potential_model(_params(tmp_path / "m", eval_every_n_steps=5, early_stopping_metric="F_RMSE",
                                    early_stopping_patience=2, early_stopping_min_delta=1e6))
    model.train(lambda: train().repeat(), max_steps=100, eval_fn=vali)
    assert int(model.step) == 15
    evals = read_metrics(tmp_path / "m", "eval")
    assert [(e["step"], e["best"]) for e in evals] == [(5, True), (10, False), (15, False)]
    best = json.loads((tmp_path / "m" / "best" / "best.json").read_text())
    assert best["step"] == 5 and best["metric"] == "F_RMSE" and best["value"] == pytest.approx(evals[0]["F_RMSE"])
    text = (tmp_path / "m" / "train.log").read_text()
    assert "early stopping at step 15: F_RMSE has not improved" in text
    # the best and the last checkpoint can each be evaluated again
    at_best = get_model(str(tmp_path / "m"), checkpoint="best")
    assert at_best.restored.endswith("best/ckpt-5") and int(at_best.step) == 5
    assert at_best.evaluate(vali)["F_RMSE"] == pytest.approx(evals[0]["F_RMSE"], rel=1e-6)
    last = get_model(str(tmp_path / "m"))
    assert int(last.step) == 15
    assert last.evaluate(vali)["F_RMSE"] == pytest.approx(evals[-1]["F_RMSE"], rel=1e-6)
    # parity data of the last evaluation
    predictions = read_eval_predictions(tmp_path / "m")
    assert int(predictions["step"]) == 15 and predictions["energy_ref"].shape == (12,)
    assert predictions["forces_pred"].shape == predictions["forces_ref"].shape
    # resuming keeps the early-stopping state: one more evaluation without improvement stops at once
    again = potential_model(str(tmp_path / "m"))
    assert int(again.early_stopping.since_best) == 2
    again.train(lambda: train().repeat(), max_steps=100, eval_fn=vali)
    assert int(again.step) == 20
    with pytest.raises(ParamsError, match="early_stopping_metric: 'D_RMSE' is not measured"):
        potential_model(_params(tmp_path / "bad", early_stopping_metric="D_RMSE")).train(
            lambda: train().repeat(), max_steps=5, eval_fn=vali)
    with pytest.raises(ValueError, match="no best checkpoint"):
        get_model(str(tmp_path / "bad"), checkpoint="best")


# ------------------------------------------------------------------- logs
def test_metrics_tensorboard_and_progress_bar(alloy_xyz, tmp_path, capsys):
    train, vali = _inputs(alloy_xyz)
    model = potential_model(_params(tmp_path / "m", progress_bar="on", eval_every_n_steps=10))
    model.train(lambda: train().repeat(), max_steps=20, eval_fn=vali)
    err = capsys.readouterr().err
    assert "\r\x1b[K20/20 [" in err and "steps/s" in err
    records = read_metrics(tmp_path / "m")
    train_records = [r for r in records if r["kind"] == "train"]
    assert [r["step"] for r in train_records] == [5, 10, 15, 20]
    for key in ("loss", "lr", "E_RMSE", "F_MAE", "structures_per_s"):
        assert all(np.isfinite(r[key]) for r in train_records), key
    tags = {}
    for kind in ("train", "eval"):
        files = list((tmp_path / "m" / "tensorboard" / kind).glob("events.out.tfevents.*"))
        assert files, kind
        tags[kind] = {v.tag for f in files for e in tf.compat.v1.train.summary_iterator(str(f))
                      for v in e.summary.value}
    assert {"loss", "lr", "F_RMSE", "structures_per_s"} <= tags["train"]
    assert {"loss", "F_RMSE", "E_MAE"} <= tags["eval"]
    # off: no bar at all
    quiet = potential_model(_params(tmp_path / "q", progress_bar="off"))
    quiet.train(lambda: train().repeat(), max_steps=5)
    assert "\r" not in capsys.readouterr().err


def test_progress_bar_draws_only_on_a_terminal():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    screen, file = Terminal(), io.StringIO()
    for stream in (screen, file):
        bar = ProgressBar(stream=stream, min_interval_s=0.0)
        for step in range(1, 11):
            bar.update(step, 10, "loss 1")
        bar.clear()
    assert screen.getvalue().count("\r\x1b[K") == 11 and "10/10 [########################] 100%" in screen.getvalue()
    assert file.getvalue() == ""


def test_weight_average_switched_on_for_a_model_trained_without(alloy_xyz, tmp_path):
    """A checkpoint without an average: the average starts at its weights, not at a fresh initialisation."""
    train, vali = _inputs(alloy_xyz)
    plain = potential_model(_params(tmp_path / "m"))
    plain.train(lambda: train().repeat(), max_steps=10)
    before = plain.evaluate(vali)
    params = _params(tmp_path / "m", ema_decay=0.99)
    averaged = potential_model(params)
    for a, b in zip(averaged.ema.shadow, averaged.model.trainable_variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert averaged.evaluate(vali)["F_RMSE"] == pytest.approx(before["F_RMSE"], rel=1e-6)
    assert "holds no weight average" in (tmp_path / "m" / "train.log").read_text()


def test_the_optimizer_follows_the_schedule(alloy_xyz, tmp_path):
    """Each update uses lr(step): Keras would otherwise keep the first value of a learning-rate function."""
    train, _ = _inputs(alloy_xyz)
    model = potential_model(_params(tmp_path / "m", lr_schedule="step", lr_boundaries=[4], decay_rate=0.1,
                                    lr_warmup_steps=2, fit_e_dress=False))
    observed = []
    for step in range(1, 7):  # one update per call; the rate it used stays in the optimizer
        model.train(lambda: train().repeat(), max_steps=step)
        observed.append(float(model.optimizer.learning_rate.numpy()))
    # step 0: warmup 1/2 of 3e-3; step 1: 3e-3; steps 2, 3: 3e-3; from step 4: × 0.1
    assert observed == pytest.approx([1.5e-3, 3e-3, 3e-3, 3e-3, 3e-4, 3e-4], rel=1e-5)


def test_labels_missing_from_the_data(alloy_xyz, tmp_path):
    """Evaluating a force-trained model on energy-only data works; training on it is refused clearly."""
    train, vali = _inputs(alloy_xyz)
    model = potential_model(_params(tmp_path / "m"))
    model.train(lambda: train().repeat(), max_steps=3)
    energies_only = lambda: vali().map(lambda b: {k: v for k, v in b.items() if k != "f_data"})  # noqa: E731
    result = model.evaluate(energies_only)
    assert "E_RMSE" in result and "F_RMSE" not in result and np.isfinite(result["loss"])
    with pytest.raises(ValueError, match=r"trains on \['forces'\] but the training data have no \['f_data'\]"):
        model.train(lambda: energies_only().repeat(), max_steps=6)
    with pytest.raises(ParamsError, match="early_stopping_metric: must be 'loss' or"):
        potential_model(_params(tmp_path / "x", early_stopping_metric="F_rmse"))
    from pinn.calculator import get_calc
    with pytest.raises(ValueError, match="checkpoint= selects a checkpoint of a model directory"):
        get_calc(model, checkpoint="best")
    frozen = get_model(str(tmp_path / "m"))
    frozen.freeze_averaged_weights()
    with pytest.raises(RuntimeError, match="inference"):
        frozen.train(lambda: train().repeat(), max_steps=10)


def test_default_settings_and_unused_decay_warning(tmp_path, caplog):
    """The defaults (cosine from 5e-3 with a warmup, weight average) are what the docs say, and
    decay_step / decay_rate given without a schedule that uses them are reported, not ignored silently."""
    import logging
    params = {"model_dir": str(tmp_path / "d"), "network": {"name": "PiNet", "params": NET},
              "model": {"name": "potential_model", "params": {"decay_step": 500}}}
    with caplog.at_level(logging.WARNING, logger="pinn"):
        model = potential_model(params)
    mp = model.mp
    assert (mp["learning_rate"], mp["lr_schedule"], mp["lr_warmup_steps"], mp["lr_min_factor"], mp["ema_decay"],
            mp["f_loss_multiplier"]) == (5e-3, "cosine", 200, 0.01, 0.99, 10.0)
    assert model.ema is not None
    assert "decay_step has no effect with lr_schedule 'cosine'" in caplog.text
    caplog.clear()
    params["model"]["params"]["lr_schedule"] = "exponential"
    params["model_dir"] = str(tmp_path / "e")
    with caplog.at_level(logging.WARNING, logger="pinn"):
        potential_model(params)
    assert "no effect" not in caplog.text


def test_each_run_logs_to_its_own_train_log_only(alloy_xyz, tmp_path):
    """Two models made one after the other in one process (a committee, active learning): the second's
    lines go to its own train.log, not also to the first's, and the first's file is closed."""
    import logging
    from pinn.io import load_ase, sparse_batch
    from pinn.models import potential_model
    net = {"atom_types": [29, 79], "rc": 4.5, "depth": 1, "pp_nodes": [4], "pi_nodes": [4], "ii_nodes": [4],
           "out_nodes": [4]}

    def model(name):
        return potential_model({"model_dir": str(tmp_path / name), "network": {"name": "PiNet", "params": net},
                                "model": {"name": "potential_model",
                                          "params": {"use_force": True, "log_every_n_steps": 1, "tensorboard": False,
                                                     "fit_e_dress": False}}})
    data = lambda: load_ase(alloy_xyz).take(8).repeat().apply(sparse_batch(4))  # noqa: E731
    model("first").train(data, 1)
    model("second").train(data, 2)
    first, second = (tmp_path / "first" / "train.log").read_text(), (tmp_path / "second" / "train.log").read_text()
    assert "step 1/1" in first and "step 2/2" not in first and str(tmp_path / "second") not in first
    assert "step 2/2" in second
    files = [h for h in logging.getLogger("pinn").handlers if getattr(h, "_pinn_run_log", None)]
    assert [h._pinn_run_log for h in files] == [str(tmp_path / "second" / "train.log")]
