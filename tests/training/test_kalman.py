"""Upstream PiNN's Kalman filters (pinn.training.kalman): the update against its closed forms, steps of
a model against the update computed here from an independent Jacobian, resume, separate_errors,
what is refused, upstream's optimizer section, and 2 real ranks against one process on the union."""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import kalman_ranks
from launching import ENV, horovod_has
from pinn.files import checkpoint_dir
from pinn.inference.handle import load_for_inference
from pinn.inference.inputs import prepared_input
from pinn.models import potential_model
from pinn.params import read_params, resolve, write_params
from pinn.params.training_options import TRAINING_PARAMS
from pinn.schema import ParamsError
from pinn.training.kalman import KalmanFilter

DEFAULTS = {key: option.default for key, option in TRAINING_PARAMS.items()}


def _flat(variables):
    return np.concatenate([np.asarray(v.numpy(), np.float64).ravel() for v in variables])


def _ekf(w, P, e, H, rate, q):
    """The textbook EKF update (NumPy): A = I/λ + H P Hᵀ, K = P Hᵀ A⁻¹, w − K e, P − K H P + qI."""
    A = np.eye(len(e)) / rate + H @ P @ H.T
    K = P @ H.T @ np.linalg.inv(A)
    return w - K @ e, P - K @ H @ P + q * np.eye(len(w))


def _gekf(w, P, g1, g2, rate, q):
    """Upstream's gEKF update (NumPy) from g₁ = ∇ mean|e| and g₂ = ∇ mean e²."""
    k = P @ g1 / (1.0 / rate + g1 @ P @ g1)
    return w - rate / 2 * (P @ g2 - k * (g1 @ P @ g2)), P - np.outer(k, P @ g1) + q * np.eye(len(w))


# ------------------------------------------------------------------------------------- the update
def test_ekf_update_is_the_posterior_of_linear_least_squares(rng):
    """Errors linear in the weights, e = X w − y: the update is the minimum of λ|Xw − y|² + (w − w₀)ᵀP⁻¹(w − w₀)
    and P becomes (P⁻¹ + λ XᵀX)⁻¹ (the information form, another formula than the filter's), + q·I."""
    variables = [tf.Variable(rng.randn(2, 3)), tf.Variable(rng.randn(4).astype(np.float32))]
    kf = KalmanFilter(variables, dict(DEFAULTS, optimizer="ekf", ekf_epsilon=0.5, max_grad_norm=None))
    n, rate = 10, 0.7
    X, y = rng.randn(6, n), rng.randn(6)
    w0 = _flat(variables)
    assert kf.update(np.c_[X @ w0 - y, X], rate, 0.0)
    w1, P1 = _flat(variables), kf.P.numpy()
    posterior = np.linalg.inv(np.eye(n) / 0.5 + rate * X.T @ X)
    np.testing.assert_allclose(P1, posterior, rtol=1e-10, atol=1e-12)
    expected = np.linalg.solve(rate * X.T @ X + np.eye(n) / 0.5, rate * X.T @ y + w0 / 0.5)
    np.testing.assert_allclose(w1[:6], expected[:6], rtol=1e-10)
    np.testing.assert_allclose(w1[6:], expected[6:], rtol=1e-6)  # a float32 variable
    assert np.linalg.norm(X @ w1 - y) < 0.5 * np.linalg.norm(X @ w0 - y)
    # a second batch, with process noise: P ← (P⁻¹ + λ X₂ᵀX₂)⁻¹ + q·I
    X2 = rng.randn(3, n)
    assert kf.update(np.c_[X2 @ w1 - rng.randn(3), X2], rate, 0.01)
    np.testing.assert_allclose(kf.P.numpy(), np.linalg.inv(np.linalg.inv(P1) + rate * X2.T @ X2) + 0.01 * np.eye(n),
                               rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(kf.P.numpy(), kf.P.numpy().T)
    # no errors: nothing changes
    before = _flat(variables)
    assert kf.update(np.zeros((0, n + 1)), rate, 0.0)
    np.testing.assert_array_equal(_flat(variables), before)


def test_gekf_update_with_one_error_is_the_ekf_update_and_follows_upstream(rng):
    """With a single error e (gradient h) g₁ = sign(e) h and g₂ = 2e h, and gEKF's update is EKF's exactly;
    with any g₁, g₂ it is upstream's formula; the division in float32 (div_dtype) changes little."""
    n, rate = 7, 0.3
    mp = dict(DEFAULTS, max_grad_norm=None, ekf_epsilon=2.0)
    v_ekf = tf.Variable(rng.randn(n))
    v_gekf = tf.Variable(v_ekf.numpy())
    ekf, gekf = KalmanFilter([v_ekf], dict(mp, optimizer="ekf")), KalmanFilter([v_gekf], dict(mp, optimizer="gekf"))
    h, e = rng.randn(n), -0.4
    assert ekf.update(np.r_[e, h][None], rate, 0.0)
    assert gekf.update(np.r_[np.sign(e) * h, 2 * e * h], rate, 0.0)
    np.testing.assert_allclose(v_gekf.numpy(), v_ekf.numpy(), rtol=1e-12)
    np.testing.assert_allclose(gekf.P.numpy(), ekf.P.numpy(), rtol=1e-12, atol=1e-14)
    w, P, g1, g2 = v_gekf.numpy(), gekf.P.numpy(), rng.randn(n), rng.randn(n)
    assert gekf.update(np.r_[g1, g2], rate, 0.02)
    w_ref, P_ref = _gekf(w, P, g1, g2, rate, 0.02)
    np.testing.assert_allclose(v_gekf.numpy(), w_ref, rtol=1e-12)
    np.testing.assert_allclose(gekf.P.numpy(), P_ref, rtol=1e-11, atol=1e-13)
    single = KalmanFilter([tf.Variable(w)], dict(mp, optimizer="gekf", ekf_solve_dtype="float32"))
    single.P.assign(P)
    assert single.update(np.r_[g1, g2], rate, 0.02)
    np.testing.assert_allclose(single.P.numpy(), P_ref, rtol=1e-5, atol=1e-6)


def test_a_non_finite_or_clipped_update(rng):
    """A NaN in the errors changes nothing and says so; max_grad_norm clips the update K e to that norm."""
    n = 4
    v = tf.Variable(rng.randn(n))
    kf = KalmanFilter([v], dict(DEFAULTS, optimizer="ekf", max_grad_norm=1e-3))
    w0, P0 = v.numpy(), kf.P.numpy()
    assert not kf.update(np.c_[[np.nan, 1.0], rng.randn(2, n)], 0.5, 0.0)
    np.testing.assert_array_equal(v.numpy(), w0)
    np.testing.assert_array_equal(kf.P.numpy(), P0)
    e, H = rng.randn(3), rng.randn(3, n)
    assert kf.update(np.c_[e, H], 0.5, 0.0)
    w_ref, P_ref = _ekf(w0, P0, e, H, 0.5, 0.0)
    assert np.linalg.norm(v.numpy() - w0) == pytest.approx(1e-3, rel=1e-9)
    np.testing.assert_allclose((w0 - v.numpy()) / 1e-3, (w0 - w_ref) / np.linalg.norm(w0 - w_ref), rtol=1e-9)
    np.testing.assert_allclose(kf.P.numpy(), P_ref, rtol=1e-10, atol=1e-13)


# ------------------------------------------------------------------------------ steps of a model
def _rows(model, batch, terms, multipliers):
    """e (prediction − label, each × √multiplier) and ∂e/∂w of ``terms``, computed here: the model's
    predictions, the labels, and a Jacobian row by row (TensorFlow's while loop, not the filters' pfor)."""
    variables = model.model.trainable_variables

    @tf.function(autograph=False)
    def rows():
        with tf.GradientTape() as tape:
            pred = model.model.predict(batch, forces="forces" in terms, stress="stress" in terms)
            labels = {"energy": "e_data", "forces": "f_data", "stress": "s_data"}
            e = tf.concat([tf.reshape(pred[t] - batch[labels[t]], [-1]) * np.sqrt(multipliers[t]) for t in terms], 0)
        return e, tape.jacobian(e, variables, experimental_use_pfor=False, unconnected_gradients="zero")
    e, jac = rows()
    return e.numpy(), np.concatenate([j.numpy().reshape(len(e), -1) for j in jac], 1)


MULTIPLIERS = {"energy": 1.0, "forces": 4.0, "stress": 9.0}  # kalman_ranks.params


def _jacobian_loops(model):
    """The ``parallel_iterations`` of the while loops in the traced EKF/gEKF function of ``model``'s step, and
    whether it holds pfor's vectorized ops."""
    from pinn.training.kalman import traced_local_function
    local = traced_local_function(model.step_functions, model.kalman.kind, model.kalman.jacobian_rows)
    graph = local.get_concrete_function().graph
    ops = graph.get_operations()
    loops = [op.get_attr("parallel_iterations") for op in ops if op.type in ("While", "StatelessWhile")]
    return loops, any("pfor" in op.name for op in ops)


@pytest.mark.parametrize("optimizer,rows", [("ekf", 64), ("ekf", None), ("ekf", 3), ("gekf", 64)])
def test_one_step_of_a_model_is_the_update_of_its_errors(optimizer, rows, tmp_path):
    """EKF on a tiny PiNet, gEKF on LJ (energies, forces, stress; float64): one training step equals the NumPy update from the
    errors and the Jacobian computed here (multipliers weighing each error by their square root); the EKF's
    Jacobian alike whether its rows come ``ekf_jacobian_rows`` at a time from a loop or all from one
    vectorized pass (None)."""
    params = kalman_ranks.params(tmp_path / "m", optimizer, False)
    params["model"]["params"].update(ema_decay=None, max_grad_norm=None, separate_errors=False)
    if rows != 64:
        params["model"]["params"]["ekf_jacobian_rows"] = rows
    model = potential_model(params)
    assert f"gradients by TensorFlow, since model.params.optimizer '{optimizer}'" in _log(tmp_path / "m")
    source = kalman_ranks.train_input(0, 1)
    batch = next(iter(prepared_input(source, model.network)))
    e, H = _rows(model, batch, ("energy", "forces", "stress"), MULTIPLIERS)
    w0, P0 = _flat(model.model.trainable_variables), model.kalman.P.numpy()
    rate = float(model.current_learning_rate())
    assert rate == pytest.approx(0.05 if optimizer == "ekf" else 0.1)
    model.train(source, max_steps=1)
    if optimizer == "ekf":
        w_ref, P_ref = _ekf(w0, P0, e, H, rate, 0.0)
    else:  # g₁ = ∇ mean|e| = Hᵀ sign(e) / m, g₂ = ∇ mean e² = 2 Hᵀ e / m
        w_ref, P_ref = _gekf(w0, P0, H.T @ np.sign(e) / len(e), 2 * H.T @ e / len(e), rate, 0.0)
    w1 = _flat(model.model.trainable_variables)
    assert np.abs(w1 - w0).max() > 1e-3
    if optimizer == "ekf":  # the setting reaches TensorFlow: a loop of that many rows at once, or pfor
        assert _jacobian_loops(model) == (([] if rows is None else [rows]), rows is None)
        assert len(e) > 3 * 3  # more rows than 3 loops of 3
    np.testing.assert_allclose(w1, w_ref, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(model.kalman.P.numpy(), P_ref, rtol=1e-8, atol=1e-10)
    if optimizer == "ekf":  # the sign of the step: the errors as the update saw them (linear in w) are lowered
        assert np.sum((e + H @ (w1 - w0)) ** 2) < 0.8 * np.sum(e ** 2)
    else:  # a descent direction of mean e²
        assert (w1 - w0) @ (H.T @ e) < 0


def _lj_params(model_dir, **model_params):
    """The LJ network (2 weights: ε, σ) on kalman_ranks' data, EKF by default."""
    params = kalman_ranks.params(model_dir, "ekf", False)
    params["network"] = kalman_ranks.LJ
    params["model"]["params"].update({"use_stress": False, "learning_rate": 0.1, "ekf_epsilon": 0.01,
                                      "ema_decay": None, "max_grad_norm": None, **model_params})
    return params


def test_separate_errors_updates_one_term_after_the_other(tmp_path):
    """separate_errors: the energies' update, then the forces' from the errors at the weights it left
    (process noise added by each); not the joint update."""
    model = potential_model(_lj_params(tmp_path / "m", separate_errors=True, ekf_q_0=0.01))
    source = kalman_ranks.train_input(0, 1)
    batch = next(iter(prepared_input(source, model.network)))
    variables = model.model.trainable_variables
    w0, P0, rate = _flat(variables), model.kalman.P.numpy(), float(model.current_learning_rate())  # 0.1 in float32
    model.train(source, max_steps=1)
    w_model, P_model = _flat(variables), model.kalman.P.numpy()

    def rows_at(w, terms):
        for v, value in zip(variables, w):
            v.assign(value)
        return _rows(model, batch, terms, MULTIPLIERS)

    w1, P1 = _ekf(w0, P0, *rows_at(w0, ("energy",)), rate, 0.01)
    w2, P2 = _ekf(w1, P1, *rows_at(w1, ("forces",)), rate, 0.01)
    np.testing.assert_allclose(w_model, w2, rtol=1e-9)
    np.testing.assert_allclose(P_model, P2, rtol=1e-9, atol=1e-14)
    joint, _ = _ekf(w0, P0, *rows_at(w0, ("energy", "forces")), rate, 0.01)
    assert np.abs(joint - w2).max() > 1e-6 * np.abs(w2).max()


def _log(model_dir):
    return (model_dir / "train.log").read_text()


def test_resume_continues_the_filter_exactly(tmp_path):
    """4 steps in one go equal 2 + 2 with a model rebuilt from its directory (P restored bitwise; after
    the 2 more steps, weights and P to float64 rounding: TensorFlow's CPU kernels may split a sum over
    threads differently from run to run, seen once in CI as 1 ulp); a directory trained with Adam
    continues with a fresh P, and back (each logged)."""
    source = kalman_ranks.train_input(0, 1)
    straight = potential_model(_lj_params(tmp_path / "a"))
    straight.train(source, max_steps=4)
    first = potential_model(_lj_params(tmp_path / "b"))
    first.train(source, max_steps=2)
    again = potential_model(str(tmp_path / "b"))  # params.yml: optimizer ekf and its keys
    assert again.params["model"]["params"]["optimizer"] == "ekf" and int(again.step) == 2
    np.testing.assert_array_equal(again.kalman.P.numpy(), first.kalman.P.numpy())
    assert np.abs(again.kalman.P.numpy() - 0.01 * np.eye(2)).max() > 1e-5
    again.train(source, max_steps=4)
    np.testing.assert_allclose(_flat(again.model.trainable_variables), _flat(straight.model.trainable_variables),
                               rtol=1e-13, atol=0)
    np.testing.assert_allclose(again.kalman.P.numpy(), straight.kalman.P.numpy(), rtol=1e-12, atol=1e-18)
    # a checkpoint of Adam taken by EKF, and one of EKF by Adam
    adam = potential_model(_lj_params(tmp_path / "c", optimizer="adam", ekf_epsilon=1.0))
    adam.model.trainable_variables[0].assign(0.07)
    adam.save()
    ekf = potential_model(_lj_params(tmp_path / "c", ekf_epsilon=3.0))
    assert "holds no Kalman filter (trained with Adam): P starts at ekf_epsilon × I" in _log(tmp_path / "c")
    np.testing.assert_array_equal(ekf.kalman.P.numpy(), 3.0 * np.eye(2))
    assert float(ekf.model.trainable_variables[0]) == 0.07
    back = potential_model(_lj_params(tmp_path / "b", optimizer="adam", ekf_epsilon=1.0))
    assert "holds no Adam state (trained with a Kalman filter)" in _log(tmp_path / "b")
    np.testing.assert_array_equal(_flat(back.model.trainable_variables), _flat(again.model.trainable_variables))


def test_inference_reads_nothing_of_the_filter(tmp_path):
    """A model loaded for inference restores the weights and the step alone: a checkpoint whose P is
    damaged (NaN) loads and evaluates as the Trainer in memory does, where a Trainer passes it over."""
    source = kalman_ranks.train_input(0, 1)
    model = potential_model(_lj_params(tmp_path / "m"))
    model.train(source, max_steps=1)
    model.kalman.P.assign(np.full((2, 2), np.nan))
    model.step.assign_add(1)
    damaged = model.store.checkpoint.write(str(tmp_path / "m" / "ckpt-2"))  # past the store's verification
    checkpoint_dir.write_state(str(tmp_path / "m"), [str(tmp_path / "m" / "ckpt-1"), damaged])
    loaded = load_for_inference(tmp_path / "m")
    assert loaded.step == 2 and loaded.checkpoint.endswith("ckpt-2") and not loaded.averaged
    np.testing.assert_array_equal(_flat(loaded.model.trainable_variables), _flat(model.model.trainable_variables))
    assert loaded.evaluate(source, steps=2) == model.evaluate(source, steps=2)
    assert int(potential_model(str(tmp_path / "m")).step) == 1  # ckpt-2 is damaged for a resume


# ----------------------------------------------------------------------------------- refusals
@pytest.mark.parametrize("settings, message", [
    ({"optimizer": "adam", "separate_errors": True}, r"model\.params\.separate_errors: one Kalman update per loss"),
    ({"optimizer": "adam", "ekf_epsilon": 2.0}, r"model\.params\.ekf_epsilon: a setting of the Kalman filters"),
    ({"use_l2": True}, r"model\.params\.use_l2: the EKF fits the errors"),
    ({"optimizer": "gekf", "loss_type": "huber"}, r"model\.params\.loss_type: 'huber'; the gEKF"),
    ({"engine": "numba"}, r"model\.params\.engine: 'numba' computes Adam's gradients; the EKF"),
    ({"jit": True}, r"model\.params\.jit: the EKF's step is not XLA-compiled"),
    ({"optimizer": "gekf", "ekf_jacobian_rows": 8}, r"model\.params\.ekf_jacobian_rows: how the EKF computes its "
                                                   r"Jacobian; the gEKF takes two gradients, no Jacobian"),
    ({"ekf_jacobian_rows": 0}, r"model\.params\.ekf_jacobian_rows"),
    ({"ekf_max_memory_gb": 1e-6}, r"model\.params\.optimizer: the EKF keeps a (\d+) × \1 matrix P for the \1 "
                                  r"weights of this network, 0\.000\d+ GB in float64 .* above model\.params\."
                                  r"ekf_max_memory_gb 1e-06"),
])
def test_what_the_kalman_filters_refuse(settings, message, tmp_path):
    params = kalman_ranks.params(tmp_path / "m", "ekf", False)
    params["model"]["params"].update(settings)
    with pytest.raises(ParamsError, match=message):
        potential_model(params)


# ------------------------------------------------------------------ upstream's optimizer section
def _upstream(model_dir, section):
    return {"model_dir": str(model_dir), "network": kalman_ranks.NETWORK, "optimizer": section,
            "model": {"name": "potential_model", "params": {"use_force": True}}}


def test_upstream_kalman_sections_become_model_params_and_round_trip(tmp_path):
    rate = {"class_name": "ExponentialDecay", "config": {"initial_learning_rate": 0.03, "decay_steps": 10000,
                                                         "decay_rate": 0.994}}
    ekf = resolve(_upstream(tmp_path, {"class_name": "EKF", "config": {
        "learning_rate": rate, "epsilon": 0.5, "q_0": 1e-3, "q_min": 1e-5, "q_tau": 100, "inv_dtype": "float32",
        "max_learning_rate": 0.5}}))
    mp = ekf["model"]["params"]
    assert (mp["optimizer"], mp["learning_rate"], mp["lr_schedule"], mp["decay_step"], mp["decay_rate"]) == \
        ("ekf", 0.03, "exponential", 10000, 0.994)
    assert (mp["ekf_epsilon"], mp["ekf_q_0"], mp["ekf_q_min"], mp["ekf_q_tau"], mp["ekf_solve_dtype"],
            mp["ekf_max_learning_rate"]) == (0.5, 1e-3, 1e-5, 100.0, "float32", 0.5)
    assert (mp["lr_warmup_steps"], mp["max_grad_norm"], mp["ema_decay"]) == (0, None, None)
    write_params(ekf, tmp_path)
    assert read_params(tmp_path) == dict(ekf, model_dir=str(tmp_path))
    gekf = resolve(_upstream(tmp_path, {"class_name": "gEKF", "config": {"learning_rate": 0.1, "div_dtype": "float64"}}))
    mp = gekf["model"]["params"]
    assert (mp["optimizer"], mp["learning_rate"], mp["lr_schedule"], mp["ekf_max_learning_rate"], mp["ekf_epsilon"],
            mp["ekf_q_tau"]) == ("gekf", 0.1, "constant", None, 1.0, 3000.0)


@pytest.mark.parametrize("section, message", [
    ({"class_name": "gEKF", "config": {"learning_rate": 0.1, "max_learning_rate": 1.0}},
     r"optimizer\.config\.max_learning_rate: unknown gEKF option; allowed: learning_rate, epsilon"),
    ({"class_name": "EKF", "config": {"epsilon": 1.0}}, r"optimizer\.config\.learning_rate: required by EKF"),
    ({"class_name": "EKF", "config": {"learning_rate": 0.1, "q_0": -1}}, r"optimizer\.config\.q_0: a number ≥ 0"),
    ({"class_name": "EKF", "config": {"learning_rate": 0.1, "inv_dtype": "float16"}}, r"optimizer\.config\.inv_dtype"),
    ({"class_name": "ekf", "config": {"learning_rate": 0.1}}, r"spelled 'EKF' and 'gEKF'"),
])
def test_upstream_kalman_sections_refused(section, message, tmp_path):
    with pytest.raises(ParamsError, match=message):
        resolve(_upstream(tmp_path, section))


def test_upstream_section_and_model_params_may_not_both_choose(tmp_path):
    params = _upstream(tmp_path, {"class_name": "EKF", "config": {"learning_rate": 0.1}})
    params["model"]["params"]["optimizer"] = "gekf"
    with pytest.raises(ParamsError, match=r"model\.params\.optimizer: also set by the optimizer section"):
        resolve(params)


# ------------------------------------------------------------------------------- 2 real ranks
LAUNCHERS = [("horovodrun-gloo", lambda: shutil.which("horovodrun") and horovod_has("gloo"),
              ["horovodrun", "-np", "2", "--gloo"]),
             ("mpirun", lambda: shutil.which("mpirun") and horovod_has("mpi"),
              ["mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none"])]


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """kalman_ranks.py on 2 ranks, once for the module (the first launcher that works)."""
    for name, available, command in LAUNCHERS:
        if available():
            break
    else:
        pytest.skip("no launcher with a Horovod controller installed")
    workdir = tmp_path_factory.mktemp("ranks")
    run = subprocess.run(command + [sys.executable, os.path.abspath(kalman_ranks.__file__), str(workdir)],
                         env=ENV, cwd=workdir, capture_output=True, text=True, timeout=600)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-4000:]
    ranks = {opt: [dict(np.load(workdir / f"{opt}.rank{r}.npz")) for r in range(2)] for opt in kalman_ranks.RUNS}
    return ranks, output


@pytest.mark.parametrize("optimizer", list(kalman_ranks.RUNS))
def test_two_ranks_equal_one_process_on_the_union(optimizer, two_ranks, tmp_path):
    """EKF (a tiny PiNet, a NaN energy on rank 1 at step 3: skipped on both) and gEKF with separate_errors
    (LJ, with a restart at step 3: rank 0 restores P, rank 1 takes it by broadcast) on 2 ranks, each
    with its part of every step's batch: the ranks end
    bitwise equal, and equal to one process trained straight on the union batches (float64: to 1e-9),
    which lowered its validation loss (the PiNet: and its force errors); the rate is not scaled
    with the ranks (logged)."""
    ranks, output = two_ranks
    a, b = ranks[optimizer]
    run = kalman_ranks.RUNS[optimizer]
    steps = run["calls"][-1]
    assert int(a["size"]) == 2 and int(a["step"]) == int(b["step"]) == steps
    for key in ("weights", "average", "P"):
        np.testing.assert_array_equal(a[key], b[key])
    one = potential_model(kalman_ranks.params(tmp_path / "one", optimizer, False))
    validation = kalman_ranks.evaluation_input(0, 1)
    before = one.evaluate(validation)
    one.train(kalman_ranks.train_input(0, 1, nan_steps=run["nan_steps"]), max_steps=steps)
    after = one.evaluate(validation)
    np.testing.assert_allclose(a["weights"], _flat(one.model.trainable_variables), rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(a["average"], np.concatenate([v.numpy().ravel() for v in one.ema.shadow]),
                               rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(a["P"], one.kalman.P.numpy(), rtol=1e-9, atol=1e-11)
    assert after["loss"] < before["loss"], (before, after)
    if optimizer == "ekf":
        # stated bound: 6 steps (one skipped) take the loss from 17.9 to 9.0, the force RMSE from 1.78 to 1.05
        assert after["loss"] < 0.6 * before["loss"] and after["F_RMSE"] < 0.7 * before["F_RMSE"], (before, after)
        assert "step 3: non-finite loss or gradient (from rank 1); update skipped on all ranks" in output
    else:
        assert "restored" in output and "(step 3)" in output
    assert f"with optimizer '{optimizer}' the rate is λ of one update on the union batch of the 2 ranks" in output
