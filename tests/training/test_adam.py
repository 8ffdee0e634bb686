"""pinn's Adam (pinn.training.adam): Keras 2.15's arithmetic and checkpoint layout, on any TensorFlow.

Against Keras' own Adam where TensorFlow's Keras is Keras 2 (TensorFlow 2.15); everywhere, against
the formula in NumPy and against a model directory written with Keras' Adam on TensorFlow 2.15.1
(tests/data/tf215, made by its make_checkpoint.py).
"""
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from pinn.training.adam import Adam

TF215 = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "tf215")  # tests/data/tf215


def _keras_2():
    try:
        import keras
    except ImportError:
        return False
    return str(getattr(keras, "__version__", "")).startswith("2.")


KERAS_2 = _keras_2()
needs_keras_2 = pytest.mark.skipif(not KERAS_2, reason="Keras 2's Adam (TensorFlow ≤ 2.15) is not installed")


def _variables(dtype, seed=0):
    rng = np.random.RandomState(seed)
    return [tf.Variable(rng.randn(*shape).astype(dtype)) for shape in [(5, 3), (4,), (2, 2, 2)]]


def _gradients(variables, step, dtype):
    rng = np.random.RandomState(100 + step)
    return [tf.constant(rng.randn(*v.shape).astype(dtype) * 10.0 ** (step % 3 - 1)) for v in variables]


def _train(optimizer, variables, dtype, steps=10):
    """``steps`` updates with changing rates, compiled as the trainer's update is (XLA)."""
    @tf.function(jit_compile=True, autograph=False)
    def update(grads, rate):
        optimizer.learning_rate.assign(rate)
        optimizer.apply_gradients(zip(grads, variables))

    for step in range(steps):
        update(_gradients(variables, step, dtype), tf.constant(1e-3 * (1 + step), tf.float32))


@needs_keras_2
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_updates_equal_keras_adam_bitwise(dtype):
    theirs, mine = _variables(dtype), _variables(dtype)
    keras_adam = tf.keras.optimizers.Adam(1e-3)
    keras_adam.build(theirs)
    _train(keras_adam, theirs, dtype)
    adam = Adam(mine, 1e-3)
    _train(adam, mine, dtype)
    for a, b in zip(theirs + keras_adam.variables, mine + adam.variables):
        np.testing.assert_array_equal(b.numpy(), a.numpy())
    assert int(adam.iterations) == 10


@needs_keras_2
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_weight_decay_equals_keras_adamw(dtype):
    """Decoupled weight decay: Keras 2.15's AdamW (all variables decayed), bitwise."""
    theirs, mine = _variables(dtype), _variables(dtype)
    keras_adam = tf.keras.optimizers.AdamW(1e-3, weight_decay=0.5)
    keras_adam.build(theirs)
    _train(keras_adam, theirs, dtype)
    adam = Adam(mine, 1e-3, weight_decay=0.5)
    _train(adam, mine, dtype)
    for a, b in zip(theirs + keras_adam.variables, mine + adam.variables):
        np.testing.assert_array_equal(b.numpy(), a.numpy())


def test_weight_decay_is_the_formula_and_skips_what_is_not_decayed():
    """With a zero gradient from zero moments Adam moves nothing: a decayed weight becomes
    w · (1 − weight_decay · lr) exactly, an undecayed one stays."""
    decayed_w, kept_w = variables = [tf.Variable(np.array([0.3, -1.2, 2.0])), tf.Variable(np.array([0.7]))]
    adam = Adam(variables, 0.01, weight_decay=0.25, decayed=[True, False])
    adam.apply_gradients([(tf.zeros(3, tf.float64), decayed_w), (tf.zeros(1, tf.float64), kept_w)])
    rate = np.float64(np.float32(0.01))
    np.testing.assert_array_equal(decayed_w.numpy(), np.array([0.3, -1.2, 2.0]) - np.array([0.3, -1.2, 2.0]) * 0.25 * rate)
    assert float(kept_w[0]) == 0.7 and adam.decays(decayed_w) and not adam.decays(kept_w)
    with pytest.raises(ValueError, match="2 decayed flags for 1 variables"):
        Adam(variables[:1], 0.01, weight_decay=0.1, decayed=[True, False])


def test_one_update_is_the_formula():
    """float64, from nonzero moments at step 5: the update written out in NumPy."""
    (w,) = variables = [tf.Variable(np.array([0.3, -1.2, 2.0]))]
    adam = Adam(variables, 0.01)
    m, v = adam.slots(w)
    m.assign([0.1, -0.2, 0.05])
    v.assign([0.01, 0.04, 0.002])
    adam.iterations.assign(4)
    g = np.array([0.5, -0.1, 3.0])
    adam.apply_gradients([(tf.constant(g), w)])
    b1, b2 = np.float64(np.float32(0.9)), np.float64(np.float32(0.999))
    m_new = np.array([0.1, -0.2, 0.05]) + (g - np.array([0.1, -0.2, 0.05])) * (1 - 0.9)
    v_new = np.array([0.01, 0.04, 0.002]) + (g * g - np.array([0.01, 0.04, 0.002])) * (1 - 0.999)
    alpha = np.float64(np.float32(0.01)) * np.sqrt(1 - b2 ** 5) / (1 - b1 ** 5)
    np.testing.assert_allclose(m.numpy(), m_new, rtol=1e-15)
    np.testing.assert_allclose(v.numpy(), v_new, rtol=1e-15)
    np.testing.assert_allclose(w.numpy(), np.array([0.3, -1.2, 2.0]) - alpha * m_new / (np.sqrt(v_new) + 1e-7),
                               rtol=1e-15)
    assert int(adam.iterations) == 5


@needs_keras_2
def test_checkpoints_load_both_ways_with_keras(tmp_path):
    """A checkpoint of Keras' Adam restores into pinn's, and one of pinn's into Keras'."""
    for writer_is_keras in (True, False):
        trained, fresh = _variables(np.float32, seed=1), _variables(np.float32, seed=2)
        if writer_is_keras:
            writer = tf.keras.optimizers.Adam(1e-3)
            writer.build(trained)
            reader = Adam(fresh, 1e-3)
        else:
            writer = Adam(trained, 1e-3)
            reader = tf.keras.optimizers.Adam(1e-3)
            reader.build(fresh)
        _train(writer, trained, np.float32, steps=3)
        path = tf.train.Checkpoint(optimizer=writer, weights=trained).write(str(tmp_path / f"ck{writer_is_keras}"))
        status = tf.train.Checkpoint(optimizer=reader, weights=fresh).read(path)
        status.assert_existing_objects_matched()
        for a, b in zip(trained + writer.variables, fresh + reader.variables):
            np.testing.assert_array_equal(b.numpy(), a.numpy())
        assert float(reader.learning_rate) == float(writer.learning_rate)


def test_a_model_directory_of_tensorflow_2_15_resumes(tmp_path):
    """tests/data/tf215/model (Keras' Adam on TensorFlow 2.15.1) restores every variable exactly, then
    trains on."""
    from pinn.training.trainer import Trainer
    model_dir = tmp_path / "model"
    shutil.copytree(os.path.join(TF215, "model"), model_dir)
    expected = np.load(os.path.join(TF215, "expected.npz"), allow_pickle=True)
    assert str(expected["tensorflow"]) == "2.15.1" and "keras" in str(expected["optimizer_class"])
    trainer = Trainer.from_model_dir(model_dir)
    assert trainer.restored and int(trainer.step) == 3
    for key, variables in (("model", trainer.model.variables), ("optimizer", trainer.optimizer.variables),
                           ("average", trainer.ema.shadow)):
        assert len(variables) == len(expected[key]), key
        for variable, value in zip(variables, expected[key]):
            np.testing.assert_array_equal(variable.numpy(), value, err_msg=key)
    assert int(trainer.optimizer.iterations) == 3
    import sys
    sys.path.insert(0, TF215)
    try:
        from make_checkpoint import cells
    finally:
        sys.path.remove(TF215)
    batches = cells()
    spec = {k: tf.TensorSpec((None,) + v.shape[1:], tf.as_dtype(v.dtype)) for k, v in batches[0].items()}
    trainer.train(lambda: tf.data.Dataset.from_generator(lambda: iter(batches), output_signature=spec).repeat(),
                  max_steps=5)
    assert int(trainer.step) == 5 and int(trainer.optimizer.iterations) == 5
    moved = [np.abs(v.numpy() - e).max() for v, e in zip(trainer.model.variables, expected["model"])
             if v.dtype.is_floating]
    assert max(moved) > 0
