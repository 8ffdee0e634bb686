"""A trained model for inference, and nothing of its training.

:func:`load_for_inference` reads a model directory's ``params.yml``, builds the network and
the model, and restores from a checkpoint only what inference needs
(:class:`~pinn.inference.checkpoint_reader.CheckpointReader`, verified): the model's variables
(weights and energy offsets), the step and, when the run kept one (``ema_decay``), the
weight average, which then replaces the raw weights (:mod:`pinn.inference.weight_average`).  No
optimizer, no Kalman filter (its P, n × n for n weights, is neither read nor checked), no checkpoint
store that writes, no MPI: evaluating a 6-atom molecule with a model trained by the EKF costs what the
model costs.

The result, an :class:`InferenceHandle`, is what the ASE calculator (:mod:`pinn.calculator`),
``pinn eval`` and the engines take; a model file's member is one too (:func:`handle_of_values`), and a
:class:`~pinn.training.trainer.Trainer` in memory gives one over its live weights
(:func:`pinn.models.restored.handle_of`).  Nothing here imports :mod:`pinn.training`.
"""
import contextlib
import logging
import os

import numpy as np
import tensorflow as tf

from pinn.inference.checkpoint_reader import CheckpointReader
from pinn.inference.errors import with_upstream_names
from pinn.inference.evaluator import Evaluator
from pinn.inference.inputs import evaluation_input, prepared_input
from pinn.inference.weight_average import AverageSlots
from pinn.networks.layers import precision_dtypes
from pinn.parallel.serial import SerialWorld
from pinn.params import read_params, resolve
from pinn.physics.registry import build_model

log = logging.getLogger("pinn")


class InferenceHandle:
    """A trained model for inference.

    Args:
        model: the model (:class:`~pinn.physics.potential.PotentialModel`,
            :class:`~pinn.physics.dipole.DipoleModel`, …).
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
        self.dtype = precision_dtypes(params["precision"])[0]
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
        """The :class:`~pinn.inference.evaluator.Evaluator` of this model in this one process."""
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
    model = build_model(params)
    step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
    parts = dict(model=model, step=step)
    average = AverageSlots(model.trainable_variables) if params["model"]["params"]["ema_decay"] else None
    if average is not None:
        parts["weight_average"] = average
    reader = CheckpointReader(model_dir, parts)
    path = reader.restore(checkpoint)
    if path is None:
        raise ValueError(f"{os.fspath(model_dir)}: no checkpoint to load (train the model first)")
    averaged = average is not None and reader.holds(path, "weight_average")
    if averaged:
        average.put_in(model.trainable_variables)
    elif average is not None:
        log.info("%s holds no weight average (trained without ema_decay): its raw weights are used", path)
    log.info("loaded %s (step %d) for inference", path, int(step))
    return InferenceHandle(model, params, path, int(step), averaged=averaged)


def variable_values(model):
    """The values of every variable of ``model`` by its path in the model (e.g.
    ``network/blocks/0/pp/layers/0/kernel``, ``e_dress``): what a model file keeps
    (:mod:`pinn.files.model_file`)."""
    return {"/".join(str(p) for p in path): np.asarray(variable.numpy())
            for path, variable in model._flatten(predicate=_is_variable, with_path=True)}


def handle_of_values(params, values, source, step=0, averaged=False):
    """A model rebuilt from its params, holding the given variable values (a model file's member).

    Args:
        params: the model's params (``model_dir`` may be absent; nothing is read or written there).
        values: :func:`variable_values` of a model of these params.
        source: what the values came from, for messages (the checkpoint attribute of the handle).
        step, averaged: the training step of the values and whether they are a weight average.

    Returns:
        an :class:`InferenceHandle`.

    Raises:
        ValueError: the values are not those of this pinn's model of these params (naming the first
            variable missing or extra, or of another shape).
    """
    params = resolve({**params, "model_dir": params.get("model_dir") or "unused"})
    model = build_model(params)
    found = {"/".join(str(p) for p in path): v for path, v in model._flatten(predicate=_is_variable, with_path=True)}
    if set(found) != set(values):
        differ = sorted(set(found) ^ set(values))[0]
        raise ValueError(f"{source}: its variables are not those of this pinn's {params['network']['name']} "
                         f"{params['model']['name']} (e.g. {differ}); export the model again with this pinn")
    for key, variable in found.items():
        if tuple(variable.shape) != values[key].shape:
            raise ValueError(f"{source}: {key} has shape {values[key].shape} there, {tuple(variable.shape)} in "
                             f"the model")
        variable.assign(values[key])
    return InferenceHandle(model, params, source, int(step), averaged=averaged)


def _is_variable(value):
    return isinstance(value, tf.Variable)


def model_of_params(params, checkpoint=None):
    """What upstream PiNN's ``get_calc(params)`` computes with: the model directory of the params, checked
    against them; or, where that directory holds no checkpoint (and no ``checkpoint`` is asked for), the
    model of the params with its initial weights, as upstream's estimator predicts without a checkpoint
    (an LJ network has no weights; a warning names the directory when the network has some).

    Returns:
        the model directory (str), or an :class:`InferenceHandle` of the initial weights.

    Raises:
        ParamsError: the params are not valid; ValueError: their network or precision differs from the
            directory's ``params.yml`` (the weights there are of another network).
    """
    from pinn.files import checkpoint_dir
    given = resolve(params)
    if checkpoint is None and checkpoint_dir.latest(given["model_dir"]) is None:
        fresh = InferenceHandle(build_model(given), given)
        if fresh.model.network.trainable_variables:
            log.warning("get_calc: %s holds no checkpoint; the calculator uses the network's initial weights",
                        given["model_dir"])
        return fresh
    stored = read_params(given["model_dir"])
    for key in ("network", "precision"):
        if given[key] != stored[key]:
            raise ValueError(f"get_calc: the params' {key} differs from {given['model_dir']}/params.yml "
                             f"({given[key]!r} against {stored[key]!r}); the checkpoint holds the weights of the "
                             "latter")
    return given["model_dir"]
