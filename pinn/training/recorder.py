"""Where the figures of a training run go on rank 0: ``metrics.jsonl`` and TensorBoard.

TensorBoard event files are written to ``model_dir/tensorboard/train`` and
``model_dir/tensorboard/eval`` (``tensorboard --logdir model_dir/tensorboard``);
see :mod:`pinn.training.metrics` for the JSONL records.  On other ranks a recorder
does nothing.
"""
import os
import time

import tensorflow as tf

from pinn.training.metrics import append_metrics, metrics_path


class RunRecorder:
    """Writes training and evaluation records.

    Args:
        model_dir: the model directory.
        enabled: whether this process writes (rank 0).
        tensorboard: also write TensorBoard summaries.
    """

    def __init__(self, model_dir, enabled=True, tensorboard=True):
        self.model_dir = model_dir
        self.enabled = enabled
        self.writers = {}
        if enabled and tensorboard:
            root = os.path.join(model_dir, "tensorboard")
            self.writers = {kind: tf.summary.create_file_writer(os.path.join(root, kind)) for kind in ("train", "eval")}

    @property
    def path(self):
        """The file the records go to (``model_dir/metrics.jsonl``)."""
        return metrics_path(self.model_dir)

    def record(self, kind, step, figures, epoch=None):
        """Write one record.

        Args:
            kind: ``'train'`` or ``'eval'``.
            step: the global step.
            figures: dict name → number (loss, errors, lr, throughput) or bool.
            epoch: epochs trained (float) or ``None``.

        Returns:
            The record written (``None`` on ranks that do not write).
        """
        if not self.enabled:
            return None
        record = {"kind": kind, "step": int(step), "epoch": None if epoch is None else round(float(epoch), 4),
                  "time": round(time.time(), 3), **figures}
        append_metrics(self.model_dir, record)
        writer = self.writers.get(kind)
        if writer is not None:
            with writer.as_default(step=int(step)):
                for name, value in figures.items():
                    if isinstance(value, (int, float)) and not isinstance(value, bool):
                        tf.summary.scalar(name, value)
            writer.flush()
        return record

    def close(self):
        for writer in self.writers.values():
            writer.close()
