"""A checkpoint on disk: its verification, the errors of a damaged one or of a full disk.

:func:`verify_files` reads a checkpoint (all of it, or the variables of some of its objects) and
checks its checksums and finite values; :func:`stop_when_disk_full` turns a full disk during a
write into one logged line and :class:`CheckpointWriteFailed`.  Used by the checkpoint store
(:mod:`pinn.training.checkpoints`) and the records of a run.
"""
import contextlib
import logging
import os

import numpy as np
import tensorflow as tf

from pinn.files.durable import format_bytes, free_bytes, is_no_space

log = logging.getLogger("pinn")

#: exit status of a run that could not write a file of its model directory (EX_IOERR of sysexits.h)
SAVE_FAILED_EXIT_CODE = 74
#: checkpoint entries that may hold ±inf (the best validation value before the first validation)
MAY_BE_INFINITE = ("best_metric/",)


class CheckpointDamaged(Exception):
    """A checkpoint that cannot be used; the message says why."""


class NoIntactCheckpoint(SystemExit):
    """No checkpoint of those asked for is intact.  A :class:`SystemExit` with a one-line message
    (exit status 1), so a script or the ``pinn`` command ends without a traceback."""


class CheckpointWriteFailed(SystemExit):
    """A file of the model directory could not be written (a full disk); exit status
    :data:`SAVE_FAILED_EXIT_CODE`, after the one-line reason is logged (:attr:`message`)."""

    def __init__(self, message):
        super().__init__(SAVE_FAILED_EXIT_CODE)
        self.message = message

    def __str__(self):
        return self.message


def verify_files(path, names=None):
    """Read checkpoint ``path``: index, data (checksummed), finite floating-point values.

    Args:
        path: the checkpoint's path (without ``.index``).
        names: read only the variables of these objects (e.g. ``{'model', 'step'}`` for inference:
            an EKF's P, n × n for n weights, is then not read); ``None``: all of them.

    Raises:
        CheckpointDamaged: naming what is wrong.
    """
    if not os.path.exists(path + ".index"):
        raise CheckpointDamaged("its index file is missing")
    try:
        reader = tf.train.load_checkpoint(path)
        dtypes = reader.get_variable_to_dtype_map()
        for key in sorted(dtypes):
            if names is not None and key.split("/", 1)[0] not in names:
                continue
            value = reader.get_tensor(key)
            if dtypes[key].is_floating:
                value = np.asarray(value)
                bad = np.isnan(value) if key.startswith(MAY_BE_INFINITE) else ~np.isfinite(value)
                if bad.any():
                    raise CheckpointDamaged(f"{key.split('/.ATTRIBUTES')[0]} holds non-finite values")
    except CheckpointDamaged:
        raise
    except Exception as err:  # noqa: BLE001 - TensorFlow raises many kinds for a damaged bundle
        raise CheckpointDamaged(first_line(err)) from None


def first_line(err):
    """The type and the first line of an error's message."""
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}".rstrip(": ")


@contextlib.contextmanager
def stop_when_disk_full(path, needed=None, kept=None):
    """Turn a full disk while writing ``path`` into :class:`CheckpointWriteFailed` (logged as one line).

    Args:
        path: the file or checkpoint being written (named in the message).
        needed: about how many bytes it needs (``None``: not said).
        kept: the checkpoint that stays the latest (named in the message), or ``None``.
    """
    try:
        yield
    except (OSError, tf.errors.OpError) as err:
        if not is_no_space(err):
            raise
        free = free_bytes(os.path.dirname(os.path.abspath(path)))
        need = f"; it needs about {format_bytes(needed)}" if needed else ""
        after = f"; {kept} is intact and a relaunch resumes from it" if kept else ""
        message = (f"cannot write {path}: no space left on device ({format_bytes(free)} free{need}){after}; "
                   f"free some space and launch the same command again")
        log.error(message)
        raise CheckpointWriteFailed(message) from None
