"""A model directory's files, written: a full disk during a write.

:func:`stop_when_disk_full` turns a full disk during a write into one logged line and
:class:`CheckpointWriteFailed`.  Used by the checkpoint store (:mod:`pinn.training.checkpoints`) and
the records of a run.  Reading and verifying a checkpoint is inference's
(:mod:`pinn.inference.checkpoint_reader`).
"""
import contextlib
import logging
import os

import tensorflow as tf

from pinn.files.durable import format_bytes, free_bytes, is_no_space

log = logging.getLogger("pinn")

#: exit status of a run that could not write a file of its model directory (EX_IOERR of sysexits.h)
SAVE_FAILED_EXIT_CODE = 74


class CheckpointWriteFailed(SystemExit):
    """A file of the model directory could not be written (a full disk); exit status
    :data:`SAVE_FAILED_EXIT_CODE`, after the one-line reason is logged (:attr:`message`)."""

    def __init__(self, message):
        super().__init__(SAVE_FAILED_EXIT_CODE)
        self.message = message

    def __str__(self):
        return self.message


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
