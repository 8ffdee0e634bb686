"""The numba engine's host-side update (pinn.engines.host_optimizer) against the training step's own,
pinn.training.steps.apply_update (pinn's Adam with Keras 2.15's arithmetic: tests/training/test_adam.py;
tf.clip_by_global_norm; pinn.training.ema.WeightAverage), step by step."""
import numpy as np
import pytest
import tensorflow as tf

from pinn.training.ema import WeightAverage
from pinn.engines.host_optimizer import HostOptimizer
from pinn.training.adam import Adam
from pinn.training.steps import StepUpdate, apply_update


def _pair(dtype, seed=0):
    rng = np.random.RandomState(seed)
    shapes = [(5, 3), (4,), (2, 2, 2)]
    values = [rng.randn(*s).astype(dtype) for s in shapes]
    return [tf.Variable(v) for v in values], [tf.Variable(v) for v in values]


@pytest.mark.parametrize("dtype, rtol", [(np.float64, 1e-13), (np.float32, 2e-6)])
@pytest.mark.parametrize("clip", [0.0, 0.5])
@pytest.mark.parametrize("decay, weight_decay", [(None, 0.0), (0.99, 0.0), (0.99, 30.0)])
def test_updates_equal_tensorflow_adam_clipping_and_the_average(dtype, rtol, clip, decay, weight_decay):
    """... and the decoupled weight decay, of the first and last variables (not the middle one)."""
    theirs, mine = _pair(dtype)
    decayed = [True, False, True]
    tf_adam = Adam(theirs, 1e-3, weight_decay=weight_decay, decayed=decayed)
    host_adam = Adam(mine, 1e-3, weight_decay=weight_decay, decayed=decayed)
    their_average = WeightAverage(theirs, decay) if decay else None
    host = HostOptimizer(mine, host_adam, WeightAverage(mine, decay) if decay else None, clip)
    host.load()
    # the training step's own update (the one definition), the schedule given as the rate of each step
    update = StepUpdate(tf_adam, their_average, clip, learning_rate=None, lr_factor=None)
    rng = np.random.RandomState(1)
    for step in range(8):
        grads = [tf.constant(rng.randn(*v.shape).astype(dtype) * 10.0 ** (step % 3 - 1)) for v in theirs]
        rate = np.float32(1e-3 * (1 + step))
        apply_update(update, theirs, grads, rate)
        host.apply(np.concatenate([g.numpy().ravel() for g in grads]), rate)
    assert host.ahead
    host.store()
    assert not host.ahead
    pairs = list(zip(theirs, mine)) + list(zip(tf_adam.variables, host_adam.variables))
    if decay:
        pairs += list(zip(their_average.shadow, host.average.shadow))
    for a, b in pairs:
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=rtol, atol=rtol * 1e-3)
    assert int(host_adam.iterations) == 8
    # the updates moved the weights (the comparison is not of untouched values)
    assert max(np.abs(v.numpy() - w).max() for v, w in zip(theirs, _pair(dtype)[0])) > 1e-3


def test_load_reads_what_tensorflow_changed():
    variables, _ = _pair(np.float64)
    adam = Adam(variables, 1e-3)
    host = HostOptimizer(variables, adam)
    host.load()
    np.testing.assert_array_equal(host.weights, np.concatenate([v.numpy().ravel() for v in variables]))
    variables[1].assign([1.0, 2.0, 3.0, 4.0])
    adam.slots(variables[1])[0].assign([0.5] * 4)
    adam.iterations.assign(7)
    host.load()
    assert host.iterations == 7
    np.testing.assert_array_equal(host.weights[15:19], [1.0, 2.0, 3.0, 4.0])
    np.testing.assert_array_equal(host.m[15:19], [0.5] * 4)
    host.store()  # nothing newer on the host: TensorFlow's values stay
    assert float(variables[1][3]) == 4.0


def test_refuses_an_optimizer_built_for_other_variables():
    variables, others = _pair(np.float64)
    with pytest.raises(KeyError, match="Adam was not built for"):
        HostOptimizer(variables, Adam(others, 1e-3))
