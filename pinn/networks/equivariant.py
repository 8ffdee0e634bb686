"""The equivariant pieces of PiNet2 (:mod:`pinn.networks.pinet2`): the five components of a traceless
symmetric tensor (:func:`rank2_components`, :func:`p5_to_matrix`), channel mixing, and upstream PiNN's
layers ``PIXLayer``, ``DotLayer`` and ``ScaleLayer`` (importable from :mod:`pinn.networks.pinet2` as
upstream's scripts do)."""
import numpy as np
import tensorflow as tf

from pinn.networks.layers import compute_dtype, mixed_matmul

_SQRT2 = np.sqrt(2.0)
_SQRT6 = np.sqrt(6.0)


def rank2_components(u):
    """The five orthonormal components of u u^T − |u|²/3 (traceless symmetric).

    Args:
        u: [..., 3] vectors (unit vectors for the network).

    Returns:
        [..., 5]: (√2 xy, √2 xz, √2 yz, (x² − y²)/√2, (2z² − x² − y²)/√6); their sum of squares is the
        squared Frobenius norm of the matrix, so it is rotation-invariant.
    """
    x, y, z = u[..., 0], u[..., 1], u[..., 2]
    return tf.stack([_SQRT2 * x * y, _SQRT2 * x * z, _SQRT2 * y * z, (x * x - y * y) / _SQRT2,
                     (2 * z * z - x * x - y * y) / _SQRT6], axis=-1)


def p5_to_matrix(p5):
    """Traceless symmetric 3×3 matrices from their five components (the inverse of :func:`rank2_components`).

    Args:
        p5: [n, 5, k] (PiNet2's ``p5`` extra output, or its P5 features).

    Returns:
        [n, 3, 3, k]: matrices T with T = R T R^T under a rotation R of the structure.
    """
    a, b, c, d, e = (p5[:, i] for i in range(5))
    xx = d / _SQRT2 - e / _SQRT6
    yy = -d / _SQRT2 - e / _SQRT6
    zz = 2 * e / _SQRT6
    xy = a / _SQRT2
    xz = b / _SQRT2
    yz = c / _SQRT2
    return tf.stack([tf.stack([xx, xy, xz], 1), tf.stack([xy, yy, yz], 1), tf.stack([xz, yz, zz], 1)], 1)


def mix_channels(x, layer):
    """x [n, m, C] times a layer's kernel [C, D] over the channel axis, in the layer's compute dtype:
    [n, m, D] (components never mix)."""
    shape = tf.shape(x)
    kernel = layer.kernel
    flat = mixed_matmul(tf.reshape(x, [-1, x.shape[-1]]), kernel, layer.compute_dtype)
    return tf.reshape(flat, [shape[0], shape[1], kernel.shape[-1]])


class _ChannelMix(tf.Module):
    """x [..., C] times a Glorot-uniform kernel [C, C] (no bias), the kernel made on the first call."""

    def __init__(self, rng, name=None):
        super().__init__(name=name)
        self.rng = rng
        self.kernel = None
        self.compute_dtype = compute_dtype()

    def __call__(self, x):
        x = tf.convert_to_tensor(x)
        if self.kernel is None:
            n = int(x.shape[-1])
            limit = np.sqrt(6.0 / (2 * n))
            self.kernel = tf.Variable(self.rng.uniform(-limit, limit, (n, n)), dtype=x.dtype, name="kernel")
        if self.compute_dtype is None:
            return tf.tensordot(x, self.kernel, axes=[[x.shape.rank - 1], [0]])
        c = self.compute_dtype
        return tf.cast(tf.tensordot(tf.cast(x, c), tf.cast(self.kernel, c), axes=[[x.shape.rank - 1], [0]]), x.dtype)


class _WeightedStyle(tf.Module):
    """Upstream's ``weighted`` style of a layer: two channel mixings ``wi``, ``wj`` from ``seed`` (or none)."""

    def __init__(self, weighted, seed=0, name=None):
        super().__init__(name=name)
        self.weighted = bool(weighted)
        if self.weighted:
            rng = np.random.RandomState(seed)
            self.wi = _ChannelMix(rng, name="wi")
            self.wj = _ChannelMix(rng, name="wj")


class PIXLayer(_WeightedStyle):
    """Upstream PiNN's ``PIXLayer``: equivariant pair terms from equivariant atomic features.

    ``PIXLayer(weighted)([ind_2, px])`` with ``ind_2`` [n_pairs, 2] and ``px`` [n_atoms, ..., C]
    (vectors [n_atoms, 3, C], matrices [n_atoms, 3, 3, C], ...): ``px_j`` per pair, or with
    ``weighted`` ``px_i W + px_j W'`` (W, W' [C, C], Glorot-uniform from ``seed``, made on the first
    call).  Channels mix, components never do, so a rotation of ``px`` rotates the result.
    """

    def __call__(self, tensors):
        """[n_pairs, ..., C] from ``[ind_2, px]``."""
        ind_2, px = tensors
        px_j = tf.gather(px, ind_2[:, 1])
        if not self.weighted:
            return px_j
        return self.wi(tf.gather(px, ind_2[:, 0])) + self.wj(px_j)


class DotLayer(_WeightedStyle):
    """Upstream PiNN's ``DotLayer``: invariants of equivariant features.

    ``DotLayer(weighted)(x)`` with ``x`` [n, m, C] (m components, e.g. 3 for vectors, or 9 for
    3 × 3 matrices flattened): Σ_m x_nmc x_nmc [n, C], or with ``weighted``
    Σ_m (x W)_nmc (x W')_nmc (W, W' [C, C] from ``seed``, made on the first call).
    """

    def __call__(self, x):
        """[n, C] from [n, m, C]."""
        if self.weighted:
            return tf.einsum("ixr,ixr->ir", self.wi(x), self.wj(x))
        return tf.einsum("ixr,ixr->ir", x, x)


class ScaleLayer(tf.Module):
    """Upstream PiNN's ``ScaleLayer``: equivariant features scaled channel by channel by invariants.

    ``ScaleLayer()([px, p1])`` with ``px`` [n, ..., C] and ``p1`` [n, C] (or broadcastable to
    [n, 1, ..., C]): ``px * p1[:, None, :]``, no weights.
    """

    def __call__(self, tensors):
        """``px`` scaled, the shape of ``px``."""
        px, p1 = tensors
        return px * p1[:, None, :]
