"""A training run's time budget: ``train: {max_time: 15m}`` in a run file, ``pinn train --max-time 15m``,
``Trainer.train(..., max_time=900)``.

Users give a run the wall-clock time it may take (a Slurm walltime, the minutes an active-learning round may
spend), not a step count.  With a budget:

- the run's end step is projected from the measured step rate (steps per second of wall time, validations and
  checkpoints included) and the time left, and projected again as the run goes (:class:`BudgetHook`); the
  learning rate's cosine (``lr_schedule: cosine`` without ``lr_cosine_steps``) is laid over that end step, so
  the run ends at the bottom of its schedule, not mid-way;
- the run ends at that step as it ends at ``max_steps``: the last validation, the best and the last checkpoints
  (the weight average's weights are in them); with ``max_steps`` as well, whichever comes first ends it;
- every rank stops at the same step: the projection is made from the ranks' clocks agreed by one allgather (the
  slowest rank's) at steps every rank computes alike;
- under ``pinn train`` the time counts from the start of the process (the interpreter, TensorFlow, the data
  read: what the user's clock sees) for its first training; a training a script or a notebook starts (and every
  later one of ``pinn train --committee``) counts from its own start; a resumed run counts the time its checkpoint
  says was already spent (``elapsed_s``, saved in every checkpoint);
- ``max_time: slurm`` takes the job's end (``SLURM_JOB_END_TIME``, else ``squeue``) less :data:`SLURM_MARGIN_S`.

A part of the budget (:func:`reserve_of`) and the longest validation and checkpoint so far are left for the end of
the run (its last validation and checkpoint). A first step that took more than :data:`FIRST_STEP_SHARE` of the
budget (tracing, and on a fresh installation compiling the Numba kernels) is warned about.
"""
import logging
import math
import os
import re
import subprocess
import time

import numpy as np

from pinn.runtime.process_clock import SINCE, process_seconds
from pinn.schema import ParamsError
from pinn.training.hooks import Hook

log = logging.getLogger("pinn")

#: ``max_time: slurm``: the budget ends this many seconds before the job's end (the run's end, a margin)
SLURM_MARGIN_S = 60.0
SLURM = "slurm"
#: the share of the budget past which the first step's time (tracing, compiling) is warned about
FIRST_STEP_SHARE = 0.2
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}
_FORM = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([smh]?)\s*$")


def parse_max_time(value, key="train.max_time"):
    """A budget as written: seconds (a number, or a text ending in ``s``, ``m`` or ``h``: ``90s``, ``15m``,
    ``1.5h``) or ``slurm``.

    Returns:
        float seconds, or :data:`SLURM`.

    Raises:
        ParamsError: naming ``key``.
    """
    if isinstance(value, bool):
        raise ParamsError(f"{key}: {value!r} is not a time; give seconds or a text such as 90s, 15m, 1.5h, or slurm")
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str) and value.strip().lower() == SLURM:
        return SLURM
    else:
        match = _FORM.match(str(value))
        if match is None:
            raise ParamsError(f"{key}: {value!r} is not a time; give seconds or a text such as 90s, 15m, 1.5h, "
                              "or slurm")
        seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    if not math.isfinite(seconds) or seconds <= 0:
        raise ParamsError(f"{key}: {value!r}: a budget is a positive time")
    return seconds


def slurm_seconds_left(environ=None, now=None, squeue=None):
    """Seconds until the Slurm job this process runs in ends.

    Args:
        environ: the environment (``os.environ``): ``SLURM_JOB_END_TIME`` (Unix time, Slurm ≥ 21.08), else
            ``SLURM_JOB_ID`` to ask ``squeue``.
        now: Unix time now (``time.time()``).
        squeue: ``job_id -> end time text`` (``squeue -h -j ID -o %e``, local time ``YYYY-MM-DDTHH:MM:SS``).

    Raises:
        ParamsError: not in a Slurm job, or a job without an end time.
    """
    environ = os.environ if environ is None else environ
    now = time.time() if now is None else now
    if environ.get("SLURM_JOB_END_TIME"):
        return float(environ["SLURM_JOB_END_TIME"]) - now
    job = environ.get("SLURM_JOB_ID")
    if not job:
        raise ParamsError("train.max_time: slurm: this process is not in a Slurm job (no SLURM_JOB_END_TIME, no "
                          "SLURM_JOB_ID); give a time such as 15m")
    text = (squeue or _squeue_end)(job).strip()
    try:
        end = time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        raise ParamsError(f"train.max_time: slurm: job {job} has no end time squeue can tell ({text!r}); give a "
                          "time such as 15m") from None
    return end - now


def _squeue_end(job):
    done = subprocess.run(["squeue", "-h", "-j", str(job), "-o", "%e"], capture_output=True, text=True, timeout=30)
    return done.stdout


def reserve_of(seconds):
    """Seconds of a budget left for the run's end (its last validation and checkpoints): 3 % and 2 s."""
    return 0.03 * seconds + 2.0


_count_from_process_start = False


def count_the_process():
    """Make the next training's clock count from the start of the process (``pinn train``: the whole command is
    the user's run)."""
    global _count_from_process_start
    _count_from_process_start = True


class RunClock:
    """The clock of one training: seconds since its own start, or since the process started for the first one
    after :func:`count_the_process`; plus the time already spent before (a resumed run's ``elapsed_s``).

    Args:
        clock: seconds since the process started (:func:`pinn.runtime.process_clock.process_seconds`).
    """

    def __init__(self, clock=process_seconds):
        global _count_from_process_start
        self.clock = clock
        if _count_from_process_start:
            self.origin, self.since = 0.0, SINCE
            _count_from_process_start = False
        else:
            self.origin, self.since = clock(), "since the training started"
        self.spent_before = 0.0

    def __call__(self):
        """Seconds this training has taken, the resumed runs' before it included."""
        return self.spent_before + self.clock() - self.origin


class TimeBudget:
    """When a run's budget ends, on its :class:`RunClock`.

    Args:
        max_time: seconds, or :data:`SLURM` (the job's end less :data:`SLURM_MARGIN_S`).
        run_clock: the :class:`RunClock`.
        slurm_left: ``() -> seconds`` until the job ends (:func:`slurm_seconds_left`).

    Attributes:
        total_s: the budget (s; for Slurm: what the run has taken plus what is left of the job, less the margin).
        end_s: the run clock's reading at which the steps must end (the budget less :func:`reserve_of`).
    """

    def __init__(self, max_time, run_clock, slurm_left=slurm_seconds_left):
        self.run_clock = run_clock
        if max_time == SLURM:
            self.total_s = run_clock() + slurm_left() - SLURM_MARGIN_S
            self.source = f"the Slurm job's end less {SLURM_MARGIN_S:g} s"
        else:
            self.total_s = float(max_time)
            self.source = "max_time"
        self.end_s = self.total_s - reserve_of(self.total_s)

    def describe(self):
        spent = self.run_clock()
        return (f"time budget {self.total_s:.0f} s ({self.source}; counted {self.run_clock.since}"
                f"{'; %.0f s spent before' % self.run_clock.spent_before if self.run_clock.spent_before else ''}), "
                f"{spent:.0f} s spent, the steps end by {self.end_s:.0f} s")


class BudgetHook(Hook):
    """Ends a run inside its :class:`TimeBudget`, at the same step on every rank, and lays the cosine over it.

    At steps every rank computes alike (the first two steps after the start, then about every 2 % of the budget
    at the measured rate), the ranks agree on the clock (the slowest rank's reading, one allgather), project the
    end step (the step rate over the latest tenth of the budget times the time left, at most ``cap``; the first
    step, which traces and compiles, is not in the rate), make it the run's ``max_steps`` (the loop, the progress
    line and the last validation follow it) and the schedule's length. The cosine's length is so known from the
    run's third step on; a warm-up (``lr_warmup_steps``) of two steps or more starts the decay after it.

    Args:
        budget: the :class:`TimeBudget`.
        world: the run's world.
        run: the :class:`~pinn.training.loop.Run` (its ``max_steps`` is set here).
        start: the global step the run starts from.
        cap: the run's last step at most (``max_steps`` or ``max_epochs``; :data:`UNBOUNDED` without them).
        learning_rate: the run's :class:`~pinn.training.schedule.LearningRate` (its length follows the projection
            when it :meth:`~pinn.training.schedule.LearningRate.follows_budget`).
        say: ``(level, message, *args)``: log below the progress bar.
        end_cost: ``() -> s``: what the run's end will take (the longest validation and checkpoint so far),
            left besides the reserve.
    """

    def __init__(self, budget, world, run, start, cap, learning_rate, say, end_cost=lambda: 0.0):
        self.budget = budget
        self.world = world
        self.run = run
        self.cap = cap
        self.learning_rate = learning_rate
        self.say = say
        self.end_cost = end_cost
        self.next_check = start + 1
        self.readings = []  # (step, agreed clock) of the checks
        self.rate = None
        self.steps_began_s = budget.run_clock()  # the run clock when the steps begin: the first step is timed from it

    def _agreed(self, *readings):
        """The ranks' readings agreed: each the largest over the ranks (the slowest rank's clock)."""
        return self.world.allgather_numpy(np.asarray(readings, np.float64)).max(axis=0)

    def on_step_end(self, report):
        step = report.step
        if step < self.next_check:
            return False
        now, end_cost = self._agreed(self.budget.run_clock(), self.end_cost())
        if not self.readings:  # the first step traces and compiles the step function: the rate is measured after it
            self._say_if_the_first_step_took_much(now)
            self.readings.append((step, now))
            self.next_check = step + 1
            if now >= self.budget.end_s - end_cost:
                self.run.max_steps = step
            return False
        # steps per second, validations and checkpoints included, over the latest 10 % of the budget (the rate
        # changes: a cached input is faster after its first epoch)
        window = 0.1 * self.budget.total_s
        recent = [reading for reading in self.readings if now - reading[1] <= window] or self.readings[-1:]
        then_step, then = recent[0]
        self.rate = rate = (step - then_step) / max(now - then, 1e-9)
        self.readings.append((step, now))
        left = self.budget.end_s - end_cost - now
        end = min(self.cap, step + max(int(math.floor(rate * left + 1e-6)), 0))
        self.run.max_steps = end
        if self.learning_rate.follows_budget():
            self.learning_rate.set_total(end)
        interval = min(max(0.02 * self.budget.total_s, 1.0), 60.0)
        self.next_check = step + max(1, int(rate * interval))
        return False

    def _say_if_the_first_step_took_much(self, now):
        """A warning when the first step (tracing the step function, compiling the engine's kernels) took more
        than :data:`FIRST_STEP_SHARE` of the budget: a short budget on a fresh installation is mostly spent there."""
        first_s = now - self.steps_began_s
        if first_s > FIRST_STEP_SHARE * self.budget.total_s:
            self.say(logging.WARNING, "time budget: the first step took %.0f s, %.0f %% of the %.0f s budget (it "
                     "traces the step function and, with the Numba engine on a fresh installation, compiles its "
                     "kernels; they are cached on disk, so the next run on this machine does not compile them "
                     "again)", first_s, 100.0 * first_s / self.budget.total_s, self.budget.total_s)

    def on_run_end(self, step):
        spent = self.budget.run_clock()
        rate = "" if self.rate is None else f" at {self.rate:.3g} steps/s"
        self.say(logging.INFO, "time budget: steps ended at step %d%s, %.1f s of %.0f s spent (the rest is the "
                 "run's end: validation, checkpoints)", step, rate, spent, self.budget.total_s)


#: the end step of a run given a time budget alone (the budget ends it)
UNBOUNDED = 2 ** 62
