"""A run's checkpoints in its model directory: verified restore, crash-safe save, the best one, rollback.

Rank 0 alone writes: the latest ``keep_checkpoint_max`` checkpoints in ``model_dir``, the
best by the validation metric in ``model_dir/best`` (with ``best.json`` naming its step,
metric and value), and ``params.yml``.  The other ranks hold a store that does not write
and take rank 0's state by broadcast (:class:`pinn.training.trainer.Trainer`).

What a crash can do, and what is done about it:

- **Restore verifies** (the store reads as inference does: :mod:`pinn.inference.checkpoint_reader`).
  A checkpoint is read whole before it is used: its index and data
  (TensorFlow checks each tensor's checksum), every variable of the model, optimizer and
  weight average present with its shape, and every floating-point value finite.  A damaged
  newest checkpoint is passed over with a warning naming it and the one used instead; only
  when none is intact does :class:`NoIntactCheckpoint` end the process with a one-line error
  (exit status 1).  A missing or torn ``checkpoint`` state file costs nothing: the
  checkpoints are found by their index files (:mod:`pinn.files.checkpoint_dir`).
- **Saving never destroys the last good state.**  A new checkpoint is written, flushed to
  the disk, read back and verified; only then does the state file (replaced atomically)
  name it, and only then are checkpoints beyond ``keep_checkpoint_max`` deleted.
  ``best/`` is built beside the old one and put in its place whole.  A damaged checkpoint
  passed over by a resume is moved to ``model_dir/damaged/`` before the next save.
- **A full disk** (or quota) during a save ends training with one line naming the file,
  the free space and the space needed, and exit status :data:`~pinn.training.checkpoint_files.SAVE_FAILED_EXIT_CODE`
  (:class:`CheckpointWriteFailed`); the partial files are removed and the previous
  checkpoint stays the latest.

``PINN_TEST_SLOW_SAVE`` (seconds; tests only) pauses twice inside every save: after the
files are written (before the state file names them), and after the state file names them
(before older checkpoints are deleted), so that a test can kill a run there.
"""
import json
import logging
import os
import shutil
import time

import tensorflow as tf

from pinn.files import checkpoint_dir as ckdir
from pinn.files.durable import fsync_dir, fsync_file, recover_dir, replace_dir, write_atomic
from pinn.inference.checkpoint_reader import (
    BEST_DIR, CheckpointDamaged, CheckpointReader, NoIntactCheckpoint, damaged_text, first_line, verify_files)
from pinn.params import ParamsError, read_params, write_params
from pinn.training.checkpoint_files import stop_when_disk_full

log = logging.getLogger("pinn")

#: the file naming the best checkpoint's step, metric and value, in :data:`BEST_DIR`
BEST_JSON = "best.json"
#: the parts holding an optimizer's state (Adam's, the Kalman filter's): a checkpoint holding one of them may
#: be restored by a run with the other, whose state then starts afresh (model.params.optimizer changed)
OPTIMIZER_PARTS = ("optimizer", "kalman")
_SLOW_SAVE = "PINN_TEST_SLOW_SAVE"


class CheckpointStore(CheckpointReader):
    """The checkpoints of one model directory: read as the inference reader reads them
    (:class:`~pinn.inference.checkpoint_reader.CheckpointReader`), and written.

    Args:
        model_dir: the directory.
        parts: dict name → trackable of everything a resume needs (model, optimizer, step, …);
            ``'weight_average'``, when present, may be missing from a checkpoint (trained without),
            and so may ``'optimizer'`` or ``'kalman'`` from one that holds the other
            (:data:`OPTIMIZER_PARTS`).
        is_chief: whether this process writes (rank 0).
        keep: how many of the latest checkpoints are kept (``keep_checkpoint_max``).
    """

    def __init__(self, model_dir, parts, is_chief, keep):
        super().__init__(model_dir, parts, interchangeable=OPTIMIZER_PARTS)
        self.checkpoint = tf.train.Checkpoint(**self.parts)
        self.checkpoint.save_counter  # created now, so every checkpoint holds what a restore expects  # noqa: B018
        self.is_chief = is_chief
        self.keep = keep
        self.current = None  # the newest checkpoint known intact (restored or saved here)
        self.passed_over = []  # damaged checkpoints a restore skipped; moved aside before the next save

    # ------------------------------------------------------------------ reading
    @property
    def latest(self):
        """Path of the latest checkpoint: the one restored or saved here, else the newest on disk; or ``None``."""
        return self.current or ckdir.latest(self.model_dir)

    def write_params(self, params):
        """Write ``params.yml`` (rank 0) unless it holds these params already (a model loaded for inference, a
        read-only folder).  The run's claim has compared them with the stored ones before
        (:func:`pinn.training.claim.check_stored_params`); this comes after the restore, so that a refused run
        leaves the file as it was."""
        path = os.path.join(self.model_dir, "params.yml")
        if os.path.exists(path):
            try:
                stored = read_params(self.model_dir)
            except (ParamsError, ValueError):
                stored = None  # damaged: said by the claim
            if stored is not None and _without_dir(stored) == _without_dir(params):
                return
        with stop_when_disk_full(path, kept=self.latest):
            write_params(params, self.model_dir)

    def restore(self, which):
        """Restore a checkpoint, verified (:meth:`CheckpointReader.restore`); the newest intact one restored
        is the store's latest, and the damaged ones passed over are moved aside before the next save.

        Returns:
            its path, or ``None`` when there is none to restore (a fresh model).
        """
        path, damaged = self.restore_chosen(which)
        if path is not None and which in (None, "last"):
            self.current = path
            self.passed_over = [p for p, _ in damaged]
        return path

    def best_metric_name(self):
        """The metric that chose the stored best checkpoint (``best.json``), or ``None`` (also when it is
        damaged: logged)."""
        path = os.path.join(self.best_dir, BEST_JSON)
        if not os.path.exists(path):
            return None
        try:
            with open(path) as f:
                return json.load(f).get("metric")
        except (OSError, ValueError, AttributeError) as err:
            log.warning("%s is damaged (%s); it is written again with the next best checkpoint", path,
                        first_line(err))
            return None

    def restore_parts(self, **parts):
        """Restore only ``parts`` (e.g. model, optimizer, weight average) from the latest intact checkpoint
        (rank 0): a rollback, which keeps the step and the data position.

        Returns:
            the checkpoint's path.
        """
        candidates = [self.current] if self.current else []
        candidates += [p for p in ckdir.candidates(self.model_dir)[0] if p != self.current]
        path, damaged = self.first_intact(candidates, parts)
        if path is None:
            raise NoIntactCheckpoint(f"cannot roll back: {damaged_text(damaged) if damaged else 'no checkpoint'}")
        return path

    def last_checkpoint_text(self):
        """Where a user finds the last checkpoint, for error messages."""
        latest = self.latest
        return f"the last checkpoint is {latest}" if latest else "see rank 0's log for the last checkpoint"

    # ------------------------------------------------------------------ writing
    def save(self, step):
        """Write a checkpoint of ``step`` (rank 0), unless the latest is of that step already.

        Returns:
            its path (rank 0), ``None`` elsewhere.

        Raises:
            CheckpointWriteFailed: the disk is full (the partial files are removed).
        """
        if not self.is_chief:
            return None
        step = int(step)
        latest = self.latest
        if latest and ckdir.step_of(latest) == step and latest not in self.passed_over:
            return latest
        self._move_damaged_aside()
        path = os.path.join(self.model_dir, f"{ckdir.PREFIX}-{step}")
        kept = [p for p in self._kept() if p != path]
        self._write(path, kept[-1] if kept else None)
        kept.append(path)
        ckdir.write_state(self.model_dir, kept[-self.keep:])
        self.current = path
        _pause_for_tests()
        for old in kept[:-self.keep]:
            ckdir.remove(old)
        log.info("checkpoint %s", path)
        return path

    def save_best(self, step, metric, value):
        """Write the best checkpoint and ``best.json`` on rank 0 (nothing elsewhere), replacing ``best/`` whole."""
        if not self.is_chief:
            return
        best = os.path.join(self.model_dir, BEST_DIR)
        recover_dir(best)
        new = best + ".new"
        shutil.rmtree(new, ignore_errors=True)
        os.makedirs(new)
        path = os.path.join(new, f"{ckdir.PREFIX}-{int(step)}")
        self._write(path, self.latest)
        info = {"step": int(step), "metric": metric, "value": float(value), "checkpoint": os.path.basename(path)}
        with stop_when_disk_full(os.path.join(best, BEST_JSON), kept=self.latest):
            ckdir.write_state(new, [path])
            write_atomic(os.path.join(new, BEST_JSON), json.dumps(info))
            replace_dir(new, best)
        return os.path.join(best, os.path.basename(path))

    def _kept(self):
        """The checkpoints of ``model_dir`` that the keep rule counts: those on disk (also those a crash left
        unnamed, or not yet deleted) and the state file's, without those passed over as damaged; oldest
        first."""
        try:
            state = ckdir.read_state(self.model_dir)
        except ckdir.StateFileError:
            state = None
        kept = set(ckdir.on_disk(self.model_dir))  # with those a crash left unnamed or not yet deleted
        kept.update(p for p in (state[1] if state else []) if os.path.exists(p + ".index"))
        if self.current:
            kept.add(self.current)
        return sorted((p for p in kept if p not in self.passed_over), key=ckdir.step_of)

    def _write(self, path, kept):
        """Write checkpoint ``path``, flush it to the disk and verify it; on failure remove its files.

        Args:
            path: the checkpoint's path prefix.
            kept: the checkpoint that stays the latest if this one fails (for the message), or ``None``.
        """
        ckdir.remove(path)  # leftovers of a run killed while writing this step
        needed = ckdir.size_of(kept) if kept else None
        try:
            with stop_when_disk_full(path + ".index", needed, kept):
                self.checkpoint.write(path)
                for file in ckdir.files_of(path):
                    if os.path.isfile(file):
                        fsync_file(file)
                fsync_dir(os.path.dirname(path))
            _pause_for_tests()
            verify_files(path)
        except CheckpointDamaged as err:
            ckdir.remove(path)
            raise RuntimeError(f"{path}: the checkpoint just written does not verify ({err}); not kept") from None
        except BaseException:
            ckdir.remove(path)
            raise

    def _move_damaged_aside(self):
        """Move the checkpoints a resume passed over into ``model_dir/damaged`` (kept for inspection)."""
        for path in self.passed_over:
            if ckdir.files_of(path):
                folder = ckdir.quarantine(path)
                log.warning("moved the damaged %s to %s", os.path.basename(path), folder)
        self.passed_over = []


def _without_dir(params):
    return {key: value for key, value in params.items() if key != "model_dir"}


def _pause_for_tests():
    delay = os.environ.get(_SLOW_SAVE)
    if delay:
        time.sleep(float(delay))
