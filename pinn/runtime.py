"""Process-wide TensorFlow settings that must be in place before TensorFlow allocates its first tensor.

:func:`use_pooled_cpu_allocator` runs when :mod:`pinn` is imported.  It imports nothing
heavy itself (an MD run with the Numba engine never imports TensorFlow).
"""
import os

#: TensorFlow reads this variable once, when it allocates its first tensor on the CPU
CPU_ALLOCATOR_VAR = "TF_CPU_ALLOCATOR_USE_BFC"


def use_pooled_cpu_allocator():
    """Have TensorFlow keep freed CPU memory in a pool (its BFC allocator) instead of returning it.

    TensorFlow's default CPU allocator hands every tensor to ``malloc``; glibc serves blocks
    above 32 MB with a fresh ``mmap`` and unmaps them when freed, so an XLA-compiled training
    step, whose temporaries are one large block per call, page-faults through all of it again
    on every step.  On the benchmark machine (2 cores) that was 42-45 % of the CPU time in the
    kernel during cu108 training; with the pool it is 3 %, and cu108 trains 1.7-2.5x faster
    (CHANGELOG.md, 0.6.0; for ethanol, whose blocks are small, the change is within the
    noise).  The pool grows on demand (up to ``TF_CPU_BFC_MEM_LIMIT_IN_MB``, TensorFlow's
    default 64 GB) and never shrinks, so the peak RSS stays that of the busiest step.

    Sets ``TF_CPU_ALLOCATOR_USE_BFC=true`` unless the variable is set already (set it to
    ``false`` to keep TensorFlow's default).  It takes effect only if TensorFlow has not run
    an operation yet in this process: import :mod:`pinn` before running TensorFlow code.

    Returns:
        The value of the variable now in the environment (str).
    """
    return os.environ.setdefault(CPU_ALLOCATOR_VAR, "true")
