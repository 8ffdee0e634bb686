"""One ``train()`` call: its plan (what to train, how long, the schedule) and its execution (the
step strategy and the hooks built from the run's parts, the loop under stop signals and the
stall watchdog).

:class:`~pinn.training.trainer.Trainer` is the facade: it checks the model may train, asks
:func:`plan_run` for the plan, :func:`prepare_run` for the model and the input made ready, and hands the
rest to an :class:`Execution` of that plan on the run's :class:`RunParts`.  Nothing here takes the Trainer: the
hooks get the parts they act on (the :class:`~pinn.training.state.TrainingState`, the step functions,
an :class:`~pinn.training.evaluation.Evaluation`).
"""
import dataclasses
import functools
import logging
from typing import Any, Callable, Optional

import tensorflow as tf

from pinn.inference.inputs import prepared_input
from pinn.training.budget import UNBOUNDED, BudgetHook, TimeBudget, parse_max_time
from pinn.training.guards import StopSignals, Watchdog
from pinn.training.hooks import CheckpointHook, DivergenceHook, MemoryHook, ProgressHook, ValidationHook
from pinn.training.epochs import steps_per_epoch_of
from pinn.training.loop import Run, TrainingLoop
from pinn.training.progress import ProgressBar
from pinn.training.recorder import RunRecorder
from pinn.training.schedule import learning_rate_of
from pinn.training.steps import StepFunctions
from pinn.training.strategies import choose_strategy

log = logging.getLogger("pinn")


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """What one ``train()`` call does.

    Attributes:
        input_fn: the training input (with ``max_epochs``: that many passes over the given one, repeated).
        eval_fn: the validation input, or ``None``.
        start: the global step the run starts from.
        max_steps: the global step it ends at.
        steps_per_epoch: steps of one pass over the input (``None``: the run is not counted in epochs).
        batches_per_step: batches in one step (``accumulate_batches`` × the world's local replicas).
        learning_rate: the schedule of the run (a cosine of unknown length spans this run, or its time budget).
        budget: the :class:`~pinn.training.budget.TimeBudget` of ``max_time``, or ``None``.
    """
    input_fn: Callable
    eval_fn: Optional[Callable]
    start: int
    max_steps: int
    steps_per_epoch: Optional[int]
    batches_per_step: int
    learning_rate: Any
    budget: Any = None

    def describe(self):
        """The run's length for the log: steps, and epochs when counted in them, or the time budget."""
        if self.budget is not None:
            cap = "" if self.max_steps == UNBOUNDED else f" (at most step {self.max_steps})"
            return f"the step its {self.budget.describe()} gives{cap}"
        if self.steps_per_epoch:
            return (f"{self.max_steps} ({self.max_steps / self.steps_per_epoch:g} epochs of "
                    f"{self.steps_per_epoch} steps)")
        return f"{self.max_steps}"


def whole_steps(max_steps):
    """``max_steps`` as an int (a whole number given as a float: upstream's notebooks write 5e3)."""
    if isinstance(max_steps, bool) or not float(max_steps).is_integer() or max_steps < 0:
        raise ValueError(f"train: max_steps must be a whole number of steps, got {max_steps!r}")
    return int(max_steps)


def plan_run(mp, world, start, input_fn, max_steps, max_epochs, eval_fn, learning_rate, max_time=None,
             run_clock=None):
    """The plan of a ``train()`` call, or ``None`` when ``start`` reaches its end already (logged).

    Args:
        mp: the resolved ``model.params``.
        world: the run's world.
        start: the global step now.
        input_fn, max_steps, max_epochs, eval_fn, max_time: as ``Trainer.train`` takes them.
        learning_rate: the model's schedule (kept, unless a cosine of unknown length must span this run or its
            time budget).
        run_clock: with ``max_time``: the training's :class:`~pinn.training.budget.RunClock`.

    Returns:
        :class:`RunPlan` or ``None``.

    Raises:
        ValueError: none of ``max_steps``, ``max_epochs`` and ``max_time``, or ``max_steps`` not a whole number.
        ParamsError: a ``max_time`` that is no time.
    """
    if max_steps is None and max_epochs is None and max_time is None:
        raise ValueError("train: give max_steps, max_epochs or max_time")
    if max_steps is not None:
        max_steps = whole_steps(max_steps)
    k = mp["accumulate_batches"] * world.local_replicas
    steps_per_epoch = None
    if max_epochs is not None:
        steps_per_epoch = steps_per_epoch_of(input_fn, k, world)
        by_epochs = int(round(max_epochs * steps_per_epoch))
        max_steps = by_epochs if max_steps is None else min(max_steps, by_epochs)
        input_fn = _epochs_of(input_fn, steps_per_epoch * k)
    if eval_fn is None and mp["early_stopping_patience"] is not None:
        log.warning("early_stopping_patience is set but train() got no eval_fn: no early stopping")
    if eval_fn is not None and mp["early_stopping_metric"] == "loss" and mp["loss_weight_schedule"]:
        log.warning("early_stopping_metric 'loss' with a loss_weight_schedule: the loss changes with the weights; "
                    "an error metric such as 'F_RMSE' picks the best checkpoint more reliably")
    budget = None
    if max_time is not None:
        budget = TimeBudget(parse_max_time(max_time, "max_time"), run_clock)
        max_steps = UNBOUNDED if max_steps is None else max_steps
    if start >= max_steps:
        log.info("step %d already reaches max_steps %d: nothing to train", start, max_steps)
        return None
    if budget is not None and budget.run_clock() >= budget.end_s:
        log.info("the %s is spent: nothing to train", budget.describe())
        return None
    if mp["lr_schedule"] == "cosine" and not mp["lr_cosine_steps"]:
        learning_rate = learning_rate_of(mp, world, max_steps, quiet=True)
        if budget is not None:
            learning_rate.lay_over_budget(max_steps)
    return RunPlan(input_fn, eval_fn, start, max_steps, steps_per_epoch, k, learning_rate, budget)


def _epochs_of(input_fn, n_batches):
    """The input of a run counted in epochs: the first ``n_batches`` of each pass, repeated."""
    return lambda: input_fn().take(n_batches).repeat()


class StepFunctionsCache:
    """The step functions of a Trainer's runs, made anew when the input's spec or the schedule changes.

    Args:
        state: the :class:`~pinn.training.state.TrainingState`.
        world: the run's world.
        backend: the gradient backend.
        max_grad_norm: ``model.params.max_grad_norm``.

    Attributes:
        current: the latest :class:`~pinn.training.steps.StepFunctions`, or ``None`` before the first run.
    """

    def __init__(self, state, world, backend, max_grad_norm):
        self.state = state
        self.world = world
        self.backend = backend
        self.max_grad_norm = max_grad_norm
        self.current = None
        self._spec = None
        self._learning_rate = None

    def __call__(self, spec, learning_rate):
        """The step functions for batches of ``spec`` and the schedule ``learning_rate``."""
        if self.current is None or self._spec != spec or self._learning_rate is not learning_rate:
            self.current = StepFunctions(spec, self.state, learning_rate, self.world, self.backend,
                                         self.max_grad_norm)
            self._spec = spec
            self._learning_rate = learning_rate
        return self.current


def prepare_run(plan, parts, steps_of):
    """The model and the input made ready for ``plan``: the model prepared (e.g. ``fit_e_dress``, then rank 0's
    state broadcast), the input with its neighbor lists (batches a resume has trained skipped, with
    ``data_resume: skip``), the step functions, ``params.yml`` written now that the input is accepted, a first
    checkpoint to roll back to, the line that says what the run does.

    Args:
        plan: the :class:`RunPlan`.
        parts: the Trainer's :class:`~pinn.training.parts.TrainerParts`.
        steps_of: ``(spec, learning_rate) -> StepFunctions`` (a :class:`StepFunctionsCache`).

    Returns:
        ``(dataset, RunParts)``: the prepared training input and what the execution acts on.
    """
    state = parts.state
    world = parts.world
    backend = parts.backend
    mp = parts.params["model"]["params"]
    if parts.model.prepare_training(plan.input_fn, world.allreduce_sum_numpy, world.local_replicas):
        state.broadcast()
    backend.reload()
    skip = plan.start * plan.batches_per_step if mp["data_resume"] == "skip" else 0
    dataset = prepared_input(plan.input_fn, parts.network, skip=skip, pad=backend.jit, parts=backend.parts)
    steps = steps_of(dataset.element_spec, plan.learning_rate)
    state.write_params()  # the input is accepted: params.yml, if pending (every rank in step)
    if world.is_chief and not state.store.latest:
        state.save()  # something to roll back to
    _log_start(plan, parts)
    return dataset, RunParts(state, steps, parts.evaluation, world, mp, parts.params["model_dir"])


def _log_start(plan, parts):
    """The line that says what a run trains, how long, where and how."""
    state = parts.state
    world = parts.world
    mp = parts.params["model"]["params"]
    if world.local_replicas > 1:
        where = f"{world.local_replicas} devices of one process"
    else:
        where = f"{world.size} rank(s)"
    average = f"; weight average with decay {mp['ema_decay']:g}" if state.ema is not None else ""
    kalman = f"{state.kalman.describe()}; " if state.kalman is not None else ""
    log.info("training %s from step %d to %s on %s; %s%s; %sgradients by %s; model_dir %s",
             parts.params["network"]["name"], plan.start, plan.describe(), where, plan.learning_rate.describe(),
             average, kalman, parts.backend.describe(), parts.params["model_dir"])


@dataclasses.dataclass
class RunParts:
    """What the execution of a run acts on.

    Attributes:
        state: the :class:`~pinn.training.state.TrainingState` (save, rollback, copies, the store).
        steps: the :class:`~pinn.training.steps.StepFunctions` of the input's spec and the run's schedule.
        evaluation: the :class:`~pinn.training.evaluation.Evaluation` the validation calls.
        world: the run's world.
        mp: the resolved ``model.params``.
        model_dir: the model directory (records, parity arrays).
    """
    state: Any
    steps: Any
    evaluation: Any
    world: Any
    mp: dict
    model_dir: str


class Execution:
    """The execution of a :class:`RunPlan`: the step strategy chosen once, the hooks built from the run's
    parts, then the loop under stop signals and the stall watchdog.

    Attributes:
        bar: the progress bar (cleared before a log line).
        validation: the :class:`~pinn.training.hooks.ValidationHook`, or ``None`` without ``eval_fn``.
    """

    def __init__(self, plan, parts):
        self.plan = plan
        self.parts = parts
        mp = parts.mp
        enabled = {"auto": None, "on": True, "off": False}[mp["progress_bar"]]
        self.bar = ProgressBar(enabled=enabled if parts.world.is_chief else False)
        self.validation = None

    def _loop(self, run):
        """The :class:`~pinn.training.loop.TrainingLoop` of ``run`` and its hooks, each given the parts it needs."""
        parts = self.parts
        state = parts.state
        steps = parts.steps
        mp = parts.mp
        world = parts.world
        strategy = choose_strategy(steps, self.plan.batches_per_step, mp["log_every_n_steps"], state.kalman,
                                   mp.get("separate_errors", False))
        loop = TrainingLoop(strategy, steps.unpack, [], run, world, state.save, self.bar)
        checkpoints = CheckpointHook(mp["save_checkpoint_steps"], state.save)

        def end_cost():  # the longest checkpoint and validation so far: what the run's end will take
            return checkpoints.longest_s + (self.validation.longest_s if self.validation is not None else 0.0)

        hooks = [] if self.plan.budget is None else [  # first: the hooks after it see the end step it sets
            BudgetHook(self.plan.budget, world, run, self.plan.start, self.plan.max_steps, self.plan.learning_rate,
                       loop.say, end_cost)]
        hooks += [DivergenceHook(mp, world, lambda: state.rollback(loop.say), state.copy,
                                functools.partial(state.restore_copy, say=loop.say), loop.say),
                 ProgressHook(run, world, mp["log_every_n_steps"], steps.current_learning_rate,
                              lambda: state.store.latest, self.bar, loop.say)]
        if run.eval_fn is not None:
            self.validation = ValidationHook(run, mp["eval_every_n_steps"] or mp["save_checkpoint_steps"],
                                             parts.evaluation.with_parity, state.early_stopping, state.store,
                                             parts.model_dir, loop.say)
            hooks.append(self.validation)
        loop.hooks = hooks + [MemoryHook(mp["max_oom_skips"], world, state.save, loop.say), checkpoints]
        return loop

    def __call__(self, dataset):
        """Train on ``dataset`` (its batches, prepared) from the plan's start to its end (or an input's end,
        early stopping, a stop signal)."""
        plan = self.plan
        parts = self.parts
        state = parts.state
        world = parts.world
        recorder = RunRecorder(parts.model_dir, enabled=world.is_chief, tensorboard=parts.mp["tensorboard"])
        loop = self._loop(Run(plan.max_steps, plan.steps_per_epoch, plan.eval_fn, recorder))
        timeout = world.options["stall_timeout_s"] if world.is_parallel else None
        last_checkpoint = state.store.last_checkpoint_text
        with StopSignals(last_checkpoint) as signals, Watchdog(timeout, last_checkpoint) as watchdog:
            try:
                loop(iter(dataset), signals, watchdog, plan.start)
            except KeyboardInterrupt:
                self.bar.clear()
                log.warning("interrupted at step %d: writing a checkpoint", int(state.step.numpy()))
                state.save()
                raise
            except (tf.errors.UnknownError, tf.errors.InternalError, tf.errors.AbortedError) as err:
                if not world.is_parallel or "Horovod" not in str(err):
                    raise
                raise RuntimeError(f"rank {world.rank}: a collective operation failed at step "
                                   f"{int(state.step.numpy())}, most likely because another rank died; "
                                   f"{state.store.last_checkpoint_text()}") from err
            finally:
                state.backend.store()
                self.bar.clear()
                recorder.close()
