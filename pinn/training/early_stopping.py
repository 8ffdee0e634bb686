"""Early stopping on a validation metric, and the best value so far (checkpointed with the run)."""
import logging

import numpy as np
import tensorflow as tf

log = logging.getLogger("pinn")


class EarlyStopping:
    """The best value of the validation metric and the evaluations since it.

    Args:
        metric: the metric's name (``model.params.early_stopping_metric``, e.g. ``'F_RMSE'``).
        patience: stop after this many evaluations without improvement (``None``: never).
        min_delta: an improvement must lower the metric by more than this (units of the metric).

    ``best`` and ``since_best`` are variables: the checkpoint holds them (as ``best_metric``
    and ``evals_since_best``), so a resumed run goes on counting.
    """

    def __init__(self, metric, patience, min_delta):
        self.metric = metric
        self.patience = patience
        self.min_delta = min_delta
        self.best = tf.Variable(np.inf, dtype=tf.float64, trainable=False, name="best_metric")
        self.since_best = tf.Variable(0, dtype=tf.int64, trainable=False, name="evals_since_best")

    @property
    def variables(self):
        """The state, for checkpoints and broadcasts."""
        return [self.best, self.since_best]

    def restart_if_metric_changed(self, stored_metric):
        """A best value of another metric (an earlier run's, ``stored_metric``) does not count."""
        if stored_metric is not None and stored_metric != self.metric:
            log.info("early_stopping_metric is now %s (was %s): the best value starts afresh",
                     self.metric, stored_metric)
            self.best.assign(np.inf)
            self.since_best.assign(0)

    def value_of(self, result):
        """The metric in the evaluation ``result`` (dict).

        Raises:
            KeyError: with the metrics that were measured, when this one was not.
        """
        if self.metric not in result:
            available = sorted(k for k in result if k != "global_step")
            raise KeyError(f"{self.metric!r} is not measured on the eval input; available: {available}")
        return result[self.metric]

    def update(self, value):
        """Count one evaluation with metric ``value``; returns whether it is the best so far."""
        improved = bool(np.isfinite(value) and value < float(self.best.numpy()) - self.min_delta)
        if improved:
            self.best.assign(value)
            self.since_best.assign(0)
        else:
            self.since_best.assign_add(1)
        return improved

    def should_stop(self):
        """Whether ``patience`` evaluations in a row brought no improvement."""
        return self.patience is not None and int(self.since_best.numpy()) >= self.patience

    def status(self):
        """``'best <metric> <value>, <n> evaluation(s) ago'``, for the log."""
        return f"best {self.metric} {float(self.best.numpy()):.4g}, {int(self.since_best.numpy())} evaluation(s) ago"
