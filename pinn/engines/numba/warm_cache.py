"""Every process runs its Numba kernels from the on-disk cache: new kernels are compiled in a child.

Why: the kernels are compiled with ``fastmath`` (``reassoc`` lets LLVM vectorise the sums), and
the machine code of a kernel compiled in the running process (its callees compiled there too)
and the code that Numba loads from its cache reassociate a few sums differently.  Results then
differed in the last bit between a run with an empty ``NUMBA_CACHE_DIR`` (compiled in the
process) and the same run with a warm one (loaded): the training engine's weight gradients by
1 ulp in a few entries from the first step, so a run's numbers depended on the cache state.

What: :func:`install` hooks a dispatcher's ``_compile_for_args``, which Numba's C dispatcher calls
only when a call from Python finds no compiled signature (so a call that finds one costs
nothing more).  The hook computes the call's signature as Numba does; when the on-disk cache
does not hold it, a child process (``sys.executable``, the same environment: ``NUMBA_CACHE_DIR``,
``NUMBA_NUM_THREADS``, ...) compiles it, and Numba's cache stores it with its callees; then the
dispatcher goes on as usual and loads it from the cache.  Every process, with a cold cache or a
warm one, thus runs the same object code.  Only kernels called from Python need it: callees are
compiled (and cached) in the child with the kernel that calls them.

Processes that need the same kernel compiled take turns (a lock file per kernel beside its cache
entries, ``<module>.<kernel>.compile-lock``, held with ``flock`` and released by the kernel's
process when it ends, whatever the end): the ranks of a parallel run started on a cold cache, or
two runs on one machine, compile each kernel once; the others wait (one log line says so) and
then load it.  Without a lock file (a cache directory that cannot be written) each compiles.

When the child fails, or the cache cannot be written, the kernel is compiled in the process as
before and one log line (``logging.getLogger("pinn")``) says that results then depend on the
compilation.  With ``NUMBA_DISABLE_JIT`` there are no dispatchers and nothing is hooked.

The check whether the cache holds a signature uses Numba's internal
``dispatcher._cache.load_overload`` (what the dispatcher itself calls; Numba has no public
call): it is guarded, and should it fail (another Numba version) the child is asked anyway,
which loads from the cache what is there and costs a second only.

NumPy and Numba only (no TensorFlow); :mod:`pinn.engines.numba.md_kernels` applies it to every
kernel it makes (``_jit``).
"""
import contextlib
import logging
import os
import pickle
import subprocess
import sys
import tempfile
import threading
import time

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no turns, each process compiles
    fcntl = None

try:
    import numba
    from numba.core.dispatcher import Dispatcher, OmittedArg
    from numba.core import types as _nb_types
except ImportError:  # pragma: no cover - numba is a dependency
    numba = None

log = logging.getLogger("pinn")

#: set in the child's environment: there the kernels are compiled in the process
CHILD_ENV = "PINN_NUMBA_COMPILE_CHILD"

_lock = threading.RLock()
_told = set()

# the child: restores the parent's sys.path, imports the kernel's module and compiles the
# signature (Numba writes it, with the callees it compiles, to the cache)
_CHILD = r"""
import importlib, pickle, sys
with open(sys.argv[1], "rb") as f:
    path, module, name, sig = pickle.load(f)
sys.path[:] = path
dispatcher = getattr(importlib.import_module(module), name)
dispatcher.compile(sig)
stats = dispatcher.stats
if sig not in stats.cache_hits and sig not in stats.cache_misses:
    sys.exit("the signature was neither loaded nor compiled")
"""


def _tell_once(key, message, *args, level=logging.WARNING):
    if key not in _told:
        _told.add(key)
        log.log(level, message, *args)


def _signature(dispatcher, args):
    """The signature Numba compiles for ``args`` (as ``Dispatcher._compile_for_args`` computes it)."""
    return tuple(_nb_types.Omitted(a.value) if isinstance(a, OmittedArg) else dispatcher.typeof_pyval(a)
                 for a in args)


def _in_cache(dispatcher, sig):
    """Whether the on-disk cache holds ``sig`` (False when unknown: the child is asked then)."""
    try:
        return dispatcher._cache.load_overload(sig, dispatcher.targetctx) is not None
    except Exception:  # pragma: no cover - Numba internals of another version
        return False


def _name(dispatcher, sig):
    """The kernel's name and its arrays' dtypes, e.g. ``_weight_gradients (float32, float64, int32, int64)``."""
    dtypes = sorted({str(getattr(t, "dtype", t)) for t in sig})
    return "%s (%s)" % (dispatcher.py_func.__name__, ", ".join(dtypes))


def compile_in_child(dispatcher, sig):
    """Compile ``dispatcher`` for ``sig`` in a child process, into Numba's on-disk cache.

    Returns True when the child succeeded; on failure logs why (once per kernel) and returns
    False (the caller then compiles in the process).
    """
    py = dispatcher.py_func
    module, name = py.__module__, py.__name__
    if getattr(sys.modules.get(module), name, None) is not dispatcher:
        _tell_once(("unreachable", module, name),
                   "Numba kernel %s.%s is not reachable by its name: compiled in this process "
                   "(results may then differ in the last bits from runs that load it from the cache)",
                   module, name)
        return False
    log.info("compiling Numba kernels (once, cached on disk): %s", _name(dispatcher, sig))
    start = time.perf_counter()
    env = dict(os.environ)
    env[CHILD_ENV] = "1"
    fd, spec = tempfile.mkstemp(prefix="pinn-numba-", suffix=".pkl")
    try:
        with os.fdopen(fd, "wb") as f:
            pickle.dump((list(sys.path), module, name, sig), f)
        done = subprocess.run([sys.executable, "-c", _CHILD, spec], env=env, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    except Exception as error:  # an unpicklable type, no interpreter, ...
        _tell_once(("child", module, name), "compiling Numba kernel %s.%s in a child process failed (%s): "
                   "compiled in this process (results may then differ in the last bits from runs that "
                   "load it from the cache)", module, name, error)
        return False
    finally:
        try:
            os.unlink(spec)
        except OSError:  # pragma: no cover
            pass
    if done.returncode != 0:
        tail = (done.stdout or "").strip().splitlines()[-5:]
        _tell_once(("child", module, name), "compiling Numba kernel %s.%s in a child process failed "
                   "(exit %d: %s): compiled in this process (results may then differ in the last bits "
                   "from runs that load it from the cache)", module, name, done.returncode, " | ".join(tail))
        return False
    log.info("compiled %s in %.0f s", _name(dispatcher, sig), time.perf_counter() - start)
    return True


def ensure_cached(dispatcher, args):
    """Before ``dispatcher`` compiles the signature of ``args``: when this process has not
    compiled it and the on-disk cache does not hold it, compile it in a child process (which
    writes it to the cache), so that this process loads it from the cache."""
    if os.environ.get(CHILD_ENV):
        return
    sig = _signature(dispatcher, args)
    with _lock:
        if sig in dispatcher.overloads or _in_cache(dispatcher, sig):
            return
        with compile_turn(dispatcher, sig):
            if _in_cache(dispatcher, sig):  # compiled by the process whose turn it was
                return
            compile_in_child(dispatcher, sig)


def compile_lock_path(dispatcher):
    """The lock file of ``dispatcher``'s compilations: ``<module>.<kernel>.compile-lock`` in the
    directory of its cache entries (None when Numba does not say where that is)."""
    try:
        directory = dispatcher._cache._cache_path
    except Exception:  # pragma: no cover - Numba internals of another version
        return None
    py = dispatcher.py_func
    return os.path.join(directory, "%s.%s.compile-lock" % (py.__module__, py.__name__))


@contextlib.contextmanager
def compile_turn(dispatcher, sig):
    """Hold the kernel's compile lock (:func:`compile_lock_path`), waiting while another process
    holds it (the wait is logged).  No lock where the file cannot be made or locked: then nothing is held."""
    path = compile_lock_path(dispatcher) if fcntl is not None else None
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666) if path else None
    except OSError:
        fd = None
    if fd is None:
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("waiting for another process compiling %s (%s)", _name(dispatcher, sig), path)
            start = time.perf_counter()
            fcntl.flock(fd, fcntl.LOCK_EX)
            log.info("%s: waited %.0f s", _name(dispatcher, sig), time.perf_counter() - start)
        except OSError as error:  # a file system without locks (some network mounts): no turns
            _tell_once(("flock", path), "no compile turns for the Numba kernels (%s: %s): processes that "
                       "start on a cold cache may compile the same kernel at once", path, error, level=logging.INFO)
        yield
    finally:
        os.close(fd)  # releases the lock


def _check_loaded(dispatcher, sig):
    """After the dispatcher compiled ``sig``: tell once when it compiled it instead of loading it."""
    if sig in dispatcher.stats.cache_misses and not os.environ.get(CHILD_ENV):
        _tell_once("compiled", "Numba compiled %s in this process (its on-disk cache is not writable or "
                   "not readable: see NUMBA_CACHE_DIR): results may then differ in the last bits from "
                   "runs that load the kernels from the cache", _name(dispatcher, sig))


def install(dispatcher):
    """Make ``dispatcher`` compile its new signatures in a child process (see the module's doc);
    returns it.  Anything else (a plain function under ``NUMBA_DISABLE_JIT``) is returned as is."""
    if numba is None or not isinstance(dispatcher, Dispatcher):
        return dispatcher
    original = dispatcher._compile_for_args

    def _compile_for_args(*args, **kws):
        try:
            ensure_cached(dispatcher, args)
        except Exception as error:  # pragma: no cover - never fail a call for the cache's sake
            _tell_once(("ensure", dispatcher.py_func.__name__), "the Numba cache check of %s failed (%s)",
                       dispatcher.py_func.__name__, error)
        result = original(*args, **kws)
        try:
            _check_loaded(dispatcher, _signature(dispatcher, args))
        except Exception:  # pragma: no cover
            pass
        return result

    # Numba's C dispatcher looks ``_compile_for_args`` up on the object when a call finds no
    # compiled signature; calls that find one never reach it
    dispatcher._compile_for_args = _compile_for_args
    return dispatcher
