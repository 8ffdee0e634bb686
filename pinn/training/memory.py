"""Steps that run out of memory: skipped on every rank, named, and the run stopped after too many.

A batch whose gradients raise an out-of-memory error (TensorFlow's ``ResourceExhaustedError``: a GPU's
allocator, or a tensor too large for the host; Python's ``MemoryError``: the Numba engine's arrays) is
not trained on.  The rank logs the batch (structures, atoms, pairs), contributes a zero gradient and
puts :data:`OOM_FLAG` in its slot of the step's flags, which travel with the gradients (the
non-finite flags' slots: :meth:`pinn.training.steps.StepFunctions.unpack`); every rank then skips the
update, as for a non-finite step, and the step counts, so no rank waits for another and all stay
equal.  The divergence guard does not count these steps; ``model.params.max_oom_skips`` in a row
make the run write its checkpoint and stop with :class:`OutOfMemory` on every rank.

Test hook: ``PINN_TEST_OOM="RANK:STEP,STEP,..."`` (tests only) raises the error on that rank when it
computes the gradients of those global steps (counted from 1).
"""
import gc
import logging
import os

import numpy as np
import tensorflow as tf

from pinn import keys as K

log = logging.getLogger("pinn")

#: the value a rank that ran out of memory puts in its slot of the step's flags: the flags of a rank's
#: batches and parts are summed, so the kinds are told apart by magnitude (a non-finite part: 1; an
#: overflow of mixed_float16's scaled gradients: :data:`pinn.training.loss_scale.OVERFLOW_FLAG`)
OOM_FLAG = 1e6
#: what counts as running out of memory
OOM_ERRORS = (tf.errors.ResourceExhaustedError, MemoryError)
_INJECT = "PINN_TEST_OOM"


class OutOfMemory(SystemExit):
    """``max_oom_skips`` steps in a row ran out of memory: every rank ends with this one-line message
    and exit status 1, after the checkpoint is written (a :class:`SystemExit`, as after a stop signal)."""


def inject(rank, step):
    """The test hook: raise an out-of-memory error when ``PINN_TEST_OOM`` names ``rank`` and ``step``."""
    spec = os.environ.get(_INJECT)
    if not spec:
        return
    where, _, steps = spec.partition(":")
    if int(where) == rank and step in {int(s) for s in steps.split(",") if s.strip()}:
        raise tf.errors.ResourceExhaustedError(None, None, f"injected by {_INJECT}={spec} at step {step}")


def batch_sizes(batches):
    """``(structures, atoms, pairs)`` of ``batches`` (each a batch or a tuple of parts; ``pairs`` is
    ``None`` when the pairs are found inside the step); padding counts."""
    structures = atoms = pairs = 0
    for batch in batches:
        for part in batch if isinstance(batch, tuple) else (batch,):
            structures += int(np.max(np.asarray(part[K.IND_1])) + 1) if part[K.IND_1].shape[0] else 0
            atoms += int(part[K.IND_1].shape[0])
            pairs = None if pairs is None or K.IND_2 not in part else pairs + int(part[K.IND_2].shape[0])
    return structures, atoms, pairs


def report(err, batches, rank, step):
    """Log an out-of-memory step on the rank it happened on, and free what Python holds.

    Returns:
        ``(structures, atoms, pairs)`` of the batches (see :func:`batch_sizes`).
    """
    structures, atoms, pairs = batch_sizes(batches)
    sizes = describe_sizes((structures, atoms, pairs))
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    log.warning("step %d: out of memory on rank %d in the gradients of its batch (%s): %s; the step is "
                "skipped on every rank", step, rank, sizes, first[:200])
    gc.collect()
    return structures, atoms, pairs


def describe_sizes(sizes):
    """``'32 structures, 3100 atoms, 120000 pairs'`` of :func:`batch_sizes`' triple (pairs ``None`` or < 0:
    not known)."""
    structures, atoms, pairs = sizes
    return f"{int(structures)} structures, {int(atoms)} atoms" + \
        (f", {int(pairs)} pairs" if pairs is not None and pairs >= 0 else "")


def skipped_stats(n_stats, rank, size):
    """The statistics a rank that ran out of memory contributes: zero, and :data:`OOM_FLAG` in its slot."""
    stats = np.zeros(n_stats)
    stats[n_stats - size + rank] = OOM_FLAG
    return stats


def out_of_memory_ranks(flags):
    """The ranks whose slot of a step's summed flags says out of memory."""
    return np.flatnonzero(np.asarray(flags) >= OOM_FLAG)
