"""A model directory's checkpoints, read: each verified before it is used, the newest intact one chosen.

:func:`verify_files` reads a checkpoint (all of it, or the variables of some of its objects) and checks
its checksums and finite values.  :class:`CheckpointReader` chooses a checkpoint (the newest intact one,
the best one or a path), verifies it and restores the objects it is given; a damaged newest checkpoint is
passed over with a warning naming it and the one used instead, and only when none is intact does
:class:`NoIntactCheckpoint` end the process with a one-line error (exit status 1).  A missing or torn
``checkpoint`` state file costs nothing: the checkpoints are found by their index files
(:mod:`pinn.files.checkpoint_dir`).

Inference reads with it alone (:func:`pinn.inference.handle.load_for_inference`); the training run's
:class:`~pinn.training.checkpoints.CheckpointStore` is a reader that also writes.  Nothing here writes.
"""
import logging
import os

import numpy as np
import tensorflow as tf

from pinn.files import checkpoint_dir as ckdir
from pinn.files.durable import existing_dir

log = logging.getLogger("pinn")

#: the folder of the best checkpoint, inside model_dir
BEST_DIR = "best"
#: checkpoint entries that may hold ±inf (the best validation value before the first validation)
MAY_BE_INFINITE = ("best_metric/",)
#: the part of a checkpoint holding the weight average (``ema_decay``), which a checkpoint may lack (trained
#: without one)
AVERAGE_PART = "weight_average"
#: parts a checkpoint written before them lacks: the weight average (trained without one), the training's time so
#: far (checkpoints of pinn before 0.30: a resumed run's time budget then counts from 0)
OPTIONAL_PARTS = (AVERAGE_PART, "elapsed_s")


class CheckpointDamaged(Exception):
    """A checkpoint that cannot be used; the message says why."""


class NoIntactCheckpoint(SystemExit):
    """No checkpoint of those asked for is intact.  A :class:`SystemExit` with a one-line message
    (exit status 1), so a script or the ``pinn`` command ends without a traceback."""


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


class CheckpointReader:
    """The checkpoints of one model directory, read and verified.

    Args:
        model_dir: the directory.
        parts: dict name → trackable of what is restored (``model``, ``step``, …); those of
            :data:`OPTIONAL_PARTS`, when present, may be missing from a checkpoint (then not restored).
        interchangeable: names of parts of which a checkpoint holds one and may hold another instead
            (Adam's state or the Kalman filter's: the training store's); the one missing is then not
            restored.
    """

    def __init__(self, model_dir, parts, interchangeable=()):
        self.model_dir = os.fspath(model_dir)
        self.parts = dict(parts)
        self.interchangeable = tuple(interchangeable)

    @property
    def best_dir(self):
        """The folder holding the best checkpoint (``best``, or what a crash in its replacement left)."""
        return existing_dir(os.path.join(self.model_dir, BEST_DIR))

    def restore(self, which):
        """Restore a checkpoint, verified (see the module's docstring).

        Args:
            which: ``None`` or ``'last'`` (the newest intact one), ``'best'`` or a checkpoint path.

        Returns:
            its path, or ``None`` when there is none to restore (a fresh model).

        Raises:
            ValueError: ``'best'`` without a best checkpoint, or a path that is no checkpoint.
            NoIntactCheckpoint: checkpoints exist but none of them is intact.
        """
        return self.restore_chosen(which)[0]

    def restore_chosen(self, which):
        """:meth:`restore`, and the checkpoints it passed over: ``(path or None, [(damaged path, reason), …])``."""
        if which in (None, "last"):
            candidates, problem = ckdir.candidates(self.model_dir)
            if problem:
                log.warning("%s; using the checkpoints found beside it", problem)
        elif which == "best":
            candidates, problem = ckdir.candidates(self.best_dir)
            if not candidates:
                raise ValueError(f"{self.model_dir}: no best checkpoint (train with an eval_fn to keep one)")
        else:
            path = os.fspath(which)
            if not tf.io.gfile.exists(path + ".index"):
                raise ValueError(f"{path}: no such checkpoint (expected {path}.index)")
            candidates = [path]
        path, damaged = self.first_intact(candidates, self.parts)
        if path is None:
            if damaged:
                raise NoIntactCheckpoint(f"no intact checkpoint in {os.path.dirname(damaged[0][0])}: "
                                         f"{damaged_text(damaged, names_only=True)}")
            return None, damaged
        if damaged:
            log.warning("%s; using %s, the newest intact checkpoint", damaged_text(damaged), path)
        return path, damaged

    def first_intact(self, candidates, parts):
        """Restore ``parts`` from the first of ``candidates`` that is intact.

        Returns:
            ``(path or None, [(damaged path, reason), …])``.
        """
        damaged = []
        for path in candidates:
            try:
                self._load(path, parts)
                return path, damaged
            except CheckpointDamaged as err:
                damaged.append((path, str(err)))
        return None, damaged

    def _load(self, path, parts):
        """Verify checkpoint ``path`` and restore ``parts`` (dict name → trackable) from it.

        Raises:
            CheckpointDamaged: the files are damaged, or lack a variable of ``parts`` or its shape.
        """
        verify_files(path, set(parts))
        parts = {k: v for k, v in parts.items() if k not in OPTIONAL_PARTS or self.holds(path, k)}
        for name in self.interchangeable:
            others = [other for other in self.interchangeable if other != name]
            if name in parts and not self.holds(path, name) and any(self.holds(path, o) for o in others):
                parts = {k: v for k, v in parts.items() if k != name}
        try:
            status = tf.train.Checkpoint(**parts).restore(path)
            status.assert_existing_objects_matched()
            status.expect_partial()
        except (AssertionError, ValueError, tf.errors.OpError) as err:
            raise CheckpointDamaged(first_line(err)) from None

    @staticmethod
    def holds(path, name):
        """Whether the checkpoint at ``path`` holds a variable of the object ``name`` (e.g.
        ``'weight_average'``, ``'kalman'``)."""
        prefix = f"{name}/"
        return any(key.startswith(prefix) for key in tf.train.load_checkpoint(path).get_variable_to_shape_map())


def damaged_text(damaged, names_only=False):
    """'A is damaged (reason)' for each (path, reason), joined; ``names_only``: the file names (one folder)
    and each reason once."""
    if not names_only:
        return "; ".join(f"{path} is damaged ({reason})" for path, reason in damaged)
    reasons = {}
    for path, reason in damaged:
        reasons.setdefault(reason, []).append(os.path.basename(path))
    return "; ".join(f"{', '.join(names)} damaged ({reason})" for reason, names in reasons.items())
