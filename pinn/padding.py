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
"""
import math

import numpy as np

from pinn import keys as K

#: buckets: 16 · 2^(k/8), rounded up to a multiple of 8
_SMALLEST = 16
_PER_OCTAVE = 8


def bucket_size(n):
    """The smallest bucket ≥ ``n``: buckets are 16 · 2^(k/8) rounded up to a multiple of 8, so
    a bucket is at most 9.1 % + 8 larger than ``n`` (and at least 16)."""
    if n <= _SMALLEST:
        return _SMALLEST
    k = math.floor(_PER_OCTAVE * math.log2(n / _SMALLEST))
    while True:
        size = 8 * math.ceil(_SMALLEST * 2 ** (k / _PER_OCTAVE) / 8)
        if size >= n:
            return size
        k += 1


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
    n_struct, n_atoms, n_pairs = len(batch[K.CELL]), len(batch[K.ELEMS]), len(batch[K.IND_2])
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
_PER_ATOM = ("forces", "charges")


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
