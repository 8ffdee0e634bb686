"""Fast CPU inference of PiNet potentials: energy, forces and stress in compiled Numba kernels.

The ASE calculator's default engine for a PiNet potential on a CPU (``get_calc(...,
engine='auto')``).  It computes what :meth:`pinn.physics.potential.PotentialModel.predict`
computes, with the same weights, in a few machine-code kernels instead of TensorFlow calls:

- no per-call framework overhead: a TensorFlow call costs 0.3-1 ms however small the graph,
  several times a 9-atom molecule's whole force evaluation;
- both cores (and more) used: the pair work is split over threads (Numba ``prange``), where
  an XLA-compiled TensorFlow function runs its fused loops on one thread;
- the pair work done in tiles of :data:`TILE` pairs held in cache, feature by feature, so the
  innermost loops run over the pairs of a tile and vectorise (the [pairs, features]
  intermediates of the graph are never written out whole);
- forces and stress by a hand-written reverse pass through the network (derivatives with
  respect to the pair distances only: the weights are not differentiated), from what the
  forward pass kept: tanh outputs (tanh' = 1 - tanh²), or pre-activations for the other
  activations.

Numbers: the same as the TensorFlow model to float rounding (float64 models: ~1e-12 relative;
float32 models: ~1e-6 relative, as between TensorFlow's XLA and graph code; tested).  For
float32 the hyperbolic tangent is a rational approximation whose error is below 4e-7 (a few
float32 ulps), which vectorises; float64 uses the exact ``tanh``.

The kernels are compiled on first use (about 30 s per precision, for the parallel build and
again for the serial one that small structures use) and cached on disk by Numba
(``__pycache__`` next to this file, or Numba's user cache directory when that is read-only),
so later processes start at once.  A new kernel is compiled in a child process and loaded from
the cache (:mod:`pinn.engines.numba.warm_cache`): every process runs the cached code, so that
results do not depend on whether the cache was cold or warm.  They are compiled with ``fastmath``: sums may be
reordered, and non-finite positions give undefined results (ASE never passes any).
"""
import contextlib
import math
import types

import numpy as np

from pinn.engines.numba.layout import (LINEAR, CODE_ACT, CODE_CUTOFF, CODE_BASIS, CODE_N_BASIS, CODE_WIDTH,
                                       LAYER_KERNEL, LAYER_BIAS, LAYER_ACTIVATED, LAYER_N_OUT, BLOCK_PP,
                                       BLOCK_N_PP, BLOCK_PI, BLOCK_N_PI, BLOCK_II, BLOCK_N_II, BLOCK_OUT,
                                       BLOCK_N_OUT, BLOCK_UNITS, BLOCK_RESIDUAL, BLOCK_WIDTH_IN,
                                       BLOCK_WIDTH_OUT, BLOCK_Z_OUT)

try:
    import numba
    from numba import njit, prange
except ImportError:  # pragma: no cover - numba is a dependency; the calculator falls back to TensorFlow
    numba = None

from pinn.engines.numba import warm_cache

#: pairs per tile (at most): the innermost loops run over a tile's pairs and vectorise; a tile's
#: intermediates (~100 kB for the reference network) stay in the L2 cache
TILE = 256
#: below this many pairs a call runs on one thread (a parallel region costs more than it saves; PiNet2's:
#: :data:`pinn.engines.numba.pinet2_kernels.PARALLEL_MIN_PAIRS`)
PARALLEL_MIN_PAIRS = 2048

# tanh(x) ~ x P(s) / Q(s), s = x^2 / 81, for |x| <= 9 (tanh rounds to ±1 in float32 beyond):
# a least-squares rational fit on Chebyshev nodes, coefficients in the scaled variable s so
# that float32 Horner evaluation stays accurate; max |error| 3.6e-7 in float32 (tested)
_TANH_CLAMP = np.float32(9.0)
_TANH_SCALE = np.float32(1.0 / 81.0)
_TANH_P = [np.float32(c * 81.0 ** k) for k, c in enumerate(
    [0.9999999996822306, 0.13855611620504757, 0.004093900659420581, 3.299661301596254e-05,
     4.572126776532908e-08, -3.1739085752704256e-11, 2.5795814500439873e-14])]
_TANH_Q = [np.float32(c * 81.0 ** k) for k, c in enumerate(
    [1.0, 0.4718894478764866, 0.028057052358581917, 0.0004350065633331428, 1.6695156020782677e-06])]
_P0, _P1, _P2, _P3, _P4, _P5, _P6 = _TANH_P
_Q0, _Q1, _Q2, _Q3, _Q4 = _TANH_Q


@contextlib.contextmanager
def numba_threads(threads):
    """Run the enclosed parallel kernels on ``threads`` threads (at most ``NUMBA_NUM_THREADS``), restoring the
    previous count afterwards, whatever happens."""
    previous = numba.get_num_threads()
    numba.set_num_threads(threads)
    try:
        yield
    finally:
        numba.set_num_threads(previous)


def _jit(**options):
    """``numba.njit`` with the options of every kernel here (a no-op decorator without Numba).

    Each kernel compiles a new signature in a child process and loads it from Numba's on-disk
    cache (:mod:`pinn.engines.numba.warm_cache`): fresh and cached code reassociate sums
    differently under ``fastmath``, and every process runs the cached code so that results do
    not depend on the cache state."""
    if numba is None:  # pragma: no cover
        return lambda f: f
    decorate = njit(cache=True, nogil=True, fastmath=True, error_model="numpy", **options)
    return lambda f: warm_cache.install(decorate(f))


@_jit(inline="always")
def _tanh32(x):
    """float32 tanh by the rational approximation (vectorises; error < 4e-7)."""
    x = min(max(x, -_TANH_CLAMP), _TANH_CLAMP)
    s = x * x * _TANH_SCALE
    p = ((((((_P6 * s + _P5) * s + _P4) * s + _P3) * s + _P2) * s + _P1) * s + _P0)
    q = ((((_Q4 * s + _Q3) * s + _Q2) * s + _Q1) * s + _Q0)
    return x * p / q


@_jit(inline="always")
def _act(z, code):
    if code == 0:
        return math.tanh(z)
    if code == 6:
        return _tanh32(z)
    if code == 1:  # shifted softplus
        return max(z, 0.0) + math.log1p(math.exp(-abs(z))) - math.log(2.0)
    if code == 2:
        return max(z, 0.0) + math.log1p(math.exp(-abs(z)))
    if code == 3:
        return z / (1.0 + math.exp(-z))
    if code == 4:
        return max(z, 0.0)
    return z


@_jit(inline="always")
def _dact(z, code):
    """d act / d z at pre-activation z."""
    if code == 0:
        t = math.tanh(z)
        return 1.0 - t * t
    if code == 6:
        t = _tanh32(z)
        return 1.0 - t * t
    if code == 1 or code == 2:
        return 1.0 / (1.0 + math.exp(-z))
    if code == 3:
        s = 1.0 / (1.0 + math.exp(-z))
        return s * (1.0 + z * (1.0 - s))
    if code == 4:
        return 1.0 if z > 0.0 else 0.0
    return 1.0


@_jit()
def _act_tile(z, y, n, code):
    """y[:n] = act(z[:n]) over [features, pairs] tiles; the branch is outside the vector loops."""
    n_t = z.shape[1]
    if code == 6:
        for c in range(n):
            for t in range(n_t):
                y[c, t] = _tanh32(z[c, t])
    elif code == 5:
        for c in range(n):
            for t in range(n_t):
                y[c, t] = z[c, t]
    else:
        for c in range(n):
            for t in range(n_t):
                y[c, t] = _act(z[c, t], code)


@_jit()
def _dact_tile(z, dy, n, code):
    """dy[:n] *= act'(z[:n]) over tiles."""
    n_t = dy.shape[1]
    if code == 6:
        for c in range(n):
            for t in range(n_t):
                h = _tanh32(z[c, t])
                dy[c, t] = dy[c, t] - dy[c, t] * h * h
    elif code != 5:
        for c in range(n):
            for t in range(n_t):
                dy[c, t] = dy[c, t] * _dact(z[c, t], code)


@_jit(inline="always")
def _keeps_output(code):
    """Whether the reverse pass can work from act(z) alone (tanh: 1 - y², linear: 1), so the
    forward pass keeps the activated values (no tanh recomputed backwards); else it keeps z."""
    return code == 0 or code == 6 or code == 5


@_jit()
def _dact_kept(kept, dy, n, code):
    """dy[:n] *= act'(z[:n]) from the kept values of :func:`_keeps_output` (act(z) or z)."""
    n_t = dy.shape[1]
    if code == 0 or code == 6:
        for c in range(n):
            for t in range(n_t):
                dy[c, t] = dy[c, t] - dy[c, t] * kept[c, t] * kept[c, t]
    elif code != 5:
        _dact_tile(kept, dy, n, code)


# Per-pair gathers and scatters between a tile [features, pairs] and per-atom arrays kept
# atom-major, [n_atoms, features]: each pair reads or adds one atom's contiguous row (two AVX
# vectors for 16 features), where a features-major per-atom array costs a scattered load or a
# short run per feature (cu108 tiles of 256 pairs, 16 features, one core: the first PI layer's
# input 6.1 -> 2.0-3.0 us, the sums into both atoms 5.1 -> 3.1-3.9 us).
@_jit()
def _pair_input(pa, pb, n, pair_i, pair_j, p0, n_valid, dest):
    """dest[c, t] = pa[i, c] + pb[j, c] for the tile's pairs t = (i, j), c < n; 0 past ``n_valid``.
    ``pa``/``pb`` [n_atoms, >= n]: per atom, the first PI layer's terms of a pair's first and second
    atom."""
    for t in range(n_valid):
        i, j = pair_i[p0 + t], pair_j[p0 + t]
        for c in range(n):
            dest[c, t] = pa[i, c] + pb[j, c]
    for c in range(n):
        for t in range(n_valid, dest.shape[1]):
            dest[c, t] = 0.0


@_jit()
def _spread_first_atom(src, n, pair_i, p0, n_valid, dest):
    """dest[c, t] = src[first atom of pair t, c] for c < n over a tile (0 past ``n_valid``);
    ``src`` [n_atoms, >= n]."""
    for t in range(n_valid):
        i = pair_i[p0 + t]
        for c in range(n):
            dest[c, t] = src[i, c]
    for c in range(n):
        for t in range(n_valid, dest.shape[1]):
            dest[c, t] = 0.0


@_jit()
def _add_by_first_atom(src, n, pair_i, p0, n_valid, out):
    """out[i, c] += src[c, t] for the tile's valid pairs t with first atom i, c < n; ``out``
    [n_atoms, >= n]."""
    for t in range(n_valid):
        i = pair_i[p0 + t]
        for c in range(n):
            out[i, c] += src[c, t]


@_jit()
def _add_by_both_atoms(src, n, pair_i, pair_j, p0, n_valid, out_i, out_j):
    """out_i[i, c] += src[c, t] and out_j[j, c] += src[c, t] for the tile's valid pairs t = (i, j),
    c < n; ``out_i``/``out_j`` [n_atoms, >= n]."""
    for t in range(n_valid):
        i, j = pair_i[p0 + t], pair_j[p0 + t]
        for c in range(n):
            v = src[c, t]
            out_i[i, c] += v
            out_j[j, c] += v


@_jit()
def _atom_major(src, n, dest):
    """dest[a, c] = src[c, a] for c < n and each row a of ``dest``: a features-by-atoms array (or its
    first columns) made atom-major."""
    for a in range(dest.shape[0]):
        for c in range(n):
            dest[a, c] = src[c, a]


@_jit()
def _tile_matmul(x, w, out, n_in, n_out, accumulate=False):
    """out[:n_out] = w^T x[:n_in] on a tile: out[c, t] = sum_k w[k, c] x[k, t] (``accumulate``: +=).

    Register-blocked: four output rows per pass, four inputs per update of them, so that each
    load and store of an output row serves 16 multiply-adds (83-102 GFLOP/s on one core for the
    reference network's 16- and 64-wide layers on 256-pair tiles, against 35-47 with two output
    rows and one input per update; measured with the products alone).
    """
    n_t = out.shape[1]
    k4 = n_in - n_in % 4
    c4 = n_out - n_out % 4
    for c in range(0, c4, 4):
        o0, o1, o2, o3 = out[c], out[c + 1], out[c + 2], out[c + 3]
        if not accumulate:
            for t in range(n_t):
                o0[t] = 0.0
                o1[t] = 0.0
                o2[t] = 0.0
                o3[t] = 0.0
        for k in range(0, k4, 4):
            x0, x1, x2, x3 = x[k], x[k + 1], x[k + 2], x[k + 3]
            a0, a1, a2, a3 = w[k, c], w[k + 1, c], w[k + 2, c], w[k + 3, c]
            b0, b1, b2, b3 = w[k, c + 1], w[k + 1, c + 1], w[k + 2, c + 1], w[k + 3, c + 1]
            d0, d1, d2, d3 = w[k, c + 2], w[k + 1, c + 2], w[k + 2, c + 2], w[k + 3, c + 2]
            e0, e1, e2, e3 = w[k, c + 3], w[k + 1, c + 3], w[k + 2, c + 3], w[k + 3, c + 3]
            for t in range(n_t):
                v0, v1, v2, v3 = x0[t], x1[t], x2[t], x3[t]
                o0[t] += a0 * v0 + a1 * v1 + a2 * v2 + a3 * v3
                o1[t] += b0 * v0 + b1 * v1 + b2 * v2 + b3 * v3
                o2[t] += d0 * v0 + d1 * v1 + d2 * v2 + d3 * v3
                o3[t] += e0 * v0 + e1 * v1 + e2 * v2 + e3 * v3
        for k in range(k4, n_in):
            a0, b0, d0, e0 = w[k, c], w[k, c + 1], w[k, c + 2], w[k, c + 3]
            xk = x[k]
            for t in range(n_t):
                o0[t] += a0 * xk[t]
                o1[t] += b0 * xk[t]
                o2[t] += d0 * xk[t]
                o3[t] += e0 * xk[t]
    for c in range(c4, n_out):
        o0 = out[c]
        if not accumulate:
            for t in range(n_t):
                o0[t] = 0.0
        for k in range(n_in):
            a0 = w[k, c]
            xk = x[k]
            for t in range(n_t):
                o0[t] += a0 * xk[t]


@_jit()
def _tile_matmul_t(dy, w, out, n_in, n_out, accumulate=False):
    """out[:n_in] = w dy[:n_out] on a tile (the reverse of :func:`_tile_matmul`; ``accumulate``: +=)."""
    _tile_matmul(dy, w.T, out, n_out, n_in, accumulate)


@_jit()
def _tensor(flat, table, tid):
    """Tensor ``tid`` of the flat weight array as a [rows, cols] view."""
    off, rows, cols = table[tid, 0], table[tid, 1], table[tid, 2]
    return flat[off:off + rows * cols].reshape((rows, cols))


@_jit()
def _cutoff(x, code):
    """(fc, d fc / d x) at x = r / rc < 1."""
    if code == 0:
        return 0.5 * (math.cos(math.pi * x) + 1.0), -0.5 * math.pi * math.sin(math.pi * x)
    if code == 1:
        t = math.tanh(1.0 - x)
        return t * t * t, -3.0 * t * t * (1.0 - t * t)
    if code == 2:
        c = math.cos(0.5 * math.pi * x)
        return c * c, -math.pi * c * math.sin(0.5 * math.pi * x)
    x2 = x * x
    return 1.0 - 6.0 * x2 * x2 * x + 15.0 * x2 * x2 - 10.0 * x2 * x, -30.0 * x2 * x2 + 60.0 * x2 * x - 30.0 * x2


@_jit()
def find_pairs(coord, cand_i, cand_j, cand_offset, rc, pair_i, pair_j, diff, dist):
    """Keep the candidate pairs closer than ``rc``.

    Args:
        coord: [n_atoms, 3] float64 positions, Å.
        cand_i, cand_j: [n_cand] int32 atoms of the candidate pairs (a Verlet list).
        cand_offset: [n_cand, 3] float64 image offsets (shift · cell), Å.
        rc: cutoff, Å.
        pair_i, pair_j, diff, dist: outputs with room for ``n_cand`` pairs (diff: r_j + offset − r_i).

    Returns:
        the number of pairs kept (they fill the first rows of the outputs, in candidate order).
    """
    n = 0
    rc2 = rc * rc
    for p in range(cand_i.shape[0]):
        i, j = cand_i[p], cand_j[p]
        dx = coord[j, 0] - coord[i, 0] + cand_offset[p, 0]
        dy = coord[j, 1] - coord[i, 1] + cand_offset[p, 1]
        dz = coord[j, 2] - coord[i, 2] + cand_offset[p, 2]
        r2 = dx * dx + dy * dy + dz * dz
        if r2 < rc2:
            pair_i[n], pair_j[n] = i, j
            diff[n, 0], diff[n, 1], diff[n, 2] = dx, dy, dz
            dist[n] = math.sqrt(r2)
            n += 1
    return n


@_jit()
def radial_basis_tile(tile, n_pairs, dist, codes, scal, basis, dbasis):
    """The radial basis e_b(r) and its derivative de_b/dr (1/Å) of one tile's pairs, [n_basis, tile]
    each (zero past ``n_pairs``); ``codes``/``scal`` as in :meth:`pinn.engines.spec.PiNetSpec.arrays`."""
    cutoff_code, basis_code, n_basis = codes[CODE_CUTOFF], codes[CODE_BASIS], codes[CODE_N_BASIS]
    rc, gamma = scal[0], scal[1]
    n_t = basis.shape[1]
    for t in range(n_t):
        p = tile * n_t + t
        for b in range(n_basis):
            basis[b, t] = 0.0
            dbasis[b, t] = 0.0
        if p >= n_pairs:
            continue
        r = dist[p]
        fc, dfc = _cutoff(r / rc, cutoff_code)
        dfc = dfc / rc
        for b in range(n_basis):
            if basis_code == 0:
                value = fc ** (b + 1)
                slope = (b + 1) * fc ** b * dfc
            else:
                center = rc * b / (n_basis - 1) if n_basis > 1 else 0.0
                g = math.exp(-gamma * (r - center) ** 2)
                value = g * fc
                slope = g * dfc - 2.0 * gamma * (r - center) * g * fc
            basis[b, t] = value
            dbasis[b, t] = slope


# ------------------------------------------------------------------ per-atom layers
# The arrays and their columns: pinn.engines.numba.layout.


@_jit()
def _atoms_dense(x, flat, table, layer, z, act):
    """One dense layer on all atoms, features by atoms: z = W^T x + b, kept in ``z``
    [n_out, n_atoms]; returns act(z) (a new array)."""
    w = _tensor(flat, table, layer[LAYER_KERNEL])
    n_in, n_out = w.shape
    _tile_matmul(x, w, z, n_in, n_out)
    bias = table[layer[LAYER_BIAS], 0]
    for c in range(n_out):
        bc = flat[bias + c]
        for a in range(z.shape[1]):
            z[c, a] += bc
    y = np.empty_like(z)
    _act_tile(z, y, n_out, act if layer[LAYER_ACTIVATED] else LINEAR)
    return y


@_jit()
def _atoms_dense_back(gy, flat, table, layer, z, act):
    """The reverse of :func:`_atoms_dense`: dE/dx [n_in, n_atoms] from dE/dy and the kept ``z``."""
    w = _tensor(flat, table, layer[LAYER_KERNEL])
    n_in, n_out = w.shape
    if layer[LAYER_ACTIVATED]:
        _dact_tile(z, gy, n_out, act)
    gx = np.empty((n_in, gy.shape[1]), gy.dtype)
    _tile_matmul_t(gy, w, gx, n_in, n_out)
    return gx


@_jit()
def _atoms_stack(x, flat, table, layers, start, count, z, col, act):
    """Layers ``start`` .. ``start + count - 1`` on all atoms (:func:`_atoms_dense`), their z kept in
    rows ``col``... of ``z``; returns the last activations."""
    for layer in range(start, start + count):
        n_out = layers[layer, LAYER_N_OUT]
        x = _atoms_dense(x, flat, table, layers[layer], z[col:col + n_out], act)
        col += n_out
    return x


@_jit()
def _atoms_stack_back(gy, flat, table, layers, start, count, z, col, act):
    """The reverse of :func:`_atoms_stack`: dE/d its input from dE/d its output."""
    for layer in range(start, start + count):
        col += layers[layer, LAYER_N_OUT]
    for layer in range(start + count - 1, start - 1, -1):
        n_out = layers[layer, LAYER_N_OUT]
        col -= n_out
        gy = _atoms_dense_back(gy, flat, table, layers[layer], z[col:col + n_out], act)
    return gy


# ------------------------------------------------------------------ pair tiles
@_jit()
def _keep(z, y, dest, n, keep_y):
    """Keep what the reverse pass needs of a layer: act(z) (``keep_y``) or z."""
    src = y if keep_y else z
    for c in range(n):
        for t in range(dest.shape[1]):
            dest[c, t] = src[c, t]


@_jit()
def _pair_forward(tile, n_pairs, pair_i, pair_j, e, pa, pb, flat, table, layers, blk, act, z, scratch, out):
    """The PI and II nets of one tile of pairs, summed into ``out`` [n_atoms, n_ii] by first atom.

    ``e``: [n_basis, tile] radial basis; ``pa`` / ``pb`` [n_atoms, n]: the first PI layer per
    atom for the first / second atom of a pair (bias in pa); ``z``: [rows, tile] where
    the values the reverse pass needs are kept (see :func:`_keeps_output`).
    """
    n_t = e.shape[1]
    p0 = tile * n_t
    n_valid = min(n_t, n_pairs - p0)
    n_basis = e.shape[0]
    x, y, u, inter = scratch[0], scratch[1], scratch[2], scratch[3]
    n_first = layers[blk[BLOCK_PI], 3]
    keep_y = _keeps_output(act)
    _pair_input(pa, pb, n_first, pair_i, pair_j, p0, n_valid, x)
    n_pi_layers = blk[BLOCK_N_PI]
    pi_out = layers[blk[BLOCK_PI] + n_pi_layers - 1]
    kernel = _tensor(flat, table, pi_out[0])
    n_pi = kernel.shape[1] // n_basis
    row = 0
    if n_pi_layers == 1:  # no hidden PI layer: x is the PI output before the basis sum
        for c in range(n_pi):
            for t in range(n_t):
                inter[c, t] = 0.0
            for b in range(n_basis):
                for t in range(n_t):
                    inter[c, t] += x[c * n_basis + b, t] * e[b, t]
    else:
        _act_tile(x, y, n_first, act)
        _keep(x, y, z[0:n_first], n_first, keep_y)
        row = n_first
        n_h = n_first
        for layer in range(blk[BLOCK_PI] + 1, blk[BLOCK_PI] + n_pi_layers - 1):
            w = _tensor(flat, table, layers[layer, LAYER_KERNEL])
            n_out = w.shape[1]
            _tile_matmul(y, w, x, n_h, n_out)
            bias = table[layers[layer, LAYER_BIAS], 0]
            for c in range(n_out):
                bc = flat[bias + c]
                for t in range(n_t):
                    x[c, t] += bc
            _act_tile(x, y, n_out, act)
            _keep(x, y, z[row:row + n_out], n_out, keep_y)
            row += n_out
            n_h = n_out
        # I_c = sum_b e_b (h K_b + B_b)_c, one basis function at a time
        for c in range(n_pi):
            for t in range(n_t):
                inter[c, t] = 0.0
        for b in range(n_basis):
            _tile_matmul(y, kernel[:, b::n_basis], u, n_h, n_pi)
            for c in range(n_pi):
                bc = flat[table[pi_out[1], 0] + c * n_basis + b]
                for t in range(n_t):
                    inter[c, t] += (u[c, t] + bc) * e[b, t]
    # II net (no bias)
    n_h = n_pi
    src = inter
    for layer in range(blk[BLOCK_II], blk[BLOCK_II] + blk[BLOCK_N_II]):
        w = _tensor(flat, table, layers[layer, LAYER_KERNEL])
        n_out = w.shape[1]
        _tile_matmul(src, w, x, n_h, n_out)
        _act_tile(x, y, n_out, act)
        _keep(x, y, z[row:row + n_out], n_out, keep_y)
        src = y
        row += n_out
        n_h = n_out
    _add_by_first_atom(src, n_h, pair_i, p0, n_valid, out)


@_jit()
def _tile_layers_back(g, tmp, flat, table, layers, lo, hi, z, row, act):
    """Back through the pair layers ``lo`` .. ``hi - 1``: ``g`` holds dE/d the output of the last
    on entry and dE/d the input of the first on exit; their kept values end at row ``row`` of ``z``."""
    for layer in range(hi - 1, lo - 1, -1):
        w = _tensor(flat, table, layers[layer, LAYER_KERNEL])
        n_in, n_out = w.shape
        row -= n_out
        _dact_kept(z[row:row + n_out], g, n_out, act)
        _tile_matmul_t(g, w, tmp, n_in, n_out)
        for c in range(n_in):
            for t in range(g.shape[1]):
                g[c, t] = tmp[c, t]


@_jit()
def _pair_backward(tile, n_pairs, pair_i, pair_j, e, de_dr, pa, pb, flat, table, layers, blk, act, z, gnew,
                   scratch, ga, gb, grad_r):
    """The reverse of :func:`_pair_forward` for one tile: adds dE/d pa and dE/d pb per atom (``ga``,
    ``gb``, [n_atoms, n]) and adds dE/d dist of the tile's pairs to ``grad_r``, given dE/d new_prop
    (``gnew``, [n_atoms, n_ii])."""
    n_t = e.shape[1]
    p0 = tile * n_t
    n_valid = min(n_t, n_pairs - p0)
    n_basis = e.shape[0]
    dy, dx, u, h, de = scratch[0], scratch[1], scratch[2], scratch[3], scratch[4]
    n_first = layers[blk[BLOCK_PI], 3]
    n_pi_layers = blk[BLOCK_N_PI]
    pi_out = layers[blk[BLOCK_PI] + n_pi_layers - 1]
    kernel = _tensor(flat, table, pi_out[0])
    n_pi = kernel.shape[1] // n_basis
    # rows of z: the PI hidden layers, then the II layers
    pi_rows = 0
    if n_pi_layers > 1:
        pi_rows = n_first
        for layer in range(blk[BLOCK_PI] + 1, blk[BLOCK_PI] + n_pi_layers - 1):
            pi_rows += layers[layer, LAYER_N_OUT]
    ii_end = pi_rows
    for layer in range(blk[BLOCK_II], blk[BLOCK_II] + blk[BLOCK_N_II]):
        ii_end += layers[layer, LAYER_N_OUT]
    n_last = layers[blk[BLOCK_II] + blk[BLOCK_N_II] - 1, 3]
    keep_y = _keeps_output(act)
    _spread_first_atom(gnew, n_last, pair_i, p0, n_valid, dy)
    _tile_layers_back(dy, dx, flat, table, layers, blk[BLOCK_II], blk[BLOCK_II] + blk[BLOCK_N_II], z, ii_end, act)
    # dy is now dE/dI [n_pi, tile]
    for b in range(n_basis):
        for t in range(n_t):
            de[b, t] = 0.0
    if n_pi_layers == 1:
        for t in range(n_valid):
            i, j = pair_i[p0 + t], pair_j[p0 + t]
            for c in range(n_pi):
                for b in range(n_basis):
                    k = c * n_basis + b
                    de[b, t] += dy[c, t] * (pa[i, k] + pb[j, k])
        for c in range(n_pi):
            for b in range(n_basis):
                for t in range(n_t):
                    dx[c * n_basis + b, t] = dy[c, t] * e[b, t]
        n_grad = n_first
    else:
        n_h = layers[blk[BLOCK_PI] + n_pi_layers - 2, 3]
        h_row = pi_rows - n_h
        if keep_y:
            h = z[h_row:pi_rows]
        else:
            _act_tile(z[h_row:pi_rows], h, n_h, act)
        for k in range(n_h):
            for t in range(n_t):
                dx[k, t] = 0.0
        contraction_adjoint(dy, kernel, flat, table[pi_out[1], 0], h, e, n_h, n_pi, u, dx, de)
        # back through the PI hidden layers to the first layer's pre-activation
        _tile_layers_back(dx, dy, flat, table, layers, blk[BLOCK_PI] + 1, blk[BLOCK_PI] + n_pi_layers - 1, z, pi_rows,
                          act)
        _dact_kept(z[0:n_first], dx, n_first, act)
        n_grad = n_first
    _add_by_both_atoms(dx, n_grad, pair_i, pair_j, p0, n_valid, ga, gb)
    for t in range(n_valid):
        p = p0 + t
        g = 0.0
        for b in range(n_basis):
            g += de[b, t] * de_dr[b, t]
        grad_r[p] += g


@_jit()
def contraction_adjoint(gi, kernel, flat, boff, h, e, n_h, n_pi, u, gh, ge):
    """First-order reverse of the PI output's basis contraction I_c = Σ_b e_b (h K_b + β_b)_c on one tile:
    from ∂E/∂I (``gi`` [n_pi, tile]) adds ∂E/∂h to ``gh`` [n_h, tile] and ∂E/∂e_b to ``ge``
    [n_basis, tile]; ``kernel``: the PI output layer's [n_h, n_pi · n_basis], its bias at
    ``flat[boff:]``; ``u``: scratch.  With u_b = K_b ∂E/∂I: ∂E/∂h = Σ_b e_b u_b and
    ∂E/∂e_b = Σ_k h_k u_bk + Σ_c (∂E/∂I)_c β_bc."""
    n_basis, n_t = e.shape[0], e.shape[1]
    for b in range(n_basis):
        _tile_matmul_t(gi, kernel[:, b::n_basis], u, n_h, n_pi)
        for k in range(n_h):
            for t in range(n_t):
                gh[k, t] += e[b, t] * u[k, t]
                ge[b, t] += h[k, t] * u[k, t]
        for c in range(n_pi):
            bc = flat[boff + c * n_basis + b]
            for t in range(n_t):
                ge[b, t] += gi[c, t] * bc


# ------------------------------------------------------------------ the whole evaluation
@_jit(parallel=True)
def _evaluate(types, n_pairs, pair_i, pair_j, dist, flat, table, layers, blocks, codes, scal, n_chunks,
              basis, dbasis, zpair, zatom, pa, pb, buf, grad_r, atomic, charge_seed, charge):
    """Atomic energies and dE/d dist per pair of one structure (and, for a network of two outputs per atom, its
    second output: the atomic charges of an electrostatic embedding, whose energy's derivative by each the
    backward pass takes from ``charge_seed``).

    Args:
        types: [n_atoms] int64 indices into atom_types.
        n_pairs, pair_i, pair_j, dist: the pairs within the cutoff (from :func:`find_pairs`).
        flat, table, layers, blocks: the network's weights and layout (see :class:`FastPiNet`).
        codes: int64 (activation, cutoff, basis type, n_basis, widest layer).
        scal: float64 (rc, gamma, e_scale).
        n_chunks: pair tiles are split into this many chunks, one per thread.
        basis, dbasis, zpair, zatom, pa, pb, buf: workspace (see :meth:`FastPiNet._workspace`);
            the per-atom arrays are features by atoms, but for pa and pb (atoms by features).
        grad_r: [>= n_pairs] output, dE/d dist (eV/Å).
        atomic: [n_atoms] output, e_scale × the network's atomic energy (eV, no e_dress).
        charge_seed: [n_atoms] ∂E/∂(second output) of each atom (eV/e); read only for two outputs.
        charge: [n_atoms] output, the second output (e); written only for two outputs.
    """
    n_atoms = types.shape[0]
    depth = blocks.shape[0]
    act, n_basis = codes[CODE_ACT], codes[CODE_N_BASIS]
    e_scale = scal[2]
    n_t = basis.shape[2]
    n_tiles = (n_pairs + n_t - 1) // n_t
    tiles_per_chunk = (n_tiles + n_chunks - 1) // n_chunks
    for tile in prange(n_tiles):
        radial_basis_tile(tile, n_pairs, dist, codes, scal, basis[tile], dbasis[tile])
    # properties, features by atoms: one-hot element types for the first block
    prop = np.zeros((blocks[0, BLOCK_WIDTH_IN], n_atoms), zpair.dtype)
    two = layers.shape[0] > 0 and _tensor(flat, table, layers[blocks[0, BLOCK_UNITS], 0]).shape[1] > 1
    for a in range(n_atoms):
        prop[types[a], a] = 1.0
        atomic[a] = 0.0
        if two:
            charge[a] = 0.0
    for d in range(depth):
        blk = blocks[d]
        x = _atoms_stack(prop, flat, table, layers, blk[BLOCK_PP], blk[BLOCK_N_PP], zatom[d], 0, act)
        first = layers[blk[BLOCK_PI]]
        kernel = _tensor(flat, table, first[0])
        n_pp = x.shape[0]
        n_first = kernel.shape[1]
        per_atom = np.empty((n_first, n_atoms), zpair.dtype)
        _tile_matmul(x, kernel[n_pp:], per_atom, n_pp, n_first)
        _atom_major(per_atom, n_first, pb[d])
        _tile_matmul(x, kernel[:n_pp], per_atom, n_pp, n_first)
        bias = table[first[1], 0]
        for c in range(n_first):
            bc = flat[bias + c]
            for a in range(n_atoms):
                per_atom[c, a] += bc
        _atom_major(per_atom, n_first, pa[d])
        n_new = blk[BLOCK_WIDTH_OUT]
        for chunk in prange(n_chunks):
            out = buf[chunk, :n_atoms, :n_new]
            for a in range(n_atoms):
                for c in range(n_new):
                    out[a, c] = 0.0
            scratch = np.empty((4, codes[CODE_WIDTH], n_t), zpair.dtype)
            for tile in range(chunk * tiles_per_chunk, min(n_tiles, (chunk + 1) * tiles_per_chunk)):
                _pair_forward(tile, n_pairs, pair_i, pair_j, basis[tile], pa[d], pb[d], flat, table, layers, blk,
                              act, zpair[d, tile], scratch, out)
        # the threads' sums, added up per atom in parallel (in chunk order, as a serial loop
        # would): serial, this pass grew with the thread count, 20-24 % of the step of
        # Cu 10 976 on 16 threads
        new = np.empty((n_new, n_atoms), zpair.dtype)
        for a in prange(n_atoms):
            for c in range(n_new):
                total = buf[0, a, c]
                for chunk in range(1, n_chunks):
                    total += buf[chunk, a, c]
                new[c, a] = total
        # output net: this block's part of the atomic energies
        y = _atoms_stack(new, flat, table, layers, blk[BLOCK_OUT], blk[BLOCK_N_OUT], zatom[d], blk[BLOCK_Z_OUT], act)
        units = _tensor(flat, table, layers[blk[BLOCK_UNITS], 0])
        for k in range(y.shape[0]):
            wk = units[k, 0] * e_scale
            for a in range(n_atoms):
                atomic[a] += wk * y[k, a]
            if two:
                uk = units[k, 1]
                for a in range(n_atoms):
                    charge[a] += uk * y[k, a]
        # residual update: prop_{d+1} = prop_d R + new (R = identity when the widths agree)
        nxt = np.empty((n_new, n_atoms), zpair.dtype)
        if blk[BLOCK_RESIDUAL] >= 0:
            res = _tensor(flat, table, layers[blk[BLOCK_RESIDUAL], 0])
            _tile_matmul(prop, res, nxt, prop.shape[0], n_new)
            for c in range(n_new):
                for a in range(n_atoms):
                    nxt[c, a] += new[c, a]
        else:
            for c in range(n_new):
                for a in range(n_atoms):
                    nxt[c, a] = prop[c, a] + new[c, a]
        prop = nxt
    # ---- reverse pass
    for p in range(n_pairs):
        grad_r[p] = 0.0
    g_next = np.zeros((blocks[depth - 1, BLOCK_WIDTH_OUT], n_atoms), zpair.dtype)  # dE/d prop_{d+1}
    for d in range(depth - 1, -1, -1):
        blk = blocks[d]
        n_new = blk[BLOCK_WIDTH_OUT]
        n_prop = blk[BLOCK_WIDTH_IN]
        units = _tensor(flat, table, layers[blk[BLOCK_UNITS], 0])
        gy = np.empty((units.shape[0], n_atoms), zpair.dtype)
        for k in range(units.shape[0]):
            wk = units[k, 0] * e_scale
            for a in range(n_atoms):
                gy[k, a] = wk
            if two:
                uk = units[k, 1]
                for a in range(n_atoms):
                    gy[k, a] += uk * charge_seed[a]
        gy = _atoms_stack_back(gy, flat, table, layers, blk[BLOCK_OUT], blk[BLOCK_N_OUT], zatom[d], blk[BLOCK_Z_OUT],
                               act)
        gnew = np.empty((n_atoms, n_new), zpair.dtype)  # atom-major, for the pair tiles
        for a in range(n_atoms):
            for c in range(n_new):
                gnew[a, c] = gy[c, a] + g_next[c, a]
        # dE/d prop_d through the residual (or the identity)
        g_prop = np.empty((n_prop, n_atoms), zpair.dtype)
        if blk[BLOCK_RESIDUAL] >= 0:
            res = _tensor(flat, table, layers[blk[BLOCK_RESIDUAL], 0])
            _tile_matmul_t(g_next, res, g_prop, n_prop, n_new)
        else:
            for k in range(n_prop):
                for a in range(n_atoms):
                    g_prop[k, a] = g_next[k, a]
        first = layers[blk[BLOCK_PI]]
        kernel = _tensor(flat, table, first[0])
        n_first = kernel.shape[1]
        for chunk in prange(n_chunks):
            ga = buf[chunk, :n_atoms, :n_first]
            gb = buf[chunk, n_atoms:2 * n_atoms, :n_first]
            for a in range(n_atoms):
                for c in range(n_first):
                    ga[a, c] = 0.0
                    gb[a, c] = 0.0
            scratch = np.empty((5, codes[CODE_WIDTH], n_t), zpair.dtype)
            for tile in range(chunk * tiles_per_chunk, min(n_tiles, (chunk + 1) * tiles_per_chunk)):
                _pair_backward(tile, n_pairs, pair_i, pair_j, basis[tile], dbasis[tile], pa[d], pb[d], flat,
                               table, layers, blk, act, zpair[d, tile], gnew, scratch, ga, gb, grad_r)
        if d == 0:
            break  # the one-hot input has no gradient to pass on
        g_first = np.empty((2, n_first, n_atoms), zpair.dtype)  # dE/d pa, dE/d pb
        for a in prange(n_atoms):  # the threads' sums, per atom in parallel as above
            for c in range(n_first):
                total_a = buf[0, a, c]
                total_b = buf[0, n_atoms + a, c]
                for chunk in range(1, n_chunks):
                    total_a += buf[chunk, a, c]
                    total_b += buf[chunk, n_atoms + a, c]
                g_first[0, c, a] = total_a
                g_first[1, c, a] = total_b
        n_pp = kernel.shape[0] // 2
        gpp = np.empty((n_pp, n_atoms), zpair.dtype)
        _tile_matmul_t(g_first[0], kernel[:n_pp], gpp, n_pp, n_first)
        _tile_matmul_t(g_first[1], kernel[n_pp:], gpp, n_pp, n_first, True)
        gpp = _atoms_stack_back(gpp, flat, table, layers, blk[BLOCK_PP], blk[BLOCK_N_PP], zatom[d], 0, act)
        g_next = np.empty((n_prop, n_atoms), zpair.dtype)
        for k in range(n_prop):
            for a in range(n_atoms):
                g_next[k, a] = g_prop[k, a] + gpp[k, a]
    return n_tiles


def _serial_build(dispatcher, name):
    """The same kernel compiled without ``parallel`` (``prange`` runs as ``range``), under its own
    name so that Numba caches the two builds apart."""
    py = getattr(dispatcher, "py_func", dispatcher)  # a plain function under NUMBA_DISABLE_JIT
    func = types.FunctionType(py.__code__, py.__globals__, name, py.__defaults__, py.__closure__)
    func.__qualname__ = name
    func.__doc__ = py.__doc__
    return _jit()(func)


_evaluate_serial = _serial_build(_evaluate, "_evaluate_serial") if numba is not None else None


@_jit()
def _forces_virial(n_pairs, pair_i, pair_j, diff, dist, grad_r, forces, virial):
    """F_i = Σ_{p: i} g_p − Σ_{p: j} g_p and the virial Σ_p diff_p ⊗ g_p, with g_p = dE/d diff_p."""
    forces[:, :] = 0.0
    virial[:, :] = 0.0
    for p in range(n_pairs):
        i, j = pair_i[p], pair_j[p]
        scale = grad_r[p] / dist[p]
        for a in range(3):
            g = scale * diff[p, a]
            forces[i, a] += g
            forces[j, a] -= g
            for b in range(3):
                virial[b, a] += diff[p, b] * g


# ------------------------------------------------------------------ Python side
def available():
    """Whether Numba is installed (the engine needs it)."""
    return numba is not None
