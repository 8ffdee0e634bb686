"""What happens around the steps of a run, as hooks on :class:`~pinn.training.loop.TrainingLoop`.

Each hook gets what it needs when it is made (functions and parts, not the Trainer) and is
called with a :class:`StepReport` after every step (``on_step_end``, which may ask the run to
stop) and once when the run ends (``on_run_end``), in the order the loop holds them:
divergence guards, progress, validation, the stop after too many out-of-memory steps, checkpoints.
"""
import logging
import time
from typing import NamedTuple

import numpy as np

from pinn import keys as K
from pinn.schema import ParamsError
from pinn.training.checkpoint_files import stop_when_disk_full
from pinn.training.guards import DivergenceGuard, LossJumpGuard, TrainingDiverged
from pinn.training.loss_scale import overflow_ranks
from pinn.training.memory import OutOfMemory, describe_sizes, out_of_memory_ranks
from pinn.training.metrics import predictions_path, write_eval_predictions
from pinn.training.progress import Meter, scaling_line

log = logging.getLogger("pinn")


class StepReport(NamedTuple):
    """One step, as the hooks see it."""
    step: int  #: the global step after it
    outcome: object  #: the :class:`~pinn.training.strategies.StepOutcome`
    loss: float  #: the step's loss (summed over ranks)
    structures: float  #: structures in the step (all ranks)
    sums: dict  #: metric → (Σ|err|, Σerr², count)
    bad_ranks: np.ndarray  #: per rank: 0, or its flags (non-finite parts, an overflow, out of memory: by magnitude)


class Hook:
    """The interface: both calls do nothing unless a hook says otherwise."""

    def on_step_end(self, report):
        """After a step; returns whether the run should stop (early stopping)."""
        return False

    def on_run_end(self, step):
        """Once, when the run ends normally at global step ``step``."""


class DivergenceHook(Hook):
    """Skipped non-finite steps and rollbacks (:class:`~pinn.training.guards.DivergenceGuard`); loss jumps
    and the in-memory copies they go back to (:class:`~pinn.training.guards.LossJumpGuard`).

    Args:
        mp: the resolved ``model.params`` (``max_nonfinite_steps``, ``max_rollbacks``, ``loss_jump_*``).
        world: the run's world (the ranks that found a step non-finite are named).
        rollback: ``() -> None``: back to the latest checkpoint, rate lowered.
        state_copy: ``() -> copy`` of the training state in memory.
        restore_state_copy: ``(step, copy, ratio, last=False) -> None``.
        say: ``(level, message, *args)``: log below the progress bar.
    """

    def __init__(self, mp, world, rollback, state_copy, restore_state_copy, say):
        self.world = world
        self.rollback = rollback
        self.restore_state_copy = restore_state_copy
        self.say = say
        self.guard = DivergenceGuard(mp["max_nonfinite_steps"], mp["max_rollbacks"])
        self.jumps = None if mp["loss_jump_factor"] is None or mp["loss_weight_schedule"] else \
            LossJumpGuard(mp["loss_jump_factor"], mp["loss_jump_window"], mp["max_rollbacks"], state_copy)

    def on_step_end(self, report):
        applied = report.outcome.applied
        step = report.step
        if not applied and out_of_memory_ranks(report.bad_ranks).size:
            return False  # not a divergence: the MemoryHook's
        overflow = overflow_ranks(report.bad_ranks)
        if not applied and overflow.size:  # mixed_float16: not a divergence either; the loss scale halved
            self.say(logging.INFO, "step %d: the scaled gradients overflowed (rank %s); the step is skipped on every "
                     "rank and the loss scale halved", step, ", ".join(map(str, overflow)))
            return False
        if not applied:
            where = f" (from rank {', '.join(str(r) for r in np.flatnonzero(report.bad_ranks))})" \
                if self.world.is_parallel and report.bad_ranks.any() else ""
            self.say(logging.WARNING, "step %d: non-finite loss or gradient%s; update skipped on all ranks "
                     "(%d in a row)", step, where, self.guard.streak + 1)
        if self.guard.record(applied, step):
            self.rollback()
            if self.jumps is not None:
                self.jumps.reset()
        elif applied and self.jumps is not None:
            self._watch_jumps(report.loss, step)
        return False

    def _watch_jumps(self, loss, step):
        """Count the loss of an applied step; after a jump, back to the state from before it (also when
        the jumps persisted through ``max_rollbacks``: then ``TrainingDiverged`` is raised)."""
        try:
            jump = self.jumps.record(loss, step)
        except TrainingDiverged as err:
            self.restore_state_copy(*err.restore, last=True)
            raise
        if jump is not None:
            self.restore_state_copy(*jump)


class MemoryHook(Hook):
    """Steps skipped because a rank ran out of memory (:mod:`pinn.training.memory`): named by rank 0 of a
    parallel run (the rank itself logs its batch), and after ``max_oom_skips`` in a row the checkpoint
    and :class:`OutOfMemory` on every rank.

    Args:
        max_skips: ``model.params.max_oom_skips``.
        world: the run's world.
        save: ``() -> path or None``: write a checkpoint of the current step (rank 0).
        say: as for :class:`DivergenceHook`.
    """

    def __init__(self, max_skips, world, save, say):
        self.max_skips = max_skips
        self.world = world
        self.save = save
        self.say = say
        self.streak = 0
        self.last_sizes = None

    def on_step_end(self, report):
        ranks = out_of_memory_ranks(report.bad_ranks)
        if report.outcome.applied or not ranks.size:
            self.streak = 0 if report.outcome.applied else self.streak
            return False
        self.streak += 1
        if report.outcome.out_of_memory is not None:
            self.last_sizes = report.outcome.out_of_memory
        if self.world.is_parallel and self.world.is_chief and report.outcome.out_of_memory is None:
            self.say(logging.WARNING, "step %d: out of memory on rank %s; the step is skipped on every rank "
                     "(%d in a row, at most %d)", report.step, ", ".join(map(str, ranks)), self.streak,
                     self.max_skips)
        if self.streak >= self.max_skips:
            self._stop(report.step)
        return False

    def _stop(self, step):
        structures, atoms, pairs = self.last_sizes or (-1, -1, -1)
        mine = np.array([structures, atoms, -1 if pairs is None else pairs], np.float64)
        sizes = self.world.allgather_numpy(mine) if self.world.is_parallel else mine[None]
        path = self.save()
        self.world.barrier()  # no rank leaves before the checkpoint is whole
        last = "; ".join(f"rank {r}: {describe_sizes(row)}" for r, row in enumerate(sizes) if row[0] >= 0)
        raise OutOfMemory(f"out of memory in {self.streak} steps in a row (model.params.max_oom_skips "
                          f"{self.max_skips}) at step {step}; the last batches that did not fit: {last}; "
                          f"checkpoint {path or 'of this step'} written: lower the batch size, then launch again "
                          "to resume")


class ProgressHook(Hook):
    """The progress bar, and every ``every`` steps a progress line and a ``train`` record.

    Args:
        run: the :class:`~pinn.training.loop.Run` (length, epochs, recorder).
        world: the run's world (throughput of every rank in a parallel run).
        every: ``log_every_n_steps``.
        learning_rate: ``() -> rate`` of the next update.
        latest_checkpoint: ``() -> path`` of the latest checkpoint (kept when the disk is full).
        bar: the :class:`~pinn.training.progress.ProgressBar`.
        say: as for :class:`DivergenceHook`.
    """

    def __init__(self, run, world, every, learning_rate, latest_checkpoint, bar, say):
        self.run = run
        self.world = world
        self.every = every
        self.learning_rate = learning_rate
        self.latest_checkpoint = latest_checkpoint
        self.bar = bar
        self.say = say
        self.meter = Meter()
        self.skipped = 0
        self.out_of_memory = 0
        self.overflowed = 0

    def on_step_end(self, report):
        outcome = report.outcome
        step = report.step
        if outcome.applied:
            self.meter.add(report.loss, report.sums, report.structures,
                           sum(real_structures(b) for b in outcome.batches), outcome.comm, outcome.phases)
        elif out_of_memory_ranks(report.bad_ranks).size:
            self.out_of_memory += 1
        elif overflow_ranks(report.bad_ranks).size:
            self.overflowed += 1
        else:
            self.skipped += 1
        self.bar.update(step, self.run.max_steps, f"loss {float(report.loss):.4g}")
        if step % self.every == 0 or step >= self.run.max_steps:
            self._progress(step)
            self.meter = Meter()
            self.skipped = 0
            self.out_of_memory = 0
            self.overflowed = 0
        return False

    def _progress(self, step):
        meter = self.meter
        run = self.run
        world = self.world
        figures = world.allgather_numpy(meter.rank_figures()) if world.is_parallel else None
        lr = float(self.learning_rate())
        epoch = run.epoch(step)
        where = f"step {step}/{run.max_steps}" + (f" epoch {epoch:.2f}" if epoch is not None else "")
        line = f"{where} {meter.summary()} lr {lr:.3g}"
        if self.skipped:
            line += f" ({self.skipped} non-finite steps skipped)"
        if self.out_of_memory:
            line += f" ({self.out_of_memory} steps skipped: out of memory)"
        if self.overflowed:
            line += f" ({self.overflowed} steps skipped: the scaled gradients overflowed)"
        if figures is not None:
            line += "; " + scaling_line(figures, world.options["single_rank_throughput"])
        self.say(logging.INFO, line)
        if meter.n_steps or self.out_of_memory or self.overflowed:
            split = {}
            if figures is not None and meter.n_steps:  # ms per step in each phase, the slowest rank's
                split = {f"step_ms_{name}": round(float(v), 3)
                         for name, v in zip(Meter.PHASES, figures[:, 2:].max(axis=0))}
            skipped = {key: n for key, n in (("oom_skipped", self.out_of_memory), ("overflow_skipped", self.overflowed))
                       if n}
            with stop_when_disk_full(run.recorder.path, kept=self.latest_checkpoint()):
                run.recorder.record("train", step, {"lr": lr, **(meter.figures() if meter.n_steps else {}), **split,
                                                    **skipped}, epoch)


class ValidationHook(Hook):
    """Validation every ``every`` steps and at the end: records, parity arrays, the best checkpoint, early
    stopping.

    Args:
        run: the :class:`~pinn.training.loop.Run` (its ``eval_fn``, epochs, recorder).
        every: steps between validations.
        evaluate: ``(input_fn) -> (metrics, parity arrays)`` (with the weights for inference).
        early_stopping: the :class:`~pinn.training.early_stopping.EarlyStopping` of the run.
        store: the :class:`~pinn.training.checkpoints.CheckpointStore` (the best checkpoint; it decides
            which rank writes).
        model_dir: where the parity arrays go (from rank 0).
        say: as for :class:`DivergenceHook`.

    Attributes:
        last: the metrics of the latest validation, or ``None``.
        longest_s: the longest validation so far, with its records and best checkpoint (s; what a time budget
            leaves for the last one).
    """

    def __init__(self, run, every, evaluate, early_stopping, store, model_dir, say):
        self.run = run
        self.every = every
        self.evaluate = evaluate
        self.stopping = early_stopping
        self.store = store
        self.model_dir = model_dir
        self.say = say
        self.last = None
        self._last_step = None
        self.longest_s = 0.0

    def on_step_end(self, report):
        step = report.step
        if step % self.every == 0 or step >= self.run.max_steps:
            started = time.perf_counter()
            stop = self.validate(step)
            self.longest_s = max(self.longest_s, time.perf_counter() - started)
            return stop
        return False

    def on_run_end(self, step):
        if self._last_step != step and step > 0:
            self.validate(step)

    def validate(self, step):
        """Evaluate the validation input; keep the best checkpoint; return whether to stop early."""
        run = self.run
        stopping = self.stopping
        store = self.store
        result, arrays = self.evaluate(run.eval_fn)
        self._last_step = step
        try:
            value = stopping.value_of(result)
        except KeyError as err:
            raise ParamsError(f"model.params.early_stopping_metric: {err.args[0]}") from None
        improved = stopping.update(value)
        epoch = run.epoch(step)
        figures = {k: v for k, v in result.items() if k != "global_step"}
        text = " ".join(f"{k} {v:.4g}" for k, v in figures.items())
        self.say(logging.INFO, "evaluation at step %d: %s%s", step, text,
                 " (best so far)" if improved else f" ({stopping.status()})")
        with stop_when_disk_full(run.recorder.path, kept=store.latest):
            run.recorder.record("eval", step, {**figures, "best": improved}, epoch)
        self.last = result
        if arrays and store.is_chief:
            with stop_when_disk_full(predictions_path(self.model_dir), kept=store.latest):
                write_eval_predictions(self.model_dir, {"step": np.array(step), **arrays})
        if improved:
            store.save_best(step, stopping.metric, value)  # on rank 0
        if stopping.should_stop():
            self.say(logging.INFO, "early stopping at step %d: %s has not improved by more than %g in %d "
                     "evaluations (best %.4g); the best checkpoint is in %s", step, stopping.metric,
                     stopping.min_delta, stopping.patience, float(stopping.best.numpy()), store.best_dir)
            return True
        return False


class CheckpointHook(Hook):
    """A checkpoint every ``every`` steps (``save_checkpoint_steps``) and at the end, by ``save()``; ``longest_s``:
    the longest save so far (s; what a time budget leaves for the last one)."""

    def __init__(self, every, save):
        self.every = every
        self.save = save
        self.longest_s = 0.0

    def on_step_end(self, report):
        if report.step % self.every == 0:
            started = time.perf_counter()
            self.save()
            self.longest_s = max(self.longest_s, time.perf_counter() - started)
        return False

    def on_run_end(self, step):
        self.save()


def real_structures(batch):
    """Structures in a batch (or in all parts of a split batch), the padding structures not counted."""
    if isinstance(batch, tuple):
        return sum(real_structures(part) for part in batch)
    return int(np.sum(batch[K.REAL])) if K.REAL in batch else int(batch[K.CELL].shape[0])
