"""What inference needs of a trained model, and nothing of its training.

:func:`load_for_inference` reads a model directory's ``params.yml``, builds the network and
the model, and restores from a checkpoint only what inference needs: the model's variables
(weights and energy offsets), the step and, when the run kept one (``ema_decay``), the
weight average, which then replaces the raw weights.  No optimizer, no Kalman filter (its
P, n × n for n weights, is neither read nor checked), no checkpoint store that writes, no
MPI: evaluating a 6-atom molecule with a model trained by the EKF costs what the model
costs.

The result, an :class:`InferenceHandle`, is what the ASE calculator (:mod:`pinn.calculator`),
``pinn eval`` and the engines take; a :class:`~pinn.training.trainer.Trainer` in memory gives
one over its live weights (:meth:`~pinn.training.trainer.Trainer.inference`).
"""
import contextlib
import logging
import os

import tensorflow as tf

from pinn.models.registry import build_model
from pinn.parallel.worlds import SerialWorld
from pinn.params import read_params
from pinn.training.checkpoints import CheckpointStore
from pinn.training.ema import WeightAverage
from pinn.training.evaluation import Evaluator
from pinn.training.inputs import evaluation_input, prepared_input
from pinn.training.metrics import with_upstream_names

log = logging.getLogger("pinn")


class InferenceHandle:
    """A trained model for inference.

    Args:
        model: the model (:class:`~pinn.models.potential.PotentialModel`, :class:`~pinn.models.dipole.DipoleModel`, …).
        params: the resolved params of the model.
        checkpoint: path of the checkpoint the weights came from (``None``: weights never restored).
        step: the training step of the weights (an int, or a ``tf.Variable`` that training moves on).
        averaged_weights: a function returning the context in which the model holds the weights for
            inference (a Trainer's :meth:`~pinn.training.trainer.Trainer.averaged_weights`); ``None``:
            the model holds them already, for good (a loaded model).
        averaged: whether those weights are the run's weight average (``ema_decay``).

    Attributes:
        model, params, checkpoint, averaged: as given.
        rc: the network's cutoff, Å.
        e_unit: eV per energy unit of the model's data (1 for eV).
        dtype: the model's ``tf.DType``.
        atom_types: the atomic numbers the model knows.
    """

    def __init__(self, model, params, checkpoint=None, step=0, averaged_weights=None, averaged=False):
        self.model = model
        self.params = params
        self.checkpoint = checkpoint
        self.averaged = bool(averaged)
        self.rc = float(params["network"]["params"]["rc"])
        self.e_unit = float(params["model"]["params"].get("e_unit", 1.0))
        self.dtype = tf.as_dtype(params["precision"])
        self.atom_types = list(model.network.atom_types)
        self._step = step
        self._averaged_weights = averaged_weights
        self._evaluator = None

    @property
    def step(self):
        """The training step of the current weights (int)."""
        return int(self._step)

    @property
    def frozen(self):
        """Whether the weights can no longer change (a model loaded for inference)."""
        return self._averaged_weights is None

    def averaged_weights(self):
        """A context in which the model holds the weights for inference (the average, when kept)."""
        return contextlib.nullcontext() if self._averaged_weights is None else self._averaged_weights()

    def _input(self, input_fn):
        return prepared_input(input_fn, self.model.network)

    def evaluate(self, input_fn, steps=None):
        """Errors of the model on an input, in this one process: the metrics of
        :meth:`pinn.training.trainer.Trainer.evaluate` (``loss``, ``global_step``, ``<Q>_MAE``,
        ``<Q>_RMSE`` and upstream PiNN's ``METRICS/…`` names)."""
        dataset = evaluation_input(self._input(input_fn), steps)
        weights = self.model.loss_weights(tf.constant(float(self.step), tf.float64))
        metrics = self.evaluator().evaluate(dataset, weights, self.step)[0]
        return with_upstream_names(metrics, self.model.upstream_metric_scales())

    def predict(self, input_fn):
        """Yield one dict per structure of the input (see :meth:`pinn.training.trainer.Trainer.predict`)."""
        return self.evaluator().predict(self._input(input_fn))

    def evaluator(self):
        """The :class:`~pinn.training.evaluation.Evaluator` of this model in this one process."""
        if self._evaluator is None:
            self._evaluator = Evaluator(self.model, SerialWorld(), self.averaged_weights)
        return self._evaluator


def load_for_inference(model_dir, checkpoint=None):
    """The model of a model directory, restored for inference.

    Args:
        model_dir: a directory holding ``params.yml`` and a checkpoint.
        checkpoint: ``None`` or ``'last'`` (the newest intact checkpoint), ``'best'`` or a
            checkpoint path.

    Returns:
        an :class:`InferenceHandle` whose model holds, for good, the averaged weights when the
        run kept an average (``ema_decay``), else the trained ones.

    Raises:
        ValueError: the directory holds no checkpoint, ``'best'`` without a best checkpoint, or
            a path that is no checkpoint; :class:`~pinn.params.ParamsError` for a damaged
            ``params.yml``.
    """
    params = read_params(model_dir)
    mp = params["model"]["params"]
    model = build_model(params)
    step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
    parts = dict(model=model, step=step)
    average = WeightAverage(model.trainable_variables, mp["ema_decay"]) if mp["ema_decay"] else None
    if average is not None:
        parts["weight_average"] = average
    store = CheckpointStore(model_dir, parts, is_chief=False, keep=mp["keep_checkpoint_max"])
    path = store.restore(checkpoint)
    if path is None:
        raise ValueError(f"{os.fspath(model_dir)}: no checkpoint to load (train the model first)")
    averaged = average is not None and store.holds(path, "weight_average")
    if averaged:
        for variable, mean in zip(model.trainable_variables, average.shadow):
            variable.assign(mean)
    elif average is not None:
        log.info("%s holds no weight average (trained without ema_decay): its raw weights are used", path)
    log.info("loaded %s (step %d) for inference", path, int(step))
    return InferenceHandle(model, params, path, int(step), averaged=averaged)
