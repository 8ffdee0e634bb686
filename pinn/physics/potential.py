"""The potential model: energy, forces and stress from a network, and the loss on them.

Energy of a structure:  E = Σ_i net_i / e_scale + Σ_i e_dress[Z_i]   (eV)

``e_scale`` is upstream PiNN's: the unit of energy during training.  The network
learns energies in eV × e_scale, and every loss term is computed on errors in those
units (energy, forces and stress errors × e_scale, so the loss × e_scale²); metrics
stay in eV.

Forces and stress come from one backward pass through the pair vectors
``diff`` (r_j + S·cell − r_i):  with g_p = ∂E/∂diff_p,

- F_i = Σ_{p: i_p = i} g_p − Σ_{p: j_p = i} g_p        (= −∂E/∂r_i, eV/Å)
- σ = (1/V) Σ_p diff_p ⊗ g_p                        (= (1/V) ∂E/∂ε, eV/Å³, ASE's sign)

which holds because the networks see positions only through ``diff``.

This is the model of mechanical embedding (:data:`pinn.physics.embedding_kinds.MECHANICAL`: a QM region alone); with
``embedding: electrostatic`` the registry builds :class:`pinn.physics.embedded_potential.EmbeddedPotentialModel`,
which takes QM/MM frames whole.  Both ask their kind (``self.embedding``, :mod:`pinn.physics.embedding_kinds`)
what they can do.
"""
import logging

import numpy as np
import tensorflow as tf

from pinn import keys as K
from pinn.physics.embedding_kinds import MECHANICAL
from pinn.io.batch import add_neighbors, pair_geometry, with_cell_and_pbc  # pair_geometry: also its old home
from pinn.networks.layers import atomic_number, scatter_sum
from pinn.physics.base import Model, abs_sq_count, cast_floats, check_atomic_outputs
from pinn.physics.energy_offsets import fit_offsets
from pinn.physics.loss_weights import atom_weights, drawn, structure_weights
from pinn.physics.potential_params import ALIASES, PARAMS, check_embedding
from pinn.schema import ParamsError

def atoms_per_structure(tensors, n_struct, dtype):
    """[n_struct] number of atoms of each structure of a batch (as ``dtype``)."""
    return tf.math.unsorted_segment_sum(tf.ones_like(tensors[K.ELEMS], dtype), tensors[K.IND_1][:, 0], n_struct)


def forces_and_stress(tensors, diff, g, n_struct, forces=True, stress=True):
    """Forces and stress from the energy's gradient with respect to the pair vectors (see the module).

    Args:
        tensors: the batch (``coord``, ``ind_1``, ``ind_2``, ``cell``, optionally ``pbc``).
        diff: [n_pairs, 3] pair vectors r_j + S·cell − r_i (Å).
        g: [n_pairs, 3] ∂E/∂diff (eV/Å).
        n_struct: number of structures.
        forces, stress: which to compute.

    Returns:
        dict with ``forces`` [n_atoms, 3] (eV/Å) and ``stress`` [n_struct, 3, 3] (eV/Å³, zero for
        open structures), those asked for.
    """
    out = {}
    ind_2 = tensors[K.IND_2]
    if forces:
        n_atoms = tf.shape(tensors[K.COORD])[0]
        out["forces"] = scatter_sum(g, ind_2[:, 0], n_atoms) - scatter_sum(g, ind_2[:, 1], n_atoms)
    if stress:
        struct_of_pair = tf.gather(tensors[K.IND_1][:, 0], ind_2[:, 0])
        virial = tf.math.unsorted_segment_sum(diff[:, :, None] * g[:, None, :], struct_of_pair, n_struct)
        cell = tensors[K.CELL]  # |a · (b × c)|: the determinant, in ops XLA compiles
        volume = tf.abs(tf.reduce_sum(cell[:, 0] * tf.linalg.cross(cell[:, 1], cell[:, 2]), axis=1))
        periodic = tf.reduce_any(tensors[K.PBC], axis=1) if K.PBC in tensors else volume > 0
        safe_volume = tf.where(periodic, volume, tf.ones_like(volume))
        out["stress"] = tf.where(periodic[:, None, None], virial / safe_volume[:, None, None], tf.zeros_like(virial))
    return out


class PotentialModel(Model):
    """Network + energy offsets → energy, forces, stress; and the training loss.

    Args:
        network: a network module (``net.atomic_outputs(tensors) -> [n_atoms, 1]``).
        params: resolved ``model.params`` (see ``PARAMS``).
        atom_types: atomic numbers the network knows (order of ``e_dress``).
        dtype: float dtype.
    """

    PARAMS = PARAMS
    #: loss terms in their fixed order; energy always, forces / stress when enabled
    LOSS_TERMS = ("energy", "forces", "stress", "l2")
    WEIGHT_KEYS = {"energy": "e_loss_multiplier", "forces": "f_loss_multiplier", "stress": "s_loss_multiplier",
                   "l2": "l2_loss_multiplier"}
    LABELS = {"energy": K.E_DATA, "forces": K.F_DATA, "stress": K.S_DATA, "l2": K.E_DATA}
    ALIASES = ALIASES
    #: cross-field checks of resolved params (:func:`pinn.params.resolve` calls it)
    check_params = staticmethod(check_embedding)

    #: the embedding this class is the model of (:mod:`pinn.physics.embedding_kinds`)
    EMBEDDING = MECHANICAL

    def __init__(self, network, params, atom_types, dtype=tf.float32, name="potential"):
        super().__init__(params, name=name)
        check_atomic_outputs(network)
        #: the kind of embedding (:class:`pinn.physics.embedding_kinds.Embedding`): what the model can do
        self.embedding = self.EMBEDDING
        for key, value in self.embedding.network_needs:
            if network.params.get(key) != value:
                raise ParamsError(f"network.params.{key}: model.params.embedding {self.embedding.name!r} needs "
                                  f"{key} {value!r}; the network has {network.params.get(key, f'no {key}')}")
        self.network = network
        self.dtype = dtype
        self.atom_types = [int(z) for z in atom_types]
        dress = np.zeros(len(self.atom_types))
        for z, value in (params.get("e_dress") or {}).items():
            z = atomic_number(z, "model.params.e_dress")
            if z not in self.atom_types:
                raise ValueError(f"model.params.e_dress: element {z} is not in atom_types {self.atom_types}")
            dress[self.atom_types.index(z)] = value
        self.e_dress = tf.Variable(dress, dtype=dtype, trainable=False, name="e_dress")
        self.dress_fitted = tf.Variable(False, trainable=False, name="dress_fitted")

    def atomic_energies(self, tensors):
        """Each atom's energy [n_atoms] (eV: the network's atomic output / e_scale + its element's e_dress),
        from a batch with ``diff``/``dist``; a structure's sum is its energy."""
        atomic = self.network.atomic_outputs(tensors)[:, 0] / self.params["e_scale"]
        return atomic + tf.gather(self.e_dress, self.network.element_index(tensors[K.ELEMS]))

    @property
    def jit_compatible(self):
        """Whether XLA can compile this model's step (its embedding says)."""
        return self.embedding.compiles_with_xla

    def dress_energy(self, tensors, n_struct, dtype=tf.float64):
        """[n_struct] Σ e_dress over each structure's atoms, eV, as ``dtype``."""
        dress = tf.gather(tf.cast(self.e_dress, dtype), self.network.element_index(tensors[K.ELEMS]))
        return scatter_sum(dress, tensors[K.IND_1][:, 0], n_struct)

    def upstream_metric_scales(self):
        """Upstream PiNN reports E, E_PER_ATOM, F and S errors × ``e_scale`` (its training units)."""
        scale = self.params["e_scale"]
        return {"E": scale, "E_PER_ATOM": scale, "F": scale, "F_QM": scale, "S": scale}

    def predict(self, tensors, forces=True, stress=True, energies=False):
        """Energy, forces and stress of a sparse batch.

        Args:
            tensors: batch with ``elems``, ``coord``, ``ind_1``, ``ind_2``, ``shift`` and
                optionally ``cell``, ``pbc`` (see :mod:`pinn.keys` and :func:`pinn.io.with_cell_and_pbc`).
            forces, stress: whether to compute them (one backward pass for both).
            energies: whether to return each atom's energy.

        Returns:
            dict with ``energy`` [n_struct] (eV), and ``forces`` [n_atoms, 3]
            (eV/Å), ``stress`` [n_struct, 3, 3] (eV/Å³; zero for open
            structures), ``energies`` [n_atoms] (eV, summing to each structure's energy) when asked for.
        """
        tensors = with_cell_and_pbc(tensors)
        n_struct = tf.shape(tensors[K.CELL])[0]
        tensors = cast_floats(tensors, self.dtype)
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            geo = pair_geometry(tensors)
            tape.watch(geo[K.DIFF])
            geo[K.DIST] = tf.norm(geo[K.DIFF], axis=1)
            atomic = self.atomic_energies(geo)
            energy = scatter_sum(atomic, geo[K.IND_1][:, 0], n_struct)
        out = {"energy": energy, **({"energies": atomic} if energies else {})}
        if not (forces or stress):
            return out
        g = tape.gradient(energy, geo[K.DIFF], unconnected_gradients=tf.UnconnectedGradients.ZERO)
        out.update(forces_and_stress(tensors, geo[K.DIFF], g, n_struct, forces, stress))
        return out

    def enabled_terms(self):
        p = self.params
        return ({"energy"} | ({"forces"} if p["use_force"] else set()) | ({"stress"} if p["use_stress"] else set())
                | ({"l2"} if p["use_l2"] else set()))

    def train_outputs(self):
        """Keyword arguments of :meth:`predict` in a training step."""
        return {"forces": self.params["use_force"], "stress": self.params["use_stress"]}

    def eval_outputs(self, spec):
        """Keyword arguments of :meth:`predict` when evaluating data with element spec ``spec``."""
        return {"forces": K.F_DATA in spec, "stress": K.S_DATA in spec and self.embedding.gives_stress}

    def metric_keys(self, spec, outputs):
        """Error metrics (``E``, ``F``, ``S``) available for data ``spec`` and predict options ``outputs``."""
        keys = ["E"] if K.E_DATA in spec else []
        if outputs["forces"] and K.F_DATA in spec:
            keys.append("F")
        if outputs["stress"] and K.S_DATA in spec:
            keys.append("S")
        return keys

    def eval_metric_keys(self, spec, outputs):
        """:meth:`metric_keys`, and ``E_PER_ATOM`` with ``log_e_per_atom`` or ``use_e_per_atom``."""
        keys = self.metric_keys(spec, outputs)
        if "E" in keys and self._logs_e_per_atom():
            keys.insert(1, "E_PER_ATOM")
        return keys

    def _logs_e_per_atom(self):
        return self.params["log_e_per_atom"] or self.params["use_e_per_atom"]

    def loss_counts(self, tensors):
        """Number of values in each enabled loss term (depends on the data only; padding and values
        left out by ``max_energy`` / ``max_force_comp`` / ``no_force_comp`` not counted).

        Returns:
            dict term → count (float64 scalar): structures for ``energy``, force components for
            ``forces``, 9 × periodic structures for ``stress``, 1 for ``l2`` (see :meth:`loss_sums`).
        """
        masks = self.loss_masks(tensors, tf.float64)
        counts = {t: tf.reduce_sum(m) for t, m in masks.items()}
        if self.params["use_l2"]:
            counts["l2"] = tf.constant(1.0, tf.float64)
        return counts

    def loss_masks(self, tensors, dtype):
        """Which values enter each enabled loss term: dict term → flat [k] 0/1 of ``dtype`` (structures
        for ``energy``, force components [n_atoms·3] for ``forces``, stress components [n_struct·9]).

        0 for padding, for energies beyond ``max_energy``, for force components beyond
        ``max_force_comp`` and for those not drawn by ``no_force_comp``.  From the data alone, so the
        counts (summed over ranks before the gradients) and the sums agree.
        """
        p = self.params
        real = structure_weights(tensors, dtype)
        masks = {"energy": real}
        if p["max_energy"] is not False and K.E_DATA in tensors:
            dress = self.dress_energy(tensors, tf.shape(tensors[K.CELL])[0])
            excess = tf.abs(tf.cast(tensors[K.E_DATA], tf.float64) - dress) * p["e_scale"] > p["max_energy"]
            masks["energy"] = tf.where(excess, tf.zeros_like(real), real)
        if p["use_force"]:
            atom_w = tf.repeat(atom_weights(tensors, dtype), 3)
            if p["max_force_comp"] is not False and K.F_DATA in tensors:
                big = tf.abs(tf.reshape(tf.cast(tensors[K.F_DATA], tf.float64), [-1])) * p["e_scale"] \
                    > p["max_force_comp"]
                atom_w = tf.where(big, tf.zeros_like(atom_w), atom_w)
            if p["no_force_comp"] is not False:
                atom_w = atom_w * drawn(tensors, atom_w, int(p["no_force_comp"]))
            masks["forces"] = atom_w
        if p["use_stress"]:
            masks["stress"] = tf.repeat(self._stress_weights(tensors, dtype), 9)
        return masks

    def residuals(self, tensors, pred):
        """The errors behind each loss term whose labels the batch has, in training units.

        Returns:
            dict term → (err, weight): flat float tensors of one length; ``err`` = e_scale ×
            (prediction − label) (energy in eV·e_scale, per atom with ``use_e_per_atom``, × √atoms
            with ``use_e_per_sqrt``; force components; stress components), ``weight`` = the mask of
            :meth:`loss_masks` × ``e_weight`` / ``f_weight`` of the data when asked for.  Each loss
            sum is Σ weight · penalty(err) (:meth:`loss_sums`).
        """
        p = self.params
        if K.E_DATA not in tensors:
            return {}
        dtype = pred["energy"].dtype
        masks = self.loss_masks(tensors, dtype)
        scale = tf.cast(p["e_scale"], dtype)
        e_err = (pred["energy"] - tf.cast(tensors[K.E_DATA], dtype)) * scale
        if p["use_e_per_atom"]:
            n_atoms = atoms_per_structure(tensors, tf.shape(e_err)[0], dtype)
            e_err = tf.math.divide_no_nan(e_err, n_atoms)
            if p["use_e_per_sqrt"]:
                e_err = e_err * tf.sqrt(n_atoms)
        e_w = masks["energy"]
        if p["use_e_weight"]:
            e_w = e_w * tf.cast(self._data(tensors, K.E_WEIGHT, "use_e_weight"), dtype)
        out = {"energy": (e_err, e_w)}
        if p["use_force"] and K.F_DATA in tensors:
            f_err = tf.reshape(pred["forces"] - tf.cast(tensors[K.F_DATA], dtype), [-1]) * scale
            f_w = masks["forces"]
            if p["use_f_weight"]:
                f_w = f_w * tf.repeat(tf.cast(self._data(tensors, K.F_WEIGHT, "use_f_weight"), dtype), 3)
            out["forces"] = (f_err, f_w)
        if p["use_stress"] and K.S_DATA in tensors:
            s_err = tf.reshape(pred["stress"] - tf.cast(tensors[K.S_DATA], dtype), [-1]) * scale
            out["stress"] = (s_err, masks["stress"])
        return out

    @staticmethod
    def _data(tensors, key, option):
        if key not in tensors:
            raise ValueError(f"model.params.{option}: the data have no {key!r} (add it to the dataset, "
                             f"see the data page)")
        return tensors[key]

    def loss_sums(self, tensors, pred):
        """Sum of the penalties (squared or Huber) of each enabled loss term whose labels the batch has:
        Σ weight · penalty(err) of :meth:`residuals`; with ``use_l2`` also ``l2``: Σ w²/2 over the
        network's weight matrices (its count is 1 per batch, so a parallel run adds it once)."""
        sums = {t: tf.reduce_sum(w * self.penalty(e, t)) for t, (e, w) in self.residuals(tensors, pred).items()}
        if sums and self.params["use_l2"]:
            sums["l2"] = tf.cast(tf.add_n([tf.constant(0.0, tf.float64)]
                                          + [tf.cast(tf.reduce_sum(v ** 2), tf.float64) / 2
                                             for v in self.network.regularized_weights()]), pred["energy"].dtype)
        return sums

    @staticmethod
    def _stress_weights(tensors, dtype):
        """1 for real periodic structures (the ones with a stress), else 0."""
        return structure_weights(tensors, dtype) * tf.cast(tf.reduce_any(tensors[K.PBC], axis=1), dtype)

    def error_sums(self, tensors, pred):
        """Sums for MAE/RMSE metrics: dict metric → (Σ|err|, Σerr², count) for E, F, S when labels exist
        (padding left out), E_PER_ATOM with ``log_e_per_atom`` or ``use_e_per_atom``."""
        dtype = pred["energy"].dtype
        out = {}
        if K.E_DATA in tensors:
            e_err = pred["energy"] - tf.cast(tensors[K.E_DATA], dtype)
            out["E"] = abs_sq_count(e_err, structure_weights(tensors, dtype))
            if self._logs_e_per_atom():  # padding structures have no atoms: divide_no_nan
                n_atoms = atoms_per_structure(tensors, tf.shape(e_err)[0], dtype)
                out["E_PER_ATOM"] = abs_sq_count(tf.math.divide_no_nan(e_err, n_atoms),
                                                 structure_weights(tensors, dtype))
        if K.F_DATA in tensors and "forces" in pred:
            out["F"] = abs_sq_count(pred["forces"] - tf.cast(tensors[K.F_DATA], dtype), atom_weights(tensors, dtype))
        if K.S_DATA in tensors and "stress" in pred:
            out["S"] = abs_sq_count(pred["stress"] - tf.cast(tensors[K.S_DATA], dtype),
                                    self._stress_weights(tensors, dtype))
        return out

    def parity_arrays(self, batch, pred):
        """Labels and predictions of one evaluated batch (NumPy) for parity plots (see :mod:`pinn.training.metrics`)."""
        out = {}
        n_struct = len(pred["energy"])
        if K.E_DATA in batch:
            out["energy_ref"] = np.asarray(batch[K.E_DATA], np.float64)
            out["energy_pred"] = np.asarray(pred["energy"], np.float64)
            out["n_atoms"] = np.bincount(np.asarray(batch[K.IND_1])[:, 0], minlength=n_struct).astype(np.float64)
        if K.F_DATA in batch and "forces" in pred:
            out["forces_ref"] = np.asarray(batch[K.F_DATA], np.float64)
            out["forces_pred"] = np.asarray(pred["forces"], np.float64)
        return out

    def structure_predict(self, tensors):
        """:meth:`predict` with per-atom energies."""
        return self.predict(tensors, energies=True)

    def structure_outputs(self, batch, pred):
        """Split a predicted batch (NumPy) into one dict per structure: ``energy`` (eV), ``forces``
        [n_atoms, 3] (eV/Å), ``energies`` [n_atoms] (eV, per atom, where the model gives them), ``stress`` [3, 3]
        (eV/Å³, periodic structures), and the structure: ``elems``, ``coord`` [n_atoms, 3] (Å), ``cell``
        [3, 3] (Å) and ``pbc`` [3]."""
        ind_1 = np.asarray(batch[K.IND_1])[:, 0]
        batch = with_cell_and_pbc(batch)
        pbc = np.asarray(batch[K.PBC])
        cell = np.asarray(batch[K.CELL])
        elems = np.asarray(batch[K.ELEMS])
        coord = np.asarray(batch[K.COORD])
        for s in range(len(pred["energy"])):
            atoms = ind_1 == s
            out = {"energy": pred["energy"][s], "forces": pred["forces"][atoms], "elems": elems[atoms],
                   "coord": coord[atoms], "cell": cell[s], "pbc": pbc[s]}
            if "energies" in pred:
                out["energies"] = pred["energies"][atoms]
            if pbc[s].any() and "stress" in pred:
                out["stress"] = pred["stress"][s]
            yield out

    def prepare_training(self, input_fn, reduce, replicas=1):
        """With ``fit_e_dress`` (once per model): fit e_dress to what the freshly initialised network
        leaves unexplained in the first ``fit_e_dress_batches`` training batches of every rank (of
        every device of a mirrored world), so that training starts from a small energy error
        (:meth:`fit_dress`).

        Args:
            input_fn: the training input function (sparse batches).
            reduce: a function summing a float64 array over all ranks.
            replicas: batches this process trains on side by side (the devices of a mirrored world):
                ``fit_e_dress_batches`` × ``replicas`` batches are fitted on.

        Returns:
            whether e_dress was fitted.
        """
        if not self.params["fit_e_dress"] or bool(self.dress_fitted.numpy()):
            return False
        self.e_dress.assign(tf.zeros_like(self.e_dress))
        dataset = input_fn().take(self.params["fit_e_dress_batches"] * replicas)
        if K.IND_2 not in dataset.element_spec:
            dataset = dataset.apply(add_neighbors(self.network.rc))
        predict = tf.function(lambda b: self.predict(b, forces=False, stress=False)["energy"],
                              input_signature=[dataset.element_spec], autograph=False)
        batches = []
        for b in dataset:
            residual = {k: v.numpy() for k, v in b.items()}
            residual[K.E_DATA] = residual[K.E_DATA] - predict(b).numpy()
            batches.append(residual)
        dress = self.fit_dress(batches, reduce=reduce)
        n_batches, n_struct = reduce(np.array([len(batches), sum(len(b[K.E_DATA]) for b in batches)]))
        logging.getLogger("pinn").info("fitted e_dress on %d batches (%d structures, repeats counted): %s",
                                       n_batches, n_struct, ", ".join(f"Z={z}: {v:.6f} eV" for z, v in dress.items()))
        return True

    def fit_dress(self, batches, reduce=None):
        """Per-element offsets fitted by least squares to the energies of ``batches`` (NumPy dicts with
        ``elems``, ``ind_1``, ``e_data``; :func:`pinn.physics.energy_offsets.fit_offsets`), stored in
        ``e_dress``.

        Args:
            batches: list of NumPy batch dicts (the trainer passes the energies minus the untrained
                network's prediction).
            reduce: function summing a float64 array over ranks (``None``: one process).

        Returns:
            dict atomic number → offset (eV).
        """
        solution = fit_offsets(batches, self.atom_types, reduce)
        self.e_dress.assign(solution)
        self.dress_fitted.assign(True)
        return {z: float(x) for z, x in zip(self.atom_types, solution)}

