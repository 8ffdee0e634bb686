"""Upstream PiNN 2.x's ten polarizability models: the charge response kernel χ and the polarizability α.

After Shao, Andersson, Knijff and Zhang, "Finite-field coupling via learning the charge response kernel",
Electron. Struct. 4, 014012 (2022), and upstream's ``pinn/models/pol_models.py``, by upstream's names.
PiNet2 gives atomic outputs P_i (``out_units`` 1) and, where a model needs them, pair outputs
I_ij = i1_ij + ⟨i3_ij, i3_ij⟩ (its ``out_extra`` i1, i3) and an atomic p1_i; per structure, with
R the positions (bohr) and 1 a vector of ones:

- ``pol_eem_model`` (electronegativity equalisation): η = E(σ) + diag(|P|), with E the Coulomb
  kernel of Gaussian charges of trainable per-element widths σ (E_ii = 1/(σ_i √π),
  E_ij = erf(r_ij / √(2(σ_i² + σ_j²))) / r_ij); χ = −η⁻¹ + η⁻¹11ᵀη⁻¹ / (1ᵀη⁻¹1),
  ``egap`` = 1 / (1ᵀη⁻¹1);
- ``pol_acks2_model``: χ = (1 − χ_s η)⁻¹ χ_s with χ_s = |I| + |I|ᵀ − diag(column sums) (from the
  pairs) and η as EEM's;
- ``pol_etainv_model``: η⁻¹ = MᵀM + ε 1 with M = diag(P) + I (off the diagonal), χ and ``egap`` from
  η⁻¹ as EEM's (``epsilon`` = ε, default 0.01);
- ``pol_localchi_model``: χ = χ_s;
- ``pol_local_model``: local terms, α = Σ_i Σ_c t_ic t_icᵀ with t_ic = Σ_j I_ijc r_ij (r_ij = r_j − r_i),
  χ = −Σ_i Σ_c v_ic v_icᵀ with (v_ic)_k = Σ_j I_ijc (δ_kj − δ_ki);
- and each ``_iso`` form adds α_iso 1 to α with α_iso = Σ_i p1_i (EEM, ACKS2, EtaInv: PiNet2's extra
  ``p1``; Local, LocalChi: the atomic outputs P_i).

Except for the local model, α = −Rᵀ χ R.  Every χ here has rows summing to zero (charge is
conserved), so α does not depend on the origin; χ and α are symmetric, invariant under a
permutation of the atoms and rotate with the structure (tested).  Units are atomic, as upstream's:
positions in bohr (Å × 1/``pinn.units.BOHR``), E in 1/bohr, the network's η terms in Hartree, χ in
e²/Hartree and α in bohr³ (QM7b's ``ptensor``), ``egap`` in Hartree.

Periodic structures (``cell`` and ``pbc``): E with the minimum image convention (exact for
orthorhombic cells, as upstream's), or with an Ewald sum when ``ewald_rc``, ``ewald_kmax`` and
``ewald_eta`` are all set (real-space pairs within ``ewald_rc``, reciprocal vectors up to
``ewald_kmax`` in each direction, Gaussian width ``ewald_eta``, Å).
"""
import numpy as np
import tensorflow as tf

from pinn import keys as K
from pinn import units
from pinn.io.batch import pair_geometry, with_cell_and_pbc
from pinn.physics.base import Model, abs_sq_count, cast_floats, check_atomic_outputs
from pinn.physics.loss_weights import structure_weights
from pinn.physics.polarizability_params import ETAINV_PARAMS, PARAMS
from pinn.physics.response_kernels import (coulomb_kernel, dense_indices, dense_positions, diagonal, pair_matrix,
                                          response_from_softness)
from pinn.schema import ParamsError

#: the data key of the polarizability tensor [3, 3] (upstream's name; QM7b's, bohr³)
PTENSOR = "ptensor"
#: the data key of the HOMO–LUMO gap (upstream's, Hartree)
EGAP = "egap"
#: 1 / bohr in Å⁻¹: Å → bohr
ANG2BOHR = 1.0 / units.BOHR
#: upstream's Gaussian widths σ (Å) of its make_sigma, by atomic number
UPSTREAM_SIGMA = {1: 0.312, 6: 0.730, 7: 0.709, 8: 0.661, 16: 1.048, 17: 1.016}


class PolarizabilityModel(Model):
    """Base of upstream's polarizability models: network → χ (and α, egap) of each structure; the loss on α.

    Subclasses set ``NAME``, ``NETWORK_EXTRAS`` (PiNet2's ``out_extra`` they read, set in the params as
    upstream's models set them), ``ISO`` and implement :meth:`response`.

    Args:
        network: a :class:`pinn.networks.PiNet2` (``out_units`` 1).
        params: resolved ``model.params`` (see ``PARAMS``).
        atom_types: atomic numbers the network knows (every one needs a Gaussian width, ``sigma``).
        dtype: float dtype.

    Raises:
        ParamsError: another network, another ``out_units``, an element without a width, Ewald keys
            given in part, egap options on a model without egap.
    """

    NAME = None
    NETWORK_EXTRAS = {}
    ISO = False
    #: dense per-structure matrices whose size depends on the data (and XLA's padding atoms would sit on
    #: one another in them): the training step is not compiled
    JIT_COMPATIBLE = False
    #: whether the model defines egap (EEM, EtaInv)
    HAS_EGAP = False
    #: whether its per-element widths σ are trained (EEM, ACKS2)
    USES_COULOMB = False
    PARAMS = PARAMS
    LOSS_TERMS = ("polarizability", "egap")
    WEIGHT_KEYS = {"polarizability": "p_loss_multiplier", "egap": "p_loss_multiplier"}
    LABELS = {"polarizability": PTENSOR, "egap": EGAP}

    def __init__(self, network, params, atom_types, dtype=tf.float32, name="polarizability"):
        from pinn.networks.pinet2 import PiNet2
        super().__init__(params, name=name)
        check_atomic_outputs(network)
        if not isinstance(network, PiNet2):
            raise ParamsError(f"network.name: the {self.NAME} reads PiNet2's atomic and pair outputs; "
                              f"{type(network).__name__} has none (use PiNet2)")
        if network.params["out_units"] != 1:
            raise ParamsError(f"network.params.out_units: the {self.NAME} reads one atomic output, got "
                              f"{network.params['out_units']}")
        missing = sorted(set(self.NETWORK_EXTRAS) - set(network.out_extra))
        if missing:
            raise ParamsError(f"network.params.out_extra: the {self.NAME} reads {missing}; set out_extra: "
                              f"{self.NETWORK_EXTRAS} (get_model sets it so, as upstream's models do)")
        p = self.params
        ewald = [p["ewald_rc"], p["ewald_kmax"], p["ewald_eta"]]
        if any(v is not None for v in ewald) and not all(v is not None for v in ewald):
            raise ParamsError("model.params.ewald_rc: the Ewald sum needs ewald_rc, ewald_kmax and ewald_eta "
                              "together (got " + ", ".join(f"{k}={v}" for k, v in zip(
                                  ("ewald_rc", "ewald_kmax", "ewald_eta"), ewald)) + ")")
        if (p["train_egap"] or p["eval_egap"]) and not self.HAS_EGAP:
            raise ParamsError(f"model.params.train_egap: the {self.NAME} has no egap (the EEM and EtaInv models "
                              "do)")
        self.network = network
        self.dtype = dtype
        self.atom_types = [int(z) for z in atom_types]
        if self.USES_COULOMB:
            table = dict(UPSTREAM_SIGMA)
            table.update({int(z): float(s) for z, s in p["sigma"].items()})
            unknown = [z for z in self.atom_types if z not in table]
            if unknown:
                raise ParamsError(f"model.params.sigma: no Gaussian width for element(s) {unknown}; upstream's "
                                  f"widths cover {sorted(UPSTREAM_SIGMA)}: give {{Z: σ in Å}} for the others")
            # trained as upstream's (their absolute values are used)
            self.sigma = tf.Variable([table[z] for z in self.atom_types], dtype=dtype, name="sigma")
        elif p["sigma"]:
            raise ParamsError(f"model.params.sigma: the {self.NAME} has no Coulomb kernel (EEM and ACKS2 have)")

    def enabled_terms(self):
        return {"egap"} if self.params["train_egap"] else {"polarizability"}

    # --- the physics -------------------------------------------------------------------------------

    def network_outputs(self, tensors):
        """(atomic outputs P [n_atoms], pair outputs I [n_pairs] or None, p1 [n_atoms] or None)."""
        outputs, extras = self.network.call_with_extras(tensors)
        pairs = None
        if "i1" in self.NETWORK_EXTRAS:
            pairs = extras["i1"][:, 0] + tf.reduce_sum(extras["i3"][:, :, 0] ** 2, axis=1)
        return outputs[:, 0], pairs, (extras["p1"][:, 0] if "p1" in self.NETWORK_EXTRAS else None)

    def coulomb(self, tensors, atom_index, n_struct, n_max):
        """E [n_struct, n_max, n_max] in 1/bohr with the trained widths."""
        sigma = tf.gather(tf.abs(self.sigma), self.network.element_index(tensors[K.ELEMS]))
        p = self.params
        ewald = None if p["ewald_rc"] is None else (p["ewald_rc"], p["ewald_kmax"], p["ewald_eta"])
        return coulomb_kernel(tensors, atom_index, sigma, n_struct, n_max, ewald) / ANG2BOHR

    def response(self, tensors, indices, atomic, pairs):
        """{``chi`` [n_struct, n_max, n_max] (e²/Hartree), ``alpha`` [n_struct, 3, 3] (bohr³; the local
        model's own, else left to :meth:`predict`), ``egap`` [n_struct] (Hartree; EEM, EtaInv)}."""
        raise NotImplementedError

    def predict(self, tensors):
        """χ, α (and egap) of a sparse batch.

        Args:
            tensors: batch with ``elems``, ``coord`` (Å), ``ind_1``, ``ind_2``, ``shift`` and optionally
                ``cell``, ``pbc``.

        Returns:
            dict with ``alpha`` [n_struct, 3, 3] (the data's unit: bohr³ / ``p_unit``), ``chi``
            [n_struct, n_max, n_max] (e²/Hartree; a structure's atoms first, zeros after them) and,
            for EEM and EtaInv, ``egap`` [n_struct] (Hartree); EEM also ``eta`` (its hardness matrix η,
            Hartree/e²).
        """
        tensors = pair_geometry(cast_floats(with_cell_and_pbc(tensors), self.dtype))
        indices = dense_indices(tensors)
        atom_index, _, n_struct, n_max = indices
        atomic, pairs, p1 = self.network_outputs(tensors)
        out = self.response(tensors, indices, atomic, pairs)
        if "alpha" not in out:
            R = dense_positions(atom_index, tensors[K.COORD], n_struct, n_max) * ANG2BOHR
            out["alpha"] = -tf.einsum("bix,bij,bjy->bxy", R, out["chi"], R)
        if self.ISO:
            iso = p1 if p1 is not None else atomic
            total = tf.math.unsorted_segment_sum(iso, tensors[K.IND_1][:, 0], n_struct)
            out["alpha"] += total[:, None, None] * tf.eye(3, dtype=self.dtype)
        out["alpha"] = out["alpha"] / self.params["p_unit"]
        return out

    def train_outputs(self):
        """Keyword arguments of :meth:`predict` in a training step (none)."""
        return {}

    def eval_outputs(self, spec):
        """Keyword arguments of :meth:`predict` when evaluating (none)."""
        return {}

    def metric_keys(self, spec, outputs):
        """``alpha_per_atom`` and its isotropic (``_diag``) and anisotropic (``_offdiag``) parts with a
        ``ptensor``; ``egap`` with ``eval_egap`` (or ``train_egap``) and the data's egap."""
        keys = ["alpha_per_atom", "alpha_per_atom_diag", "alpha_per_atom_offdiag"] if PTENSOR in spec else []
        if (self.params["eval_egap"] or self.params["train_egap"]) and EGAP in spec:
            keys.append("egap")
        return keys

    # --- the loss and the metrics -------------------------------------------------------------------

    def _per_atom_error(self, tensors, pred):
        """(α_pred − α_label) / n_atoms [n_struct, 3, 3] (the data's unit per atom)."""
        dtype = pred["alpha"].dtype
        n_struct = tf.shape(pred["alpha"])[0]
        n_atoms = tf.math.unsorted_segment_sum(tf.ones_like(tensors[K.ELEMS], dtype), tensors[K.IND_1][:, 0],
                                               n_struct)
        err = pred["alpha"] - tf.cast(tf.reshape(tensors[PTENSOR], [-1, 3, 3]), dtype)
        return err / n_atoms[:, None, None]

    def loss_counts(self, tensors):
        """Values in the loss (float64): 9 per real structure (α), or 1 (egap)."""
        per = 1.0 if self.params["train_egap"] else 9.0
        term = "egap" if self.params["train_egap"] else "polarizability"
        return {term: per * tf.reduce_sum(structure_weights(tensors, tf.float64))}

    def loss_sums(self, tensors, pred):
        """Σ penalty(p_scale × error): the per-atom α components (upstream's loss), or the egap."""
        p = self.params
        dtype = pred["alpha"].dtype
        weights = structure_weights(tensors, dtype)
        if p["train_egap"]:
            if EGAP not in tensors:
                return {}
            err = (pred["egap"] - tf.cast(tf.reshape(tensors[EGAP], [-1]), dtype)) * p["p_scale"]
            return {"egap": tf.reduce_sum(weights * self.penalty(err, "egap"))}
        if PTENSOR not in tensors:
            return {}
        err = self._per_atom_error(tensors, pred) * p["p_scale"]
        return {"polarizability": tf.reduce_sum(weights[:, None, None] * self.penalty(err, "polarizability"))}

    def error_sums(self, tensors, pred):
        """Sums behind upstream's metrics, per structure: ``alpha_per_atom`` (the 9 components of
        3 Δα/n), ``alpha_per_atom_diag`` (tr Δα / (√3 n)), ``alpha_per_atom_offdiag`` (the 5 anisotropic
        components × √10 / n), so that each RMSE is upstream's; ``egap`` (Hartree)."""
        out = {}
        if PTENSOR in tensors:
            err = self._per_atom_error(tensors, pred)
            weights = structure_weights(tensors, err.dtype)
            out["alpha_per_atom"] = abs_sq_count(3.0 * tf.reshape(err, [-1, 9]), weights)
            out["alpha_per_atom_diag"] = abs_sq_count(tf.linalg.trace(err) / np.sqrt(3.0), weights)
            out["alpha_per_atom_offdiag"] = abs_sq_count(anisotropic_parts(err) * np.sqrt(10.0), weights)
        if EGAP in tensors and "egap" in pred and (self.params["eval_egap"] or self.params["train_egap"]):
            err = pred["egap"] - tf.cast(tf.reshape(tensors[EGAP], [-1]), pred["egap"].dtype)
            out["egap"] = abs_sq_count(err, structure_weights(tensors, err.dtype))
        return out

    def parity_arrays(self, batch, pred):
        """Labels and predictions of α's nine components [n_struct, 9] (the data's unit) for parity plots."""
        if PTENSOR not in batch:
            return {}
        return {"alpha_ref": np.asarray(batch[PTENSOR], np.float64).reshape(-1, 9),
                "alpha_pred": np.asarray(pred["alpha"], np.float64).reshape(-1, 9)}

    def structure_outputs(self, batch, pred):
        """One dict per structure: ``alpha`` [3, 3], ``chi`` [n_atoms, n_atoms], ``egap`` (EEM, EtaInv) and
        ``elems``."""
        ind_1 = np.asarray(batch[K.IND_1])[:, 0]
        elems = np.asarray(batch[K.ELEMS])
        for s in range(len(pred["alpha"])):
            n = int(np.sum(ind_1 == s))
            out = {"alpha": pred["alpha"][s], "chi": pred["chi"][s][:n, :n], "elems": elems[ind_1 == s]}
            if "egap" in pred:
                out["egap"] = pred["egap"][s]
            yield out


def anisotropic_parts(matrices):
    """The five anisotropic components [n, 5] of [n, 3, 3] matrices, as upstream's metric takes them:
    (xy, xz, yz, (2zz − xx − yy)/(2√3), (xx − yy)/2)."""
    m = matrices
    z2 = (2 * m[:, 2, 2] - m[:, 0, 0] - m[:, 1, 1]) / (2 * np.sqrt(3.0))
    return tf.stack([m[:, 0, 1], m[:, 0, 2], m[:, 1, 2], z2, (m[:, 0, 0] - m[:, 1, 1]) / 2], axis=1)


class EEMModel(PolarizabilityModel):
    """Upstream's ``pol_eem_model`` (see the module docstring)."""

    NAME = "pol_eem_model"
    HAS_EGAP = USES_COULOMB = True

    def response(self, tensors, indices, atomic, pairs):
        atom_index, _, n_struct, n_max = indices
        eta = self.coulomb(tensors, atom_index, n_struct, n_max) + diagonal(atom_index, tf.abs(atomic), n_struct,
                                                                            n_max)
        empty = tf.eye(n_max, batch_shape=[n_struct], dtype=eta.dtype) - diagonal(
            atom_index, tf.ones_like(atomic), n_struct, n_max)  # 1 on the diagonal of the empty places
        softness = tf.linalg.inv(eta + empty) - empty
        return {"chi": response_from_softness(softness), "egap": 1.0 / tf.reduce_sum(softness, axis=[1, 2]),
                "eta": eta}


class ACKS2Model(PolarizabilityModel):
    """Upstream's ``pol_acks2_model`` (see the module docstring)."""

    NAME = "pol_acks2_model"
    NETWORK_EXTRAS = {"i1": 1, "i3": 1}
    USES_COULOMB = True

    def response(self, tensors, indices, atomic, pairs):
        atom_index, pair_index, n_struct, n_max = indices
        eta = self.coulomb(tensors, atom_index, n_struct, n_max) + diagonal(atom_index, tf.abs(atomic), n_struct,
                                                                            n_max)
        chi_s = pair_matrix(pair_index, tf.abs(pairs), n_struct, n_max, symmetric=True, invariant=True)
        identity = tf.eye(n_max, batch_shape=[n_struct], dtype=eta.dtype)
        return {"chi": tf.linalg.solve(identity - tf.matmul(chi_s, eta), chi_s)}


class EtaInvModel(PolarizabilityModel):
    """Upstream's ``pol_etainv_model`` (see the module docstring)."""

    NAME = "pol_etainv_model"
    NETWORK_EXTRAS = {"i1": 1, "i3": 1}
    HAS_EGAP = True
    PARAMS = ETAINV_PARAMS

    def response(self, tensors, indices, atomic, pairs):
        atom_index, pair_index, n_struct, n_max = indices
        m = pair_matrix(pair_index, pairs, n_struct, n_max) + diagonal(atom_index, atomic, n_struct, n_max)
        softness = tf.einsum("bij,bik->bjk", m, m) + self.params["epsilon"] * diagonal(
            atom_index, tf.ones_like(atomic), n_struct, n_max)
        return {"chi": response_from_softness(softness), "egap": 1.0 / tf.reduce_sum(softness, axis=[1, 2])}


class LocalChiModel(PolarizabilityModel):
    """Upstream's ``pol_localchi_model`` (see the module docstring)."""

    NAME = "pol_localchi_model"
    NETWORK_EXTRAS = {"i1": 1, "i3": 1}

    def response(self, tensors, indices, atomic, pairs):
        _, pair_index, n_struct, n_max = indices
        return {"chi": pair_matrix(pair_index, tf.abs(pairs), n_struct, n_max, symmetric=True, invariant=True)}


class LocalModel(PolarizabilityModel):
    """Upstream's ``pol_local_model`` (see the module docstring)."""

    NAME = "pol_local_model"
    NETWORK_EXTRAS = {"i1": 1, "i3": 1}

    def response(self, tensors, indices, atomic, pairs):
        atom_index, pair_index, n_struct, n_max = indices
        ind_2 = tensors[K.IND_2]
        n_atoms = tf.shape(atomic)[0]
        weights = pairs[:, None]  # [n_pairs, c]: one channel, as upstream's i1/i3 heads
        local = tf.math.unsorted_segment_sum(weights[:, :, None] * tensors[K.DIFF][:, None, :] * ANG2BOHR,
                                             ind_2[:, 0], n_atoms)  # t_ic [n_atoms, c, 3]
        alpha = tf.math.unsorted_segment_sum(tf.einsum("acx,acy->axy", local, local), tensors[K.IND_1][:, 0],
                                             n_struct)
        # v_ic over the structure's atoms: +I_ijc at j, −Σ_j I_ijc at i
        atom_of_pair = ind_2[:, 0]
        c = tf.shape(weights)[1]
        plus = tf.scatter_nd(tf.stack([atom_of_pair, tf.zeros_like(atom_of_pair), pair_index[:, 2]], axis=1),
                             weights[:, 0], tf.stack([n_atoms, c, n_max]))
        minus = tf.scatter_nd(tf.stack([tf.range(n_atoms), tf.zeros([n_atoms], tf.int32), atom_index[:, 1]], axis=1),
                              tf.math.unsorted_segment_sum(weights[:, 0], atom_of_pair, n_atoms),
                              tf.stack([n_atoms, c, n_max]))
        v = plus - minus
        chi = -tf.math.unsorted_segment_sum(tf.einsum("ack,acl->akl", v, v), tensors[K.IND_1][:, 0], n_struct)
        return {"chi": chi, "alpha": alpha}


def _iso(cls, extras):
    """The ``_iso`` form of a model: α + α_iso 1 (see the module docstring)."""
    return type(cls.__name__.replace("Model", "IsoModel"), (cls,), {
        "NAME": cls.NAME.replace("_model", "_iso_model"), "ISO": True, "NETWORK_EXTRAS": extras,
        "__doc__": f"Upstream's ``{cls.NAME.replace('_model', '_iso_model')}``: {cls.NAME} with α + α_iso 1 "
                   "(see the module docstring)."})


EEMIsoModel = _iso(EEMModel, {"p1": 1})
ACKS2IsoModel = _iso(ACKS2Model, {"p1": 1, "i1": 1, "i3": 1})
EtaInvIsoModel = _iso(EtaInvModel, {"p1": 1, "i1": 1, "i3": 1})
LocalChiIsoModel = _iso(LocalChiModel, {"i1": 1, "i3": 1})
LocalIsoModel = _iso(LocalModel, {"i1": 1, "i3": 1})

#: upstream's polarizability models by name
POLARIZABILITY_MODELS = {cls.NAME: cls for cls in (
    EEMModel, ACKS2Model, EtaInvModel, LocalChiModel, LocalModel,
    EEMIsoModel, ACKS2IsoModel, EtaInvIsoModel, LocalChiIsoModel, LocalIsoModel)}
