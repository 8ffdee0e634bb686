"""The dipole models: a network's atomic charges, bond charges or atomic dipoles, and the dipole they make.

One family (:class:`DipoleFamilyModel`) with upstream PiNN 2.x's members; each adds some of

- AC, atomic charges:  q_i = net_i / d_scale (neutralised, below)           D += Σ_i q_i r_i
- BC, bond charges:    I_ij from the pair (i, j) / d_scale                   D += Σ_(ij) I_ij r_ij
- AD, atomic dipoles:  μ_i from equivariant vector features / d_scale       D += Σ_i μ_i
- OS, oxidation states q_ox_i of the data (e)                               D += Σ_i q_ox_i r_i / d_unit

with r_ij = r_j + S·cell − r_i, the pair vector (Å).  D is in the data's dipole unit (e·Å × 1/d_unit; e·Å
by default).  ``dipole_model`` (pinn's) and ``AC_dipole_model`` (upstream's name) are AC alone; the other
members are in :mod:`pinn.physics.dipole_variants`.

Charge neutrality (``charge_neutrality``, AC): each structure's charges (``neutral_unit: system``), or
each water molecule's (``water_molecule``: every three consecutive atoms of a structure, as upstream's
datasets order them), are shifted by their mean so that they sum to zero; this also makes D independent
of the origin.  Bond charges move charge between two atoms and keep every structure neutral by
construction: their atomic charges q_i = Σ_(ji) I_ji − Σ_(ij) I_ij (charge I_ij leaves i for j) are what
the models give as ``charges`` together with the AC charges.  For a molecule D = Σ q_i r_i (+ Σ μ_i);
in a periodic cell a bond across the boundary counts with its image's position.

The positions are taken as stored: for a periodic structure D is the dipole of the atoms as placed
(unwrapped molecules give a meaningful one; a wrapped cell does not).  Charges are invariant under
rotation and translation and D rotates with the structure, because the networks see positions only
through pair distances and directions.

The loss (upstream's options): with ``vector_dipole`` the errors of the three components, else of the
magnitude |D| (a label with three components counts by its norm, a label with one value is the
magnitude), × d_scale (per atom with ``use_d_per_atom``); values whose label × d_scale exceeds
``max_dipole`` are left out; ``use_d_weight`` multiplies each structure's penalty by the data's
``d_weight``.  ``regularization`` (BC) adds the mean square bond charge in training units, ``use_l2``
the network's squared weights.
"""
import numpy as np
import tensorflow as tf

from pinn import keys as K
from pinn.io.batch import pair_geometry, with_cell_and_pbc
from pinn.networks.layers import scatter_sum
from pinn.physics.base import COMMON_PARAMS, Model, abs_sq_count, cast_floats, check_atomic_outputs, per_row
from pinn.physics.dipole_params import AC_PARAMS, CHARGE_PARAMS, family_params
from pinn.physics.loss_weights import atom_weights, structure_weights
from pinn.schema import ParamsError

#: data key of the per-structure weights of ``use_d_weight``
D_WEIGHT = "d_weight"
#: data key of the atoms' oxidation states (e) of the OS models
OXIDATION = "oxidation"
#: added to |D|² before the square root of the magnitude loss (e·Å)²: a finite gradient at D = 0
MAGNITUDE_EPS = 1e-12


def neutral_groups(struct, n_struct, unit):
    """Group of every atom for charge neutrality, and the number of groups.

    Args:
        struct: [n_atoms] structure of each atom (atoms of a structure consecutive, as in a batch).
        n_struct: number of structures (int32 scalar).
        unit: ``'system'`` (a group per structure) or ``'water_molecule'`` (every three consecutive atoms of
            a structure; a structure whose atoms are not a multiple of three ends with a smaller group).

    Returns:
        ([n_atoms] int32 group ids, number of groups).
    """
    if unit == "system":
        return struct, n_struct
    n_atoms = tf.shape(struct)[0]
    index = tf.range(n_atoms)
    first = tf.math.unsorted_segment_min(index, struct, n_struct)
    start = tf.gather(first, struct)
    return start + (index - start) // 3, n_atoms


def neutralize(charges, groups, n_groups):
    """``charges`` [n_atoms] minus the mean of their group: each group sums to zero."""
    count = tf.math.unsorted_segment_sum(tf.ones_like(charges), groups, n_groups)
    mean = tf.math.divide_no_nan(tf.math.unsorted_segment_sum(charges, groups, n_groups), count)
    return charges - tf.gather(mean, groups)


class DipoleFamilyModel(Model):
    """Network → charges / bond charges / atomic dipoles → dipole; and the loss on them.

    Subclasses set which parts they have (``CHARGES``, ``BONDS``, ``ATOMIC_DIPOLES``, ``OXIDATION``) and
    their ``PARAMS``; the parts' network outputs come from :meth:`parts`.

    Args:
        network: a network module (``net.atomic_outputs(tensors) -> [n_atoms, out_units]``).
        params: resolved ``model.params`` (see ``PARAMS``).
        atom_types: atomic numbers the network knows.
        dtype: float dtype.
    """

    #: the model's name in the params (``model.name``)
    NAME = None
    CHARGES = False
    BONDS = False
    ATOMIC_DIPOLES = False
    OXIDATION = False
    LOSS_TERMS = ("dipole", "charges", "bond_charges", "l2")
    WEIGHT_KEYS = {"dipole": "d_loss_multiplier", "charges": "q_loss_multiplier",
                   "bond_charges": "bc_loss_multiplier", "l2": "l2_loss_multiplier"}
    LABELS = {"dipole": K.D_DATA, "charges": K.Q_DATA, "bond_charges": K.D_DATA, "l2": K.D_DATA}

    def __init__(self, network, params, atom_types, dtype=tf.float32, name="dipole"):
        super().__init__(params, name=name)
        check_atomic_outputs(network)
        self.network = network
        self.dtype = dtype
        self.atom_types = [int(z) for z in atom_types]

    @property
    def has_charges(self):
        """Whether the model gives atomic charges (AC or BC parts)."""
        return self.CHARGES or self.BONDS

    def enabled_terms(self):
        p = self.params
        terms = {"dipole"} if p.get("use_dipole", True) else set()
        if p.get("use_charge"):
            terms.add("charges")
        if self.BONDS and p["regularization"]:
            terms.add("bond_charges")
        if p["use_l2"]:
            terms.add("l2")
        return terms

    # --- the parts ---------------------------------------------------------------------------------

    def parts(self, tensors):
        """The network's outputs for this model's parts, in training units (× d_scale).

        Args:
            tensors: batch with ``diff`` and ``dist`` (:func:`pinn.io.batch.pair_geometry`).

        Returns:
            dict with ``charges`` [n_atoms] (AC), ``bonds`` [n_pairs] (BC), ``dipoles`` [n_atoms, 3] (AD).
        """
        return {"charges": self.network.atomic_outputs(tensors)[:, 0]}

    def regularized_weights(self):
        """Weight matrices of ``use_l2``: the network's (models with their own layers add theirs)."""
        return list(self.network.regularized_weights())

    def upstream_metric_scales(self):
        """Upstream PiNN reports D and D_PER_ATOM errors × ``d_scale`` (its training units)."""
        return {"D": self.params["d_scale"], "D_PER_ATOM": self.params["d_scale"]}

    def predict(self, tensors, bond_charges=False):
        """Dipole (and charges) of a sparse batch.

        Args:
            tensors: batch with ``elems``, ``coord``, ``cell``, ``ind_1``, ``ind_2``, ``shift`` (see
                :mod:`pinn.keys`), and ``oxidation`` [n_atoms] (e) for the OS models.
            bond_charges: also return the bond charges (BC models; for their regularisation).

        Returns:
            dict with ``dipole`` [n_struct, 3] (data units: e·Å / d_unit), ``charges`` [n_atoms] (models with
            AC or BC parts, data units / Å) and with ``bond_charges`` the bond charges [n_pairs] in training
            units.
        """
        p = self.params
        tensors = with_cell_and_pbc(tensors)
        n_struct = tf.shape(tensors[K.CELL])[0]
        tensors = pair_geometry(cast_floats(tensors, self.dtype))
        struct = tensors[K.IND_1][:, 0]
        coord = tensors[K.COORD]
        n_atoms = tf.shape(coord)[0]
        parts = self.parts(tensors)
        dipole = tf.zeros([n_struct, 3], self.dtype)
        charges = None
        if self.CHARGES:
            charges = parts["charges"] * p.get("q_scale", 1.0) / p["d_scale"]
            if p["charge_neutrality"]:
                charges = neutralize(charges, *neutral_groups(struct, n_struct, p["neutral_unit"]))
            dipole += scatter_sum(charges[:, None] * coord, struct, n_struct)
        out = {}
        if self.BONDS:
            ind_2 = tensors[K.IND_2]
            bonds = parts["bonds"] / p["d_scale"]
            dipole += scatter_sum(bonds[:, None] * tensors[K.DIFF], tf.gather(struct, ind_2[:, 0]), n_struct)
            moved = scatter_sum(bonds, ind_2[:, 1], n_atoms) - scatter_sum(bonds, ind_2[:, 0], n_atoms)
            charges = moved if charges is None else charges + moved
            if bond_charges:
                out["bond_charges"] = parts["bonds"]
        if self.ATOMIC_DIPOLES:
            dipole += scatter_sum(parts["dipoles"] / p["d_scale"], struct, n_struct)
        if self.OXIDATION:
            if OXIDATION not in tensors:
                raise ValueError(f"{type(self).__name__}: the data have no {OXIDATION!r} (the atoms' oxidation "
                                 "states, e); add them to the dataset")
            oxidation = tf.cast(tensors[OXIDATION], self.dtype)
            dipole += scatter_sum(oxidation[:, None] * coord, struct, n_struct) / p["d_unit"]
        out["dipole"] = dipole
        if charges is not None:
            out["charges"] = charges
        return out

    def train_outputs(self):
        """Keyword arguments of :meth:`predict` in a training step."""
        return {"bond_charges": "bond_charges" in self.enabled_terms()}

    def eval_outputs(self, spec):
        """Keyword arguments of :meth:`predict` when evaluating."""
        return self.train_outputs()

    def metric_keys(self, spec, outputs):
        """Error metrics (``D``, ``Q``) available for data with element spec ``spec``."""
        keys = ["D"] if K.D_DATA in spec else []
        if self.has_charges and K.Q_DATA in spec:
            keys.append("Q")
        return keys

    # --- the loss ----------------------------------------------------------------------------------

    def _compared(self, tensors, dipole):
        """(prediction, label) of the dipole as the loss compares them, in data units: [n_struct, 3] with
        ``vector_dipole``, else magnitudes [n_struct]."""
        label = tf.cast(tensors[K.D_DATA], dipole.dtype)
        single = label.shape.rank == 1 or (label.shape.rank == 2 and label.shape[-1] == 1)
        if self.params["vector_dipole"]:
            if single:
                raise ValueError("model.params.vector_dipole: the data's d_data has one value per structure (a "
                                 "magnitude); the vector loss needs three components (set vector_dipole false)")
            return dipole, label
        label = tf.reshape(label, [-1]) if single else tf.norm(label, axis=1)
        return tf.sqrt(tf.reduce_sum(dipole ** 2, axis=1) + MAGNITUDE_EPS), label

    def _dipole_mask(self, tensors, label, dtype):
        """0/1 of each compared dipole value: padding and values beyond ``max_dipole`` left out."""
        mask = structure_weights(tensors, dtype)
        if label.shape.rank == 2:
            mask = tf.repeat(mask[:, None], 3, axis=1)
        if self.params["max_dipole"] is not False:
            big = tf.abs(label) * self.params["d_scale"] > self.params["max_dipole"]
            mask = tf.where(big, tf.zeros_like(mask), mask)
        return mask

    def _pair_weights(self, tensors, dtype):
        """[n_pairs] 1 for the pairs of real structures, 0 for padding."""
        return tf.gather(atom_weights(tensors, dtype), tensors[K.IND_2][:, 0])

    def loss_counts(self, tensors):
        """Values in each enabled loss term (float64; padding and values beyond ``max_dipole`` not
        counted): dipole components or magnitudes, atoms for ``charges``, pairs for ``bond_charges``,
        1 for ``l2``."""
        terms = self.enabled_terms()
        counts = {}
        if "dipole" in terms and K.D_DATA in tensors:
            zeros = tf.zeros([tf.shape(tensors[K.CELL])[0], 3], tf.float64)
            _, label = self._compared(tensors, zeros)
            counts["dipole"] = tf.reduce_sum(self._dipole_mask(tensors, label, tf.float64))
        elif "dipole" in terms:
            counts["dipole"] = tf.constant(0.0, tf.float64)
        if "charges" in terms:
            counts["charges"] = tf.reduce_sum(atom_weights(tensors, tf.float64))
        if "bond_charges" in terms:
            counts["bond_charges"] = tf.reduce_sum(self._pair_weights(tensors, tf.float64))
        if "l2" in terms:
            counts["l2"] = tf.constant(1.0, tf.float64)
        return counts

    def residuals(self, tensors, pred):
        """The errors behind each enabled loss term whose labels the batch has, in training units.

        Returns:
            dict term → (err, weight): flat tensors of one length; ``dipole``: d_scale × (prediction −
            label) of the components (``vector_dipole``) or magnitudes, per atom with
            ``use_d_per_atom``, weight 0 for padding and beyond ``max_dipole``, × ``d_weight`` with
            ``use_d_weight``; ``charges``: charges − q_data (e); ``bond_charges``: the bond charges
            themselves (training units), weight 1 per real pair.  Each loss sum is
            Σ weight · penalty(err) (:meth:`loss_sums`).
        """
        p = self.params
        terms = self.enabled_terms()
        out = {}
        dtype = pred["dipole"].dtype
        if "dipole" in terms and K.D_DATA in tensors:
            value, label = self._compared(tensors, pred["dipole"])
            err = (value - label) * p["d_scale"]
            weight = self._dipole_mask(tensors, label, dtype)
            if p["use_d_per_atom"]:
                n_atoms = tf.math.unsorted_segment_sum(tf.ones_like(tensors[K.ELEMS], dtype), tensors[K.IND_1][:, 0],
                                                       tf.shape(tensors[K.CELL])[0])
                err = tf.math.divide_no_nan(err, per_row(n_atoms, err))
            if p["use_d_weight"]:
                if D_WEIGHT not in tensors:
                    raise ValueError(f"model.params.use_d_weight: the data have no {D_WEIGHT!r} (add it to the "
                                     "dataset, see the data page)")
                weight = weight * per_row(tf.reshape(tf.cast(tensors[D_WEIGHT], dtype), [-1]), weight)
            out["dipole"] = (tf.reshape(err, [-1]), tf.reshape(weight, [-1]))
        if "charges" in terms and K.Q_DATA in tensors:
            out["charges"] = (pred["charges"] - tf.cast(tensors[K.Q_DATA], dtype), atom_weights(tensors, dtype))
        if "bond_charges" in terms and "bond_charges" in pred:
            out["bond_charges"] = (pred["bond_charges"], self._pair_weights(tensors, dtype))
        return out

    def loss_sums(self, tensors, pred):
        """Sum of the penalties of each enabled loss term whose labels the batch has (padding left out):
        Σ weight · penalty(err) of :meth:`residuals`; with ``use_l2`` also ``l2``: Σ w²/2 over
        :meth:`regularized_weights` (its count is 1 per batch, so a parallel run adds it once)."""
        sums = {t: tf.reduce_sum(w * self.penalty(e, t)) for t, (e, w) in self.residuals(tensors, pred).items()}
        if "l2" in self.enabled_terms():
            sums["l2"] = tf.cast(tf.add_n([tf.constant(0.0, tf.float64)]
                                          + [tf.cast(tf.reduce_sum(v ** 2), tf.float64) / 2
                                             for v in self.regularized_weights()]), pred["dipole"].dtype)
        return sums

    def error_sums(self, tensors, pred):
        """Sums for MAE/RMSE metrics: ``D`` (data units: the compared components or magnitudes, padding left
        out) and ``Q`` (e) → (Σ|err|, Σerr², count) when labels exist."""
        out = {}
        if K.D_DATA in tensors:
            value, label = self._compared(tensors, pred["dipole"])
            out["D"] = abs_sq_count(value - label, structure_weights(tensors, value.dtype))
        if K.Q_DATA in tensors and "charges" in pred:
            err = pred["charges"] - tf.cast(tensors[K.Q_DATA], pred["charges"].dtype)
            out["Q"] = abs_sq_count(err, atom_weights(tensors, err.dtype))
        return out

    def parity_arrays(self, batch, pred):
        """Labels and predictions of one evaluated batch (NumPy) for parity plots (see :mod:`pinn.training.metrics`):
        the dipole as the loss compares it ([n, 3] components, or [n] magnitudes), charges [m]."""
        out = {}
        if K.D_DATA in batch:
            value, label = self._compared({K.D_DATA: tf.constant(batch[K.D_DATA])}, tf.constant(pred["dipole"]))
            out["dipole_ref"] = np.asarray(label, np.float64)
            out["dipole_pred"] = np.asarray(value, np.float64)
        if K.Q_DATA in batch and "charges" in pred:
            out["charges_ref"] = np.asarray(batch[K.Q_DATA], np.float64)
            out["charges_pred"] = np.asarray(pred["charges"], np.float64)
        return out

    def structure_outputs(self, batch, pred):
        """Split a predicted batch (NumPy) into one dict per structure: ``dipole`` [3] (data units),
        ``charges`` [n_atoms] (models that have them) and ``elems``."""
        ind_1 = np.asarray(batch[K.IND_1])[:, 0]
        elems = np.asarray(batch[K.ELEMS])
        for s in range(len(pred["dipole"])):
            atoms = ind_1 == s
            out = {"dipole": pred["dipole"][s], "elems": elems[atoms]}
            if "charges" in pred:
                out["charges"] = pred["charges"][atoms]
            yield out


class DipoleModel(DipoleFamilyModel):
    """pinn's ``dipole_model``: atomic charges → dipole (the AC model), the vector dipole in the loss.

    Takes the arguments of :class:`DipoleFamilyModel`.
    """

    NAME = "dipole_model"
    CHARGES = True
    PARAMS = {**AC_PARAMS, **CHARGE_PARAMS, **family_params(vector_dipole=True), **COMMON_PARAMS}

    def __init__(self, network, params, atom_types, dtype=tf.float32, name="dipole"):
        if not (params["use_dipole"] or params["use_charge"]):
            raise ParamsError(f"model.params.use_dipole: the {self.NAME} needs use_dipole or use_charge (or both)")
        super().__init__(network, params, atom_types, dtype, name=name)


class ACDipoleModel(DipoleModel):
    """Upstream PiNN 2.x's ``AC_dipole_model``: the same model as ``dipole_model`` with upstream's defaults
    (``vector_dipole`` false: the loss on |D|).

    Takes the arguments of :class:`DipoleFamilyModel`.
    """

    NAME = "AC_dipole_model"
    PARAMS = {**AC_PARAMS, **CHARGE_PARAMS, **family_params(vector_dipole=False), **COMMON_PARAMS}
