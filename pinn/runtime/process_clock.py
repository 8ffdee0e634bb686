"""How long this process has run: the clock of a training run's time budget (``train.max_time``), which counts the
whole process (the interpreter and TensorFlow starting, the data read, the steps), as a user's wall clock does.

On Linux the age comes from the kernel (``/proc/self/stat``'s start time against the system's uptime); elsewhere
from the moment this module was first imported, which pinn does when it is imported itself, and the log line of a
budgeted run says which.
"""
import os
import time

_IMPORTED = time.monotonic()


def _age_from_proc():
    """Seconds since the process started, from ``/proc`` (Linux), or ``None``."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        start_ticks = float(fields[19])  # field 22 of proc(5), counted after the name's closing parenthesis
        return uptime - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _started():
    age = _age_from_proc()
    if age is None or age < 0:
        return _IMPORTED, "since pinn was imported"
    return time.monotonic() - age, "since the process started"


#: the monotonic time the process started (or pinn was imported), and how it was found
STARTED, SINCE = _started()


def process_seconds():
    """Seconds this process has run (:data:`SINCE` says from when)."""
    return time.monotonic() - STARTED
