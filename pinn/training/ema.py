"""Exponential moving average of the trainable weights.

    w̄ ← d·w̄ + (1 − d)·w,   d = min(ema_decay, (1 + n) / (10 + n))

after the n-th applied update (the second term lets the average follow the
fast early changes instead of remembering the random initialisation).  The
average lives in its own variables, checkpointed apart from the raw weights:
training always continues from the raw weights, evaluation and inference use
the average (:meth:`WeightAverage.swapped_in`, :meth:`WeightAverage.swap_in_for_good`), and the average
knows whether the variables hold it (:attr:`WeightAverage.swapped`).
"""
import contextlib

import tensorflow as tf

from pinn.inference.weight_average import AverageSlots


class WeightAverage(AverageSlots):
    """Shadow copies of ``variables`` (:class:`~pinn.inference.weight_average.AverageSlots`, what inference
    restores) and their update count.

    Args:
        variables: the trainable variables to average (not tracked here, so a
            checkpoint of this module holds the averages alone).
        decay: ``ema_decay`` in (0, 1).
    """

    def __init__(self, variables, decay, name="weight_average"):
        super().__init__(variables, name=name)
        self.decay = float(decay)
        self.updates = tf.Variable(0, dtype=tf.int64, trainable=False, name="updates")
        #: whether the averaged variables hold the averages now (and the averages the raw weights)
        self.swapped = False

    def update(self, variables):
        """One update of the averages towards ``variables`` (call after each applied step)."""
        self.updates.assign_add(1)
        n = tf.cast(self.updates, tf.float64)
        decay = self.decay_after(n, lambda a, b: tf.minimum(tf.constant(a, tf.float64), b))
        factors = {}  # (d, 1 − d) once per dtype: the same bits as per variable, fewer operations to trace
        for average, v in zip(self.shadow, variables):
            if v.dtype not in factors:
                d = tf.cast(decay, v.dtype)
                factors[v.dtype] = d, 1.0 - d
            d, rest = factors[v.dtype]
            average.assign(d * average + rest * v)

    def decay_after(self, n, minimum=min):
        """The decay d of the n-th update (``n`` a float, or a float64 tensor with a TensorFlow ``minimum``):
        min(ema_decay, (1 + n) / (10 + n)).  The numba engine's host update uses it too."""
        return minimum(self.decay, (1.0 + n) / (10.0 + n))

    def reset(self, variables):
        """Start the averages at ``variables`` (after an initialisation that training did not make)."""
        for average, v in zip(self.shadow, variables):
            average.assign(v)
        self.updates.assign(0)

    def swap(self, variables):
        """Exchange the values of ``variables`` and their averages (twice: back as before).

        One traced call for all variables, so an interrupt cannot leave a half-swapped model.
        """
        if getattr(self, "_swap_fn", None) is None:
            live = list(variables)

            def exchange():
                raws = [tf.identity(v) for v in live]
                with tf.control_dependencies(raws):
                    for average, v, raw in zip(self.shadow, live, raws):
                        v.assign(tf.identity(average))
                        average.assign(raw)
            object.__setattr__(self, "_swap_fn", tf.function(exchange, autograph=False))
            object.__setattr__(self, "_swap_vars", live)
        if [id(v) for v in variables] != [id(v) for v in self._swap_vars]:
            raise ValueError("WeightAverage.swap: other variables than the first swap's")
        self._swap_fn()

    @contextlib.contextmanager
    def swapped_in(self, variables):
        """Within this block ``variables`` hold the averages, after it their raw values again (where they
        hold the averages already, for good or in an outer block, they stay as they are)."""
        if self.swapped:
            yield
            return
        self.swap(variables)
        self.swapped = True
        try:
            yield
        finally:
            self.swap(variables)
            self.swapped = False

    def swap_in_for_good(self, variables):
        """Put the averages in ``variables`` and leave them there (inference only)."""
        if not self.swapped:
            self.swap(variables)
            self.swapped = True
