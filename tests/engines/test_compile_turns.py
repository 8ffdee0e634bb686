"""Processes that need the same Numba kernel compiled take turns (pinn.engines.numba.warm_cache): one
compiles it into the on-disk cache while the others wait, then load it.  Real processes, a real lock
file and a real compilation, on a kernel small enough to compile in a second or two."""
import os
import subprocess
import sys
import time

KERNEL_MODULE = '''
import numba
from pinn.engines.numba.warm_cache import install


@numba.njit(cache=True)
def add_one(x):
    return x + 1.0


install(add_one)
'''

CALLER = '''
import logging
import sys
sys.path.insert(0, sys.argv[1])
logging.basicConfig(level=logging.INFO, format="%(message)s")
import numpy as np
import turn_kernel
print("result", turn_kernel.add_one(np.float64(1.0)), flush=True)
'''


def _wait_for(predicate, proc, timeout=120):
    end = time.time() + timeout
    while time.time() < end:
        if predicate():
            return True
        if proc.poll() is not None:
            return predicate()
        time.sleep(0.1)
    return False


def test_a_process_waits_while_another_compiles_the_kernel_then_loads_it(tmp_path):
    """The test holds the kernel's compile lock; a process that needs the kernel says it waits and
    compiles nothing; the test compiles the kernel into the cache (in a child, as pinn does) and lets go;
    the process then loads it from the cache and computes with it (a no-op lock: it compiles itself)."""
    import fcntl

    from numba.core import types

    from pinn.engines.numba.warm_cache import compile_in_child, compile_lock_path
    (tmp_path / "turn_kernel.py").write_text(KERNEL_MODULE)
    sys.path.insert(0, str(tmp_path))
    try:
        import turn_kernel
        lock_path = compile_lock_path(turn_kernel.add_one)
        assert lock_path is not None and os.path.basename(lock_path) == "turn_kernel.add_one.compile-lock"
        os.makedirs(os.path.dirname(lock_path), exist_ok=True)
        held = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666)
        fcntl.flock(held, fcntl.LOCK_EX)
        log = tmp_path / "caller.out"
        with open(log, "w") as out:
            proc = subprocess.Popen([sys.executable, "-c", CALLER, str(tmp_path)], stdout=out,
                                    stderr=subprocess.STDOUT, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
        try:
            assert _wait_for(lambda: "waiting for another process compiling add_one" in log.read_text(), proc), \
                log.read_text()
            time.sleep(0.5)
            assert proc.poll() is None, log.read_text()  # held at the lock
            assert compile_in_child(turn_kernel.add_one, (types.float64,))
        finally:
            os.close(held)
        proc.wait(timeout=120)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("turn_kernel", None)
    output = log.read_text()
    assert proc.returncode == 0, output
    assert "result 2.0" in output and "add_one (float64): waited" in output
    assert "compiling Numba kernels" not in output and "in this process" not in output, output
