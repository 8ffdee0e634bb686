"""The learning rate of a training run as a function of the step (the loss weights' schedules are
:mod:`pinn.physics.loss_weights`).

Learning rate, with s = step · k single-rank steps::

    lr(step) = lr0 · warmup(s) · shape(s) · ramp(s)

- ``shape``: ``exponential`` decay_rate^(s / decay_step); ``step``
  decay_rate^(number of ``lr_boundaries`` passed, or ⌊s / decay_step⌋ without
  boundaries); ``cosine`` from 1 down to ``lr_min_factor`` over the steps
  after the warmup, f + (1 − f)·½(1 + cos(π·t)); ``constant`` 1.
- ``warmup``: linear from 1/W to 1 over the first W = ``lr_warmup_steps`` steps.
- ``k`` is the number of single-rank steps one step stands for: the number of
  ranks N when the rate is scaled with N (every step then sees N batches), 1
  otherwise.  ``ramp`` grows linearly from 1 to the scale factor (N for
  ``linear``, √N for ``sqrt``) over ``parallel_params.warmup_steps``
  single-rank steps, and is the scale factor without that warmup.

So with scaling on, every step count of a schedule keeps its meaning (an
amount of data) whatever N is, and the user edits no step counts when moving
from 1 rank to N.  A schedule depends on the step alone, so a resumed run
continues it exactly.
"""
import logging
import math

import tensorflow as tf

from pinn.params.training_options import LR_SCHEDULES
from pinn.runtime.ranks import lr_scale

log = logging.getLogger("pinn")


class LearningRate:
    """``lr(step)`` as a float32 tensor.

    Args:
        learning_rate: the single-rank rate lr0.
        schedule: one of :data:`LR_SCHEDULES`.
        decay_step, decay_rate: exponential / step decay per ``decay_step`` single-rank steps.
        boundaries: single-rank steps at which the ``step`` schedule multiplies by ``decay_rate``.
        min_factor: final rate of the ``cosine`` schedule as a fraction of lr0.
        total_steps: single-rank steps over which the cosine falls (warmup included); ``None``: not
            known yet (the rate stays at lr0 until the trainer sets it from ``max_steps``).
        warmup_steps: single-rank steps of the linear warmup from lr0/W to lr0 (0: none).
        size: number of replicas N (ranks, or the devices of a mirrored run).
        scaling: ``'linear'``, ``'sqrt'`` or ``'none'``.
        parallel_warmup_steps: single-rank steps of the ramp from lr0 to the scaled rate.
    """

    def __init__(self, learning_rate, schedule="exponential", decay_step=10000, decay_rate=0.96, boundaries=(),
                 min_factor=0.0, total_steps=None, warmup_steps=0, size=1, scaling="none",
                 parallel_warmup_steps=0):
        if schedule not in LR_SCHEDULES:
            raise ValueError(f"learning-rate schedule {schedule!r} is not one of {list(LR_SCHEDULES)}")
        self.base = float(learning_rate)
        self.schedule = schedule
        self.decay_step = float(decay_step)
        self.decay_rate = float(decay_rate)
        self.boundaries = sorted(float(b) for b in boundaries)
        self.min_factor = float(min_factor)
        self.total_steps = float(total_steps or 0)
        self.warmup_steps = float(warmup_steps)
        self.scale = lr_scale(size, scaling)
        self.steps_per_step = float(size) if scaling != "none" else 1.0
        self.parallel_warmup_steps = float(parallel_warmup_steps)
        self._budget_total = None  # a cosine laid over a time budget: its length, single-rank steps (tf.Variable)

    def lay_over_budget(self, initial_steps):
        """Make a cosine's length follow a time budget (:class:`~pinn.training.budget.BudgetHook` sets it, a
        variable read at every step), starting at the global step ``initial_steps``."""
        self._budget_total = tf.Variable(float(initial_steps) * self.steps_per_step, dtype=tf.float64,
                                         trainable=False, name="lr_budget_steps")

    def follows_budget(self):
        """Whether the cosine's length follows a time budget (:meth:`lay_over_budget`)."""
        return self._budget_total is not None

    def set_total(self, steps):
        """The cosine's length: it reaches its end at global step ``steps`` (a schedule that
        :meth:`follows_budget`)."""
        self._budget_total.assign(float(steps) * self.steps_per_step)

    def single_rank_steps(self, step):
        """The step as float64 single-rank steps."""
        return tf.cast(step, tf.float64) * self.steps_per_step

    def shape(self, s):
        """The schedule's factor at ``s`` single-rank steps (float64 tensor)."""
        rate = tf.constant(self.decay_rate, tf.float64)
        if self.schedule == "exponential":
            return tf.pow(rate, s / self.decay_step)
        if self.schedule == "step":
            if self.boundaries:
                passed = tf.reduce_sum(tf.cast(s >= tf.constant(self.boundaries, tf.float64), tf.float64))
            else:
                passed = tf.floor(s / self.decay_step)
            return tf.pow(rate, passed)
        if self.schedule == "cosine" and (self._budget_total is not None or self.total_steps > 0):
            total = self.total_steps if self._budget_total is None else self._budget_total  # a budget's: a variable
            span = tf.maximum(tf.cast(total, tf.float64) - self.warmup_steps, 1.0)
            t = tf.clip_by_value((s - self.warmup_steps) / span, 0.0, 1.0)
            return self.min_factor + (1.0 - self.min_factor) * 0.5 * (1.0 + tf.cos(math.pi * t))
        return tf.constant(1.0, tf.float64)  # constant, or a cosine of unknown length

    def __call__(self, step):
        s = self.single_rank_steps(step)
        rate = self.base * self.shape(s)
        if self.warmup_steps > 0:
            rate = rate * tf.minimum((s + self.steps_per_step) / self.warmup_steps, 1.0)
        if self.parallel_warmup_steps > 0:
            ramp = 1.0 + (self.scale - 1.0) * tf.minimum(s / self.parallel_warmup_steps, 1.0)
        else:
            ramp = tf.constant(self.scale, tf.float64)
        return tf.cast(rate * ramp, tf.float32)

    def describe(self):
        """One line for the log: the scaled rate and the schedule in steps of this run."""
        per = self.steps_per_step
        text = f"learning rate {self.base:g} × {self.scale:g} = {self.base * self.scale:g}, "
        if self.schedule == "exponential":
            text += f"decay ×{self.decay_rate:g} every {self.decay_step / per:g} steps"
        elif self.schedule == "step":
            at = ", ".join(f"{b / per:g}" for b in self.boundaries) if self.boundaries else \
                f"every {self.decay_step / per:g}"
            text += f"×{self.decay_rate:g} at steps {at}"
        elif self.schedule == "cosine" and self._budget_total is not None:
            text += f"cosine to {self.min_factor:g}× by the step the time budget gives"
        elif self.schedule == "cosine":
            text += f"cosine to {self.min_factor:g}× by step {self.total_steps / per:g}"
        else:
            text += "constant"
        if self.warmup_steps:
            text += f", warmup over {self.warmup_steps / per:g} steps"
        if self.parallel_warmup_steps:
            text += f", scaling ramp over {self.parallel_warmup_steps / per:g} steps"
        return text


def learning_rate_of(mp, world, total_steps, quiet=False):
    """The :class:`LearningRate` of a run; ``total_steps`` (steps of this run) sets a cosine's length.

    With the Kalman filters the rate is λ of one update on the union batch of all ranks, the
    same as one process's on that batch: not scaled with the number of ranks (logged unless
    ``quiet``, when ``parallel_params`` asks for a scaling).

    Args:
        mp: the resolved ``model.params``.
        world: the run's world (its replicas and ``parallel_params``).
        total_steps: the run's length in steps, or ``None``.
        quiet: say nothing (the schedule is made again for a run's length).
    """
    options = world.options
    size = world.replicas
    scaling = options["lr_scaling"]
    ramp = options["warmup_steps"]
    if mp["optimizer"] != "adam":
        if size > 1 and world.is_chief and (scaling != "none" or ramp) and not quiet:
            log.info("parallel_params.lr_scaling %r and warmup_steps %d apply to Adam; with optimizer %r the "
                     "rate is λ of one update on the union batch of the %d ranks, not scaled", scaling, ramp,
                     mp["optimizer"], size)
        size = 1
        scaling = "none"
        ramp = 0
    steps_per_step = size if scaling != "none" else 1
    return LearningRate(mp["learning_rate"], mp["lr_schedule"], mp["decay_step"], mp["decay_rate"],
                        mp["lr_boundaries"], mp["lr_min_factor"],
                        total_steps * steps_per_step if total_steps else None, mp["lr_warmup_steps"],
                        size, scaling, ramp)
