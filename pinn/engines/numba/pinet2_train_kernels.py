"""PiNet2's training gradients in Numba kernels: the weight gradient of the energy and force loss.

The identity is :mod:`pinn.engines.numba.train_kernels`' (PiNet's): with the energies' seeds c_a = ∂L/∂E_s of
each atom's structure and the displacements w = −∂L/∂F per atom,

    ∂L/∂θ = ∂/∂θ (Σ_a c_a E_a + Ė),   Ė = Σ_a w_a · ∂E/∂x_a,

the weight derivative of the energies and of the energy's directional derivative along w.  One kernel computes
it (:func:`loss_gradients`): the network forward once with every value carrying its tangent along w (the pair
vectors' tangent is ḋ_p = w_j − w_i), then one reverse pass through the values and the tangents together, seeded
with c_a at each atomic energy and 1 at its tangent.  Through a tanh layer y = tanh(z), ẏ = (1 − y²) ż, with
the adjoints ȳ (of the value) and ẏ̄ (of the tangent):

    z̄ = (1 − y²) ȳ − 2 y ẏ ẏ̄,   ż̄ = (1 − y²) ẏ̄,   W̄ += x z̄ᵀ + ẋ ż̄ᵀ,  b̄ += Σ z̄,  (x̄, ẋ̄) = W (z̄, ż̄);

through a product z = a b (the pair terms, the dot products, the scaled residual updates):
ā = z̄ b + ż̄ ḃ, ǡ = ż̄ b (and the same with a and b swapped).  The geometry (the radial basis, u and its
rank-2 components) does not depend on the weights: its tangent enters the forward pass, and no adjoint of it is
needed, hence no second derivative of the basis or the cutoff.

Layout: a value and its tangent are one array of doubled columns, [rows, 2n] with the n values first (n: the
atoms, or a tile's pairs), so that every linear map (the dense layers' products, the channel mixings, the
gathers and sums by atom) handles both in one pass; the weight gradients of a linear map are one product over
the doubled columns.  Pair work runs in tiles of the MD engine's size, split in chunks over the threads, each
chunk with its own weight-gradient row and per-atom sums, added up in chunk order.  The reverse pass reads each
tile's forward from ``kept_tiles`` where the forward pass kept it (a bounded number of tiles per chunk,
:data:`pinn.engines.pinet2_passes.KEPT_BYTES`), and computes it again from the per-atom inputs kept per block
for the tiles past that, so that the memory stays bounded: per atom and per thread beyond the kept tiles.

Supported (:func:`pinn.engines.lowering.refusal` names the rest): PiNet2 of rank 1, 3 or 5, ``weighted`` either
way, tanh activations, at least one hidden PI layer, one output per atom.
"""
import math

import numpy as np

try:
    from numba import prange
except ImportError:  # pragma: no cover - numba is a dependency
    prange = range

from pinn.engines.numba.layout import (B2_II, B2_MIX, B2_N_II, B2_N_INTER, B2_N_MIX, B2_N_OUT, B2_N_PI, B2_N_PP,
                                       B2_OUT, B2_PATH, B2_PI, B2_PP, B2_RESIDUAL, B2_UNITS, CODE_ACT,
                                       CODE_N_BASIS, LAYER_BIAS, LAYER_KERNEL, PATH_COLUMNS, PATH_DOT_A,
                                       PATH_DOT_B, PATH_PAIR_I, PATH_PAIR_J, PATH_PP, TANH_FAST)
from pinn.engines.numba.md_kernels import (_jit, _serial_build, _tanh32, _tensor, _tile_matmul, _tile_matmul_t,
                                           radial_basis_tile)
from pinn.engines.numba.pinet2_kernels import (_SQRT2, _SQRT6, _mix, _mix_back, _path_sides, _stack_rows, _sum_chunks,
                                               _transpose, len_types)
from pinn.engines.numba.train_kernels import _outer_acc


@_jit(inline="always")
def _tanh(z, code):
    if code == TANH_FAST:
        return _tanh32(z)
    return math.tanh(z)


# ------------------------------------------------------------------ dense layers on values and tangents
@_jit()
def _stack(Y, row, n_in, flat, table, layers, start, count, n, code):
    """Tanh layers ``start`` … ``start + count − 1`` on the rows ``row`` … ``row + n_in − 1`` of ``Y`` [rows, 2n]
    (values, then tangents), each layer's output written to the rows after its input; returns the row where the
    last output starts."""
    for layer in range(start, start + count):
        w = _tensor(flat, table, layers[layer, LAYER_KERNEL])
        n_out = w.shape[1]
        y = Y[row + n_in:row + n_in + n_out]
        _tile_matmul(Y[row:row + n_in], w, y, n_in, n_out)
        boff = table[layers[layer, LAYER_BIAS], 0]
        for c in range(n_out):
            bc = flat[boff + c]
            for t in range(n):
                v = _tanh(y[c, t] + bc, code)
                y[c, t] = v
                y[c, n + t] = y[c, n + t] * (1.0 - v * v)
        row += n_in
        n_in = n_out
    return row


@_jit()
def _tanh_back(y, g, n):
    """Through y = tanh(z) on doubled columns: ``g`` holds (ȳ, ẏ̄) on entry, (z̄, ż̄) after."""
    for c in range(g.shape[0]):
        for t in range(n):
            v = y[c, t]
            d = 1.0 - v * v
            a1 = g[c, n + t]
            g[c, t] = d * g[c, t] - 2.0 * v * y[c, n + t] * a1
            g[c, n + t] = d * a1


@_jit()
def _bias_grad(g, n, gflat, boff):
    """gflat[boff + c] += Σ over the value columns of g[c]."""
    for c in range(g.shape[0]):
        s = g[c, 0] * 0.0
        for t in range(n):
            s += g[c, t]
        gflat[boff + c] += s


@_jit()
def _stack_back(Y, row, n_in, g, flat, table, layers, start, count, n, gflat):
    """The reverse of :func:`_stack` (same ``Y``, ``row``, ``n_in``): ``g`` [n_out, 2n], the adjoints of the last
    output (overwritten); adds the weight and bias gradients to ``gflat``; returns the adjoints of the input."""
    end = row + n_in + _stack_rows(layers, start, count)
    for layer in range(start + count - 1, start - 1, -1):
        w = _tensor(flat, table, layers[layer, LAYER_KERNEL])
        k_in, k_out = w.shape
        _tanh_back(Y[end - k_out:end], g, n)
        x = Y[end - k_out - k_in:end - k_out]
        _outer_acc(x, g, _tensor(gflat, table, layers[layer, LAYER_KERNEL]), k_in, k_out)
        _bias_grad(g, n, gflat, table[layers[layer, LAYER_BIAS], 0])
        gx = np.empty((k_in, g.shape[1]), g.dtype)
        _tile_matmul_t(g, w, gx, k_in, k_out)
        g = gx
        end -= k_out
    return g


@_jit()
def _mix_outer(x, g, gw, m):
    """gw += Σ_k x_k g_kᵀ over the columns: a channel mixing's weight gradient (m stacked components)."""
    n_in, n_out = gw.shape
    for k in range(m):
        _outer_acc(x[k * n_in:(k + 1) * n_in], g[k * n_out:(k + 1) * n_out], gw, n_in, n_out)


@_jit()
def _product_back(gz, b, n, ga):
    """ga += the adjoints of a in z = a b (elementwise, doubled columns): (z̄ b + ż̄ ḃ, ż̄ b)."""
    for c in range(gz.shape[0]):
        for t in range(n):
            ga[c, t] += gz[c, t] * b[c, t] + gz[c, n + t] * b[c, n + t]
            ga[c, n + t] += gz[c, n + t] * b[c, t]


# ------------------------------------------------------------------ pair tiles
@_jit()
def tile_rows(layers, blk, n_parts, n_basis):
    """Rows of a tile's buffer [rows, 2 tile]: the offsets of the first PI layer's output, the last hidden PI
    output, the basis contraction, the interactions, the vector and the tensor pair factors, and the total
    (int64 [7])."""
    n_inter = blk[B2_N_INTER]
    n_first = layers[blk[B2_PI], 3]
    mid = _stack_rows(layers, blk[B2_PI] + 1, blk[B2_N_PI] - 2)
    last = _tensor_rows(layers, blk[B2_PI] + blk[B2_N_PI] - 1)
    n_pi = layers[blk[B2_PI] + blk[B2_N_PI] - 1, 3] // n_basis
    o = np.zeros(7, np.int64)
    o[1] = n_first + mid - last  # the contraction's input: the last hidden output
    o[2] = n_first + mid
    o[3] = o[2] + n_pi + _stack_rows(layers, blk[B2_II], blk[B2_N_II]) - n_parts * n_inter
    o[4] = o[3] + n_parts * n_inter
    o[5] = o[4] + (3 * n_inter if blk[B2_PATH + PATH_PP] >= 0 else 0)
    o[6] = o[5] + (5 * n_inter if blk[B2_PATH + PATH_COLUMNS + PATH_PP] >= 0 else 0)
    return o


@_jit()
def _tensor_rows(layers, layer):
    """The input width of a layer: the previous layer's output (the PI stack's layers follow each other)."""
    return layers[layer - 1, 3]


@_jit()
def _tile_geometry(p0, n_valid, diff, dist, ddiff, codes, scal, geo):
    """``geo`` [n_basis + 8, 2 tile] of the pairs ``p0`` … ``p0 + n_valid − 1`` (zero past them): the radial
    basis e_b, u (3 rows) and its rank-2 components (5 rows), values then tangents along ``ddiff``."""
    n_basis = codes[CODE_N_BASIS]
    n_t = geo.shape[1] // 2
    dt = geo.dtype
    dist_t = np.ones(n_t, dt)
    for t in range(n_valid):
        dist_t[t] = dist[p0 + t]
    e = np.zeros((n_basis, n_t), dt)
    de = np.zeros((n_basis, n_t), dt)
    radial_basis_tile(0, n_valid, dist_t, codes, scal, e, de)
    for r in range(geo.shape[0]):
        for t in range(2 * n_t):
            geo[r, t] = 0.0
    u0 = n_basis
    for t in range(n_valid):
        p = p0 + t
        r = dist[p]
        x = diff[p, 0] / r
        y = diff[p, 1] / r
        z = diff[p, 2] / r
        r_dot = x * ddiff[p, 0] + y * ddiff[p, 1] + z * ddiff[p, 2]
        xd = (ddiff[p, 0] - x * r_dot) / r
        yd = (ddiff[p, 1] - y * r_dot) / r
        zd = (ddiff[p, 2] - z * r_dot) / r
        for b in range(n_basis):
            geo[b, t] = e[b, t]
            geo[b, n_t + t] = de[b, t] * r_dot
        geo[u0, t] = x
        geo[u0 + 1, t] = y
        geo[u0 + 2, t] = z
        geo[u0, n_t + t] = xd
        geo[u0 + 1, n_t + t] = yd
        geo[u0 + 2, n_t + t] = zd
        geo[u0 + 3, t] = _SQRT2 * x * y
        geo[u0 + 4, t] = _SQRT2 * x * z
        geo[u0 + 5, t] = _SQRT2 * y * z
        geo[u0 + 6, t] = (x * x - y * y) / _SQRT2
        geo[u0 + 7, t] = (2.0 * z * z - x * x - y * y) / _SQRT6
        geo[u0 + 3, n_t + t] = _SQRT2 * (xd * y + x * yd)
        geo[u0 + 4, n_t + t] = _SQRT2 * (xd * z + x * zd)
        geo[u0 + 5, n_t + t] = _SQRT2 * (yd * z + y * zd)
        geo[u0 + 6, n_t + t] = _SQRT2 * (x * xd - y * yd)
        geo[u0 + 7, n_t + t] = (4.0 * z * zd - 2.0 * x * xd - 2.0 * y * yd) / _SQRT6


@_jit()
def _tile_path_forward(side_i, side_j, first, dirs, inter_t, part, n_inter, pair_i, pair_j, n_valid, n_atoms, add, sums,
                       pair):
    """The pair factors B = u_k (+ P_i W + P_j W' or P_j) of one equivariant path into ``pair`` [2 tile, m·C]
    (pair-major: each pair's values, then the tangents), and with ``add`` the pair terms B · I_part summed by
    first atom into ``sums`` [2 n_atoms, m·C].  ``dirs`` [m, 2 tile]: u or its rank-2 components; ``inter_t``
    [2 tile, ·]: the interactions, pair-major; the sides atom-major [2 n_atoms, m·C] (``side_i`` without columns:
    unweighted)."""
    m = dirs.shape[0]
    n_t = dirs.shape[1] // 2
    weighted = side_i.shape[1] > 0
    n = np.uint64(n_inter)  # unsigned column indices: no wraparound test per element, so the loops vectorise
    q0 = np.uint64(part) * n
    for t in range(n_t):
        i = pair_i[t]
        j = pair_j[t]
        ti = n_t + t
        for k in range(m):
            dv = dirs[k, t]
            dd = dirs[k, ti]
            r0 = np.uint64(k) * n
            if first:
                for c in range(n):
                    pair[t, r0 + c] = dv
                    pair[ti, r0 + c] = dd
            elif weighted:
                for c in range(n):
                    pair[t, r0 + c] = dv + side_i[i, r0 + c] + side_j[j, r0 + c]
                    pair[ti, r0 + c] = dd + side_i[n_atoms + i, r0 + c] + side_j[n_atoms + j, r0 + c]
            else:
                for c in range(n):
                    pair[t, r0 + c] = dv + side_j[j, r0 + c]
                    pair[ti, r0 + c] = dd + side_j[n_atoms + j, r0 + c]
            if add and t < n_valid:
                ni = n_atoms + i
                for c in range(n):
                    bv = pair[t, r0 + c]
                    iv = inter_t[t, q0 + c]
                    sums[i, r0 + c] += bv * iv
                    sums[ni, r0 + c] += pair[ti, r0 + c] * iv + bv * inter_t[ti, q0 + c]


@_jit()
def _tile_forward(sides, first, pair_i, pair_j, n_valid, n_atoms, geo, flat, table, layers, blk, code, o, buf, add,
                  sums, sums3, sums5):
    """One tile of a block forward, values and tangents, into ``buf`` (rows ``o``, :func:`tile_rows`); with
    ``add`` its interactions and pair terms summed by first atom into ``sums``, ``sums3``, ``sums5``
    [2 n_atoms, ·].  ``sides``: the first PI layer's two per-atom sides and the paths' (atom-major, doubled
    rows: the atoms' values, then their tangents)."""
    side_a, side_b, side3_i, side3_j, side5_i, side5_j = sides
    n_t = geo.shape[1] // 2
    n_basis = geo.shape[0] - 8
    n_first = side_a.shape[1]
    for c in range(n_first):
        for t in range(2 * n_t):
            buf[c, t] = 0.0
    for t in range(n_valid):
        i = pair_i[t]
        j = pair_j[t]
        for c in range(n_first):
            buf[c, t] = side_a[i, c] + side_b[j, c]
            buf[c, n_t + t] = side_a[n_atoms + i, c] + side_b[n_atoms + j, c]
    for c in range(n_first):
        for t in range(n_t):
            v = _tanh(buf[c, t], code)
            buf[c, t] = v
            buf[c, n_t + t] = buf[c, n_t + t] * (1.0 - v * v)
    _stack(buf, 0, n_first, flat, table, layers, blk[B2_PI] + 1, blk[B2_N_PI] - 2, n_t, code)
    last = layers[blk[B2_PI] + blk[B2_N_PI] - 1]
    kernel = _tensor(flat, table, last[LAYER_KERNEL])
    n_h = kernel.shape[0]
    n_pi = kernel.shape[1] // n_basis
    boff = table[last[LAYER_BIAS], 0]
    h = buf[o[1]:o[1] + n_h]
    inter_pi = buf[o[2]:o[2] + n_pi]
    for c in range(n_pi):
        for t in range(2 * n_t):
            inter_pi[c, t] = 0.0
    u = np.empty((n_pi, 2 * n_t), buf.dtype)
    for b in range(n_basis):
        _tile_matmul(h, kernel[:, b::n_basis], u, n_h, n_pi)
        for c in range(n_pi):
            bc = flat[boff + c * n_basis + b]
            for t in range(n_t):
                uv = u[c, t] + bc
                ev = geo[b, t]
                inter_pi[c, t] += uv * ev
                inter_pi[c, n_t + t] += u[c, n_t + t] * ev + uv * geo[b, n_t + t]
    _stack(buf, o[2], n_pi, flat, table, layers, blk[B2_II], blk[B2_N_II], n_t, code)
    n_inter = blk[B2_N_INTER]
    if not add and o[6] == o[4]:
        return
    inter_t = _transpose(buf[o[3]:o[4]])  # pair-major: each pair's interactions are one contiguous row
    if add:
        columns = np.uint64(o[4] - o[3])  # unsigned: no wraparound test per element, so the loop vectorises
        for t in range(n_valid):
            i = pair_i[t]
            values = inter_t[t]
            tangents = inter_t[n_t + t]
            for r in range(columns):
                sums[i, r] += values[r]
                sums[n_atoms + i, r] += tangents[r]
    if o[6] == o[4]:
        return
    n_parts = (o[4] - o[3]) // n_inter
    if o[5] > o[4]:
        _tile_path_forward(side3_i, side3_j, first, geo[n_basis:n_basis + 3], inter_t, 1, n_inter, pair_i, pair_j,
                           n_valid, n_atoms, add, sums3, buf[o[4]:o[5]].reshape((2 * n_t, 3 * n_inter)))
    if o[6] > o[5]:
        _tile_path_forward(side5_i, side5_j, first, geo[n_basis + 3:n_basis + 8], inter_t, n_parts - 1, n_inter,
                           pair_i, pair_j, n_valid, n_atoms, add, sums5,
                           buf[o[5]:o[6]].reshape((2 * n_t, 5 * n_inter)))


@_jit()
def _tile_path_back(g_sums, weighted, first, pair, inter_t, part, n_inter, pair_i, pair_j, n_valid, n_atoms,
                    g_inter, by_i, by_j):
    """The reverse of :func:`_tile_path_forward`'s sums (pair-major, as there): adds the adjoints of I_part to
    ``g_inter`` [2 tile, ·] and, past the first block, of the pair factors into ``by_j`` (and ``by_i``,
    ``weighted``) by atom."""
    m = pair.shape[1] // n_inter
    n_t = pair.shape[0] // 2
    n = np.uint64(n_inter)  # unsigned column indices, as in _tile_path_forward
    q0 = np.uint64(part) * n
    n_rows = np.uint64(m) * n
    g_pair = np.empty(2 * m * n_inter, pair.dtype)
    for t in range(n_valid):
        i = pair_i[t]
        j = pair_j[t]
        ti = n_t + t
        ni = n_atoms + i
        for k in range(m):
            r0 = np.uint64(k) * n
            for c in range(n):
                xv = g_sums[i, r0 + c]
                xt = g_sums[ni, r0 + c]
                bv = pair[t, r0 + c]
                iv = inter_t[t, q0 + c]
                g_inter[t, q0 + c] += xv * bv + xt * pair[ti, r0 + c]
                g_inter[ti, q0 + c] += xt * bv
                g_pair[r0 + c] = xv * iv + xt * inter_t[ti, q0 + c]
                g_pair[n_rows + r0 + c] = xt * iv
        if not first:
            nj = n_atoms + j
            for r in range(n_rows):
                by_j[j, r] += g_pair[r]
                by_j[nj, r] += g_pair[n_rows + r]
            if weighted:
                for r in range(n_rows):
                    by_i[i, r] += g_pair[r]
                    by_i[ni, r] += g_pair[n_rows + r]


@_jit()
def _tile_backward(g_sums, sides, first, pair_i, pair_j, n_valid, n_atoms, geo, flat, table, layers, blk, o, buf,
                   gw, backs):
    """The reverse of one tile of :func:`_tile_forward` (its ``buf`` filled): from the adjoints of the per-atom
    sums (``g_sums``: three atom-major arrays [2 n_atoms, ·]), adds the pair layers' weight gradients to ``gw``
    and the adjoints of the per-atom sides to ``backs`` (the first PI layer's two, the paths' four)."""
    g_sum, g_sum3, g_sum5 = g_sums
    by_a, by_b, by3_i, by3_j, by5_i, by5_j = backs
    n_t = buf.shape[1] // 2
    n_basis = geo.shape[0] - 8
    n_inter = blk[B2_N_INTER]
    n_cols = o[4] - o[3]
    n_parts = n_cols // n_inter
    g_inter_t = np.zeros((2 * n_t, n_cols), buf.dtype)  # pair-major, as the pair terms' reverse adds to it
    columns = np.uint64(n_cols)
    for t in range(n_valid):
        i = pair_i[t]
        for r in range(columns):
            g_inter_t[t, r] = g_sum[i, r]
            g_inter_t[n_t + t, r] = g_sum[n_atoms + i, r]
    if o[6] > o[4]:
        inter_t = _transpose(buf[o[3]:o[4]])
        if o[5] > o[4]:
            _tile_path_back(g_sum3, sides[2].shape[1] > 0, first, buf[o[4]:o[5]].reshape((2 * n_t, 3 * n_inter)),
                            inter_t, 1, n_inter, pair_i, pair_j, n_valid, n_atoms, g_inter_t, by3_i, by3_j)
        if o[6] > o[5]:
            _tile_path_back(g_sum5, sides[4].shape[1] > 0, first, buf[o[5]:o[6]].reshape((2 * n_t, 5 * n_inter)),
                            inter_t, n_parts - 1, n_inter, pair_i, pair_j, n_valid, n_atoms, g_inter_t, by5_i, by5_j)
    g_inter = _transpose(g_inter_t)
    last = layers[blk[B2_PI] + blk[B2_N_PI] - 1]
    kernel = _tensor(flat, table, last[LAYER_KERNEL])
    n_h = kernel.shape[0]
    n_pi = kernel.shape[1] // n_basis
    g_pi = _stack_back(buf, o[2], n_pi, g_inter, flat, table, layers, blk[B2_II], blk[B2_N_II], n_t, gw)
    # the basis contraction I_c = Σ_b (h K_b + β_b)_c e_b: Ū_b = Ī e_b + İ̄ ė_b, its tangent's İ̄ e_b
    h = buf[o[1]:o[1] + n_h]
    g_kernel = _tensor(gw, table, last[LAYER_KERNEL])
    boff = table[last[LAYER_BIAS], 0]
    g_h = np.zeros((n_h, 2 * n_t), buf.dtype)
    g_u = np.empty((n_pi, 2 * n_t), buf.dtype)
    for b in range(n_basis):
        for c in range(n_pi):
            s = g_u[0, 0] * 0.0
            for t in range(n_t):
                av = g_pi[c, t]
                at = g_pi[c, n_t + t]
                ev = geo[b, t]
                g_u[c, t] = av * ev + at * geo[b, n_t + t]
                g_u[c, n_t + t] = at * ev
                s += g_u[c, t]
            gw[boff + c * n_basis + b] += s
        _outer_acc(h, g_u, g_kernel[:, b::n_basis], n_h, n_pi)
        _tile_matmul_t(g_u, kernel[:, b::n_basis], g_h, n_h, n_pi, True)
    n_first = side_width(sides)
    g_first = _stack_back(buf, 0, n_first, g_h, flat, table, layers, blk[B2_PI] + 1, blk[B2_N_PI] - 2, n_t, gw)
    _tanh_back(buf[:n_first], g_first, n_t)
    for t in range(n_valid):
        i = pair_i[t]
        j = pair_j[t]
        for c in range(n_first):
            gv = g_first[c, t]
            gt = g_first[c, n_t + t]
            by_a[i, c] += gv
            by_b[j, c] += gv
            by_a[n_atoms + i, c] += gt
            by_b[n_atoms + j, c] += gt


@_jit()
def side_width(sides):
    """The first PI layer's width (of its per-atom sides)."""
    return sides[0].shape[1]


# ------------------------------------------------------------------ per atom
@_jit()
def _first_sides(p1, flat, table, layers, blk, n):
    """The first PI layer's per-atom sides [P_i, P_j] W + b = side_a[i] + side_b[j], atom-major with doubled rows
    ([2n, n_first] each; the bias on the values of side_a)."""
    n_in = p1.shape[0]
    first = layers[blk[B2_PI]]
    w1 = _tensor(flat, table, first[LAYER_KERNEL])
    n_first = w1.shape[1]
    side_a = np.empty((n_first, 2 * n), p1.dtype)
    side_b = np.empty((n_first, 2 * n), p1.dtype)
    _tile_matmul(p1, w1[:n_in], side_a, n_in, n_first)
    _tile_matmul(p1, w1[n_in:], side_b, n_in, n_first)
    bias = table[first[LAYER_BIAS], 0]
    for c in range(n_first):
        for a in range(n):
            side_a[c, a] += flat[bias + c]
    return _transpose(side_a), _transpose(side_b)


@_jit()
def _path_atoms(summed, flat, table, layers, blk, path, m, n):
    """V = (Σ_j X) W_pp, its two dot mixings and the dot products D = Σ_k a_k b_k, values and tangents:
    (V, a, b, D)."""
    col = B2_PATH + PATH_COLUMNS * path
    dt = summed.dtype
    w_pp = _tensor(flat, table, layers[blk[col + PATH_PP], LAYER_KERNEL])
    n_out = w_pp.shape[1]
    v = np.empty((m * n_out, 2 * n), dt)
    _mix(summed, w_pp, m, v)
    if blk[col + PATH_DOT_A] >= 0:
        mixed_a = np.empty((m * n_out, 2 * n), dt)
        mixed_b = np.empty((m * n_out, 2 * n), dt)
        _mix(v, _tensor(flat, table, layers[blk[col + PATH_DOT_A], LAYER_KERNEL]), m, mixed_a)
        _mix(v, _tensor(flat, table, layers[blk[col + PATH_DOT_B], LAYER_KERNEL]), m, mixed_b)
    else:
        mixed_a = v
        mixed_b = v
    dots = np.zeros((n_out, 2 * n), dt)
    for k in range(m):
        for c in range(n_out):
            r = k * n_out + c
            for a in range(n):
                av = mixed_a[r, a]
                bv = mixed_b[r, a]
                dots[c, a] += av * bv
                dots[c, n + a] += mixed_a[r, n + a] * bv + av * mixed_b[r, n + a]
    return v, mixed_a, mixed_b, dots


@_jit()
def _path_atoms_back(g_v, g_dots, summed, v, mixed_a, mixed_b, flat, table, layers, blk, path, n, gflat):
    """The reverse of :func:`_path_atoms`: from the adjoints of V (``g_v``, added to) and of D, the weight
    gradients into ``gflat``; returns the adjoints of Σ_j X [m·C, 2n]."""
    col = B2_PATH + PATH_COLUMNS * path
    dt = v.dtype
    w_pp = _tensor(flat, table, layers[blk[col + PATH_PP], LAYER_KERNEL])
    n_out = w_pp.shape[1]
    m = v.shape[0] // n_out
    g_dots_m = np.empty((m * n_out, 2 * n), dt)
    for k in range(m):
        g_dots_m[k * n_out:(k + 1) * n_out] = g_dots
    if blk[col + PATH_DOT_A] >= 0:
        t_a = np.zeros((m * n_out, 2 * n), dt)
        t_b = np.zeros((m * n_out, 2 * n), dt)
        _product_back(g_dots_m, mixed_b, n, t_a)
        _product_back(g_dots_m, mixed_a, n, t_b)
        for tid_col, t_x in ((PATH_DOT_A, t_a), (PATH_DOT_B, t_b)):
            layer = layers[blk[col + tid_col], LAYER_KERNEL]
            _mix_outer(v, t_x, _tensor(gflat, table, layer), m)
            _mix_back(t_x, _tensor(flat, table, layer), m, g_v, True)
    else:
        twice = np.empty_like(v)
        for r in range(v.shape[0]):
            for a in range(2 * n):
                twice[r, a] = 2.0 * v[r, a]
        _product_back(g_dots_m, twice, n, g_v)
    _mix_outer(summed, g_v, _tensor(gflat, table, layers[blk[col + PATH_PP], LAYER_KERNEL]), m)
    g_summed = np.empty((summed.shape[0], 2 * n), dt)
    _mix_back(g_v, w_pp, m, g_summed)
    return g_summed


@_jit()
def _scaled_sum(p, v, scales, part, n_inter, n):
    """p + V · S_part per channel (values and tangents): the residual update of P3 or P5."""
    out = np.empty_like(p)
    m = p.shape[0] // n_inter
    for k in range(m):
        for c in range(n_inter):
            r = k * n_inter + c
            s = part * n_inter + c
            for a in range(n):
                out[r, a] = p[r, a] + v[r, a] * scales[s, a]
                out[r, n + a] = p[r, n + a] + v[r, n + a] * scales[s, a] + v[r, a] * scales[s, n + a]
    return out


@_jit()
def _scaled_sum_back(g_p, v, scales, part, n_inter, n, g_scales):
    """The reverse of :func:`_scaled_sum`'s product: the adjoints of V (returned) and of S_part (added to
    ``g_scales``) from those of the update ``g_p``."""
    g_v = np.zeros_like(v)
    m = v.shape[0] // n_inter
    for k in range(m):
        for c in range(n_inter):
            r = k * n_inter + c
            s = part * n_inter + c
            for a in range(n):
                gv = g_p[r, a]
                gt = g_p[r, n + a]
                g_v[r, a] += gv * scales[s, a] + gt * scales[s, n + a]
                g_v[r, n + a] += gt * scales[s, a]
                g_scales[s, a] += gv * v[r, a] + gt * v[r, n + a]
                g_scales[s, n + a] += gt * v[r, a]
    return g_v


@_jit()
def _copy_rows(dest, src):
    for r in range(src.shape[0]):
        for a in range(src.shape[1]):
            dest[r, a] = src[r, a]


# ------------------------------------------------------------------ a block per atom
# Helpers without ``parallel``: in the parallel kernel every array expression or allocation would be a parallel
# region of its own (a launch of the threads each: ~1.4 ms of a step of 32 ethanol molecules).
@_jit()
def _start(types, n_inputs, n_inter, dt_of, gchunk, gflat, atomic):
    """Zero the outputs and the chunks' gradients; the first block's inputs (P1 one-hot, P3 = P5 = 0)."""
    n = types.shape[0]
    gchunk[:, :] = 0.0
    gflat[:] = 0.0
    atomic[:] = 0.0
    p1 = np.zeros((n_inputs, 2 * n), dt_of.dtype)
    for a in range(n):
        p1[types[a], a] = 1.0
    return p1, np.zeros((3 * n_inter, 2 * n), dt_of.dtype), np.zeros((5 * n_inter, 2 * n), dt_of.dtype)


@_jit()
def _block_sides(p1, p3, p5, flat, table, layers, blk, n):
    """The per-atom sides of a block's pair work (atom-major, doubled rows): the first PI layer's two, the
    vector path's P_i W and P_j W' (or none and P_j), the tensor path's."""
    side_a, side_b = _first_sides(p1, flat, table, layers, blk, n)
    s3i, s3j = _path_sides(p3, flat, table, layers, blk, 0, 3)
    s5i, s5j = _path_sides(p5, flat, table, layers, blk, 1, 5)
    return side_a, side_b, _transpose(s3i), _transpose(s3j), _transpose(s5i), _transpose(s5j)


@_jit()
def _chunk_sums(n_chunks, n, width, dt_of):
    """Per-chunk per-atom sums, zero: [n_chunks, 2n, width]."""
    return np.zeros((n_chunks, 2 * n, width), dt_of.dtype)


@_jit()
def _atoms_forward(summed, summed3, summed5, p1, p3, p5, flat, table, layers, blk, code, n, e_scale, atomic):
    """A block's per-atom part, values and tangents, from the sums of its pair work ([·, 2n]: the interactions,
    the vector and the tensor pair terms): the PP, mixing and
    output nets, the paths' dot products; adds e_scale × the atomic energies (and tangents) to ``atomic``.
    Returns (what the reverse keeps: the nets' rows, the paths' sums, V and mixings; then P1', P3', P5')."""
    dt = flat.dtype
    n_inter = blk[B2_N_INTER]
    vectors = blk[B2_PATH + PATH_PP] >= 0
    tensors = blk[B2_PATH + PATH_COLUMNS + PATH_PP] >= 0
    n_parts = 1 + int(vectors) + int(tensors)
    n_sum = summed.shape[0]
    y_pp = np.empty((n_sum + _stack_rows(layers, blk[B2_PP], blk[B2_N_PP]), 2 * n), dt)
    _copy_rows(y_pp, summed)
    row_q = _stack(y_pp, 0, n_sum, flat, table, layers, blk[B2_PP], blk[B2_N_PP], n, code)
    n_pp = y_pp.shape[0] - row_q
    y_mix = np.empty((n_parts * n_pp + _stack_rows(layers, blk[B2_MIX], blk[B2_N_MIX]), 2 * n), dt)
    _copy_rows(y_mix, y_pp[row_q:])
    v3, a3, b3, v5, a5, b5 = p3, p3, p3, p5, p5, p5
    if vectors:
        v3, a3, b3, dots3 = _path_atoms(summed3, flat, table, layers, blk, 0, 3, n)
        _copy_rows(y_mix[n_pp:2 * n_pp], dots3)
    if tensors:
        v5, a5, b5, dots5 = _path_atoms(summed5, flat, table, layers, blk, 1, 5, n)
        _copy_rows(y_mix[(n_parts - 1) * n_pp:n_parts * n_pp], dots5)
    row_s = _stack(y_mix, 0, n_parts * n_pp, flat, table, layers, blk[B2_MIX], blk[B2_N_MIX], n, code)
    scales = y_mix[row_s:]
    y_out = np.empty((n_inter + _stack_rows(layers, blk[B2_OUT], blk[B2_N_OUT]), 2 * n), dt)
    _copy_rows(y_out, scales[:n_inter])
    row_y = _stack(y_out, 0, n_inter, flat, table, layers, blk[B2_OUT], blk[B2_N_OUT], n, code)
    units = _tensor(flat, table, layers[blk[B2_UNITS], LAYER_KERNEL])
    for k in range(units.shape[0]):
        wk = units[k, 0] * e_scale
        for a in range(2 * n):
            atomic[a] += wk * y_out[row_y + k, a]
    nxt = np.empty((n_inter, 2 * n), dt)
    if blk[B2_RESIDUAL] >= 0:
        _tile_matmul(p1, _tensor(flat, table, layers[blk[B2_RESIDUAL], LAYER_KERNEL]), nxt, p1.shape[0], n_inter)
        for c in range(n_inter):
            for a in range(2 * n):
                nxt[c, a] += scales[c, a]
    else:
        for c in range(n_inter):
            for a in range(2 * n):
                nxt[c, a] = p1[c, a] + scales[c, a]
    p3_next = _scaled_sum(p3, v3, scales, 1, n_inter, n) if vectors else p3
    p5_next = _scaled_sum(p5, v5, scales, n_parts - 1, n_inter, n) if tensors else p5
    return (y_pp, y_mix, y_out, summed3, v3, a3, b3, summed5, v5, a5, b5), nxt, p3_next, p5_next


@_jit()
def _atoms_backward(kept, g_p1, g_p3, g_p5, c_atom, flat, table, layers, blk, n, e_scale, gflat):
    """The reverse of :func:`_atoms_forward` (its kept arrays ``kept``), from the adjoints of P1', P3', P5' and
    the energies' seeds: adds the per-atom nets' weight gradients to ``gflat``; returns the adjoints of the
    per-atom sums of the pair work (atom-major [2n, ·]: the interactions, the vector and the tensor pair terms)."""
    dt = flat.dtype
    y_pp, y_mix, y_out, summed3, v3, a3, b3, summed5, v5, a5, b5 = kept
    n_inter = blk[B2_N_INTER]
    vectors = blk[B2_PATH + PATH_PP] >= 0
    tensors = blk[B2_PATH + PATH_COLUMNS + PATH_PP] >= 0
    n_parts = 1 + int(vectors) + int(tensors)
    n_sum = n_parts * n_inter
    n_pp = n_sum if blk[B2_N_PP] == 0 else layers[blk[B2_PP] + blk[B2_N_PP] - 1, 3]
    scales = y_mix[y_mix.shape[0] - n_parts * n_inter:]
    units = _tensor(flat, table, layers[blk[B2_UNITS], LAYER_KERNEL])
    g_units = _tensor(gflat, table, layers[blk[B2_UNITS], LAYER_KERNEL])
    n_y = units.shape[0]
    row_y = y_out.shape[0] - n_y
    g_y = np.empty((n_y, 2 * n), dt)
    for k in range(n_y):
        wk = units[k, 0] * e_scale
        s = g_y[0, 0] * 0.0
        for a in range(n):
            g_y[k, a] = wk * c_atom[a]
            g_y[k, n + a] = wk
            s += c_atom[a] * y_out[row_y + k, a] + y_out[row_y + k, n + a]
        g_units[k, 0] += e_scale * s
    g_s0 = _stack_back(y_out, 0, n_inter, g_y, flat, table, layers, blk[B2_OUT], blk[B2_N_OUT], n, gflat)
    g_scales = np.zeros((n_parts * n_inter, 2 * n), dt)
    for c in range(n_inter):
        for a in range(2 * n):
            g_scales[c, a] = g_s0[c, a] + g_p1[c, a]
    g_v3 = g_p3
    g_v5 = g_p5
    if vectors:
        g_v3 = _scaled_sum_back(g_p3, v3, scales, 1, n_inter, n, g_scales)
    if tensors:
        g_v5 = _scaled_sum_back(g_p5, v5, scales, n_parts - 1, n_inter, n, g_scales)
    g_mix_in = _stack_back(y_mix, 0, n_parts * n_pp, g_scales, flat, table, layers, blk[B2_MIX], blk[B2_N_MIX], n,
                           gflat)
    g_sum = _stack_back(y_pp, 0, n_sum, np.ascontiguousarray(g_mix_in[:n_pp]), flat, table, layers, blk[B2_PP],
                        blk[B2_N_PP], n, gflat)
    g_sum3 = g_p3
    g_sum5 = g_p5
    if vectors:
        g_sum3 = _path_atoms_back(g_v3, np.ascontiguousarray(g_mix_in[n_pp:2 * n_pp]), summed3, v3, a3, b3, flat,
                                  table, layers, blk, 0, n, gflat)
    if tensors:
        g_sum5 = _path_atoms_back(g_v5, np.ascontiguousarray(g_mix_in[(n_parts - 1) * n_pp:]), summed5, v5, a5, b5,
                                  flat, table, layers, blk, 1, n, gflat)
    return _transpose(g_sum), _transpose(g_sum3), _transpose(g_sum5)


@_jit()
def _sides_backward(backs, p1_in, p3_in, p5_in, g_p1, g_p3, g_p5, first_block, flat, table, layers, blk, n, gflat):
    """The reverse of :func:`_block_sides` and of the residual map, from the per-chunk adjoints of the sides
    (``backs``): the first PI layer's, the residual map's and the pair mixings' weight gradients into ``gflat``;
    adds the adjoints of P3 and P5 to ``g_p3``, ``g_p5``; returns the adjoints of P1 (the block's input)."""
    dt = flat.dtype
    n_inter = blk[B2_N_INTER]
    by_a = _sum_chunks(backs[0])
    by_b = _sum_chunks(backs[1])
    n_first = by_a.shape[0]
    first = layers[blk[B2_PI]]
    w1 = _tensor(flat, table, first[LAYER_KERNEL])
    g_w1 = _tensor(gflat, table, first[LAYER_KERNEL])
    n_in = p1_in.shape[0]
    _outer_acc(p1_in, by_a, g_w1[:n_in], n_in, n_first)
    _outer_acc(p1_in, by_b, g_w1[n_in:], n_in, n_first)
    _bias_grad(by_a, n, gflat, table[first[LAYER_BIAS], 0])
    g_prev = np.zeros((n_in, 2 * n), dt)
    if blk[B2_RESIDUAL] >= 0:
        res = layers[blk[B2_RESIDUAL], LAYER_KERNEL]
        _outer_acc(p1_in, g_p1, _tensor(gflat, table, res), n_in, n_inter)
        _tile_matmul_t(g_p1, _tensor(flat, table, res), g_prev, n_in, n_inter)
    else:
        _copy_rows(g_prev, g_p1)
    _tile_matmul_t(by_a, w1[:n_in], g_prev, n_in, n_first, True)
    _tile_matmul_t(by_b, w1[n_in:], g_prev, n_in, n_first, True)
    if not first_block:  # the first block's P3 and P5 are zero: no gradient through them
        if blk[B2_PATH + PATH_PP] >= 0:
            _path_sides_back(_sum_chunks(backs[2]), _sum_chunks(backs[3]), p3_in, flat, table, layers, blk, 0, 3,
                             g_p3, gflat)
        if blk[B2_PATH + PATH_COLUMNS + PATH_PP] >= 0:
            _path_sides_back(_sum_chunks(backs[4]), _sum_chunks(backs[5]), p5_in, flat, table, layers, blk, 1, 5,
                             g_p5, gflat)
    return g_prev


@_jit()
def _tile_buffer(kept_tiles, block, chunk, local, n_kept, scratch):
    """The forward buffer of a chunk's ``local``-th tile in ``block``: its slot in ``kept_tiles`` [depth,
    n_chunks · n_kept, rows, 2 tile] while ``local`` < n_kept, else ``scratch``."""
    if local < n_kept:
        return kept_tiles[block, chunk * n_kept + local]
    return scratch


@_jit()
def _add_chunks(gchunk, gflat):
    """gflat += Σ_chunk gchunk[chunk], in chunk order."""
    for chunk in range(gchunk.shape[0]):
        for q in range(gflat.shape[0]):
            gflat[q] += gchunk[chunk, q]


@_jit()
def tile_buffer_rows(layers, blocks, n_basis):
    """The rows of a tile's buffer (:func:`tile_rows`), the most of any block."""
    n_parts = 1 + int(blocks[0, B2_PATH + PATH_PP] >= 0) + int(blocks[0, B2_PATH + PATH_COLUMNS + PATH_PP] >= 0)
    rows = 1
    for d in range(blocks.shape[0]):
        rows = max(rows, tile_rows(layers, blocks[d], n_parts, n_basis)[6])
    return rows


# ------------------------------------------------------------------ the whole gradient
@_jit(parallel=True)
def loss_gradients(types, pair_i, pair_j, diff, dist, ddiff, flat, table, layers, blocks, codes, scal, c_atom, tile,
                   n_chunks, geometry, kept_tiles, gchunk, gflat, atomic):
    """∂/∂θ (Σ_a c_a E_a + Σ_a w_a · ∂E/∂x_a) of one batch (the loss gradient, module docstring).

    Args:
        types: [n_atoms] int64 indices into atom_types.
        pair_i, pair_j: [n_tiles · tile] int32 atoms of the pairs within the cutoff, then (any) atoms to the end of
            the last tile.
        diff: [n_pairs, 3] r_j + offset − r_i (Å); dist: [n_pairs] its length (Å); ddiff: [n_pairs, 3] its tangent
            w_j − w_i (Å per unit of the tangent).
        flat, table, layers, blocks, codes, scal: :meth:`pinn.engines.spec.PiNet2Spec.arrays`.
        c_atom: [n_atoms] the seed of each atom's energy (∂L/∂E of its structure, 1/eV × loss units).
        tile: pairs per tile; n_chunks: chunks of tiles (one per thread).
        geometry: [n_tiles, n_basis + 8, 2 tile] workspace.
        kept_tiles: [depth, n_chunks · n_kept, rows, 2 tile] workspace (rows: :func:`tile_buffer_rows`): the
            forward buffers of each chunk's first n_kept tiles, kept for the reverse pass; the chunk's other tiles
            are computed forward again there.  n_kept = 0 keeps none (the memory is then per atom and thread).
        gchunk: [n_chunks, len(flat)] workspace; gflat: [len(flat)] output, the gradient (zero where no weight).
        atomic: [2 n_atoms] output, e_scale × the atomic energies (eV) and their tangents.
    """
    n = types.shape[0]
    n_pairs = dist.shape[0]
    n_tiles = (n_pairs + tile - 1) // tile
    tiles_per_chunk = (n_tiles + n_chunks - 1) // n_chunks
    n_kept = kept_tiles.shape[1] // n_chunks  # tiles kept a chunk
    depth = blocks.shape[0]
    code = codes[CODE_ACT]
    e_scale = scal[2]
    dt = flat.dtype
    n_inter = blocks[0, B2_N_INTER]
    n_parts = 1 + int(blocks[0, B2_PATH + PATH_PP] >= 0) + int(blocks[0, B2_PATH + PATH_COLUMNS + PATH_PP] >= 0)
    w3 = 3 * n_inter * int(blocks[0, B2_PATH + PATH_PP] >= 0)
    w5 = 5 * n_inter * int(blocks[0, B2_PATH + PATH_COLUMNS + PATH_PP] >= 0)
    rows = tile_buffer_rows(layers, blocks, codes[CODE_N_BASIS])
    for k in prange(n_tiles):
        _tile_geometry(k * tile, min(tile, n_pairs - k * tile), diff, dist, ddiff, codes, scal, geometry[k])
    p1, p3, p5 = _start(types, len_types(blocks, layers, flat, table), n_inter, flat, gchunk, gflat, atomic)
    inputs = []
    sides_kept = []
    kept = []
    for d in range(depth):
        blk = blocks[d]
        o = tile_rows(layers, blk, n_parts, codes[CODE_N_BASIS])
        sides = _block_sides(p1, p3, p5, flat, table, layers, blk, n)
        sides_kept.append(sides)
        inputs.append((p1, p3, p5))
        sums0 = _chunk_sums(n_chunks, n, n_parts * n_inter, flat)
        sums3 = _chunk_sums(n_chunks, n, w3, flat)
        sums5 = _chunk_sums(n_chunks, n, w5, flat)
        for chunk in prange(n_chunks):
            scratch = np.empty((rows, 2 * tile), dt)
            for k in range(chunk * tiles_per_chunk, min(n_tiles, (chunk + 1) * tiles_per_chunk)):
                p0 = k * tile
                buf = _tile_buffer(kept_tiles, d, chunk, k - chunk * tiles_per_chunk, n_kept, scratch)
                _tile_forward(sides, d == 0, pair_i[p0:p0 + tile], pair_j[p0:p0 + tile], min(tile, n_pairs - p0), n,
                              geometry[k], flat, table, layers, blk, code, o, buf, True, sums0[chunk], sums3[chunk],
                              sums5[chunk])
        block_kept, p1, p3, p5 = _atoms_forward(_sum_chunks(sums0), _sum_chunks(sums3), _sum_chunks(sums5), p1, p3, p5,
                                                flat, table, layers, blk, code, n, e_scale, atomic)
        kept.append(block_kept)
    # ---- the reverse pass: the adjoints of values and tangents, the weight gradients
    g_p1 = np.zeros((n_inter, 2 * n), dt)
    g_p3 = np.zeros((3 * n_inter, 2 * n), dt)
    g_p5 = np.zeros((5 * n_inter, 2 * n), dt)
    for d in range(depth - 1, -1, -1):
        blk = blocks[d]
        o = tile_rows(layers, blk, n_parts, codes[CODE_N_BASIS])
        sides = sides_kept[d]
        g_sums = _atoms_backward(kept[d], g_p1, g_p3, g_p5, c_atom, flat, table, layers, blk, n, e_scale, gflat)
        n_first = sides[0].shape[1]
        backs = (_chunk_sums(n_chunks, n, n_first, flat), _chunk_sums(n_chunks, n, n_first, flat),
                 _chunk_sums(n_chunks, n, w3, flat), _chunk_sums(n_chunks, n, w3, flat),
                 _chunk_sums(n_chunks, n, w5, flat), _chunk_sums(n_chunks, n, w5, flat))
        for chunk in prange(n_chunks):
            scratch = np.empty((rows, 2 * tile), dt)
            for k in range(chunk * tiles_per_chunk, min(n_tiles, (chunk + 1) * tiles_per_chunk)):
                p0 = k * tile
                n_valid = min(tile, n_pairs - p0)
                local = k - chunk * tiles_per_chunk
                buf = _tile_buffer(kept_tiles, d, chunk, local, n_kept, scratch)
                if local >= n_kept:
                    _tile_forward(sides, d == 0, pair_i[p0:p0 + tile], pair_j[p0:p0 + tile], n_valid, n, geometry[k],
                                  flat, table, layers, blk, code, o, buf, False, backs[0][chunk], backs[2][chunk],
                                  backs[4][chunk])
                _tile_backward(g_sums, sides, d == 0, pair_i[p0:p0 + tile], pair_j[p0:p0 + tile], n_valid, n,
                               geometry[k], flat, table, layers, blk, o, buf, gchunk[chunk],
                               (backs[0][chunk], backs[1][chunk], backs[2][chunk], backs[3][chunk], backs[4][chunk],
                                backs[5][chunk]))
        p1_in, p3_in, p5_in = inputs[d]
        g_p1 = _sides_backward(backs, p1_in, p3_in, p5_in, g_p1, g_p3, g_p5, d == 0, flat, table, layers, blk, n,
                               gflat)
    _add_chunks(gchunk, gflat)


@_jit()
def _path_sides_back(by_i, by_j, px, flat, table, layers, blk, path, m, g_px, gflat):
    """The reverse of :func:`~pinn.engines.numba.pinet2_kernels._path_sides` on values and tangents: adds the
    adjoints of P to ``g_px`` and the pair mixings' weight gradients to ``gflat``."""
    col = B2_PATH + PATH_COLUMNS * path
    if blk[col + PATH_PAIR_I] < 0:
        for r in range(by_j.shape[0]):
            for a in range(by_j.shape[1]):
                g_px[r, a] += by_j[r, a]
        return
    for side, by in ((PATH_PAIR_I, by_i), (PATH_PAIR_J, by_j)):
        layer = layers[blk[col + side], LAYER_KERNEL]
        _mix_outer(px, by, _tensor(gflat, table, layer), m)
        _mix_back(by, _tensor(flat, table, layer), m, g_px, True)


loss_gradients_serial = _serial_build(loss_gradients, "loss_gradients_serial")
