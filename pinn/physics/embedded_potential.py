"""The potential model of electrostatic embedding (:data:`pinn.physics.embedding_kinds.ELECTROSTATIC`): a QM
region's energy in the field of its MM environment's point charges, on QM/MM frames taken whole (:mod:`pinn.io.qmmm`).

What differs from the mechanical model (:class:`pinn.physics.potential.PotentialModel`) lives here: the energy
and the forces on every atom (:mod:`pinn.physics.embedding`: the network's conserved atomic charges times the MM
charges' Coulomb potential), no stress and no per-atom energies, e_dress over the QM atoms, the force errors
counted over the QM atoms (the MM atoms' errors add to the sum without diluting the QM atoms' share) and the
``F_QM`` metric (the QM atoms' forces alone).  :data:`POTENTIAL_KINDS` gives each embedding its model class.
"""
import numpy as np
import tensorflow as tf

from pinn import keys as K
from pinn.physics.embedding_kinds import ELECTROSTATIC, MECHANICAL
from pinn.io.batch import pair_geometry, with_cell_and_pbc
from pinn.networks.layers import scatter_sum
from pinn.physics.base import abs_sq_count, cast_floats
from pinn.physics.embedding import conserved_charges, embedding_energy, qm_atoms_view, qm_mask
from pinn.physics.loss_weights import atom_weights
from pinn.physics.potential import PotentialModel


class EmbeddedPotentialModel(PotentialModel):
    """The potential model of electrostatic embedding (see the module); built by the registry from
    ``model.params.embedding: electrostatic`` (:func:`pinn.physics.registry.model_class`), with the arguments of
    :class:`~pinn.physics.potential.PotentialModel`."""

    EMBEDDING = ELECTROSTATIC

    def check_frames(self, spec, what):
        """QM/MM frames (``qm`` in ``spec``) are taken whole: nothing to refuse."""

    def dress_energy(self, tensors, n_struct, dtype=tf.float64):
        """[n_struct] Σ e_dress over each structure's QM atoms, eV, as ``dtype``."""
        qm = qm_mask(tensors)
        elems = tf.boolean_mask(tensors[K.ELEMS], qm)
        structure = tf.boolean_mask(tensors[K.IND_1][:, 0], qm)
        dress = tf.gather(tf.cast(self.e_dress, dtype), self.network.element_index(elems))
        return scatter_sum(dress, structure, n_struct)

    def predict(self, tensors, forces=True, stress=True, energies=False):
        """Energy and forces of a sparse batch of QM/MM frames (``qm``, ``mm_charge``, ``qm_charge``; a frame
        without them is a QM region without environment).

        Args:
            tensors: the batch (as :meth:`PotentialModel.predict`).
            forces: whether to compute the forces (on every atom).
            stress, energies: not given by this model: asking for them (``stress`` by default, as the mechanical
                model's signature has it) raises ValueError.

        Returns:
            dict with ``energy`` [n_struct] (eV), ``charges`` [n_atoms] (e: the QM atoms' predicted charges, the
            MM atoms' own) and, when asked for, ``forces`` [n_atoms, 3] (eV/Å).
        """
        for name, asked in (("stress", stress), ("energies", energies)):
            if asked:
                raise ValueError(f"{name}: the model with embedding {self.embedding.name!r} gives energy and "
                                 f"forces of a QM region in its MM environment, no {name} (predict with "
                                 f"{name}=False)")
        tensors = with_cell_and_pbc(tensors)
        n_struct = tf.shape(tensors[K.CELL])[0]
        tensors = cast_floats(tensors, self.dtype)
        qm = qm_mask(tensors)
        coord = tf.reshape(tensors[K.COORD], [-1, 3])
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch(coord)
            geo = pair_geometry({**tensors, K.COORD: coord})
            view, qm_index = qm_atoms_view(geo, qm)
            outputs = self.network.atomic_outputs(view)
            structure = view[K.IND_1][:, 0]
            atomic = outputs[:, 0] / self.params["e_scale"] + tf.gather(
                self.e_dress, self.network.element_index(view[K.ELEMS]))
            energy = scatter_sum(atomic, structure, n_struct)
            region_charge = tensors[K.QM_CHARGE] if K.QM_CHARGE in tensors else tf.zeros([n_struct], self.dtype)
            charges = conserved_charges(outputs[:, 1], structure, n_struct, region_charge)
            if K.MM_CHARGE in tensors:
                energy = energy + embedding_energy(tensors, coord, charges, qm, n_struct,
                                                   self.params["embedding_damping"])
        mm_charge = tf.cast(tensors[K.MM_CHARGE], self.dtype) if K.MM_CHARGE in tensors else tf.zeros_like(coord[:, 0])
        out = {"energy": energy, "charges": tf.where(qm, tf.scatter_nd(qm_index[:, None], charges, tf.shape(qm)),
                                                     mm_charge)}
        if forces:
            out["forces"] = -tape.gradient(energy, coord, unconnected_gradients=tf.UnconnectedGradients.ZERO)
        return out

    def metric_keys(self, spec, outputs):
        """:meth:`PotentialModel.metric_keys`, and on QM/MM data ``F_QM``: the forces on the QM atoms alone (``F``
        counts every atom)."""
        keys = super().metric_keys(spec, outputs)
        if "F" in keys and K.QM in spec:
            keys.insert(keys.index("F") + 1, "F_QM")
        return keys

    def loss_counts(self, tensors):
        """:meth:`PotentialModel.loss_counts`, the force components counted over the QM atoms alone: the MM
        atoms' errors add to the sum without diluting the QM atoms' share."""
        counts = super().loss_counts(tensors)
        if "forces" in counts:
            masks = self.loss_masks(tensors, tf.float64)
            counts["forces"] = tf.reduce_sum(masks["forces"] * tf.repeat(tf.cast(qm_mask(tensors), tf.float64), 3))
        return counts

    def error_sums(self, tensors, pred):
        """:meth:`PotentialModel.error_sums`, and ``F_QM`` (the QM atoms' forces) on QM/MM data."""
        out = super().error_sums(tensors, pred)
        if "F" in out and K.QM in tensors:
            dtype = pred["energy"].dtype
            out["F_QM"] = abs_sq_count(pred["forces"] - tf.cast(tensors[K.F_DATA], dtype),
                                       atom_weights(tensors, dtype) * tf.cast(tensors[K.QM], dtype))
        return out

    def structure_predict(self, tensors):
        """:meth:`predict` (no per-atom energies, no stress)."""
        return self.predict(tensors, stress=False)

    def fit_dress(self, batches, reduce=None):
        """:meth:`PotentialModel.fit_dress` on the QM atoms of each batch: the offsets are theirs."""
        return super().fit_dress([region_atoms(b) for b in batches], reduce)


def region_atoms(batch):
    """A NumPy batch with ``elems`` and ``ind_1`` of its QM atoms only (all atoms where it has no ``qm``)."""
    if K.QM not in batch:
        return batch
    qm = np.asarray(batch[K.QM], bool).reshape(-1)
    return {**batch, K.ELEMS: np.asarray(batch[K.ELEMS])[qm], K.IND_1: np.asarray(batch[K.IND_1])[qm]}


#: the potential model of each embedding (:mod:`pinn.physics.embedding_kinds`)
POTENTIAL_KINDS = {MECHANICAL: PotentialModel, ELECTROSTATIC: EmbeddedPotentialModel}
