"""The update of a one-process numba-engine step on flat NumPy arrays: clipping, Adam and the
weight average, as the TensorFlow step applies them (:mod:`pinn.training.trainer`), without a TensorFlow
call per step.

With the numba engine (:mod:`pinn.engines.gradients`) computing the gradients in about 5 ms for a
small batch, TensorFlow's update (one XLA call taking the gradient and writing ~60 weight,
~120 Adam-slot and ~60 average variables) cost another 1.5–2.5 ms, most of it the call's
overhead per variable.  Here the weights, Adam's moments and the averages are one vector
each, updated in one compiled loop (~20 µs), and TensorFlow's variables are written only when
something reads them (:meth:`HostOptimizer.store`: before a checkpoint, a validation, a step
TensorFlow computes, and at the end of training) and read back when something else changed them
(:meth:`HostOptimizer.load`: the start of training, a rollback).

The arithmetic is :class:`pinn.training.adam.Adam`'s (Keras 2.15's: ``m += (g − m)(1 − β₁)``,
``v += (g² − v)(1 − β₂)``, ``w −= α m / (√v + ε)``, ``α = lr √(1 − β₂ᵗ) / (1 − β₁ᵗ)``),
with its decoupled weight decay (``w −= w · weight_decay · lr`` first, for the variables it decays),
``tf.clip_by_global_norm`` and :class:`pinn.training.ema.WeightAverage`, in the variables' precision;
float64 training gives TensorFlow's numbers to rounding (tested, ``tests/engines/test_fast_train.py``).
"""
import numpy as np

from pinn.engines.numba.md_kernels import _jit


@_jit()
def _update(weights, grad, m, v, average, scale, alpha, keep_1, keep_2, epsilon, decay):
    """One update in place: Adam with the gradient ``grad × scale`` (clipping's scale), step size
    ``alpha`` and the moments' update fractions ``keep_1 = 1 − β₁``, ``keep_2 = 1 − β₂``; then
    ``average`` towards the new weights with ``decay`` (< 0: no average).  The scalars are of the
    arrays' dtype, so the loops stay in it."""
    for i in range(weights.shape[0]):
        g = grad[i] * scale
        m[i] += (g - m[i]) * keep_1
        v[i] += (g * g - v[i]) * keep_2
        weights[i] -= (m[i] * alpha) / (np.sqrt(v[i]) + epsilon)
    if decay >= 0:
        rest = decay / decay - decay
        for i in range(weights.shape[0]):
            average[i] = decay * average[i] + rest * weights[i]


class HostOptimizer:
    """Weights, Adam's moments and the weight average of a training run as flat vectors.

    Args:
        variables: the trainable variables (their values, flattened and concatenated in this
            order, are :attr:`weights`).
        optimizer: the run's :class:`pinn.training.adam.Adam`, built for ``variables``.
        average: the run's :class:`pinn.training.ema.WeightAverage`, or None.
        max_grad_norm: global-norm clipping of the gradient (None or 0: none).
        frozen: per variable, whether it is frozen (``model.params.freeze``): its weights and Adam's
            moments stay as they are and its gradient counts in no clipping (default: none).
    """

    def __init__(self, variables, optimizer, average=None, max_grad_norm=None, frozen=()):
        self.variables = list(variables)
        self.optimizer = optimizer
        self.average = average
        self.clip_norm = float(max_grad_norm or 0.0)
        self.slots = [optimizer.slots(v) for v in self.variables]
        self.sizes = [v.shape.num_elements() for v in self.variables]
        self.dtype = np.dtype(self.variables[0].dtype.as_numpy_dtype)
        n = sum(self.sizes)
        self.weights, self.m, self.v = (np.zeros(n, self.dtype) for _ in range(3))
        self.averaged = np.zeros(n if average is not None else 1, self.dtype)
        self.iterations = 0  # Adam's step count (applied updates)
        self.average_updates = 0
        self.last_lr = None
        self.ahead = False  # the vectors are newer than the variables
        starts = np.cumsum([0] + self.sizes)
        self.frozen = self._indices(starts, frozen)  # flat indices of the frozen weights
        # ... and of those weight decay shrinks
        self.decayed = self._indices(starts, [optimizer.decays(v) for v in self.variables])

    @staticmethod
    def _indices(starts, flags):
        return np.concatenate([np.arange(starts[i], starts[i + 1]) for i, f in enumerate(flags) if f] +
                              [np.zeros(0, np.int64)])

    def _gather(self, tensors):
        return np.concatenate([np.asarray(t.numpy(), self.dtype).ravel() for t in tensors])

    def _scatter(self, flat, tensors):
        start = 0
        for t, size in zip(tensors, self.sizes):
            t.assign(flat[start:start + size].reshape(t.shape))
            start += size

    def load(self):
        """Read the variables, Adam's state and the average from TensorFlow."""
        self.weights[:] = self._gather(self.variables)
        self.m[:] = self._gather([s[0] for s in self.slots])
        self.v[:] = self._gather([s[1] for s in self.slots])
        self.iterations = int(self.optimizer.iterations.numpy())
        if self.average is not None:
            self.averaged[:] = self._gather(self.average.shadow)
            self.average_updates = int(self.average.updates.numpy())
        self.ahead = False

    def store(self):
        """Write the vectors to TensorFlow's variables (no-op when they hold them already)."""
        if not self.ahead:
            return
        self._scatter(self.weights, self.variables)
        self._scatter(self.m, [s[0] for s in self.slots])
        self._scatter(self.v, [s[1] for s in self.slots])
        self.optimizer.iterations.assign(self.iterations)
        if self.last_lr is not None:
            self.optimizer.learning_rate.assign(self.last_lr)
        if self.average is not None:
            self._scatter(self.averaged, self.average.shadow)
            self.average.updates.assign(self.average_updates)
        self.ahead = False

    def apply(self, grad, lr):
        """One update with the flat gradient ``grad`` (in :attr:`weights`' layout) at learning rate
        ``lr`` (a float32 value, as the optimizer keeps it)."""
        dt = self.dtype.type
        grad = np.asarray(grad, self.dtype)
        frozen = self.frozen
        if frozen.size:
            grad = grad.copy()
            grad[frozen] = 0  # out of the clipping norm; Adam's update of them is undone below
            averaged = self.averaged[frozen] if self.average is not None else None
            kept = (self.weights[frozen], self.m[frozen], self.v[frozen], averaged)
        self.ahead = True  # first: an interrupt during the update still has it written by store()
        one = dt(1.0)
        scale = one
        if self.clip_norm > 0:  # tf.clip_by_global_norm
            norm = dt(np.linalg.norm(grad))
            clip = dt(self.clip_norm)
            scale = clip * min(one / norm, one / clip) if norm > 0 else one
        self.iterations += 1
        t = dt(self.iterations)
        opt = self.optimizer
        rate = dt(np.float32(lr))
        # Adam's tf.cast(beta, dtype) makes a float32 constant of the Python float first
        beta_1, beta_2 = dt(np.float32(opt.beta_1)), dt(np.float32(opt.beta_2))
        alpha = rate * np.sqrt(one - beta_2 ** t) / (one - beta_1 ** t)
        if self.decayed.size:  # Keras' order: w · weight_decay · lr, before Adam's step
            self.weights[self.decayed] -= self.weights[self.decayed] * dt(opt.weight_decay) * rate
        decay = dt(-1.0)
        if self.average is not None:
            self.average_updates += 1
            decay = dt(self.average.decay_after(float(self.average_updates)))
        _update(self.weights, grad, self.m, self.v, self.averaged, dt(scale), dt(alpha), dt(1.0 - opt.beta_1),
                dt(1.0 - opt.beta_2), dt(opt.epsilon), decay)
        if frozen.size:
            self.weights[frozen], self.m[frozen], self.v[frozen] = kept[:3]
            if decay >= 0:  # the average of a frozen weight follows it, as TensorFlow's step averages it
                self.averaged[frozen] = decay * kept[3] + (dt(1.0) - decay) * kept[0]
        self.last_lr = float(rate)
