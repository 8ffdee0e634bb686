"""The learning-rate schedule: exponential decay, scaled with the number of ranks, with warmup.

    lr(step) = lr0 · ramp(s) · decay_rate^(s / decay_step),   s = step · k

``k`` is the number of single-rank steps one step stands for: the number of
ranks N when the rate is scaled with N (every step then sees N batches), 1
otherwise.  ``ramp`` grows linearly from 1 to the scale factor (N for
``linear``, √N for ``sqrt``) over ``warmup_steps`` single-rank steps, and is
the scale factor without warmup.  So with scaling on, ``decay_step`` and
``warmup_steps`` keep their meaning (an amount of data) whatever N is, and
the user edits no step counts when moving from 1 rank to N.
"""
import tensorflow as tf

from pinn.parallel import lr_scale


class LearningRate:
    """``lr(step)`` as a float32 tensor.

    Args:
        learning_rate: the single-rank rate lr0.
        decay_step, decay_rate: exponential decay per ``decay_step`` single-rank steps.
        size: number of ranks N.
        scaling: ``'linear'``, ``'sqrt'`` or ``'none'``.
        warmup_steps: single-rank steps of the linear ramp (0: none).
    """

    def __init__(self, learning_rate, decay_step, decay_rate, size=1, scaling="none", warmup_steps=0):
        self.base = float(learning_rate)
        self.decay_step = float(decay_step)
        self.decay_rate = float(decay_rate)
        self.scale = lr_scale(size, scaling)
        self.steps_per_step = float(size) if scaling != "none" else 1.0
        self.warmup_steps = float(warmup_steps)

    def __call__(self, step):
        s = tf.cast(step, tf.float64) * self.steps_per_step
        rate = self.base * tf.pow(tf.constant(self.decay_rate, tf.float64), s / self.decay_step)
        if self.warmup_steps > 0:
            ramp = 1.0 + (self.scale - 1.0) * tf.minimum(s / self.warmup_steps, 1.0)
        else:
            ramp = tf.constant(self.scale, tf.float64)
        return tf.cast(rate * ramp, tf.float32)

    def describe(self):
        """One line for the log: the scaled rate and the decay in steps of this run."""
        return (f"learning rate {self.base:g} × {self.scale:g} = {self.base * self.scale:g}, decay ×{self.decay_rate:g} "
                f"every {self.decay_step / self.steps_per_step:g} steps"
                + (f", warmup over {self.warmup_steps / self.steps_per_step:g} steps" if self.warmup_steps else ""))
