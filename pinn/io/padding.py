"""Padding sparse batches to a few fixed sizes, so that XLA-compiled functions see few shapes.

XLA compiles a function once per input shape.  A sparse batch has as many rows as it
has atoms and pairs, which change from structure to structure and from MD step to MD
step; :func:`pad_batch` rounds both up to a *bucket* (sizes 9 % apart, see
:func:`bucket_size`), so an MD run compiles a handful of times and then reuses the code.

The padding is one extra structure after the real ones: its atoms (of a known element)
sit at the origin of a cubic cell of side ``rc + 1`` Å, and every padding pair joins the
first of them to its own periodic image one cell away.  Padding pairs are therefore
longer than the cutoff, and every network's cutoff function makes their contribution,
and its derivatives, exactly zero: the real structures' energies, forces and stresses
are the same numbers as without padding.  Outputs of the padding structure and its
atoms are cut off by :func:`unpad`.

Training batches are padded in the ``tf.data`` pipeline by :func:`pad_to_buckets`, labels
included; their ``real`` key marks the padding structure, and the models leave it (and its
atoms) out of every loss sum, count and error metric (:mod:`pinn.physics.loss_weights`).
"""
import math

import numpy as np
import tensorflow as tf

from pinn import keys as K
from pinn.io.batch import atomic_keys, per_structure_checks, with_cell_and_pbc

#: buckets: 16 · 2^(k/8), rounded up to a multiple of 8
_SMALLEST = 16
_PER_OCTAVE = 8


def _bucket_table(largest=2 ** 31):
    sizes = []
    k = 0
    while not sizes or sizes[-1] < largest:
        size = 8 * math.ceil(_SMALLEST * 2 ** (k / _PER_OCTAVE) / 8)
        if not sizes or size > sizes[-1]:
            sizes.append(size)
        k += 1
    return np.array(sizes, np.int64)


#: every bucket size in increasing order (up to 2^31), shared by the NumPy and TensorFlow paddings
BUCKETS = _bucket_table()


def bucket_size(n):
    """The smallest bucket ≥ ``n``: buckets are 16 · 2^(k/8) rounded up to a multiple of 8, so
    a bucket is at most 9.1 % + 8 larger than ``n`` (and at least 16)."""
    return int(BUCKETS[np.searchsorted(BUCKETS, n)])


def pad_batch(batch, rc, element):
    """Pad a NumPy sparse batch (see :func:`pinn.io.batch_from_atoms`) to bucket sizes.

    Args:
        batch: dict with ``elems``, ``coord``, ``cell``, ``pbc``, ``ind_1``, ``ind_2``,
            ``shift`` (no labels).
        rc: the model's cutoff radius, Å.
        element: atomic number of the padding atoms (one the network knows).

    Returns:
        ``(padded, sizes)``: the padded batch, with at least one padding atom and
        ``bucket_size(n_atoms + 1)`` atoms and ``bucket_size(n_pairs)`` pairs in all, and
        ``sizes = (n_struct, n_atoms)`` of the real part for :func:`unpad`.
    """
    n_struct = len(batch[K.CELL])
    n_atoms = len(batch[K.ELEMS])
    n_pairs = len(batch[K.IND_2])
    extra_atoms = bucket_size(n_atoms + 1) - n_atoms
    extra_pairs = bucket_size(max(n_pairs, 1)) - n_pairs
    float_dtype = batch[K.COORD].dtype
    side = float(rc) + 1.0
    padded = {
        K.ELEMS: np.concatenate([batch[K.ELEMS], np.full(extra_atoms, element, batch[K.ELEMS].dtype)]),
        K.COORD: np.concatenate([batch[K.COORD], np.zeros((extra_atoms, 3), float_dtype)]),
        K.CELL: np.concatenate([batch[K.CELL], side * np.eye(3, dtype=float_dtype)[None]]),
        K.PBC: np.concatenate([batch[K.PBC], np.ones((1, 3), bool)]),
        K.IND_1: np.concatenate([batch[K.IND_1], np.full((extra_atoms, 1), n_struct, batch[K.IND_1].dtype)]),
        K.IND_2: np.concatenate([batch[K.IND_2], np.full((extra_pairs, 2), n_atoms, batch[K.IND_2].dtype)]),
        K.SHIFT: np.concatenate([batch[K.SHIFT], np.tile(np.array([[1.0, 0.0, 0.0]], float_dtype),
                                                         (extra_pairs, 1))]),
    }
    return padded, (n_struct, n_atoms)


#: which predictions are per structure and which per atom
_PER_STRUCTURE = ("energy", "stress", "dipole")
_PER_ATOM = ("forces", "charges", "energies")


def unpad(pred, sizes):
    """Cut the padding off predictions (dict of arrays or tensors) of a padded batch."""
    n_struct, n_atoms = sizes
    out = {}
    for key, value in pred.items():
        if key in _PER_STRUCTURE:
            out[key] = value[:n_struct]
        elif key in _PER_ATOM:
            out[key] = value[:n_atoms]
        else:
            raise KeyError(f"unpad: do not know whether {key!r} is per structure or per atom")
    return out


def pad_tensors(batch, rc, element, atomic_props=None):
    """Pad a sparse batch of tensors, labels included, to bucket sizes (the TensorFlow
    counterpart of :func:`pad_batch`, for the training pipeline).

    Args:
        batch: dict of tensors of a sparse batch with its neighbor list (``ind_2``, ``shift``),
            labels and any other per-structure keys.
        rc: the model's cutoff radius, Å.
        element: atomic number of the padding atoms (one the network knows).
        atomic_props: keys besides pinn's with one row per atom, as for
            :func:`pinn.io.sparse_batch` (default ``f_weights``, ``oxidation``); other keys
            pinn does not know are per structure (checked).

    Returns:
        The padded batch: one padding structure (zero labels), ``bucket_size(n_atoms + 1)``
        atoms and ``bucket_size(n_pairs)`` pairs, and ``real`` [n_struct + 1] bool, False
        for the padding structure.
    """
    table = tf.constant(BUCKETS)

    def bucket(n):
        return tf.cast(tf.gather(table, tf.searchsorted(table, tf.cast(n, tf.int64)[None]))[0], tf.int32)

    batch = with_cell_and_pbc(batch)
    n_struct = tf.shape(batch[K.CELL])[0]
    n_atoms = tf.shape(batch[K.ELEMS])[0]
    n_pairs = tf.shape(batch[K.IND_2])[0]
    extra_atoms = bucket(n_atoms + 1) - n_atoms
    extra_pairs = bucket(tf.maximum(n_pairs, 1)) - n_pairs
    side = float(rc) + 1.0
    atomic = atomic_keys(atomic_props)
    with tf.control_dependencies(per_structure_checks(batch, n_struct, atomic, "padding")):
        n_struct = tf.identity(n_struct)
    out = {}
    for key, value in batch.items():
        if isinstance(value, tf.RaggedTensor):
            raise ValueError(f"padding: batch key {key!r} is ragged; only sparse-batch keys can be padded")
        rest = tf.shape(value)[1:]
        if key == K.ELEMS:
            fill = tf.fill([extra_atoms], tf.constant(element, value.dtype))
        elif key == K.IND_1:
            fill = tf.fill([extra_atoms, 1], tf.cast(n_struct, value.dtype))
        elif key == K.IND_2:
            fill = tf.fill([extra_pairs, 2], tf.cast(n_atoms, value.dtype))
        elif key == K.SHIFT:
            fill = tf.tile(tf.constant([[1.0, 0.0, 0.0]], value.dtype), [extra_pairs, 1])
        elif key == K.CELL:
            fill = side * tf.eye(3, batch_shape=[1], dtype=value.dtype)
        elif key == K.PBC:
            fill = tf.ones([1, 3], tf.bool)
        elif key in atomic:
            fill = tf.zeros(tf.concat([[extra_atoms], rest], 0), value.dtype)
        elif key in K.PAIR_KEYS:
            fill = tf.zeros(tf.concat([[extra_pairs], rest], 0), value.dtype)
        elif key == K.REAL:
            raise ValueError("padding: the batch is padded already")
        else:  # per structure (stacked by sparse_batch)
            fill = tf.zeros(tf.concat([[1], rest], 0), value.dtype)
        out[key] = tf.concat([value, fill], axis=0)
    out[K.REAL] = tf.concat([tf.ones([n_struct], tf.bool), [False]], axis=0)
    return out


def pad_to_buckets(rc, element, num_parallel_calls=tf.data.AUTOTUNE, atomic_props=None):
    """Dataset transform: :func:`pad_tensors` on every sparse batch (with neighbor lists), or on
    every part of a batch split by :func:`pinn.io.split_batch` (a tuple of sparse batches).

    Use as ``dataset.apply(pad_to_buckets(rc, element))``; the trainer does this itself for
    an XLA-compiled training step (``model.params.jit``).  ``atomic_props``: as for
    :func:`pad_tensors`.
    """
    @tf.autograph.experimental.do_not_convert
    def pad(*parts):  # tf.data passes the parts of a tuple element as separate arguments
        if len(parts) == 1:
            return pad_tensors(parts[0], rc, element, atomic_props)
        return tuple(pad_tensors(part, rc, element, atomic_props) for part in parts)

    def transform(dataset):
        return dataset.map(pad, num_parallel_calls=num_parallel_calls, deterministic=True)
    return transform
