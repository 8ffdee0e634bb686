"""The ways to make one training step, chosen once per run, called through one interface.

A strategy is called as ``strategy(iterator, signals, step)`` and returns either a
:class:`StepOutcome` (the step was made: applied, or skipped on every rank as non-finite) or a
:class:`Halt` (the run ends before this step: an input ended or a stop signal came, on any
rank).  Which one a run uses (:func:`choose_strategy`):

- :class:`ExchangeSteps` over :class:`~pinn.training.kalman.KalmanSteps`: the Kalman filters
  (``optimizer: ekf | gekf``), one process or N ranks;
- :class:`ExchangeSteps` over :class:`~pinn.training.exchange.FusedExchange`: a parallel run
  with Adam, one allreduce per step (gradients, statistics, the next step's counts and flags);
- :class:`MirroredSteps`: one process on several devices (``parallel_params.backend: mirrored``);
- :class:`WholeSteps`: one process, one batch per step: the step in one traced call;
- :class:`SplitSteps`: otherwise (``accumulate_batches`` > 1, or fp16-compressed gradients):
  agree on the loss counts, local gradients, then reduce and apply.
"""
import time
from typing import NamedTuple, Optional

import numpy as np
import tensorflow as tf

from pinn.training.exchange import FusedExchange, fused, take
from pinn.training.kalman import KalmanSteps
from pinn.training.memory import OOM_ERRORS, inject, report, skipped_stats


class StepOutcome(NamedTuple):
    """One step made."""
    batches: list  #: the batches trained on
    applied: bool  #: whether the update was applied (everything finite on every rank)
    stats: np.ndarray  #: the step's statistics summed over ranks (:meth:`~pinn.training.steps.StepFunctions.unpack`)
    step: int  #: the global step after it
    comm: float  #: this rank's seconds in communication
    phases: Optional[np.ndarray]  #: this rank's seconds in (compute, exchange, update), parallel runs
    ended: bool = False  #: an input ended before the next step, on any rank (strategies that look ahead)
    stop_signal: bool = False  #: a stop signal came before the next step, on any rank
    #: this rank's batches ran out of memory: their (structures, atoms, pairs); else ``None``
    out_of_memory: Optional[tuple] = None


class Halt(NamedTuple):
    """The run ends before the step: an input ended, or a stop signal came (on any rank)."""
    ended: bool
    stop_signal: bool


class ExchangeSteps:
    """Steps through an exchange that takes each step's batches ahead (``start``) and makes the step with
    one exchange over ranks (``step``): :class:`~pinn.training.kalman.KalmanSteps` or
    :class:`~pinn.training.exchange.FusedExchange`."""

    def __init__(self, exchange, name):
        self.exchange = exchange
        self.name = name

    def __call__(self, iterator, signals, step):
        exchange = self.exchange
        if exchange.batches is None:
            ended, stop_signal = exchange.start(iterator, signals)
            if ended or stop_signal:
                return Halt(ended, stop_signal)
        batches, applied, stats, phases, ended, stop_signal = exchange.step(iterator, signals, step)
        return StepOutcome(batches, bool(applied), np.asarray(stats), step + 1, float(phases[1]), phases, ended,
                           stop_signal, exchange.out_of_memory)


class SplitSteps:
    """A step in pieces: agree on loss counts and stop flags over ranks, this rank's gradients over its
    ``k`` batches, then reduce-and-apply.

    Args:
        steps: the run's :class:`~pinn.training.steps.StepFunctions`.
        k: batches per step (``accumulate_batches``).
    """

    name = "split"

    def __init__(self, steps, k):
        self.steps = steps
        self.k = k

    def __call__(self, iterator, signals, step):
        return self._split(take(iterator, self.k), signals, step)

    def _split(self, batches, signals, step):
        steps = self.steps
        world = self.steps.world
        t1 = time.perf_counter()
        steps.store()
        counts = steps.count(batches)
        flags = [float(len(batches) < self.k), float(signals.received is not None)]
        agreed = world.allreduce_sum_numpy(np.concatenate([counts, flags]))
        t2 = time.perf_counter()
        if agreed[-2] > 0 or agreed[-1] > 0:
            return Halt(bool(agreed[-2] > 0), bool(agreed[-1] > 0))
        global_counts = tf.constant(agreed[:-2])
        out_of_memory = None
        try:
            inject(world.rank, step + 1)
            grads, stats = self._gradients(batches, global_counts)
        except OOM_ERRORS as err:  # a zero gradient and this rank's flag: every rank skips the update
            out_of_memory = report(err, batches, world.rank, step + 1)
            grads = [tf.zeros(v.shape, v.dtype) for v in steps.variables]
            stats = tf.constant(skipped_stats(steps.n_stats, world.rank, world.size), steps.dtype)
        if world.is_parallel:
            stats.numpy()  # wait for this rank's compute before timing the communication
        t3 = time.perf_counter()
        applied, stats = steps.reduce_and_apply(grads, stats)
        phases = None
        comm = 0.0
        if world.is_parallel:  # fp16 gradients: the agreement on counts and the reduction
            t4 = time.perf_counter()
            phases = np.array([t3 - t2, (t2 - t1) + (t4 - t3), 0.0])
            comm = float(phases[1])
        return StepOutcome(batches, bool(applied), np.asarray(stats), int(steps.step.numpy()), comm, phases,
                           out_of_memory=out_of_memory)


    def _gradients(self, batches, global_counts):
        """This rank's gradients and stats summed over ``batches``."""
        grads, stats = self.steps.local_gradients(batches[0], global_counts)
        for batch in batches[1:]:
            more_grads, more_stats = self.steps.local_gradients(batch, global_counts)
            grads = [g + h for g, h in zip(grads, more_grads)]
            stats = stats + more_stats
        return grads, stats


class MirroredSteps(SplitSteps):
    """A split step of one process on several devices (``parallel_params.backend: mirrored``): ``k``
    groups of one batch per device, each group's gradients computed side by side on the devices and
    summed there (:attr:`~pinn.training.steps.StepFunctions.replica_gradients`), then the update of the
    sum: the update of one device on the union batch.

    Args:
        steps: the run's :class:`~pinn.training.steps.StepFunctions` (of a mirrored world).
        k: batches per step (``accumulate_batches`` × the devices).
    """

    name = "mirrored"

    def _gradients(self, batches, global_counts):
        n = self.steps.world.local_replicas
        groups = [self.steps.replica_gradients(batches[i:i + n], global_counts) for i in range(0, len(batches), n)]
        grads = [tf.add_n(list(g)) for g in zip(*[group[0] for group in groups])]
        return grads, tf.add_n([group[1] for group in groups])


class WholeSteps(SplitSteps):
    """One process, one batch per step: the whole step in one traced call (a split step where the input
    ended or a stop signal came, which then halts the run)."""

    name = "whole"

    def __init__(self, steps):
        super().__init__(steps, 1)

    def __call__(self, iterator, signals, step):
        batches = take(iterator, 1)
        if not batches or signals.received is not None:
            return self._split(batches, signals, step)
        try:
            inject(0, step + 1)
            applied, stats = self.steps.whole_step(batches[0])
        except OOM_ERRORS as err:  # the batch skipped, the step counted
            sizes = report(err, batches, 0, step + 1)
            steps = self.steps
            steps.apply_flat(np.zeros(sum(v.shape.num_elements() for v in steps.variables)), False)
            return StepOutcome(batches, False, skipped_stats(steps.n_stats, 0, 1), step + 1, 0.0, None,
                               out_of_memory=sizes)
        return StepOutcome(batches, bool(applied), np.asarray(stats), step + 1, 0.0, None)  # counts, applied or not


def choose_strategy(steps, k, check_every, kalman=None, separate_errors=False):
    """The step strategy of a run.

    Args:
        steps: the run's :class:`~pinn.training.steps.StepFunctions` (its world decides).
        k: batches per step (``accumulate_batches``, times the devices of a mirrored world).
        check_every: steps between the ranks' weight checksums (``log_every_n_steps``).
        kalman: the :class:`~pinn.training.kalman.KalmanFilter` of ``optimizer: ekf | gekf``, else ``None``.
        separate_errors: the Kalman filters' ``separate_errors``.

    Returns:
        a strategy (see the module's docstring).
    """
    if kalman is not None:
        return ExchangeSteps(KalmanSteps(steps, kalman, k, check_every, separate_errors), "kalman")
    if steps.replica_gradients is not None:
        return MirroredSteps(steps, k)
    if fused(steps.world):
        return ExchangeSteps(FusedExchange(steps, k, check_every), "fused exchange")
    if not steps.world.is_parallel and k == 1:
        return WholeSteps(steps)
    return SplitSteps(steps, k)
