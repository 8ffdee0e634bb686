"""The dipole model: atomic charges from a network, and the dipole moment they make.

    q_i = q_scale · net_i − (neutral: mean of q_scale · net over the structure)      (e)
    D   = Σ_i q_i r_i                                                                  (e·Å)

With ``charge_neutrality`` (the default) every structure's charges sum to
zero, which also makes D independent of the origin.  The positions are taken
as stored: for a periodic structure D is the dipole of the atoms as placed
(unwrapped molecules give a meaningful one; a wrapped cell does not).  Charges
are invariant under rotation and translation and D rotates with the structure,
because the networks see positions only through pair distances and directions.
"""
import numpy as np
import tensorflow as tf

from pinn import keys as K
from pinn.models.base import COMMON_PARAMS, Model, abs_sq_count, cast_floats, check_atomic_outputs, per_row
from pinn.models.potential import pair_geometry
from pinn.models.loss_weights import atom_weights, structure_weights
from pinn.schema import Option, ParamsError, non_negative, positive

PARAMS = {
    "use_dipole": Option(bool, True, "train on the dipole moment (d_data, e·Å)"),
    "use_charge": Option(bool, False, "train on the atomic charges (q_data, e)"),
    "charge_neutrality": Option(bool, True, "shift the charges of each structure so that they sum to zero"),
    "d_loss_multiplier": Option(float, 1.0, "weight of the dipole loss", check=non_negative),
    "q_loss_multiplier": Option(float, 1.0, "weight of the charge loss", check=non_negative),
    "q_scale": Option(float, 1.0, "network outputs are multiplied by this (e)", check=positive),
    **COMMON_PARAMS,
}


class DipoleModel(Model):
    """Network → atomic charges → dipole; and the loss on them.

    Args:
        network: a network module (``net(tensors) -> [n_atoms, 1]``).
        params: resolved ``model.params`` (see ``PARAMS``).
        atom_types: atomic numbers the network knows.
        dtype: float dtype.
    """

    PARAMS = PARAMS
    LOSS_TERMS = ("dipole", "charges")
    WEIGHT_KEYS = {"dipole": "d_loss_multiplier", "charges": "q_loss_multiplier"}
    LABELS = {"dipole": K.D_DATA, "charges": K.Q_DATA}

    def __init__(self, network, params, atom_types, dtype=tf.float32, name="dipole"):
        if not (params["use_dipole"] or params["use_charge"]):
            raise ParamsError("model.params.use_dipole: the dipole model needs use_dipole or use_charge (or both)")
        super().__init__(params, name=name)
        check_atomic_outputs(network)
        self.network = network
        self.dtype = dtype
        self.atom_types = [int(z) for z in atom_types]

    def enabled_terms(self):
        p = self.params
        return ({"dipole"} if p["use_dipole"] else set()) | ({"charges"} if p["use_charge"] else set())

    def predict(self, tensors):
        """Charges and dipole of a sparse batch.

        Args:
            tensors: batch with ``elems``, ``coord``, ``cell``, ``ind_1``,
                ``ind_2``, ``shift`` (see :mod:`pinn.keys`).

        Returns:
            dict with ``charges`` [n_atoms] (e) and ``dipole`` [n_struct, 3] (e·Å).
        """
        n_struct = tf.shape(tensors[K.CELL])[0]
        tensors = pair_geometry(cast_floats(tensors, self.dtype))
        struct = tensors[K.IND_1][:, 0]
        charges = self.network(tensors)[:, 0] * self.params["q_scale"]
        if self.params["charge_neutrality"]:
            n_atoms = tf.math.unsorted_segment_sum(tf.ones_like(charges), struct, n_struct)
            mean = tf.math.unsorted_segment_sum(charges, struct, n_struct) / n_atoms
            charges = charges - tf.gather(mean, struct)
        dipole = tf.math.unsorted_segment_sum(charges[:, None] * tensors[K.COORD], struct, n_struct)
        return {"charges": charges, "dipole": dipole}

    def train_outputs(self):
        """Keyword arguments of :meth:`predict` in a training step (none)."""
        return {}

    def eval_outputs(self, spec):
        """Keyword arguments of :meth:`predict` when evaluating (none)."""
        return {}

    def metric_keys(self, spec, outputs):
        """Error metrics (``D``, ``Q``) available for data with element spec ``spec``."""
        return [key for key, label in (("D", K.D_DATA), ("Q", K.Q_DATA)) if label in spec]

    #: per-row weights of each term's values: structures for the dipole, atoms for the charges
    _ROW_WEIGHTS = {"dipole": structure_weights, "charges": atom_weights}

    def loss_counts(self, tensors):
        """Values in each enabled loss term: 3 × structures for ``dipole``, atoms for ``charges``
        (float64; padding not counted)."""
        counts = {}
        if self.params["use_dipole"]:
            counts["dipole"] = 3.0 * tf.reduce_sum(structure_weights(tensors, tf.float64))
        if self.params["use_charge"]:
            counts["charges"] = tf.reduce_sum(atom_weights(tensors, tf.float64))
        return counts

    def residuals(self, tensors, pred):
        """The errors behind each enabled loss term whose labels the batch has.

        Returns:
            dict term → (err, weight): flat tensors of one length, ``err`` = prediction − label
            (dipole components in e·Å, charges in e), ``weight`` 1, or 0 for padding.  Each loss sum
            is Σ weight · penalty(err) (:meth:`loss_sums`).
        """
        out = {}
        for term, label in self.LABELS.items():
            if term in self.enabled_terms() and label in tensors:
                err = pred[term] - tf.cast(tensors[label], pred[term].dtype)
                weights = tf.broadcast_to(per_row(self._ROW_WEIGHTS[term](tensors, err.dtype), err), tf.shape(err))
                out[term] = (tf.reshape(err, [-1]), tf.reshape(weights, [-1]))
        return out

    def loss_sums(self, tensors, pred):
        """Sum of the penalties of each enabled loss term whose labels the batch has (padding left out):
        Σ weight · penalty(err) of :meth:`residuals`."""
        return {t: tf.reduce_sum(w * self.penalty(e, t)) for t, (e, w) in self.residuals(tensors, pred).items()}

    def error_sums(self, tensors, pred):
        """Sums for MAE/RMSE metrics: ``D`` and ``Q`` → (Σ|err|, Σerr², count) when labels exist
        (padding left out)."""
        out = {}
        for key, term, label in (("D", "dipole", K.D_DATA), ("Q", "charges", K.Q_DATA)):
            if label in tensors:
                err = pred[term] - tf.cast(tensors[label], pred[term].dtype)
                out[key] = abs_sq_count(err, self._ROW_WEIGHTS[term](tensors, err.dtype))
        return out

    def parity_arrays(self, batch, pred):
        """Labels and predictions of one evaluated batch (NumPy) for parity plots (see :mod:`pinn.training.metrics`)."""
        out = {}
        if K.D_DATA in batch:
            out["dipole_ref"] = np.asarray(batch[K.D_DATA], np.float64)
            out["dipole_pred"] = np.asarray(pred["dipole"], np.float64)
        if K.Q_DATA in batch:
            out["charges_ref"] = np.asarray(batch[K.Q_DATA], np.float64)
            out["charges_pred"] = np.asarray(pred["charges"], np.float64)
        return out

    def structure_outputs(self, batch, pred):
        """Split a predicted batch (NumPy) into one dict per structure: ``dipole`` [3] (e·Å),
        ``charges`` [n_atoms] (e) and ``elems``."""
        ind_1 = np.asarray(batch[K.IND_1])[:, 0]
        elems = np.asarray(batch[K.ELEMS])
        for s in range(len(pred["dipole"])):
            atoms = ind_1 == s
            yield {"dipole": pred["dipole"][s], "charges": pred["charges"][atoms], "elems": elems[atoms]}
