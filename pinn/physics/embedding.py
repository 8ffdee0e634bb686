"""Electrostatic embedding: a QM region's energy in the field of its MM environment's point charges.

A QM/MM frame (:mod:`pinn.io.qmmm`) holds the QM atoms (``qm`` true) and MM atoms carrying point charges
(``mm_charge``, e); the region's total charge is ``qm_charge`` (e, 0 when absent).  A potential model with
``embedding: electrostatic`` gives

    E = Σ_{a∈QM} [ε_a / e_scale + e_dress(Z_a)] + k_e Σ_{a∈QM} Σ_{m∈MM} q_a Q_m v(|r_m − r_a|)     (eV)

- ε_a, q̃_a: the network's two outputs of QM atom a.  The network sees the QM atoms alone (pairs among them,
  :func:`pinn.io.add_neighbors` on QM/MM frames), so its cost does not grow with the MM atoms;
- q_a = q̃_a − mean_region(q̃) + Q_region / n_QM: atomic charges that sum to the region's charge exactly;
- Q_m: the MM atoms' charges (the data's ``mm_charge``), every MM atom of the frame, no cutoff;
- v(r) = 1/r, or with ``embedding_damping`` r_d > 0 the smeared kernel MiMiC and CPMD use for MM charges near
  the QM density, v(r) = (r_d⁴ − r⁴)/(r_d⁵ − r⁵): 1/r_d at r = 0, within 1 % of 1/r beyond ~2.5 r_d, smooth;
- k_e = 14.399645 eV Å / e² (:data:`COULOMB`);
- in periodic frames the QM–MM vectors are taken in the minimum image (the fractional components rounded along
  the periodic axes; exact for orthorhombic cells and vectors shorter than half the cell).

Forces are −∂E/∂r on every atom: on the MM atoms through the Coulomb term alone.  The form was chosen by
measurement (benchmarks/bench_qmmm_embedding_probe.py, docs/qmmm.md): on held-out frames of a PySCF
reference, fixed network charges in the MM potential cut the force error on the QM atoms to 0.27× a
mechanical model's, where MM atoms as graph neighbours, induced dipoles and charge equilibration did no better.
"""
import tensorflow as tf

from pinn import keys as K
from pinn.networks.layers import scatter_sum
from pinn.units import COULOMB  # eV Å / e²


def qm_mask(tensors):
    """[n_atoms] bool: the QM atoms of a batch (all atoms where the data have no ``qm``: a gas-phase frame is a
    QM region without environment)."""
    if K.QM in tensors:
        return tf.reshape(tf.cast(tensors[K.QM], tf.bool), [-1])
    return tf.ones(tf.shape(tensors[K.ELEMS])[:1], tf.bool)


def qm_atoms_view(tensors, qm):
    """The QM atoms of a batch with pair geometry, as the network takes them.

    Args:
        tensors: a sparse batch with ``elems``, ``ind_1``, ``ind_2``, ``diff`` and ``dist``.
        qm: [n_atoms] bool, the QM atoms.

    Returns:
        ``(view, qm_index)``: ``view`` a dict with ``elems``, ``ind_1`` of the QM atoms and the pairs whose
        both atoms are QM (``ind_2`` renumbered among the QM atoms, ``diff``, ``dist``); ``qm_index`` [n_qm]
        the QM atoms' places in the batch.
    """
    qm_index = tf.cast(tf.reshape(tf.where(qm), [-1]), tf.int32)
    place = tf.cumsum(tf.cast(qm, tf.int32)) - 1  # an atom's place among the QM atoms
    ind_2 = tensors[K.IND_2]
    inner = tf.logical_and(tf.gather(qm, ind_2[:, 0]), tf.gather(qm, ind_2[:, 1]))
    view = {K.ELEMS: tf.gather(tensors[K.ELEMS], qm_index), K.IND_1: tf.gather(tensors[K.IND_1], qm_index),
            K.IND_2: tf.gather(place, tf.boolean_mask(ind_2, inner)),
            K.DIFF: tf.boolean_mask(tensors[K.DIFF], inner), K.DIST: tf.boolean_mask(tensors[K.DIST], inner)}
    return view, qm_index


def conserved_charges(raw, structure, n_struct, total):
    """Atomic charges of the QM atoms that sum to each region's charge.

    Args:
        raw: [n_qm] the network's charge output of the QM atoms (e).
        structure: [n_qm] int, the structure of each QM atom.
        n_struct: number of structures.
        total: [n_struct] the regions' charges (e).

    Returns:
        [n_qm] q = raw − mean of raw over the atom's region + total / n_QM of the region (e).
    """
    count = tf.math.unsorted_segment_sum(tf.ones_like(raw), structure, n_struct)
    shift = (tf.cast(total, raw.dtype) - tf.math.unsorted_segment_sum(raw, structure, n_struct))
    return raw + tf.gather(tf.math.divide_no_nan(shift, count), structure)


def qm_mm_pairs(qm, structure, n_struct):
    """Every (QM atom, MM atom) pair of the same structure.

    Args:
        qm: [n_atoms] bool.
        structure: [n_atoms] int, each atom's structure (atoms of a structure contiguous, in order).
        n_struct: number of structures.

    Returns:
        ``(pair_qm, pair_mm)`` [n_pairs] int: the pair's QM atom as a place among the QM atoms, its MM atom
        as a place in the batch.
    """
    mm = tf.logical_not(qm)
    mm_index = tf.cast(tf.reshape(tf.where(mm), [-1]), tf.int32)
    mm_count = tf.math.unsorted_segment_sum(tf.cast(mm, tf.int32), structure, n_struct)
    mm_start = tf.cumsum(mm_count, exclusive=True)
    qm_structure = tf.boolean_mask(structure, qm)
    counts = tf.gather(mm_count, qm_structure)
    starts = tf.gather(mm_start, qm_structure)
    pair_qm = tf.repeat(tf.range(tf.shape(qm_structure)[0]), counts)
    pair_mm = tf.gather(mm_index, tf.ragged.range(starts, starts + counts).flat_values)
    return pair_qm, pair_mm


def minimum_image(vectors, structure, cell, pbc):
    """Vectors in the minimum image of their structure's cell along its periodic axes (unchanged along open
    ones): the fractional components rounded away.

    Args:
        vectors: [n, 3] (Å).
        structure: [n] int, the structure of each vector.
        cell: [n_struct, 3, 3] the cells (rows a, b, c; Å).
        pbc: [n_struct, 3] bool.

    Returns:
        [n, 3] (Å).
    """
    periodic = tf.reduce_any(pbc, axis=1)
    safe_cell = tf.where(periodic[:, None, None], cell, tf.eye(3, dtype=cell.dtype)[None])
    fractional = tf.einsum("ni,nij->nj", vectors, tf.gather(tf.linalg.inv(safe_cell), structure))
    images = tf.where(tf.gather(pbc, structure), tf.round(fractional), tf.zeros_like(fractional))
    return vectors - tf.einsum("ni,nij->nj", images, tf.gather(safe_cell, structure))


def coulomb_kernel(r, damping):
    """v(r) (1/Å) of distances ``r`` (a tensor or a NumPy array, Å): 1/r, or for ``damping`` r_d > 0 the smeared
    (r_d⁴ − r⁴)/(r_d⁵ − r⁵), written without the 0/0 at r = r_d as
    (r_d³ + r_d² r + r_d r² + r³) / (r_d⁴ + r_d³ r + r_d² r² + r_d r³ + r⁴)."""
    if not damping:
        return 1.0 / r
    a = float(damping)  # a Python number takes the dtype of r
    return (a ** 3 + a * a * r + a * r * r + r ** 3) / (a ** 4 + a ** 3 * r + a * a * r * r + a * r ** 3 + r ** 4)


def embedding_energy(tensors, coord, charges, qm, n_struct, damping):
    """The Coulomb energy of the QM atoms' charges with every MM charge of their structure.

    Args:
        tensors: the batch (``ind_1``, ``mm_charge``; ``cell`` and ``pbc`` for periodic frames).
        coord: [n_atoms, 3] positions (Å), the tensor the forces are taken against.
        charges: [n_qm] the QM atoms' charges (e), in the order of the QM atoms in the batch.
        qm: [n_atoms] bool.
        n_struct: number of structures.
        damping: r_d of :func:`coulomb_kernel` (Å), or 0.

    Returns:
        [n_struct] energy (eV).
    """
    structure = tensors[K.IND_1][:, 0]
    pair_qm, pair_mm = qm_mm_pairs(qm, structure, n_struct)
    qm_index = tf.cast(tf.reshape(tf.where(qm), [-1]), tf.int32)
    pair_structure = tf.gather(structure, pair_mm)
    vectors = tf.gather(coord, pair_mm) - tf.gather(coord, tf.gather(qm_index, pair_qm))
    vectors = minimum_image(vectors, pair_structure, tf.cast(tensors[K.CELL], coord.dtype), tensors[K.PBC])
    r = tf.norm(vectors, axis=1)
    mm_charge = tf.cast(tf.gather(tensors[K.MM_CHARGE], pair_mm), coord.dtype)
    pair_energy = COULOMB * tf.gather(charges, pair_qm) * mm_charge * coulomb_kernel(r, damping)
    return scatter_sum(pair_energy, pair_structure, n_struct)
