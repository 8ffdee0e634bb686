"""Helpers of the tests that start real processes: launcher environment, Horovod's build, waiting."""
import os
import subprocess
import sys
import time

#: environment of launched ranks: quiet TensorFlow, mpirun allowed as root, unbuffered output, this venv first
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           PYTHONUNBUFFERED="1", PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))


def horovod_has(controller):
    """True if Horovod is installed and built with ``controller`` ('mpi' or 'gloo')."""
    try:
        out = subprocess.run([sys.executable, "-c", f"import horovod.tensorflow as h; print(h.{controller}_built())"],
                             capture_output=True, text=True, env=ENV, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.stdout.strip().endswith("True")


def wait_for(predicate, timeout, what):
    """Poll ``predicate`` every 0.5 s; AssertionError naming ``what`` after ``timeout`` s."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")
