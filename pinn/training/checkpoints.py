"""A run's checkpoints in its model directory: restore, save, the best one, rollback.

Rank 0 alone writes: the latest ``keep_checkpoint_max`` checkpoints in ``model_dir``, the
best by the validation metric in ``model_dir/best`` (with ``best.json`` naming its step,
metric and value), and ``params.yml``.  The other ranks hold a store without managers and
take rank 0's state by broadcast (:class:`pinn.training.trainer.Trainer`).
"""
import json
import logging
import os

import tensorflow as tf

from pinn.params import read_params, write_params

log = logging.getLogger("pinn")

#: the folder of the best checkpoint, inside model_dir
BEST_DIR = "best"


class CheckpointStore:
    """The checkpoints of one model directory.

    Args:
        model_dir: the directory.
        checkpoint: the ``tf.train.Checkpoint`` of everything a resume needs.
        is_chief: whether this process writes (rank 0).
        keep: how many of the latest checkpoints are kept (``keep_checkpoint_max``).
    """

    def __init__(self, model_dir, checkpoint, is_chief, keep):
        self.model_dir = model_dir
        self.checkpoint = checkpoint
        self.manager = self.best_manager = None
        if is_chief:
            self.manager = tf.train.CheckpointManager(checkpoint, model_dir, max_to_keep=keep,
                                                      checkpoint_name="ckpt")
            self.best_manager = tf.train.CheckpointManager(checkpoint, os.path.join(model_dir, BEST_DIR),
                                                           max_to_keep=1, checkpoint_name="ckpt")

    @property
    def latest(self):
        """Path of the latest checkpoint (rank 0), or ``None``."""
        return self.manager.latest_checkpoint if self.manager else None

    def check_and_write_params(self, params):
        """Refuse a model directory that holds another network; write ``params.yml`` (rank 0).

        Raises:
            ValueError: ``params.yml`` of the directory has another network.
        """
        path = os.path.join(self.model_dir, "params.yml")
        if os.path.exists(path):
            stored = read_params(self.model_dir)
            if stored["network"] != params["network"]:
                raise ValueError(f"{path}: the network in model_dir differs from the given params; "
                                 f"use another model_dir or the stored params")
        write_params(params, self.model_dir)

    def restore(self, which):
        """Restore a checkpoint (rank 0).

        Args:
            which: ``None`` or ``'last'`` (the latest), ``'best'`` or a checkpoint path.

        Returns:
            its path, or ``None`` when there is none to restore (a fresh model).

        Raises:
            ValueError: ``'best'`` without a best checkpoint, or a path that is no checkpoint.
        """
        if which in (None, "last"):
            path = self.manager.latest_checkpoint
        elif which == "best":
            path = self.best_manager.latest_checkpoint
            if path is None:
                raise ValueError(f"{self.model_dir}: no best checkpoint (train with an eval_fn to keep one)")
        else:
            path = os.fspath(which)
            if not tf.io.gfile.exists(path + ".index"):
                raise ValueError(f"{path}: no such checkpoint (expected {path}.index)")
        if path:
            self.checkpoint.restore(path).expect_partial()
        return path

    @staticmethod
    def holds(path, name):
        """Whether the checkpoint at ``path`` holds the object ``name`` (e.g. ``'weight_average'``)."""
        return tf.train.load_checkpoint(path).has_tensor(f"{name}/updates/.ATTRIBUTES/VARIABLE_VALUE")

    def save(self, step):
        """Write a checkpoint of ``step`` (rank 0), unless the latest is of that step already.

        Returns:
            its path (rank 0), ``None`` elsewhere.
        """
        if self.manager is None:
            return None
        latest = self.manager.latest_checkpoint
        if latest and latest.endswith(f"-{int(step)}"):
            return latest
        path = self.manager.save(checkpoint_number=int(step))
        log.info("checkpoint %s", path)
        return path

    def save_best(self, step, metric, value):
        """Write the best checkpoint and ``best.json`` (rank 0)."""
        path = self.best_manager.save(checkpoint_number=step)
        info = {"step": int(step), "metric": metric, "value": float(value), "checkpoint": os.path.basename(path)}
        with open(os.path.join(self.model_dir, BEST_DIR, "best.json"), "w") as f:
            json.dump(info, f)

    def best_metric_name(self):
        """The metric that chose the stored best checkpoint (``best.json``), or ``None``."""
        path = os.path.join(self.model_dir, BEST_DIR, "best.json")
        if not os.path.exists(path):
            return None
        with open(path) as f:
            return json.load(f).get("metric")

    def restore_parts(self, **parts):
        """Restore only ``parts`` (e.g. model, optimizer, weight average) from the latest checkpoint (rank 0):
        a rollback, which keeps the step and the data position.

        Returns:
            the checkpoint's path.
        """
        path = self.manager.latest_checkpoint
        tf.train.Checkpoint(**parts).restore(path).expect_partial()
        return path

    def last_checkpoint_text(self):
        """Where a user finds the last checkpoint, for error messages."""
        latest = self.latest
        return f"the last checkpoint is {latest}" if latest else "see rank 0's log for the last checkpoint"
