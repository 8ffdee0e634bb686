"""Dynamic loss scaling for ``precision: mixed_float16``.

float16 holds numbers from 6e-8 to 65 504: small gradients of the layers' products underflow to zero.
The loss is multiplied by a scale S before the gradients are taken and the gradients divided by S
after (in float32), so what float16 carries is S times larger.  S starts at
``loss_scale_initial`` (2¹⁵); a step whose gradients are not finite on any rank overflowed: it is
skipped on every rank and S halves (down to 1); after ``loss_scale_growth_interval`` finite steps
in a row S doubles (``loss_scale_factor``).  Every rank sees the same finite flag after the step's
exchange, so every rank's S stays the same; S and its count of finite steps are in the checkpoint
and rank 0's are broadcast at the start.  A rank whose gradients overflow puts :data:`OVERFLOW_FLAG`
in its slot of the step's flags, so the divergence guard does not take the step for a divergence;
at S = 1 a non-finite step is one.

``mixed_bfloat16`` has float32's exponent range and needs no scaling (Keras' policy likewise).

Test hook: ``PINN_TEST_OVERFLOW="RANK:STEP,STEP,..."`` (tests only) makes that rank's scaled loss
infinite at those global steps (counted from 1).
"""
import os

import numpy as np
import tensorflow as tf

from pinn.training.memory import OOM_FLAG

#: the value a part of a rank's batch whose scaled gradients overflowed adds to the rank's slot of the
#: step's flags (summed over its parts: non-finite parts add 1, an out-of-memory rank puts 1e6)
OVERFLOW_FLAG = 1e3
_INJECT = "PINN_TEST_OVERFLOW"


class LossScale(tf.Module):
    """The scale and its count of finite steps (checkpointed as ``loss_scale``).

    Args:
        initial: the first scale (a power of two keeps the division exact).
        growth_interval: finite steps in a row after which the scale grows.
        factor: what it grows by, and shrinks by after an overflow.
    """

    def __init__(self, initial=2.0 ** 15, growth_interval=2000, factor=2.0, name="loss_scale"):
        super().__init__(name=name)
        self.growth_interval = int(growth_interval)
        self.factor = float(factor)
        self.scale = tf.Variable(float(initial), dtype=tf.float32, trainable=False, name="scale")
        self.finite_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="finite_steps")

    @property
    def variables(self):
        """``[scale, finite_steps]``."""
        return [self.scale, self.finite_steps]

    def update(self, applied, overflowed):
        """After a step's agreement (traced or eager; the same on every rank): halve after an overflow
        (not below 1); after ``growth_interval`` applied steps in a row, grow.  A step skipped for
        another reason (out of memory, non-finite at scale 1) changes nothing."""
        grown = tf.logical_and(applied, self.finite_steps + 1 >= self.growth_interval)
        scale = tf.where(overflowed, tf.maximum(self.scale / self.factor, 1.0),
                         tf.where(grown, self.scale * self.factor, self.scale))
        count = tf.where(tf.logical_or(overflowed, grown), tf.constant(0, tf.int64),
                         self.finite_steps + tf.cast(applied, tf.int64))
        self.finite_steps.assign(count)
        self.scale.assign(scale)

    def flag(self, finite):
        """This rank's flag of a step: 0 when finite, :data:`OVERFLOW_FLAG` when not at a scale above 1,
        1 (non-finite: the divergence guard's) at scale 1."""
        return tf.where(finite, 0.0, tf.where(self.scale > 1.0, OVERFLOW_FLAG, 1.0))


def overflow_ranks(flags):
    """The ranks whose slot of a step's summed flags (NumPy) says their scaled gradients overflowed."""
    flags = np.asarray(flags)
    return np.flatnonzero((flags >= OVERFLOW_FLAG) & (flags < OOM_FLAG))


def overflowed(flags):
    """Whether a step's summed flags (one slot per rank) say a rank's scaled gradients overflowed."""
    return tf.reduce_any(tf.logical_and(flags >= OVERFLOW_FLAG, flags < OOM_FLAG))


def injected_factor(rank, step):
    """The test hook: ``inf`` where ``PINN_TEST_OVERFLOW`` names ``rank`` and the step being made (``step`` + 1,
    a tensor), else 1 (float32 tensor); read when the step is traced."""
    spec = os.environ.get(_INJECT)
    if not spec:
        return tf.constant(1.0)
    where, _, steps = spec.partition(":")
    listed = [int(s) for s in steps.split(",") if s.strip()]
    if int(where) != rank or not listed:
        return tf.constant(1.0)
    hit = tf.reduce_any(tf.equal(tf.cast(step, tf.int64) + 1, tf.constant(listed, tf.int64)))
    return tf.where(hit, tf.constant(float("inf")), tf.constant(1.0))
