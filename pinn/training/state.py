"""The state of a training run that checkpoints keep, rollbacks restore and rank 0 broadcasts.

:class:`TrainingState` holds the step, the learning-rate factor, the optimizer's state (Adam's
moments, or the Kalman filter's P), the weight average and the early-stopping state beside the
model, and the :class:`~pinn.training.checkpoints.CheckpointStore` of the model directory.  It
restores on rank 0 (a failure there raises on every rank), writes ``params.yml`` there (at once, or
once the run is accepted), broadcasts rank 0's state, rolls back to the latest checkpoint and keeps
in-memory copies for the loss-jump guard.
"""
import contextlib
import logging

import numpy as np
import tensorflow as tf

from pinn.training.adam import Adam, decayed_flags
from pinn.training.budget import RunClock
from pinn.training.checkpoint_files import CheckpointWriteFailed
from pinn.training.checkpoints import CheckpointStore, NoIntactCheckpoint
from pinn.training.early_stopping import EarlyStopping
from pinn.training.ema import WeightAverage
from pinn.training.freeze import describe as describe_frozen, frozen_flags
from pinn.training.kalman import KalmanFilter
from pinn.training.loss_scale import LossScale
from pinn.training.warm_start import warm_start

log = logging.getLogger("pinn")


class TrainingState:
    """Everything of a run besides the model that a resume needs, and the model's checkpoints.

    Args:
        model: the model (its variables are trained).
        mp: the resolved ``model.params`` (optimizer, weight average, early stopping, checkpoints, rollbacks).
        world: the run's world.
        backend: the gradient backend (its host copy of the weights is stored before a copy and dropped
            on a rollback).
        model_dir: the model directory.
        learning_rate: the schedule, ``step -> rate`` (Adam starts at its rate times ``lr_factor``).

    Attributes:
        step, lr_factor: the global step (int64) and the factor of the learning rate (float32) variables.
        elapsed_s: the seconds the training has taken up to the latest checkpoint (float64 variable, saved in
            every checkpoint; a resumed run's time budget counts them).
        clock: the :class:`~pinn.training.budget.RunClock` of the training (the time spent before included).
        optimizer: :class:`~pinn.training.adam.Adam` or the :class:`~pinn.training.kalman.KalmanFilter`.
        kalman: the Kalman filter of ``optimizer: ekf | gekf``, else ``None``.
        ema: the :class:`~pinn.training.ema.WeightAverage` of ``ema_decay``, else ``None``.
        early_stopping: the :class:`~pinn.training.early_stopping.EarlyStopping`.
        store: the :class:`~pinn.training.checkpoints.CheckpointStore`.
    """

    def __init__(self, model, mp, world, backend, model_dir, learning_rate):
        self.model = model
        self.mp = mp
        self.world = world
        self.backend = backend
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        self.lr_factor = tf.Variable(1.0, dtype=tf.float32, trainable=False, name="lr_factor")
        self.elapsed_s = tf.Variable(0.0, dtype=tf.float64, trainable=False, name="elapsed_s")
        self.clock = RunClock()
        self.early_stopping = EarlyStopping(mp["early_stopping_metric"], mp["early_stopping_patience"],
                                            mp["early_stopping_min_delta"])
        self.kalman = None
        self.frozen = frozen_flags(model, mp["freeze"]) if mp["freeze"] else ()
        if self.frozen:
            log.info(describe_frozen(model, self.frozen))
        if mp["optimizer"] == "adam":
            variables = model.trainable_variables
            decayed = decayed_flags(variables, mp["weight_decay_on"])
            self.optimizer = Adam(variables, learning_rate=float(learning_rate(self.step) * self.lr_factor),
                                  weight_decay=mp["weight_decay"], decayed=decayed)
            if mp["weight_decay"]:
                log.info("weight decay %g (AdamW) on %d of %d trainable variables (%s)", mp["weight_decay"],
                         sum(self.optimizer.decayed), len(variables), mp["weight_decay_on"])
        else:
            self.optimizer = self.kalman = KalmanFilter(model.trainable_variables, mp, frozen=self.frozen)
        self.ema = WeightAverage(model.trainable_variables, mp["ema_decay"]) if mp["ema_decay"] else None
        #: mixed_float16's dynamic loss scale (pinn.training.loss_scale), else None
        self.loss_scale = None
        if model.network.compute_dtype == tf.float16:
            self.loss_scale = LossScale(mp["loss_scale_initial"], mp["loss_scale_growth_interval"],
                                        mp["loss_scale_factor"])
        parts = dict(model=model, step=self.step, lr_factor=self.lr_factor, best_metric=self.early_stopping.best,
                     evals_since_best=self.early_stopping.since_best, elapsed_s=self.elapsed_s,
                     **self.optimizer_part())
        if self.ema is not None:
            parts["weight_average"] = self.ema
        if self.loss_scale is not None:
            parts["loss_scale"] = self.loss_scale
        self.store = CheckpointStore(model_dir, parts, world.is_chief, mp["keep_checkpoint_max"])
        #: the params that params.yml is to hold once the run is accepted (restore_on_chief(defer_params=True)),
        #: until write_params or a save writes them (rank 0); None: written, or nothing to write
        self.pending_params = None
        self._params_agreed = True  # whether write_params has had its one exchange over the ranks

    @contextlib.contextmanager
    def averaged_weights(self):
        """Within this block the model holds the averaged weights (``ema_decay``; otherwise the raw ones)."""
        if self.ema is None:
            yield
            return
        with self.ema.swapped_in(self.model.trainable_variables):
            yield

    def save(self):
        """Write a checkpoint of the current step (the store writes on rank 0 alone), after giving TensorFlow
        the weights the host steps keep; refused while the variables hold the weight average.  Params still
        pending (:meth:`write_params`) are written first, so that no checkpoint lies there without them.

        Returns:
            the checkpoint's path on rank 0, ``None`` elsewhere.
        """
        self.backend.store()
        if self.ema is not None and self.ema.swapped:
            raise RuntimeError("save: the model holds its averaged weights (inference only); a checkpoint "
                               "stores the raw weights")
        if self.pending_params is not None and self.world.is_chief:
            self.store.write_params(self.pending_params)
            self.pending_params = None
        self.elapsed_s.assign(self.clock())
        return self.store.save(int(self.step.numpy()))

    def write_params(self):
        """Write the pending ``params.yml`` (rank 0) now that the run is accepted, on every rank at the same
        point: a failure on rank 0 (a full disk, a read-only directory) raises on every rank (no hang).  Does
        nothing when nothing is pending (or after its first call)."""
        if self._params_agreed:
            return
        self._params_agreed = True
        error = None
        if self.world.is_chief and self.pending_params is not None:
            try:
                self.store.write_params(self.pending_params)
            except (Exception, CheckpointWriteFailed) as err:  # noqa: BLE001 (raised below, on every rank)
                error = err
            self.pending_params = None
        if self.world.is_parallel and self.world.allreduce_sum_numpy(np.array([float(error is not None)]))[0]:
            if error is None:
                raise ValueError(f"rank {self.world.rank}: rank 0 could not write {self.store.model_dir}/params.yml "
                                 "(see its error)")
        if error is not None:
            raise error

    def optimizer_part(self):
        """The checkpoint part of the optimizer's state: ``{'optimizer': Adam}`` or ``{'kalman': KalmanFilter}``."""
        return {"kalman": self.kalman} if self.kalman is not None else {"optimizer": self.optimizer}

    def restore_on_chief(self, which, params, defer_params=False):
        """Restore checkpoint ``which`` on rank 0 (or, for a fresh run with ``init_model``, that directory's
        weights: :mod:`pinn.training.warm_start`) and write ``params.yml`` once that succeeded, then broadcast; a
        failure on rank 0 raises on every rank (no hang).  With ``defer_params``, ``params.yml`` is not written
        here but kept pending until the run is accepted (:meth:`write_params`, or the first :meth:`save`), so
        that a run refused before (its data) leaves the file as it was.  Returns the run's own checkpoint's
        path, or ``None``."""
        error = None
        path = None
        if self.world.is_chief:
            try:
                path = self.store.restore(which)
                if path is None and self.mp["init_model"]:
                    warm_start(self.mp["init_model"], self.mp["init_checkpoint"], params, self.model, self.ema,
                               self.frozen)
                elif path and self.mp["init_model"]:
                    log.info("model.params.init_model %s not used: the run goes on from its own checkpoint",
                             self.mp["init_model"])
                if path:
                    log.info("restored %s (step %d)", path, int(self.step.numpy()))
                    self._optimizer_state_missing(path)
                    if self.ema is not None and not self.store.holds(path, "weight_average"):
                        self.ema.reset(self.model.trainable_variables)
                        log.info("%s holds no weight average (trained without ema_decay): the average starts "
                                 "at its weights", path)
                self.early_stopping.restart_if_metric_changed(self.store.best_metric_name())
                if not defer_params:
                    self.store.write_params(params)  # last: a run refused above leaves params.yml as it was
            except (ValueError, NoIntactCheckpoint) as err:
                error = err
        if self.world.is_parallel and self.world.allreduce_sum_numpy(np.array([float(error is not None)]))[0]:
            if error is None:
                raise ValueError(f"rank 0 could not set up {self.store.model_dir} (see its error)")
        if error is not None:
            raise error
        if defer_params:
            self.pending_params = params if self.world.is_chief else None
            self._params_agreed = False
        self.broadcast()
        self.clock.spent_before = float(self.elapsed_s.numpy())  # a resumed run's time so far (0 when fresh)
        return path

    def _optimizer_state_missing(self, path):
        """After restoring checkpoint ``path`` (rank 0): when it holds the other optimizer's state (a run that
        changed model.params.optimizer), this one's starts afresh, logged."""
        name = next(iter(self.optimizer_part()))
        if self.store.holds(path, name):
            return
        if self.kalman is not None:
            self.kalman.reset()
            log.info("%s holds no Kalman filter (trained with Adam): P starts at ekf_epsilon × I", path)
        else:
            log.info("%s holds no Adam state (trained with a Kalman filter): Adam's moments start at zero", path)

    def variables(self):
        """The variables a rollback restores: the model's, the optimizer's (Adam's moments or the Kalman
        filter) and the weight average's."""
        extra = list(self.ema.variables) if self.ema is not None else []
        extra += self.loss_scale.variables if self.loss_scale is not None else []
        return list(self.model.variables) + list(self.optimizer.variables) + extra

    def broadcast(self):
        """Every rank takes rank 0's model, optimizer state, weight average, step and schedule state."""
        self.world.broadcast_variables(self.variables() + [self.step, self.lr_factor, self.elapsed_s] +
                                       self.early_stopping.variables)

    def rollback(self, say):
        """Back to the latest checkpoint's model, optimizer and weight average (step and data position go on),
        with the learning rate multiplied by ``rollback_lr_factor``; ``say(level, message, *args)`` logs."""
        self.backend.reload(diverged=True)  # the engine's diverged weights are dropped; the next step reads these
        factor = self._lower_learning_rate()
        if self.world.is_chief:
            parts = dict(model=self.model, **self.optimizer_part())
            if self.ema is not None:
                parts["weight_average"] = self.ema
            path = self.store.restore_parts(**parts)
            self._optimizer_state_missing(path)
            say(logging.WARNING, "rolled back to %s; learning rate × %g from now on", path, factor)
        self.broadcast()

    def _lower_learning_rate(self):
        """Multiply the rate by ``rollback_lr_factor`` from now on (after a rollback); returns the factor."""
        factor = float(self.lr_factor.numpy()) * self.mp["rollback_lr_factor"]
        self.lr_factor.assign(factor)
        return factor

    def copy(self):
        """An in-memory copy of the training state (list of NumPy arrays, :meth:`variables`' order), for
        :meth:`restore_copy`."""
        self.backend.store()
        return [v.numpy().copy() for v in self.variables()]

    def restore_copy(self, step, copy, ratio, last=False, say=None):
        """Back to ``copy`` (of :meth:`copy`, taken at ``step``) after a loss jump of ``ratio`` × the loss's
        running level, with the learning rate multiplied by ``rollback_lr_factor`` (the step and the data
        position go on); on every rank alike (each holds the same copy).  ``last``: training stops (the
        rate stays).  ``say(level, message, *args)`` logs (rank 0)."""
        self.backend.reload(diverged=True)
        for variable, value in zip(self.variables(), copy):
            variable.assign(value)
        factor = float(self.lr_factor.numpy()) if last else self._lower_learning_rate()
        if self.world.is_chief and say is not None:
            then = "training stops" if last else f"learning rate × {factor:g} from now on"
            say(logging.WARNING, "step %d: the loss jumped to %.3g × its running level; back to the state of "
                "step %d, %s", int(self.step.numpy()), ratio, step, then)
