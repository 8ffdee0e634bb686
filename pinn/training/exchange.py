"""The steps of a parallel run with one allreduce each.

A data-parallel step needs from the other ranks: the loss counts of the step's batches
(the loss is normalised by all ranks' counts), the gradients, the statistics of the
progress line, the non-finite flags, and whether any rank's input ended or got a stop
signal.  :class:`FusedExchange` sends all of them in one float64 buffer, one allreduce
per step (or per ``accumulate_batches`` group):

    [ gradient | stats | loss counts of the next step's batches | next input ended | stop signal | checksums ]

The counts of a step's batches travel one step ahead, with the previous step's
gradients (the batches are taken from the input one step early); the first step of a
``train()`` call exchanges its counts on their own.  After the exchange every rank holds
the same sums and applies the same update (the numba engine: on the host, as one process
does), so the weights stay bitwise equal across ranks.  Every ``check_every`` steps each
rank adds a checksum of its weights in its own slot; ranks whose checksums differ stop
with an error naming the step.

With ``parallel_params.compression: fp16`` the gradients keep their own allreduce in
float16 (:class:`pinn.training.strategies.SplitSteps`), which pays where the
network is large enough for the bytes to matter.
"""
import time

import numpy as np

from pinn.training.loss_scale import overflow_ranks
from pinn.training.memory import OOM_ERRORS, inject, report, skipped_stats


def take(iterator, k):
    """Up to ``k`` batches of the input (fewer when it ends)."""
    batches = []
    for _ in range(k):
        try:
            batches.append(next(iterator))
        except StopIteration:
            break
    return batches


class WeightsDiffer(SystemExit):
    """The ranks' weights differ (they must stay bitwise equal): every rank ends with this one-line
    message and exit status 1 (a :class:`SystemExit`: the ranks leave as after a stop signal)."""


class FusedExchange:
    """One allreduce per step for a parallel run.

    Args:
        steps: the run's :class:`~pinn.training.steps.StepFunctions` (with its world).
        k: batches per step (``accumulate_batches``).
        check_every: compare the ranks' weight checksums every this many steps.
    """

    def __init__(self, steps, k, check_every):
        self.k = k
        self.check_every = max(1, int(check_every))
        self.steps = steps
        self.world = steps.world
        steps = self.steps
        size = self.world.size
        self.n_grad = sum(v.shape.num_elements() for v in steps.variables)
        self.n_stats = steps.n_stats
        self.n_terms = len(steps.terms)
        # where each part starts in the buffer
        self.at_stats = self.n_grad
        self.at_counts = self.at_stats + self.n_stats
        self.at_flags = self.at_counts + self.n_terms
        self.at_sums = self.at_flags + 2
        self.length = self.at_sums + size
        self.coefficients = np.random.RandomState(7).uniform(0.5, 1.5, self.n_grad)
        self.batches = None  # the next step's batches (taken one step early) …
        self.counts = None  # … and all ranks' loss counts of them
        #: this rank's batches of the latest step ran out of memory: their (structures, atoms, pairs)
        self.out_of_memory = None

    def start(self, iterator, signals):
        """Take the first step's batches and agree on their counts (the one exchange that is not fused).

        Returns:
            ``(input_ended, stop_signal)``: on any rank.
        """
        self.batches = take(iterator, self.k)
        flags = [float(len(self.batches) < self.k), float(signals.received is not None)]
        counts = self.steps.count(self.batches, keep=True)
        agreed = self.world.allreduce_sum_numpy(np.concatenate([counts, flags]))
        self.counts = agreed[:self.n_terms]
        return bool(agreed[-2] > 0), bool(agreed[-1] > 0)

    def step(self, iterator, signals, step):
        """One step on the batches taken before, with one allreduce.

        Args:
            iterator: the input (the next step's batches are taken from it here).
            signals: the :class:`~pinn.training.guards.StopSignals` of the run.
            step: the global step before this one.

        Returns:
            ``(batches, applied, stats, phases, input_ended, stop_signal)``: the batches trained on, whether
            the update was applied (all finite on all ranks), the stats summed over ranks, this rank's
            seconds in (compute, exchange, update), and whether any rank's input ended before the next
            step or got a stop signal.

        Raises:
            WeightsDiffer: at a checked step, the ranks' weights differ.
        """
        t0 = time.perf_counter()
        batches = self.batches
        size = self.world.size
        self.out_of_memory = None
        try:
            inject(self.world.rank, step + 1)
            grad, stats = self.steps.flat_gradient(batches, self.counts)
        except OOM_ERRORS as err:  # a zero gradient and this rank's flag: every rank skips the update
            self.out_of_memory = report(err, batches, self.world.rank, step + 1)
            grad = np.zeros(self.n_grad)
            stats = skipped_stats(self.n_stats, self.world.rank, size)
        following = take(iterator, self.k)
        buffer = np.zeros(self.length)
        buffer[:self.at_stats] = grad
        buffer[self.at_stats:self.at_counts] = stats
        buffer[self.at_counts:self.at_flags] = self.steps.count(following, keep=True)
        buffer[self.at_flags] = float(len(following) < self.k)
        buffer[self.at_flags + 1] = float(signals.received is not None)
        checked = (step + 1) % self.check_every == 0
        if checked:
            buffer[self.at_sums + self.world.rank] = float(np.dot(self.steps.flat_weights(), self.coefficients))
        t1 = time.perf_counter()
        summed = self.world.allreduce_sum_numpy(buffer)
        t2 = time.perf_counter()
        if checked:
            sums = summed[self.at_sums:]
            if np.any(sums != sums[0]):
                raise WeightsDiffer(f"step {step + 1}: the weights differ between ranks (checksums "
                                    f"{', '.join(f'{c:.17g}' for c in sums)}); they must stay bitwise equal")
        grad = summed[:self.at_stats]
        stats = summed[self.at_stats:self.at_counts]
        finite = bool(np.isfinite(grad).all() and np.isfinite(stats[:2]).all() and stats[-size:].sum() == 0)
        overflow = bool(overflow_ranks(stats[-size:]).size)  # mixed_float16: the loss scale halves
        applied = self.steps.apply_flat(grad, finite, overflow)
        t3 = time.perf_counter()
        self.batches = following
        self.counts = summed[self.at_counts:self.at_flags]
        phases = np.array([t1 - t0, t2 - t1, t3 - t2])
        return (batches, applied, stats, phases, bool(summed[self.at_flags] > 0),
                bool(summed[self.at_flags + 1] > 0))


def fused(world):
    """Whether a run in ``world`` uses :class:`FusedExchange` (parallel, without fp16 compression)."""
    return world.is_parallel and world.options["compression"] != "fp16"

