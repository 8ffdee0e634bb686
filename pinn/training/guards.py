"""What keeps a long training run safe: stop signals and a stall watchdog.

- :class:`StopSignals` catches SIGTERM and SIGUSR1 (Slurm's walltime and
  preemption signals) while training runs, so the trainer can agree with
  the other ranks, write a checkpoint and exit with
  :data:`PREEMPTED_EXIT_CODE` instead of dying mid-step.
- :class:`Watchdog` ends a process whose training step has not finished
  within a time limit, which is what happens to the surviving ranks of a
  parallel job when one rank dies inside a collective operation.
"""
import logging
import os
import signal
import threading
import time

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
        self.signal_name, self.step = signal_name, step


class StopSignals:
    """Context manager: while inside, SIGTERM/SIGUSR1 set :attr:`received` instead of killing the process.

    Handlers can only be installed from the main thread; elsewhere this does
    nothing (and :attr:`received` stays ``None``).  The previous handlers are
    put back on exit.
    """

    def __init__(self):
        self.received = None
        self._previous = {}

    def _handler(self, signum, frame):
        name = signal.Signals(signum).name
        if self.received is None:
            log.warning("received %s: stopping after this step with a checkpoint", name)
        self.received = name

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for name in STOP_SIGNALS:
                sig = getattr(signal, name, None)
                if sig is not None:
                    self._previous[sig] = signal.signal(sig, self._handler)
        return self

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}
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
    """Non-finite losses persisted through ``max_rollbacks`` rollbacks."""


class DivergenceGuard:
    """Counts steps skipped for a non-finite loss or gradient and says when to roll back.

    Args:
        max_nonfinite_steps: roll back after this many skipped steps in a row.
        max_rollbacks: raise :class:`TrainingDiverged` at the rollback after this many (in one
            ``train()`` call).
    """

    def __init__(self, max_nonfinite_steps, max_rollbacks):
        self.max_nonfinite_steps, self.max_rollbacks = max_nonfinite_steps, max_rollbacks
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
