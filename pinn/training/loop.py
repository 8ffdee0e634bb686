"""The loop of one ``train()`` call: steps, progress lines, validation, checkpoints, and stopping.

:class:`TrainingLoop` runs the steps of a :class:`~pinn.training.trainer.Trainer` until
``max_steps``, an input's end, early stopping or a stop signal, and decides on every rank
alike: a step that one rank found non-finite is skipped everywhere
(:class:`~pinn.training.guards.DivergenceGuard` rolls back after too many), a stop signal
on any rank makes every rank write the checkpoint and exit.
"""
import logging
import time

import numpy as np
import tensorflow as tf

from pinn import keys as K
from pinn.schema import ParamsError
from pinn.training.checkpoints import stop_when_disk_full
from pinn.training.exchange import FusedExchange, fused, local_counts, take
from pinn.training.guards import DivergenceGuard, LossJumpGuard, TrainingDiverged, TrainingPreempted
from pinn.training.kalman import KalmanSteps
from pinn.training.metrics import predictions_path, write_eval_predictions
from pinn.training.progress import Meter, scaling_line

log = logging.getLogger("pinn")


class Run:
    """What one ``train()`` call needs besides the model: its length, epochs, validation input and recorder."""

    def __init__(self, max_steps, steps_per_epoch, eval_fn, recorder):
        self.max_steps = max_steps
        self.steps_per_epoch = steps_per_epoch
        self.eval_fn = eval_fn
        self.recorder = recorder

    def epoch(self, step):
        """Epochs trained at ``step`` (``None`` when training is not counted in epochs)."""
        return step / self.steps_per_epoch if self.steps_per_epoch else None


class TrainingLoop:
    """The steps of one run.

    Args:
        trainer: the :class:`~pinn.training.trainer.Trainer` (its step functions, world, backend,
            checkpoints, early stopping and evaluation).
        run: the :class:`Run`.
        k: batches per step (``accumulate_batches``).
        bar: the progress bar.
    """

    def __init__(self, trainer, run, k, bar):
        self.trainer, self.run, self.k, self.bar = trainer, run, k, bar
        mp = trainer.mp
        self.guard = DivergenceGuard(mp["max_nonfinite_steps"], mp["max_rollbacks"])
        self.jumps = None if mp["loss_jump_factor"] is None or mp["loss_weight_schedule"] else \
            LossJumpGuard(mp["loss_jump_factor"], mp["loss_jump_window"], mp["max_rollbacks"], trainer.state_copy)

    def log(self, level, message, *args):
        """Log below the progress bar."""
        self.bar.clear()
        log.log(level, message, *args)

    def __call__(self, iterator, signals, watchdog):
        """Run the steps from ``iterator`` (of batches) until the run ends; then validate (when the last
        step was not validated) and write a checkpoint."""
        trainer, run, k = self.trainer, self.run, self.k
        steps, world, mp = trainer.step_functions, trainer.world, trainer.mp
        every = mp["log_every_n_steps"]
        eval_every = mp["eval_every_n_steps"] or mp["save_checkpoint_steps"]
        meter = Meter()
        skipped = 0
        step = int(trainer.step)
        last_eval = None
        if trainer.kalman is not None:  # one process or N ranks alike
            exchange = KalmanSteps(trainer, k, mp["log_every_n_steps"])
        else:
            exchange = FusedExchange(trainer, k, mp["log_every_n_steps"]) if fused(world) else None
        ahead = (False, False)  # a parallel step's news of the next one: an input ended, a stop signal
        while step < run.max_steps:
            comm, phases = 0.0, None
            if exchange is not None:  # one allreduce per step
                if exchange.batches is None and self._stop_or_end(*exchange.start(iterator, signals), signals, step):
                    break
                batches, applied, stats, phases, *ahead = exchange.step(iterator, signals, step)
                counted, comm = step + 1, phases[1]
            else:
                batches = take(iterator, k)
                t1 = time.perf_counter()
                if not world.is_parallel and k == 1 and batches and signals.received is None:
                    applied, stats = steps.whole_step(batches[0])
                    counted = step + 1  # a whole step counts one, applied or not
                else:  # also where a single process stops: input ended, or a signal
                    trainer.backend.store()
                    applied, stats, times = self._split_step(batches, signals, step)
                    if applied is None:
                        break
                    counted = int(trainer.step)
                if world.is_parallel:  # fp16 gradients: the agreement on counts and the reduction
                    t4 = time.perf_counter()
                    phases = np.array([times[1] - times[0], (times[0] - t1) + (t4 - times[1]), 0.0])
                    comm = phases[1]
            applied, stats = bool(applied), np.asarray(stats)  # the engine's step gives NumPy already
            watchdog.beat()
            step = counted
            loss, n_struct, sums, bad_ranks = steps.unpack(stats)
            if applied:
                meter.add(loss, sums, n_struct, sum(real_structures(b) for b in batches), comm, phases)
            else:
                skipped += 1
                where = f" (from rank {', '.join(str(r) for r in np.flatnonzero(bad_ranks))})" \
                    if world.is_parallel and bad_ranks.any() else ""
                self.log(logging.WARNING, "step %d: non-finite loss or gradient%s; update skipped on all ranks "
                         "(%d in a row)", step, where, self.guard.streak + 1)
            if self.guard.record(applied, step):
                trainer.rollback()
                if self.jumps is not None:
                    self.jumps.reset()
            elif applied and self.jumps is not None:
                self._watch_jumps(loss, step)
            self.bar.update(step, run.max_steps, f"loss {float(loss):.4g}")
            if step % every == 0 or step >= run.max_steps:
                self._progress(step, meter, skipped)
                meter, skipped = Meter(), 0
            stop = False
            if run.eval_fn is not None and (step % eval_every == 0 or step >= run.max_steps):
                stop = self._validate(step)
                last_eval = step
            if step % mp["save_checkpoint_steps"] == 0:
                trainer.save()
            if stop:
                break
            if self._stop_or_end(*ahead, signals, step):  # news of the next step, with this step's exchange
                break
        if run.eval_fn is not None and last_eval != step and step > 0:
            self._validate(step)
        trainer.save()

    def _watch_jumps(self, loss, step):
        """Count the loss of an applied step; after a jump, back to the state from before it (also when
        the jumps persisted through ``max_rollbacks``: then ``TrainingDiverged`` is raised)."""
        try:
            jump = self.jumps.record(loss, step)
        except TrainingDiverged as err:
            self.trainer.restore_state_copy(*err.restore, last=True)
            raise
        if jump is not None:
            self.trainer.restore_state_copy(*jump)

    def _stop_or_end(self, ended, stop_signal, signals, step):
        """After an agreement over ranks: preempt on a stop signal (raises); whether an input ended."""
        if stop_signal:
            self.bar.clear()
            self._preempted(signals.received or "a stop signal on another rank")
        if ended:
            self.log(logging.INFO, "an input ended at step %d before max_steps %d", step, self.run.max_steps)
        return ended

    def _split_step(self, batches, signals, step):
        """A step in pieces: agree on loss counts (and stop flags) over ranks, local gradients over the
        ``k`` batches, then reduce-and-apply (not waited for).  Returns ``(applied, stats, (t2, t3))``
        with the times after the agreement and after the local compute, or ``(None, None, None)``
        when an input ended on any rank."""
        trainer, k = self.trainer, self.k
        steps, world = trainer.step_functions, trainer.world
        counts = local_counts(trainer.backend, steps, batches)
        flags = [float(len(batches) < k), float(signals.received is not None)]
        agreed = world.allreduce_sum_numpy(np.concatenate([counts, flags]))
        t2 = time.perf_counter()
        if self._stop_or_end(agreed[-2] > 0, agreed[-1] > 0, signals, step):
            return None, None, None
        global_counts = tf.constant(agreed[:-2])
        grads, stats = steps.local_gradients(batches[0], global_counts)
        for b in batches[1:]:
            more_grads, more_stats = steps.local_gradients(b, global_counts)
            grads = [g + h for g, h in zip(grads, more_grads)]
            stats = stats + more_stats
        if world.is_parallel:
            stats.numpy()  # wait for this rank's compute before timing the communication
        t3 = time.perf_counter()
        applied, stats = steps.reduce_and_apply(grads, stats)
        return applied, stats, (t2, t3)

    def _progress(self, step, meter, skipped):
        trainer, run = self.trainer, self.run
        figures = trainer.world.allgather_numpy(meter.rank_figures()) if trainer.world.is_parallel else None
        lr = float(trainer.current_learning_rate())
        epoch = run.epoch(step)
        where = f"step {step}/{run.max_steps}" + (f" epoch {epoch:.2f}" if epoch is not None else "")
        line = f"{where} {meter.summary()} lr {lr:.3g}"
        if skipped:
            line += f" ({skipped} non-finite steps skipped)"
        if figures is not None:
            line += "; " + scaling_line(figures, trainer.world.options["single_rank_throughput"])
        self.log(logging.INFO, line)
        if meter.n_steps:
            split = {}
            if figures is not None:  # ms per step in each phase, the slowest rank's
                split = {f"step_ms_{name}": round(float(v), 3)
                         for name, v in zip(Meter.PHASES, figures[:, 2:].max(axis=0))}
            with stop_when_disk_full(run.recorder.path, kept=trainer.store.latest):
                run.recorder.record("train", step, {"lr": lr, **meter.figures(), **split}, epoch)

    def _validate(self, step):
        """Evaluate the validation input; keep the best checkpoint; return whether to stop early."""
        trainer, run = self.trainer, self.run
        stopping = trainer.early_stopping
        result, arrays = trainer.evaluate_with_parity(run.eval_fn)
        try:
            value = stopping.value_of(result)
        except KeyError as err:
            raise ParamsError(f"model.params.early_stopping_metric: {err.args[0]}") from None
        improved = stopping.update(value)
        epoch = run.epoch(step)
        figures = {k: v for k, v in result.items() if k != "global_step"}
        text = " ".join(f"{k} {v:.4g}" for k, v in figures.items())
        self.log(logging.INFO, "evaluation at step %d: %s%s", step, text,
                 " (best so far)" if improved else f" ({stopping.status()})")
        with stop_when_disk_full(run.recorder.path, kept=trainer.store.latest):
            run.recorder.record("eval", step, {**figures, "best": improved}, epoch)
        trainer.last_validation = result
        if trainer.is_chief:
            if arrays:
                with stop_when_disk_full(predictions_path(trainer.model_dir), kept=trainer.store.latest):
                    write_eval_predictions(trainer.model_dir, {"step": np.array(step), **arrays})
            if improved:
                trainer.store.save_best(step, stopping.metric, value)
        if stopping.should_stop():
            self.log(logging.INFO, "early stopping at step %d: %s has not improved by more than %g in %d "
                     "evaluations (best %.4g); the best checkpoint is in %s", step, stopping.metric,
                     stopping.min_delta, stopping.patience, float(stopping.best), trainer.best_dir)
            return True
        return False

    def _preempted(self, signal_name):
        trainer = self.trainer
        step = int(trainer.step)
        path = trainer.save()
        # a barrier: no rank exits (and makes the launcher kill the others) before the checkpoint is whole
        trainer.world.barrier()
        if trainer.is_chief:
            log.warning("stopped by %s at step %d; checkpoint %s written; launch the same command again to "
                        "resume from it", signal_name, step, path)
        raise TrainingPreempted(signal_name, step)


def real_structures(batch):
    """Structures in a batch (or in all parts of a split batch), the padding structures not counted."""
    if isinstance(batch, tuple):
        return sum(real_structures(part) for part in batch)
    return int(np.sum(batch[K.REAL])) if K.REAL in batch else int(batch[K.CELL].shape[0])
