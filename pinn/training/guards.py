"""What keeps a long training run safe: stop signals and a stall watchdog.

- :class:`StopSignals` catches SIGTERM and SIGUSR1 (Slurm's walltime and
  preemption signals) while training runs, so the trainer can agree with
  the other ranks, write a checkpoint and exit with
  :data:`PREEMPTED_EXIT_CODE` instead of dying mid-step.
- :class:`Watchdog` ends a process whose training step has not finished
  within a time limit, which is what happens to the surviving ranks of a
  parallel job when one rank dies inside a collective operation.
- :class:`DivergenceGuard` rolls back after non-finite losses, and
  :class:`LossJumpGuard` after a finite loss that jumps far above its running
  level (Adam's occasional blow-ups, which take thousands of steps to recover).
"""
import collections
import logging
import math
import os
import signal
import threading
import time

from pinn.files.lock import release_all

log = logging.getLogger("pinn")

#: exit status of a run stopped by SIGTERM/SIGUSR1 after writing its checkpoint
#: (EX_TEMPFAIL of sysexits.h: "try again later"); a job script may requeue on it
PREEMPTED_EXIT_CODE = 75
#: exit status of a process ended by the watchdog
STALLED_EXIT_CODE = 70

STOP_SIGNALS = ("SIGTERM", "SIGUSR1")


class TrainingPreempted(SystemExit):
    """Raised on every rank after a stop signal, once the checkpoint is written.

    It is a :class:`SystemExit`, so an uncaught one ends the script quietly
    with :data:`PREEMPTED_EXIT_CODE`; ``args[1:]`` hold the signal name and the step.
    """

    def __init__(self, signal_name, step):
        super().__init__(PREEMPTED_EXIT_CODE)
        self.signal_name = signal_name
        self.step = step


class StopSignals:
    """Context manager: while inside, SIGTERM/SIGUSR1 set :attr:`received` instead of killing the process.

    The one line that says so (with where the last checkpoint is) is written at once by a thread of
    its own, woken through :func:`signal.set_wakeup_fd`: Python runs a signal handler only when the
    main thread next runs Python code, which never comes for a rank held inside a collective whose
    peer is gone (a lost node) before the launcher's SIGKILL.  Handlers can only be installed from
    the main thread; elsewhere this does nothing (and :attr:`received` stays ``None``).  The previous
    handlers and wakeup fd are put back on exit.

    Args:
        describe: function returning where the last checkpoint is, said with the signal: a launcher that
            lost a node signals the ranks that survive, whose step then never ends.
    """

    def __init__(self, describe=lambda: ""):
        self.received = None
        self.describe = describe
        self._previous = {}
        self._said = threading.Lock()
        self._pipe = self._announcer = None
        self._previous_fd = -1

    def _handler(self, signum, frame):
        self._say(signum)
        self.received = signal.Signals(signum).name

    def _say(self, signum):
        """Writes the signal's one line, once per run, whichever thread comes first."""
        if self._said.acquire(blocking=False):
            where = self.describe()
            log.warning("received %s: stopping after this step with a checkpoint%s", signal.Signals(signum).name,
                        f" (until then {where})" if where else "")
            for handler in log.handlers:
                handler.flush()

    def _announce(self, read_end, stops):
        """The announcer thread: one byte per signal from the wakeup fd (0 from :meth:`__exit__` ends it);
        ``stops``: the numbers of the signals handled here."""
        while True:
            try:
                got = os.read(read_end, 1)
            except InterruptedError:
                continue
            if not got or got[0] == 0:
                return
            if got[0] in stops:
                self._say(got[0])

    def __enter__(self):
        if threading.current_thread() is not threading.main_thread():
            return self
        for name in STOP_SIGNALS:
            sig = getattr(signal, name, None)
            if sig is not None:
                self._previous[sig] = signal.signal(sig, self._handler)
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)
        try:
            self._previous_fd = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
        except ValueError:  # not the main interpreter
            os.close(read_end), os.close(write_end)
            return self
        self._pipe = (read_end, write_end)
        stops = {int(sig) for sig in self._previous}
        self._announcer = threading.Thread(target=self._announce, args=(read_end, stops), name="pinn-stop-signals",
                                           daemon=True)
        self._announcer.start()
        return self

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}
        if self._pipe:
            signal.set_wakeup_fd(self._previous_fd)
            read_end, write_end = self._pipe
            os.set_blocking(write_end, True)
            os.write(write_end, b"\0")
            self._announcer.join(timeout=5)
            os.close(read_end), os.close(write_end)
            self._pipe = self._announcer = None
        return False


class Watchdog:
    """Ends the process if :meth:`beat` is not called for ``timeout_s`` seconds.

    Args:
        timeout_s: the limit, s; ``None`` disables the watchdog.
        describe: function returning a text appended to the error (e.g. where
            the last checkpoint is).
    """

    def __init__(self, timeout_s, describe=lambda: ""):
        self.timeout_s = timeout_s
        self.describe = describe
        self._last = time.monotonic()
        self._done = threading.Event()
        self._thread = None

    def beat(self):
        self._last = time.monotonic()

    def _watch(self):
        period = min(5.0, self.timeout_s / 4)
        while not self._done.wait(period):
            idle = time.monotonic() - self._last
            if idle > self.timeout_s:
                log.error("no training step finished in %.0f s (stall_timeout_s %.0f): another rank has probably "
                          "died or hangs; ending this process. %s", idle, self.timeout_s, self.describe())
                for handler in log.handlers:
                    handler.flush()
                release_all()  # the model directory's lock: os._exit skips atexit
                os._exit(STALLED_EXIT_CODE)

    def __enter__(self):
        if self.timeout_s:
            self.beat()
            self._thread = threading.Thread(target=self._watch, name="pinn-watchdog", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        return False


class TrainingDiverged(FloatingPointError):
    """Non-finite losses, or loss jumps, persisted through ``max_rollbacks`` rollbacks."""


class DivergenceGuard:
    """Counts steps skipped for a non-finite loss or gradient and says when to roll back.

    Args:
        max_nonfinite_steps: roll back after this many skipped steps in a row.
        max_rollbacks: raise :class:`TrainingDiverged` at the rollback after this many (in one
            ``train()`` call).
    """

    def __init__(self, max_nonfinite_steps, max_rollbacks):
        self.max_nonfinite_steps = max_nonfinite_steps
        self.max_rollbacks = max_rollbacks
        self.streak = self.rollbacks = 0

    def record(self, applied, step):
        """Count a step; returns whether the run must roll back now.

        Args:
            applied: whether the step's update was applied (its loss and gradient were finite).
            step: the step's number, for the error message.

        Raises:
            TrainingDiverged: a rollback beyond ``max_rollbacks``.
        """
        if applied:
            self.streak = 0
            return False
        self.streak += 1
        if self.streak < self.max_nonfinite_steps:
            return False
        self.rollbacks += 1
        if self.rollbacks > self.max_rollbacks:
            raise TrainingDiverged(f"step {step}: the loss stayed non-finite after {self.max_rollbacks} "
                                   f"rollbacks; lower model.params.learning_rate or check the data")
        self.streak = 0
        return True


class LossJumpGuard:
    """Watches the training loss for a jump and keeps an in-memory copy of a state from before it.

    The loss level is the median of the last ``window`` step losses (a single outlier batch does not
    move it); its running reference is an exponential average of that median over ``8 × window``
    steps, updated while the level is healthy (at most √``factor`` × the reference).  A level above
    ``factor`` × the reference is a jump: :meth:`record` then returns the state to go back to.

    The states are copies of the training state (``take()``) every ``2 × window`` steps; a copy becomes
    the one rolled back to only after the next ``2 × window`` steps stayed healthy, so the state
    restored was taken at least that long before the jump showed (a jump shows within ``window / 2``
    steps).  The loss given must be the same on every rank (the allreduced loss), so every rank
    decides alike.  Before the first copy is confirmed (the first ``5 × window`` steps of a run) a jump
    is not acted on.

    Args:
        factor: the jump, as a multiple of the reference (> 1).
        window: steps in the median.
        max_rollbacks: raise :class:`TrainingDiverged` at the jump after this many rollbacks (in one
            ``train()`` call).
        take: function returning a copy of the training state (restored by the caller).
    """

    def __init__(self, factor, window, max_rollbacks, take):
        self.factor = factor
        self.window = window
        self.max_rollbacks = max_rollbacks
        self.take = take
        self.every = 2 * window
        self.losses = collections.deque(maxlen=window)
        self.reference = None
        self.good = self.pending = None  # (step, state): the state to roll back to; the next candidate
        self.suspect = False  # an unhealthy level since the pending copy was taken
        self.rollbacks = 0

    def level(self):
        """The median of the last ``window`` losses (``None`` before the window is full)."""
        if len(self.losses) < self.window:
            return None
        ordered = sorted(self.losses)
        middle = len(ordered) // 2
        return ordered[middle] if len(ordered) % 2 else 0.5 * (ordered[middle - 1] + ordered[middle])

    def record(self, loss, step):
        """Count the loss of an applied step.

        Args:
            loss: the step's loss (float, the same on every rank).
            step: the step's number.

        Returns:
            ``None``, or ``(step, state, ratio)`` when the loss jumped: the copy to restore, the step it
            was taken at, and the level over the reference.

        Raises:
            TrainingDiverged: a jump after ``max_rollbacks`` rollbacks (its ``restore`` attribute holds
                what the return value would).
        """
        self.losses.append(float(loss))
        level = self.level()
        if level is None:
            return None
        if self.reference is None:
            self.reference = level
        ratio = level / self.reference if self.reference > 0 else math.inf
        if ratio > self.factor and self.good is not None:
            return self._jumped(step, ratio)
        if ratio > math.sqrt(self.factor):
            self.suspect = True
        else:
            self.reference += (level - self.reference) / (8 * self.window)
        if step % self.every == 0:
            if self.pending is not None and not self.suspect:
                self.good = self.pending
            self.pending = (step, self.take())
            self.suspect = False
        return None

    def _jumped(self, step, ratio):
        self.rollbacks += 1
        self.reset()
        if self.rollbacks > self.max_rollbacks:
            err = TrainingDiverged(f"step {step}: the loss jumped to {ratio:.3g} × its running level again after "
                                   f"{self.max_rollbacks} rollbacks; lower model.params.learning_rate or check "
                                   f"the data")
            err.restore = self.good + (ratio,)
            raise err
        return self.good + (ratio,)

    def reset(self):
        """Start the window and the candidate copy afresh (after any rollback); the reference and the
        state to roll back to stay."""
        self.losses.clear()
        self.pending = None
        self.suspect = False
