"""Process-wide TensorFlow settings that must be in place before TensorFlow is imported or allocates anything.

:func:`use_pooled_cpu_allocator` runs when :mod:`pinn` is imported.  :func:`quiet_tensorflow`
runs first in the ``pinn`` command and the scripts in ``inputs/``, not at ``import pinn``.
Neither imports anything heavy (an MD run with the Numba engine never imports TensorFlow).
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


#: TensorFlow's C++ log threshold: 0 all, 1 no INFO, 2 no INFO or WARNING, 3 no ERROR either (FATAL only)
LOG_LEVEL_VAR = "TF_CPP_MIN_LOG_LEVEL"
#: pinn's default: TensorFlow 2.15 logs a harmless "SetPriority unimplemented" as an ERROR at every XLA
#: compilation on the CPU (and, with CUDA, "Unable to register cuDNN factory" at import), so 2 is not enough
QUIET_LEVEL = "3"


def quiet_tensorflow(verbose=False):
    """Hide TensorFlow's C++ log lines unless asked for them; call it before TensorFlow is imported.

    TensorFlow prints lines from C++ on stderr when it starts and compiles (``oneDNN custom
    operations are on``, ``This TensorFlow binary is optimized to use available CPU
    instructions``, ``XLA service ... initialized``, ``SetPriority unimplemented for this
    stream``), none of which a user can act on.  The ``pinn`` command and the scripts in
    ``inputs/`` call this first.  ``import pinn`` does not: a library user keeps
    TensorFlow's own logging.

    The default, ``TF_CPP_MIN_LOG_LEVEL=3``, hides TensorFlow's C++ INFO, WARNING and ERROR
    lines (FATAL ones still print); an error that stops a run still raises a Python
    exception carrying TensorFlow's message.  Two lines that TensorFlow 2.15 writes through
    another logger (absl) at the first XLA compilation ignore the variable and still appear
    once per process: ``WARNING: All log messages before absl::InitializeLog() is called
    are written to STDERR`` and ``Compiled cluster using XLA!``; TensorFlow 2.16+ writes its
    ``oneDNN custom operations are on`` line through absl too, before the logger is set up, so it
    also still appears at start.

    Args:
        verbose: ``False``: set ``TF_CPP_MIN_LOG_LEVEL`` to :data:`QUIET_LEVEL` unless the
            variable is set already, so a user's own value is kept.  ``True`` (``pinn
            --verbose``): set it to ``0``, every line shown, overriding the environment
            as a command-line flag does.

    TensorFlow reads the variable once, when it is imported: this has no effect after
    ``import tensorflow``.

    Returns:
        The value of the variable now in the environment (str).
    """
    if verbose:
        os.environ[LOG_LEVEL_VAR] = "0"
        return "0"
    return os.environ.setdefault(LOG_LEVEL_VAR, QUIET_LEVEL)
