"""The loop of one ``train()`` call: steps until the run ends, hooks around them, and stopping.

:class:`TrainingLoop` calls the run's step strategy (:mod:`pinn.training.strategies`, chosen once)
until ``max_steps``, an input's end, early stopping or a stop signal, and after every step
its hooks (:mod:`pinn.training.hooks`: divergence guards, progress, validation, checkpoints).
Every rank decides alike: a step that one rank found non-finite is skipped everywhere, a stop
signal on any rank makes every rank write the checkpoint and exit.
"""
import logging

from pinn.training.guards import TrainingPreempted
from pinn.training.hooks import StepReport
from pinn.training.strategies import Halt

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
        strategy: the step strategy (:func:`pinn.training.strategies.choose_strategy`).
        unpack: ``stats -> (loss, structures, sums, bad ranks)``
            (:meth:`~pinn.training.steps.StepFunctions.unpack`).
        hooks: the :class:`~pinn.training.hooks.Hook` s, called in this order.
        run: the :class:`Run`.
        world: the run's world (a barrier before a preempted run exits).
        save: ``() -> path or None``: write a checkpoint of the current step (rank 0).
        bar: the progress bar (cleared before a log line).
    """

    def __init__(self, strategy, unpack, hooks, run, world, save, bar):
        self.strategy = strategy
        self.unpack = unpack
        self.hooks = list(hooks)
        self.run = run
        self.world = world
        self.save = save
        self.bar = bar

    def say(self, level, message, *args):
        """Log below the progress bar."""
        self.bar.clear()
        log.log(level, message, *args)

    def __call__(self, iterator, signals, watchdog, step):
        """Run the steps from ``iterator`` (of batches), from global step ``step``, until the run ends; then
        the hooks' ends (the last validation, a checkpoint)."""
        while step < self.run.max_steps:
            outcome = self.strategy(iterator, signals, step)
            if isinstance(outcome, Halt):
                self._stop_or_end(outcome.ended, outcome.stop_signal, signals, step)
                break
            watchdog.beat()
            step = outcome.step
            report = StepReport(step, outcome, *self.unpack(outcome.stats))
            stop = False
            for hook in self.hooks:
                stop = hook.on_step_end(report) or stop
            if stop:
                break
            # news of the next step, with this step's exchange
            if self._stop_or_end(outcome.ended, outcome.stop_signal, signals, step):
                break
        for hook in self.hooks:
            hook.on_run_end(step)
        return step

    def _stop_or_end(self, ended, stop_signal, signals, step):
        """After an agreement over ranks: preempt on a stop signal (raises); whether an input ended."""
        if stop_signal:
            self.bar.clear()
            self._preempted(signals.received or "a stop signal on another rank", step)
        if ended:
            self.say(logging.INFO, "an input ended at step %d before max_steps %d", step, self.run.max_steps)
        return ended

    def _preempted(self, signal_name, step):
        path = self.save()
        # a barrier: no rank exits (and makes the launcher kill the others) before the checkpoint is whole
        self.world.barrier()
        if self.world.is_chief:
            log.warning("stopped by %s at step %d; checkpoint %s written; launch the same command again to "
                        "resume from it", signal_name, step, path)
        raise TrainingPreempted(signal_name, step)
