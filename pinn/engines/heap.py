"""The C library's heap kept mapped between the compiled engines' calls.

The Numba kernels allocate their per-call arrays anew at every call: per atom, per chunk of pairs, and for
PiNet2 every layer's values and tangents of the whole batch.  With glibc's defaults a freed block above the
mmap threshold (128 KiB, raised on the fly up to the largest block freed so far) is unmapped, and once more than
the trim threshold (twice that) is free at the heap's top it goes back to the system.  The next call then takes
every page of those arrays fresh from the system, one page fault per 4 KiB.  Measured on 2 cores
(``benchmarks/bench_engine_heap.py``): a PiNet2 training call on 32 cells of 108 Cu atoms faulted in
28 904–28 924 pages (113 MB) a call, an MD call of 3 456 Cu atoms 3 425–3 450; with the heap kept, none.

:func:`keep_heap` raises the two thresholds once per process (to :data:`MMAP_THRESHOLD` and
:data:`TRIM_THRESHOLD`): the blocks a call frees stay mapped for the next one, which faults none in.  The peak
memory of a call does not change; between calls the process keeps up to :data:`TRIM_THRESHOLD` of freed heap.
It leaves the allocator alone where it is not glibc's, where the user set any of glibc's ``MALLOC_*_``
variables of these thresholds, and with ``PINN_KEEP_HEAP=0`` in the environment (the opt-out).
"""
import ctypes
import ctypes.util
import os
import sys

#: glibc's mallopt parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
#: blocks above this (bytes) are mapped for themselves (the workspaces sized once, the kept tiles)
MMAP_THRESHOLD = 64 << 20
#: freed memory at the heap's top kept mapped (bytes)
TRIM_THRESHOLD = 256 << 20
#: the environment variables through which a user sets these thresholds (or the padding they interact with)
USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")
#: the environment variable that, set to 0, leaves the allocator alone
OPT_OUT = "PINN_KEEP_HEAP"

_state = {"done": False, "kept": False}


def _glibc():
    """The C library when it is glibc (it has ``gnu_get_libc_version``), else ``None``."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):
        return None
    return libc


def keep_heap():
    """Raise glibc's mmap and trim thresholds once per process (module docstring).

    Returns:
        True when this process's thresholds are the raised ones (set now or by an earlier call), False when the
        allocator was left alone (not glibc, one of :data:`USER_SETTINGS` set, or :data:`OPT_OUT` = 0).

    Raises:
        ValueError: :data:`OPT_OUT` set to something other than 0 or 1.
    """
    if _state["done"]:
        return _state["kept"]
    choice = os.environ.get(OPT_OUT, "1")
    if choice not in ("0", "1"):
        raise ValueError(f"{OPT_OUT} must be 0 (leave the C library's heap thresholds alone) or 1, got {choice!r}")
    _state["done"] = True
    if choice == "0" or any(name in os.environ for name in USER_SETTINGS):
        return False
    libc = _glibc()
    if libc is None:
        return False
    libc.mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    libc.mallopt.restype = ctypes.c_int
    if libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) != 1 or libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) != 1:
        raise OSError("mallopt refused the engines' heap thresholds")
    _state["kept"] = True
    return True
