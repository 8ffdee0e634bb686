"""What every model shares: loss terms with weights (fixed or scheduled), MSE or Huber penalties, error sums.

A model declares its loss terms in order (``LOSS_TERMS``), the params key of
each term's multiplier (``WEIGHT_KEYS``) and which terms are on
(:meth:`Model.enabled_terms`).  The loss of a batch is

    L = Σ_term w_term(step) · Σ penalty(err) / (number of values)

with penalty(e) = e² (``loss_type: mse``) or, for ``huber``, e² when |e| ≤ δ
and 2δ|e| − δ² beyond (the same as MSE for small errors, linear for outliers).
Sums and counts are kept apart so a parallel run can normalise by the global
counts (see :mod:`pinn.training.trainer`).
"""
import copy

import tensorflow as tf

from pinn import keys as K
from pinn.physics.loss_weights import check_weight_schedule, piecewise_linear
from pinn.schema import Option, ParamsError

#: loss options shared by all models (``model.params``)
LOSS_PARAMS = {
    "loss_type": Option(str, "mse", "penalty of each error: 'mse' (squared) or 'huber' (squared up to "
                        "huber_delta, linear beyond)", choices=("mse", "huber")),
    "huber_delta": Option((float, dict), 1.0, "δ of the Huber loss in the units of each quantity; a number for "
                          "all terms or {term: δ}"),
    "loss_weight_schedule": Option(dict, {}, "{term: [[step, weight], ...]}: the weight of a loss term "
                                   "interpolated linearly between the given steps (steps counted as for "
                                   "decay_step); replaces that term's multiplier", check=check_weight_schedule),
}

#: what every model's ``PARAMS`` includes (the training loop's options are added by
#: :func:`pinn.params.model_schema`)
COMMON_PARAMS = LOSS_PARAMS


class Model(tf.Module):
    """Base of the models: loss weights, penalties and error sums.

    Subclasses set ``LOSS_TERMS``, ``WEIGHT_KEYS``, ``LABELS`` (term → data key), ``PARAMS`` and implement
    ``enabled_terms``, ``predict``, ``train_outputs``, ``eval_outputs``,
    ``metric_keys``, ``loss_counts``, ``loss_sums``, ``error_sums``,
    ``parity_arrays`` and ``structure_outputs`` (of :meth:`structure_predict`).
    """

    LOSS_TERMS = ()
    WEIGHT_KEYS = {}
    LABELS = {}

    def __init__(self, params, name):
        super().__init__(name=name)
        # a private deep copy, set past TensorFlow's attribute tracking (which would wrap its lists)
        object.__setattr__(self, "params", copy.deepcopy(dict(params)))
        self._check_loss_params()

    def enabled_terms(self):
        """Set of the loss terms that are on."""
        raise NotImplementedError

    def structure_predict(self, tensors):
        """What :meth:`structure_outputs` splits per structure: ``predict`` of a batch (a model that can give
        more than its defaults, such as per-atom energies, asks for it here)."""
        return self.predict(tensors)

    def eval_metric_keys(self, spec, outputs):
        """The error metrics of an evaluation: those of training (``metric_keys``) unless a model adds some."""
        return self.metric_keys(spec, outputs)

    def _check_loss_params(self):
        terms = set(self.enabled_terms())
        for key in self.params["loss_weight_schedule"]:
            if key not in terms:
                raise ParamsError(f"model.params.loss_weight_schedule.{key}: not a loss term of this model "
                                  f"and settings; terms: {self.loss_term_names()}")
        delta = self.params["huber_delta"]
        deltas = delta.values() if isinstance(delta, dict) else [delta]
        if isinstance(delta, dict):
            for key in delta:
                if key not in self.LOSS_TERMS:
                    raise ParamsError(f"model.params.huber_delta.{key}: not a loss term; "
                                      f"terms: {list(self.LOSS_TERMS)}")
        if any(not isinstance(d, (int, float)) or d <= 0 for d in deltas):
            raise ParamsError(f"model.params.huber_delta: must be positive (got {delta!r})")

    def loss_term_names(self):
        """The enabled loss terms, in the order of ``LOSS_TERMS``."""
        enabled = self.enabled_terms()
        return [t for t in self.LOSS_TERMS if t in enabled]

    def loss_weights(self, s):
        """Weight of each enabled loss term.

        Args:
            s: position in the schedule (float64 tensor, single-rank steps).

        Returns:
            dict term → weight (float, or float64 tensor for a scheduled term).
        """
        schedule = self.params["loss_weight_schedule"]
        out = {}
        for term in self.loss_term_names():
            if term in schedule:
                out[term] = piecewise_linear(s, schedule[term])
            else:
                out[term] = self.params[self.WEIGHT_KEYS[term]]
        return out

    def penalty(self, err, term):
        """Elementwise penalty of errors ``err`` of loss term ``term`` (see the module docstring)."""
        if self.params["loss_type"] == "mse":
            return err ** 2
        delta = self.params["huber_delta"]
        delta = tf.cast(delta.get(term, 1.0) if isinstance(delta, dict) else delta, err.dtype)
        size = tf.abs(err)
        return tf.where(size <= delta, err ** 2, 2.0 * delta * size - delta ** 2)

    def loss_terms(self, tensors, pred):
        """Penalty sums and their counts, per enabled loss term.

        Returns:
            dict term → (sum of penalties, number of values).  The loss is
            Σ_term weight · sum / count; keeping sums and counts apart lets a
            parallel run normalise by global counts.
        """
        dtype = self.dtype
        sums = self.loss_sums(tensors, pred)
        counts = self.loss_counts(tensors)
        return {t: (sums[t], tf.cast(counts[t], dtype)) for t in sums}

    def prepare_training(self, input_fn, reduce, replicas=1):
        """Model-specific preparation before the first training step (here none).

        Args:
            input_fn: the training input function (sparse batches).
            reduce: a function summing a float64 array over all ranks.
            replicas: batches this process trains on side by side in a step (the devices of a
                mirrored world), each counting as a rank's.

        Returns:
            whether the model's variables changed (the trainer then makes every rank take rank 0's).
        """
        return False

    def upstream_metric_scales(self):
        """Quantity (``E``, ``F``, ``D``, ...) → the factor between pinn's metric and upstream PiNN's
        ``METRICS/...`` value of it (upstream reports errors in its training units); none here."""
        return {}

    def missing_labels(self, spec):
        """Enabled loss terms whose labels data with element spec ``spec`` lack."""
        return [t for t in self.loss_term_names() if self.LABELS[t] not in spec]

    def check_frames(self, spec, what):
        """Refuse QM/MM frames (data with ``qm``: QM and MM atoms in one structure): this model (mechanical
        embedding) would count every MM atom as part of the region.

        Args:
            spec: the data's element spec (a dict).
            what: the data, for the message (e.g. ``"training batches"``).

        Raises:
            ValueError: naming :func:`pinn.io.qm_region`, which keeps the QM region alone.
        """
        if K.QM in spec:
            raise ValueError(f"the {what} are QM/MM frames (key {K.QM!r}: QM and MM atoms in one structure), and "
                             "this model (mechanical embedding) would count every MM atom as part of the QM "
                             "region: give it the region alone, dataset.apply(pinn.io.qm_region()) before "
                             "add_neighbors (pinn train run files and pinn eval do this; docs/qmmm.md)")


def check_atomic_outputs(network):
    """Refuse a network whose outputs are pooled per structure (PiNet's ``out_pool``): a model sums
    the atoms' outputs itself."""
    pool = getattr(network, "params", {}).get("out_pool")
    if pool:
        raise ParamsError(f"network.params.out_pool: {pool!r} pools the outputs per structure, for the network "
                          "on its own; the models need one output per atom: leave out_pool false")


def abs_sq_count(err, weights=None):
    """(Σ w|err|, Σ w err², Σ w over all values) of an error tensor: the sums behind MAE and RMSE.

    ``weights`` (optional) has one value per row of ``err`` (1: counted, 0: padding, see
    :func:`structure_weights`); without it every value counts once.
    """
    if weights is None:
        return (tf.reduce_sum(tf.abs(err)), tf.reduce_sum(err ** 2), tf.cast(tf.size(err), err.dtype))
    w = tf.broadcast_to(per_row(weights, err), tf.shape(err))
    return tf.reduce_sum(w * tf.abs(err)), tf.reduce_sum(w * err ** 2), tf.reduce_sum(w)


def per_row(weights, values):
    """``weights`` [n] shaped to multiply the rows of ``values`` [n, ...] (in its dtype)."""
    return tf.reshape(tf.cast(weights, values.dtype), [-1] + [1] * (values.shape.rank - 1))


def cast_floats(tensors, dtype):
    """A copy of a batch dict with every floating tensor cast to ``dtype``."""
    return {k: (tf.cast(v, dtype) if v.dtype.is_floating else v) for k, v in tensors.items()}
