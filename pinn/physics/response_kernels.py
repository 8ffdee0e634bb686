"""Dense per-structure matrices of a sparse batch and the kernels of the polarizability models: the Coulomb
kernel of Gaussian charges (direct, minimum image, Ewald) and the response from a softness kernel.

Used by :mod:`pinn.physics.polarizability`; the units are the callers' (lengths in Å here).
"""
import itertools

import numpy as np
import tensorflow as tf

from pinn import keys as K
from pinn.io.batch import batch_pairs, structure_count


def dense_indices(tensors):
    """Where the atoms and pairs of a sparse batch sit in dense per-structure matrices.

    Returns:
        (atom_index [n_atoms, 2] (structure, position in it), pair_index [n_pairs, 3] (structure, i, j),
        n_struct, n_max (the most atoms of a structure)).
    """
    ind_1 = tensors[K.IND_1][:, 0]
    n_struct = structure_count(tensors)
    position = tf.range(tf.shape(ind_1)[0]) - tf.gather(
        tf.math.unsorted_segment_min(tf.range(tf.shape(ind_1)[0]), ind_1, n_struct), ind_1)
    n_max = tf.maximum(tf.reduce_max(position) + 1, 1)
    atom_index = tf.stack([ind_1, position], axis=1)
    ind_2 = tensors[K.IND_2]
    pair_index = tf.stack([tf.gather(ind_1, ind_2[:, 0]), tf.gather(position, ind_2[:, 0]),
                           tf.gather(position, ind_2[:, 1])], axis=1)
    return atom_index, pair_index, n_struct, n_max


def dense_positions(atom_index, coord, n_struct, n_max):
    """R [n_struct, n_max, 3] of ``coord`` (zeros in the empty places)."""
    return tf.scatter_nd(atom_index, coord, tf.stack([n_struct, n_max, 3]))


def diagonal(atom_index, values, n_struct, n_max):
    """[n_struct, n_max, n_max] with the atoms' ``values`` on the diagonals."""
    index = tf.stack([atom_index[:, 0], atom_index[:, 1], atom_index[:, 1]], axis=1)
    return tf.scatter_nd(index, values, tf.stack([n_struct, n_max, n_max]))


def pair_matrix(pair_index, values, n_struct, n_max, symmetric=False, invariant=False):
    """[n_struct, n_max, n_max] with each pair's value at (i, j); ``symmetric``: also at (j, i);
    ``invariant``: the diagonal set to minus each column's sum (so each row and column sums to zero when
    the matrix is symmetric)."""
    shape = tf.stack([n_struct, n_max, n_max])
    matrix = tf.scatter_nd(pair_index, values, shape)
    if symmetric:
        matrix += tf.scatter_nd(tf.gather(pair_index, [0, 2, 1], axis=1), values, shape)
    if invariant:
        matrix = tf.linalg.set_diag(matrix, -tf.reduce_sum(matrix, axis=1))
    return matrix


def response_from_softness(softness, eps=1e-15):
    """χ = −A + (A1)(1ᵀA) / (1ᵀA1) from a softness kernel A = η⁻¹ [n, m, m] (upstream's make_lrf)."""
    row = tf.reduce_sum(softness, axis=2)
    total = tf.reduce_sum(row, axis=1) + eps
    return -softness + row[:, :, None] * row[:, None, :] / total[:, None, None]


def coulomb_kernel(tensors, atom_index, sigma, n_struct, n_max, ewald=None):
    """E [n_struct, n_max, n_max] (1/Å) of Gaussian charges of widths ``sigma`` [n_atoms] (Å).

    Open structures: the direct sum; periodic ones (``pbc``): the minimum image, or with ``ewald``
    ``(rc, kmax, eta)`` the Ewald sum (see the module docstring).  Zero rows and columns in the empty
    places of a structure with fewer than ``n_max`` atoms.
    """
    coord = tensors[K.COORD]
    dtype = coord.dtype
    pi = np.pi
    cell = tf.cast(tensors[K.CELL], dtype)
    periodic = tf.reduce_any(tensors[K.PBC], axis=1)
    real = diagonal(atom_index, tf.ones_like(sigma), n_struct, n_max)
    occupied = tf.linalg.diag_part(real)  # [n_struct, n_max] 1 where an atom sits
    sigma2 = tf.scatter_nd(atom_index, sigma ** 2, tf.stack([n_struct, n_max]))
    self_term = tf.scatter_nd(atom_index, 1.0 / (sigma * np.sqrt(pi)), tf.stack([n_struct, n_max]))
    if ewald is not None:
        rc, kmax, eta = ewald
        nl = batch_pairs({K.COORD: coord, K.IND_1: tensors[K.IND_1], K.CELL: cell, K.PBC: tensors[K.PBC]}, rc)
        _, pair_index, _, _ = dense_indices({K.IND_1: tensors[K.IND_1], K.IND_2: nl[K.IND_2], K.CELL: cell})
        r = nl[K.DIST]
        gamma = tf.sqrt(2.0 * tf.reduce_sum(tf.gather(sigma ** 2, nl[K.IND_2]), axis=1))
        short = (tf.math.erfc(r / (np.sqrt(2.0) * eta)) - tf.math.erfc(r / gamma)) / r
        kernel = tf.scatter_nd(pair_index, short, tf.stack([n_struct, n_max, n_max]))
        grid = np.array([k for k in itertools.product(range(-kmax, kmax + 1), repeat=3) if k != (0, 0, 0)], float)
        safe_cell = tf.where(periodic[:, None, None], cell, tf.eye(3, batch_shape=[n_struct], dtype=dtype))
        kvec = 2 * pi * tf.einsum("bxc,kc->bkx", tf.linalg.inv(safe_cell), tf.constant(grid, dtype))
        k2 = tf.reduce_sum(kvec ** 2, axis=2)
        weight = tf.exp(-k2 * eta ** 2 / 2) / k2
        phase = tf.einsum("bkx,bix->bki", kvec, dense_positions(atom_index, coord, n_struct, n_max))
        waves = tf.stack([tf.cos(phase), tf.sin(phase)]) * occupied[None, :, None, :]
        volume = tf.abs(tf.linalg.det(safe_cell))
        kernel += 4 * pi * tf.einsum("bk,sbki,sbkj->bij", weight, waves, waves) / volume[:, None, None]
        kernel += tf.linalg.diag(self_term - np.sqrt(2.0 / pi) / eta * occupied)
        return kernel
    R = dense_positions(atom_index, coord, n_struct, n_max)
    d = R[:, None, :, :] - R[:, :, None, :]  # [b, i, j, x] = r_j − r_i
    safe_cell = tf.where(periodic[:, None, None], cell, tf.eye(3, batch_shape=[n_struct], dtype=dtype))
    frac = tf.einsum("bijx,bxc->bijc", d, tf.linalg.inv(safe_cell))
    frac -= tf.where(periodic[:, None, None, None], tf.math.rint(frac), tf.zeros_like(frac))
    d = tf.einsum("bijc,bcx->bijx", frac, safe_cell)
    pair_mask = occupied[:, :, None] * occupied[:, None, :] * (1.0 - tf.eye(n_max, dtype=dtype))
    r = tf.sqrt(tf.reduce_sum(d ** 2, axis=3) + (1.0 - pair_mask))  # 1 where there is no pair: no 0/0
    gamma = tf.sqrt(sigma2[:, None, :] + sigma2[:, :, None] + (1.0 - pair_mask))
    kernel = pair_mask * tf.math.erf(r / (np.sqrt(2.0) * gamma)) / r
    return tf.linalg.set_diag(kernel, self_term)
