"""PiNet2's energy and its derivative by the pair vectors, in Numba kernels (the MD engine's second network).

The equations are :mod:`pinn.networks.pinet2`'s (its module docstring); the weights and their layout are
:meth:`pinn.engines.spec.PiNet2Spec.arrays`' (columns :data:`~pinn.engines.numba.layout.B2_PI` …).  Per-atom
arrays are features by atoms, so that the dense layers of :mod:`pinn.engines.numba.md_kernels` (its
``_atoms_dense`` stacks and register-blocked products) serve them; equivariant features of m components are
stacked as m row blocks of C channels, [m·C, n_atoms].

The pairs run in tiles (:data:`~pinn.engines.numba.md_kernels.TILE` at most; the last one padded, its padding
never summed into an atom), the tiles split in chunks over the threads (``evaluate``; ``evaluate_serial`` for
small structures), each chunk summing into its own per-atom rows, added up in chunk order.  In a tile the PI and
II nets run features by pairs; the equivariant pair terms run pairs by features, so that their loops over a
pair's channels read and write rows.  The forward pass keeps, per tile and per block, what the reverse needs
(the layers' outputs for tanh, else their pre-activations; the pair terms), in a workspace the caller keeps
between calls (:func:`workspace_rows`).  The reverse pass runs the blocks backwards from the energy's seeds
(the output units, and for a second output per atom the caller's ∂E/∂q) to ∂E/∂e_b per pair (the radial basis)
and ∂E/∂u per pair (the unit vector u_ij, and the five components of u u^T − 1/3), which
:func:`pair_gradients` turns into ∂E/∂(r_j − r_i).  The weights are not differentiated.

NumPy and Numba only; compiled with the options of every kernel (``md_kernels._jit``: cached on disk,
compiled once in a child process).
"""
import math

import numpy as np

try:
    from numba import prange
except ImportError:  # pragma: no cover - numba is a dependency
    prange = range

from pinn.engines.numba.layout import (B2_II, B2_MIX, B2_N_II, B2_N_INTER, B2_N_MIX, B2_N_OUT, B2_N_PI, B2_N_PP,
                                       B2_OUT, B2_PATH, B2_PI, B2_PP, B2_RESIDUAL, B2_UNITS, CODE_ACT,
                                       CODE_N_BASIS, LAYER_BIAS, LAYER_KERNEL, LAYER_N_OUT, PATH_COLUMNS,
                                       PATH_DOT_A, PATH_DOT_B, PATH_PAIR_I, PATH_PAIR_J, PATH_PP)
from pinn.engines.numba.md_kernels import (TILE, _act_tile, _add_by_both_atoms, _atoms_stack, _atoms_stack_back,
                                           _dact_kept, _jit, _keep, _keeps_output, _pair_input, _serial_build,
                                           _tensor, _tile_matmul, _tile_matmul_t, contraction_adjoint,
                                           radial_basis_tile)

#: arrays a block keeps per atom for the reverse pass (see :func:`evaluate`)
ATOM_KEPT = 11
#: below this many pairs PiNet2's kernels run on one thread. A PiNet2 pair costs several times a PiNet one
#: (:data:`~pinn.engines.numba.md_kernels.PARALLEL_MIN_PAIRS`: 2 048), so two tiles already pay for the threads
#: (16 ethanol molecules, ~1 150 pairs, 2 cores: MD 8–24 % less time per step, training 13–39 % more steps per
#: second than on one; benchmarks/results/0.30.0-dev-pinet2-threshold.jsonl)
PARALLEL_MIN_PAIRS = 2 * TILE


def tiling(n_pairs, threads):
    """How the MD kernel and the training kernel split ``n_pairs`` pairs: (pairs per tile, tiles, chunks of
    tiles — one per thread, or 1 below :data:`PARALLEL_MIN_PAIRS`).  A small molecule gets one tile of its own
    size (a multiple of 16)."""
    tile = min(TILE, 16 * ((n_pairs + 15) // 16)) or 16
    n_tiles = (n_pairs + tile - 1) // tile
    chunks = threads if threads > 1 and n_pairs >= PARALLEL_MIN_PAIRS else 1
    return tile, n_tiles, chunks
_SQRT2 = math.sqrt(2.0)
_SQRT6 = math.sqrt(6.0)


@_jit()
def _stack_rows(layers, start, count):
    """The rows that :func:`~pinn.engines.numba.md_kernels._atoms_stack` keeps for layers ``start`` … ``+count``."""
    rows = 0
    for layer in range(start, start + count):
        rows += layers[layer, LAYER_N_OUT]
    return rows


@_jit()
def _mix(x, w, m, out, accumulate=False):
    """Channel mixing of m stacked components: out[k·D:(k+1)·D] = w^T x[k·C:(k+1)·C] (w [C, D])."""
    n_in, n_out = w.shape
    for k in range(m):
        _tile_matmul(x[k * n_in:(k + 1) * n_in], w, out[k * n_out:(k + 1) * n_out], n_in, n_out, accumulate)


@_jit()
def _mix_back(g, w, m, out, accumulate=False):
    """The reverse of :func:`_mix`: out[k·C:(k+1)·C] = w g[k·D:(k+1)·D]."""
    n_in, n_out = w.shape
    for k in range(m):
        _tile_matmul_t(g[k * n_out:(k + 1) * n_out], w, out[k * n_in:(k + 1) * n_in], n_in, n_out, accumulate)


@_jit()
def pair_rows(layers, blk, n_parts):
    """Where a tile's kept arrays lie among the rows of its workspace ([rows, tile]): the offsets of the first
    PI layer's pre-activation, the last hidden PI activation, the middle PI and the II layers' pre-activations,
    the interactions, the vector and the tensor pair terms, and the total (int64 [8])."""
    n_inter = blk[B2_N_INTER]
    n_pi_layers = blk[B2_N_PI]
    n_first = layers[blk[B2_PI], LAYER_N_OUT]
    n_h = layers[blk[B2_PI] + n_pi_layers - 2, LAYER_N_OUT] if n_pi_layers > 1 else 0
    sizes = (n_first, n_h, _stack_rows(layers, blk[B2_PI] + 1, max(n_pi_layers - 2, 0)),
             _stack_rows(layers, blk[B2_II], blk[B2_N_II]), n_parts * n_inter,
             3 * n_inter if blk[B2_PATH + PATH_PP] >= 0 else 0,
             5 * n_inter if blk[B2_PATH + PATH_COLUMNS + PATH_PP] >= 0 else 0)
    offsets = np.zeros(8, np.int64)
    for k in range(7):
        offsets[k + 1] = offsets[k] + sizes[k]
    return offsets


@_jit()
def workspace_rows(layers, blocks, n_basis):
    """Sizes of :func:`evaluate`'s workspace: (rows kept per tile, geometry rows per tile, gradient rows per tile,
    and the columns of the per-chunk sums: the interactions, the vector and the tensor pair terms, the first PI
    layer's sides)."""
    n_inter = blocks[0, B2_N_INTER]
    vectors = blocks[0, B2_PATH + PATH_PP] >= 0
    tensors = blocks[0, B2_PATH + PATH_COLUMNS + PATH_PP] >= 0
    n_parts = 1 + int(vectors) + int(tensors)
    kept = 1
    n_first = 1
    for d in range(blocks.shape[0]):
        kept = max(kept, pair_rows(layers, blocks[d], n_parts)[7])
        n_first = max(n_first, layers[blocks[d, B2_PI], LAYER_N_OUT])
    return (kept, 2 * n_basis + 8, n_basis + 8, n_parts * n_inter, 3 * n_inter * int(vectors),
            5 * n_inter * int(tensors), n_first)


@_jit()
def _tile_geometry(p0, n_valid, diff, dist, codes, scal, geo):
    """Fill ``geo`` [2 n_basis + 8, tile] for the pairs ``p0`` … ``p0 + n_valid − 1``: the radial basis e_b and
    de_b/dr (1/Å), u (3 rows) and its rank-2 components (5 rows, :func:`pinn.networks.equivariant.rank2_components`),
    zero past ``n_valid``."""
    n_basis = codes[CODE_N_BASIS]
    n_t = geo.shape[1]
    dist_t = np.ones(n_t, geo.dtype)
    for t in range(n_valid):
        dist_t[t] = dist[p0 + t]
    radial_basis_tile(0, n_valid, dist_t, codes, scal, geo[:n_basis], geo[n_basis:2 * n_basis])
    u = 2 * n_basis
    for r in range(8):
        for t in range(n_valid, n_t):
            geo[u + r, t] = 0.0
    for t in range(n_valid):
        r = dist[p0 + t]
        x = diff[p0 + t, 0] / r
        y = diff[p0 + t, 1] / r
        z = diff[p0 + t, 2] / r
        geo[u, t] = x
        geo[u + 1, t] = y
        geo[u + 2, t] = z
        geo[u + 3, t] = _SQRT2 * x * y
        geo[u + 4, t] = _SQRT2 * x * z
        geo[u + 5, t] = _SQRT2 * y * z
        geo[u + 6, t] = (x * x - y * y) / _SQRT2
        geo[u + 7, t] = (2.0 * z * z - x * x - y * y) / _SQRT6


@_jit()
def _first_layer_sides(p1, flat, table, layers, blk):
    """The first PI layer per atom, for the first and the second atom of a pair: [P_i, P_j] W + b =
    side_a[:, i] + side_b[:, j] ([n_first, n_atoms] each; the bias in side_a)."""
    n_in = p1.shape[0]
    first = layers[blk[B2_PI]]
    w1 = _tensor(flat, table, first[LAYER_KERNEL])
    n_first = w1.shape[1]
    side_a = np.empty((n_first, p1.shape[1]), p1.dtype)
    side_b = np.empty((n_first, p1.shape[1]), p1.dtype)
    _tile_matmul(p1, w1[:n_in], side_a, n_in, n_first)
    _tile_matmul(p1, w1[n_in:], side_b, n_in, n_first)
    bias = table[first[LAYER_BIAS], 0]
    for c in range(n_first):
        for a in range(p1.shape[1]):
            side_a[c, a] += flat[bias + c]
    return side_a, side_b


@_jit()
def _pair_layers(x, flat, table, layers, start, count, kept, act):
    """Activated layers ``start`` … ``start + count − 1`` on a tile's pairs ([features, tile]), keeping in ``kept``
    what their reverse needs: act(z) where it suffices (tanh, linear: :func:`~pinn.engines.numba.md_kernels.
    _keeps_output`), else z; returns the last activations."""
    keep_y = _keeps_output(act)
    row = 0
    for layer in range(start, start + count):
        w = _tensor(flat, table, layers[layer, LAYER_KERNEL])
        n_in, n_out = w.shape
        z = np.empty((n_out, x.shape[1]), x.dtype)
        _tile_matmul(x, w, z, n_in, n_out)
        bias = table[layers[layer, LAYER_BIAS], 0]
        for c in range(n_out):
            bc = flat[bias + c]
            for t in range(x.shape[1]):
                z[c, t] += bc
        y = np.empty_like(z)
        _act_tile(z, y, n_out, act)
        _keep(z, y, kept[row:row + n_out], n_out, keep_y)
        row += n_out
        x = y
    return x


@_jit()
def _pair_layers_back(g, flat, table, layers, start, count, kept, act):
    """The reverse of :func:`_pair_layers`: ∂E/∂ its input from ∂E/∂ its output (``g``, overwritten)."""
    row = _stack_rows(layers, start, count)
    for layer in range(start + count - 1, start - 1, -1):
        w = _tensor(flat, table, layers[layer, LAYER_KERNEL])
        n_in, n_out = w.shape
        row -= n_out
        _dact_kept(kept[row:row + n_out], g, n_out, act)
        out = np.empty((n_in, g.shape[1]), g.dtype)
        _tile_matmul_t(g, w, out, n_in, n_out)
        g = out
    return g


@_jit()
def _tile_interactions(side_a, side_b, pair_i, pair_j, e, flat, table, layers, blk, act, kept, rows):
    """The PI and II nets on one tile of pairs (``side_a``, ``side_b``: :func:`_first_layer_sides` atom-major,
    [n_atoms, n_first]): the interactions, written to their rows of ``kept`` [·, tile]
    (offsets ``rows``, :func:`pair_rows`) with what the reverse needs: the first PI layer's kept value (its
    activation, or its pre-activation, as :func:`_pair_layers` keeps; the basis weights themselves without a
    hidden PI layer), the last hidden PI activation, the middle PI layers' and the II layers' kept values."""
    n_pairs = e.shape[1]
    n_basis = e.shape[0]
    dt = e.dtype
    n_first = side_a.shape[1]
    x0 = np.empty((n_first, n_pairs), dt)
    _pair_input(side_a, side_b, n_first, pair_i, pair_j, 0, n_pairs, x0)
    n_pi_layers = blk[B2_N_PI]
    if n_pi_layers == 1:  # no hidden layer: x0 holds the basis weights, I_c = Σ_b x0[c·n_basis + b] e_b
        kept[rows[0]:rows[1]] = x0
        n_pi = n_first // n_basis
        inter_pi = np.zeros((n_pi, n_pairs), dt)
        for c in range(n_pi):
            for b in range(n_basis):
                for p in range(n_pairs):
                    inter_pi[c, p] += x0[c * n_basis + b, p] * e[b, p]
    else:
        h = np.empty((n_first, n_pairs), dt)
        _act_tile(x0, h, n_first, act)
        _keep(x0, h, kept[rows[0]:rows[1]], n_first, _keeps_output(act))
        h = _pair_layers(h, flat, table, layers, blk[B2_PI] + 1, n_pi_layers - 2, kept[rows[2]:rows[3]], act)
        kept[rows[1]:rows[2]] = h
        last = layers[blk[B2_PI] + n_pi_layers - 1]
        kernel = _tensor(flat, table, last[LAYER_KERNEL])
        n_h = kernel.shape[0]
        n_pi = kernel.shape[1] // n_basis
        boff = table[last[LAYER_BIAS], 0]
        inter_pi = np.zeros((n_pi, n_pairs), dt)
        u = np.empty((n_pi, n_pairs), dt)
        for b in range(n_basis):
            _tile_matmul(h, kernel[:, b::n_basis], u, n_h, n_pi)
            e_b = e[b]
            for c in range(n_pi):
                bc = flat[boff + c * n_basis + b]
                row = inter_pi[c]
                u_c = u[c]
                for p in range(n_pairs):
                    row[p] += (u_c[p] + bc) * e_b[p]
    kept[rows[4]:rows[5]] = _pair_layers(inter_pi, flat, table, layers, blk[B2_II], blk[B2_N_II],
                                         kept[rows[3]:rows[4]], act)


@_jit()
def _path_sides(px, flat, table, layers, blk, path, m):
    """The pair term's per-atom parts of an equivariant path: P_i W and P_j W' ([m·C, n_atoms] each) in the
    weighted style, else (0, P_j)."""
    col = B2_PATH + PATH_COLUMNS * path
    if blk[col + PATH_PAIR_I] < 0:
        return np.zeros((0, px.shape[1]), px.dtype), px
    side_i = np.empty_like(px)
    side_j = np.empty_like(px)
    _mix(px, _tensor(flat, table, layers[blk[col + PATH_PAIR_I], LAYER_KERNEL]), m, side_i)
    _mix(px, _tensor(flat, table, layers[blk[col + PATH_PAIR_J], LAYER_KERNEL]), m, side_j)
    return side_i, side_j


@_jit()
def _path_atoms(summed, flat, table, layers, blk, path, m, kept_atom):
    """The per-atom part of an equivariant path: V = (Σ_j X) W ([m·C, n_atoms]) and the dot products D
    [C, n_atoms]; keeps V and the weighted dot's two mixings (V, V unweighted)."""
    col = B2_PATH + PATH_COLUMNS * path
    n_atoms = summed.shape[1]
    dt = summed.dtype
    w_pp = _tensor(flat, table, layers[blk[col + PATH_PP], LAYER_KERNEL])
    n_out = w_pp.shape[1]
    v = np.empty((m * n_out, n_atoms), dt)
    _mix(summed, w_pp, m, v)
    dots = np.zeros((n_out, n_atoms), dt)
    kept_atom.append(v)
    if blk[col + PATH_DOT_A] >= 0:
        mixed_a = np.empty((m * n_out, n_atoms), dt)
        mixed_b = np.empty((m * n_out, n_atoms), dt)
        _mix(v, _tensor(flat, table, layers[blk[col + PATH_DOT_A], LAYER_KERNEL]), m, mixed_a)
        _mix(v, _tensor(flat, table, layers[blk[col + PATH_DOT_B], LAYER_KERNEL]), m, mixed_b)
        kept_atom.append(mixed_a)
        kept_atom.append(mixed_b)
    else:
        mixed_a = v
        mixed_b = v
        kept_atom.append(v)
        kept_atom.append(v)
    for k in range(m):
        for c in range(n_out):
            for a in range(n_atoms):
                dots[c, a] += mixed_a[k * n_out + c, a] * mixed_b[k * n_out + c, a]
    return v, dots


@_jit()
def _path_atoms_back(g_new, scales, part, n_inter, v, mixed_a, mixed_b, g_dots, flat, table, layers, blk, path):
    """The reverse of :func:`_path_atoms` and of the scaling P' = V S (whose ∂E/∂S :func:`_add_scale_grad`
    takes): ∂E/∂(Σ_j X) [m·C, n_atoms] from ∂E/∂P' (``g_new``) and ∂E/∂D (``g_dots``)."""
    col = B2_PATH + PATH_COLUMNS * path
    n_atoms = v.shape[1]
    dt = v.dtype
    w_pp = _tensor(flat, table, layers[blk[col + PATH_PP], LAYER_KERNEL])
    n_out = w_pp.shape[1]
    m = v.shape[0] // n_out
    g_v = np.empty((m * n_out, n_atoms), dt)
    for k in range(m):
        for c in range(n_out):
            r = k * n_out + c
            for a in range(n_atoms):
                g_v[r, a] = g_new[r, a] * scales[part * n_inter + c, a]
    if blk[col + PATH_DOT_A] >= 0:
        t_a = np.empty((m * n_out, n_atoms), dt)
        t_b = np.empty((m * n_out, n_atoms), dt)
        for k in range(m):
            for c in range(n_out):
                r = k * n_out + c
                for a in range(n_atoms):
                    t_a[r, a] = g_dots[c, a] * mixed_b[r, a]
                    t_b[r, a] = g_dots[c, a] * mixed_a[r, a]
        _mix_back(t_a, _tensor(flat, table, layers[blk[col + PATH_DOT_A], LAYER_KERNEL]), m, g_v, True)
        _mix_back(t_b, _tensor(flat, table, layers[blk[col + PATH_DOT_B], LAYER_KERNEL]), m, g_v, True)
    else:
        for k in range(m):
            for c in range(n_out):
                r = k * n_out + c
                for a in range(n_atoms):
                    g_v[r, a] += 2.0 * g_dots[c, a] * v[r, a]
    g_summed = np.empty((m * n_inter, n_atoms), dt)
    _mix_back(g_v, w_pp, m, g_summed)
    return g_summed


@_jit()
def _transpose(src):
    """A new C-contiguous array with ``src``'s rows as columns, in 16 × 16 blocks, which stay in cache (unsigned
    indices: no wraparound test per element, so that the loops vectorise)."""
    n_rows = np.uint64(src.shape[0])
    n_cols = np.uint64(src.shape[1])
    block = np.uint64(16)
    out = np.empty((src.shape[1], src.shape[0]), src.dtype)
    for r0 in range(np.uint64(0), n_rows, block):
        r1 = min(n_rows, r0 + block)
        for c0 in range(np.uint64(0), n_cols, block):
            for c in range(c0, min(n_cols, c0 + block)):
                for r in range(r0, r1):
                    out[c, r] = src[r, c]
    return out


@_jit()
def _tile_path(side_i, side_j, first, inter_t, n_inter, part, dirs, pair_i, pair_j, n_valid, sums, pair):
    """The pair terms X = (dirs + P_j or P_i W + P_j W') · I_part of one tile, summed by first atom into
    ``sums`` [n_atoms, m·C] (the ``n_valid`` pairs); the factor in brackets written to ``pair`` [tile, m·C] (kept
    for the reverse).  Pair-major: ``side_i``/``side_j`` [n_atoms, m·C] (``side_i`` without columns: unweighted),
    ``inter_t`` [tile, ·], so that the loops over channels read and write rows."""
    m = dirs.shape[0]
    n_t = dirs.shape[1]
    weighted = side_i.shape[1] > 0
    n = np.uint64(n_inter)  # unsigned column indices: no wraparound test per element, so the loops vectorise
    q0 = np.uint64(part) * n
    for p in range(n_t):
        i = pair_i[p]
        j = pair_j[p]
        for k in range(m):
            direction = dirs[k, p]
            r0 = np.uint64(k) * n
            if first:
                for c in range(n):
                    pair[p, r0 + c] = direction
            elif weighted:
                for c in range(n):
                    pair[p, r0 + c] = direction + side_i[i, r0 + c] + side_j[j, r0 + c]
            else:
                for c in range(n):
                    pair[p, r0 + c] = direction + side_j[j, r0 + c]
            if p < n_valid:
                for c in range(n):
                    sums[i, r0 + c] += pair[p, r0 + c] * inter_t[p, q0 + c]


@_jit()
def _tile_path_back(g_summed, pair, inter_t, n_inter, part, pair_i, pair_j, n_valid, first, weighted, g_inter,
                    g_dirs, by_i, by_j):
    """The reverse of :func:`_tile_path` on one tile (pair-major, [n_atoms, m·C] and [tile, ·]): adds ∂E/∂I_part to
    ``g_inter`` [tile, ·], ∂E/∂dirs to ``g_dirs`` [m, tile] and, past the first block, ∂E/∂(the bracket) of the
    ``n_valid`` pairs summed by first atom into ``by_i`` (``weighted`` style only) and by second atom into
    ``by_j``."""
    m = g_dirs.shape[0]
    n_t = pair.shape[0]
    n = np.uint64(n_inter)  # unsigned column indices, as in _tile_path
    q0 = np.uint64(part) * n
    n_rows = np.uint64(m) * n
    g_pair = np.empty(m * n_inter, pair.dtype)
    for p in range(n_t):
        i = pair_i[p]
        j = pair_j[p]
        for k in range(m):
            r0 = np.uint64(k) * n
            total = 0.0
            for c in range(n):
                g = g_summed[i, r0 + c]
                g_inter[p, q0 + c] += g * pair[p, r0 + c]
                g_pair[r0 + c] = g * inter_t[p, q0 + c]
                total += g_pair[r0 + c]
            g_dirs[k, p] += total
        if p < n_valid and not first:
            for r in range(n_rows):
                by_j[j, r] += g_pair[r]
            if weighted:
                for r in range(n_rows):
                    by_i[i, r] += g_pair[r]


@_jit()
def _add_rows_by_atom(src_t, atom, n_valid, out):
    """out[atom[p], :] += src_t[p, :] for p < ``n_valid`` (pair-major rows into atom-major rows)."""
    n = np.uint64(src_t.shape[1])
    for p in range(n_valid):
        a = atom[p]
        for c in range(n):
            out[a, c] += src_t[p, c]


@_jit()
def _tile_forward(side_a, side_b, side3_i, side3_j, side5_i, side5_j, first, pair_i, pair_j, n_valid, geo, flat,
                  table, layers, blk, act, n_parts, kept, rows, sums, sums3, sums5):
    """One tile of a block's forward pass: its interactions and pair terms into ``kept`` (rows ``rows``), summed
    by first atom into ``sums``, ``sums3`` and ``sums5`` ([n_atoms, ·]: the interactions, the vector and the tensor
    pair terms)."""
    n_inter = blk[B2_N_INTER]
    n_basis = (geo.shape[0] - 8) // 2
    n_t = geo.shape[1]
    _tile_interactions(side_a, side_b, pair_i, pair_j, geo[:n_basis], flat, table, layers, blk, act, kept, rows)
    inter_t = _transpose(kept[rows[4]:rows[5]])
    _add_rows_by_atom(inter_t, pair_i, n_valid, sums)
    if rows[6] > rows[5]:
        _tile_path(side3_i, side3_j, first, inter_t, n_inter, 1, geo[2 * n_basis:2 * n_basis + 3], pair_i, pair_j,
                   n_valid, sums3, kept[rows[5]:rows[6]].reshape((n_t, 3 * n_inter)))
    if rows[7] > rows[6]:
        _tile_path(side5_i, side5_j, first, inter_t, n_inter, n_parts - 1, geo[2 * n_basis + 3:2 * n_basis + 8],
                   pair_i, pair_j, n_valid, sums5, kept[rows[6]:rows[7]].reshape((n_t, 5 * n_inter)))


@_jit()
def _tile_backward(g_summed, g_summed3, g_summed5, first, pair_i, pair_j, n_valid, geo, flat, table, layers, blk,
                   act, n_parts, kept, rows, grads, by_a, by_b, by3_i, by3_j, by5_i, by5_j):
    """One tile of a block's reverse pass, from ∂E/∂ the sums of :func:`_tile_forward` ([n_atoms, ·] each):
    ∂E/∂e and ∂E/∂u into ``grads`` [n_basis + 8, tile]; past the first block, ∂E/∂ the first PI layer's per-atom
    sides (``by_a``, ``by_b``) and the pair terms' per-atom parts (``by3_i``, ``by3_j``, ``by5_i``, ``by5_j``)
    summed into those [n_atoms, ·] arrays."""
    n_inter = blk[B2_N_INTER]
    n_basis = (geo.shape[0] - 8) // 2
    n_t = geo.shape[1]
    inter_t = _transpose(kept[rows[4]:rows[5]])
    g_inter = np.empty((n_t, n_parts * n_inter), geo.dtype)
    n_columns = np.uint64(n_parts * n_inter)
    for p in range(n_t):
        i = pair_i[p]
        for c in range(n_columns):
            g_inter[p, c] = g_summed[i, c]
    n_first = rows[1] - rows[0]
    if rows[6] > rows[5]:
        _tile_path_back(g_summed3, kept[rows[5]:rows[6]].reshape((n_t, 3 * n_inter)), inter_t, n_inter, 1, pair_i,
                        pair_j, n_valid, first, blk[B2_PATH + PATH_PAIR_I] >= 0, g_inter, grads[n_basis:n_basis + 3],
                        by3_i, by3_j)
    if rows[7] > rows[6]:
        _tile_path_back(g_summed5, kept[rows[6]:rows[7]].reshape((n_t, 5 * n_inter)), inter_t, n_inter, n_parts - 1,
                        pair_i, pair_j, n_valid, first, blk[B2_PATH + PATH_COLUMNS + PATH_PAIR_I] >= 0, g_inter,
                        grads[n_basis + 3:n_basis + 8], by5_i, by5_j)
    g_x0 = _interactions_backward(_transpose(g_inter), geo[:n_basis], kept[rows[0]:rows[1]], kept[rows[1]:rows[2]],
                                  kept[rows[2]:rows[3]], kept[rows[3]:rows[4]], flat, table, layers, blk, act,
                                  grads[:n_basis])
    if not first:
        _add_by_both_atoms(g_x0, n_first, pair_i, pair_j, 0, n_valid, by_a, by_b)


@_jit()
def _zero(buf):
    """Set a [rows, columns] array to zero."""
    for r in range(buf.shape[0]):
        for c in range(buf.shape[1]):
            buf[r, c] = 0.0


@_jit()
def _sum_chunks(buf):
    """Σ_chunk buf[chunk, a, c], in chunk order, as [columns, n_atoms] (features by atoms)."""
    n_atoms = buf.shape[1]
    columns = buf.shape[2]
    out = np.empty((columns, n_atoms), buf.dtype)
    for a in range(n_atoms):
        for c in range(columns):
            total = buf[0, a, c]
            for chunk in range(1, buf.shape[0]):
                total += buf[chunk, a, c]
            out[c, a] = total
    return out


@_jit(parallel=True)
def evaluate(types, pair_i, pair_j, diff, dist, flat, table, layers, blocks, codes, scal, charge_seed, atomic,
             charge, g_diff, tile, kept, geometry, grads, sums, backs):
    """Atomic energies and ∂E/∂(r_j − r_i) per pair of one structure (and a second output per atom, as
    :func:`pinn.engines.numba.md_kernels._evaluate` has it: the charges of an electrostatic embedding, whose
    energy's derivative the reverse pass takes from ``charge_seed``).

    Args:
        types: [n_atoms] int64 indices into atom_types.
        pair_i, pair_j: [n_tiles · tile] int32 atoms of the pairs within the cutoff, then (any) atom indices to the
            end of the last tile.
        diff: [n_pairs, 3] float64 r_j + offset − r_i (Å); dist: [n_pairs] float64 its length (Å).
        flat, table, layers, blocks, codes, scal: :meth:`pinn.engines.spec.PiNet2Spec.arrays`.
        charge_seed: [n_atoms] ∂E/∂(second output) (eV/e); read for two outputs only.
        atomic: [n_atoms] output, e_scale × the network's atomic energy (eV, no e_dress).
        charge: [n_atoms] output, the second output (e); written for two outputs only.
        g_diff: [>= n_pairs, 3] float64 output, ∂E/∂diff (eV/Å).
        tile: pairs per tile.
        kept, geometry, grads: per tile [depth, n_tiles, ·, tile], [n_tiles, ·, tile], [n_tiles, ·, tile];
            sums, backs: per chunk of tiles (one per thread), [n_chunks, n_atoms, ·] each: the forward sums (the
            interactions, the vector and the tensor pair terms) and the reverse's (the first PI layer's two sides,
            the vector pair terms' P_i and P_j parts, the tensor ones'): the workspace, sizes by
            :func:`workspace_rows`.
    """
    n_atoms = types.shape[0]
    n_pairs = dist.shape[0]
    n_tiles = (n_pairs + tile - 1) // tile
    n_chunks = sums[0].shape[0]
    tiles_per_chunk = (n_tiles + n_chunks - 1) // n_chunks
    depth = blocks.shape[0]
    act = codes[CODE_ACT]
    n_basis = codes[CODE_N_BASIS]
    e_scale = scal[2]
    dt = flat.dtype
    n_inter = blocks[0, B2_N_INTER]
    vectors = blocks[0, B2_PATH + PATH_PP] >= 0
    tensors = blocks[0, B2_PATH + PATH_COLUMNS + PATH_PP] >= 0
    n_parts = 1 + int(vectors) + int(tensors)
    two = _tensor(flat, table, layers[blocks[0, B2_UNITS], LAYER_KERNEL]).shape[1] > 1
    p1 = np.zeros((len_types(blocks, layers, flat, table), n_atoms), dt)
    for a in range(n_atoms):
        p1[types[a], a] = 1.0
        atomic[a] = 0.0
        if two:
            charge[a] = 0.0
    for k in prange(n_tiles):
        _tile_geometry(k * tile, min(tile, n_pairs - k * tile), diff, dist, codes, scal, geometry[k])
        grads[k, :, :] = 0.0
    p3 = np.zeros((3 * n_inter, n_atoms), dt)
    p5 = np.zeros((5 * n_inter, n_atoms), dt)
    kept_atom = [p1]
    for d in range(depth):
        blk = blocks[d]
        rows = pair_rows(layers, blk, n_parts)
        kept_atom.append(p1)
        side_a, side_b = _first_layer_sides(p1, flat, table, layers, blk)
        side_a = _transpose(side_a)
        side_b = _transpose(side_b)
        side3_i, side3_j = _path_sides(p3, flat, table, layers, blk, 0, 3)
        side5_i, side5_j = _path_sides(p5, flat, table, layers, blk, 1, 5)
        side3_i = _transpose(side3_i)
        side3_j = _transpose(side3_j)
        side5_i = _transpose(side5_i)
        side5_j = _transpose(side5_j)
        for chunk in prange(n_chunks):
            _zero(sums[0][chunk])
            _zero(sums[1][chunk])
            _zero(sums[2][chunk])
            for k in range(chunk * tiles_per_chunk, min(n_tiles, (chunk + 1) * tiles_per_chunk)):
                p0 = k * tile
                _tile_forward(side_a, side_b, side3_i, side3_j, side5_i, side5_j, d == 0, pair_i[p0:p0 + tile],
                              pair_j[p0:p0 + tile], min(tile, n_pairs - p0), geometry[k], flat, table, layers, blk,
                              act, n_parts, kept[d, k], rows, sums[0][chunk], sums[1][chunk], sums[2][chunk])
        summed = _sum_chunks(sums[0])
        z_pp = np.empty((_stack_rows(layers, blk[B2_PP], blk[B2_N_PP]), n_atoms), dt)
        q = _atoms_stack(summed, flat, table, layers, blk[B2_PP], blk[B2_N_PP], z_pp, 0, act)
        kept_atom.append(z_pp)
        n_pp = q.shape[0]
        mix_in = np.empty((n_parts * n_pp, n_atoms), dt)
        mix_in[:n_pp] = q
        v3 = p3
        v5 = p5
        if vectors:
            v3, dots3 = _path_atoms(_sum_chunks(sums[1]), flat, table, layers, blk, 0, 3, kept_atom)
            mix_in[n_pp:2 * n_pp] = dots3
        else:
            for _ in range(3):
                kept_atom.append(p1)
        if tensors:
            v5, dots5 = _path_atoms(_sum_chunks(sums[2]), flat, table, layers, blk, 1, 5, kept_atom)
            mix_in[(n_parts - 1) * n_pp:] = dots5
        else:
            for _ in range(3):
                kept_atom.append(p1)
        z_mix = np.empty((_stack_rows(layers, blk[B2_MIX], blk[B2_N_MIX]), n_atoms), dt)
        scales = np.ascontiguousarray(_atoms_stack(mix_in, flat, table, layers, blk[B2_MIX], blk[B2_N_MIX], z_mix, 0,
                                                   act))
        kept_atom.append(z_mix)
        kept_atom.append(scales)
        z_out = np.empty((_stack_rows(layers, blk[B2_OUT], blk[B2_N_OUT]), n_atoms), dt)
        y = _atoms_stack(scales[:n_inter], flat, table, layers, blk[B2_OUT], blk[B2_N_OUT], z_out, 0, act)
        kept_atom.append(z_out)
        units = _tensor(flat, table, layers[blk[B2_UNITS], LAYER_KERNEL])
        for k in range(y.shape[0]):
            wk = units[k, 0] * e_scale
            for a in range(n_atoms):
                atomic[a] += wk * y[k, a]
            if two:
                for a in range(n_atoms):
                    charge[a] += units[k, 1] * y[k, a]
        nxt = np.empty((n_inter, n_atoms), dt)
        if blk[B2_RESIDUAL] >= 0:
            res = _tensor(flat, table, layers[blk[B2_RESIDUAL], LAYER_KERNEL])
            _tile_matmul(p1, res, nxt, p1.shape[0], n_inter)
            for c in range(n_inter):
                for a in range(n_atoms):
                    nxt[c, a] += scales[c, a]
        else:
            for c in range(n_inter):
                for a in range(n_atoms):
                    nxt[c, a] = p1[c, a] + scales[c, a]
        p1 = nxt
        p3 = _scaled_sum(p3, v3, scales, 1, n_inter) if vectors else p3
        p5 = _scaled_sum(p5, v5, scales, n_parts - 1, n_inter) if tensors else p5
    # ---- reverse pass
    g_p1 = np.zeros((n_inter, n_atoms), dt)
    g_p3 = np.zeros((3 * n_inter, n_atoms), dt)
    g_p5 = np.zeros((5 * n_inter, n_atoms), dt)
    for d in range(depth - 1, -1, -1):
        blk = blocks[d]
        rows = pair_rows(layers, blk, n_parts)
        ka = 1 + d * ATOM_KEPT
        p1_in, z_pp = kept_atom[ka], kept_atom[ka + 1]
        v3, a3, b3 = kept_atom[ka + 2], kept_atom[ka + 3], kept_atom[ka + 4]
        v5, a5, b5 = kept_atom[ka + 5], kept_atom[ka + 6], kept_atom[ka + 7]
        z_mix, scales, z_out = kept_atom[ka + 8], kept_atom[ka + 9], kept_atom[ka + 10]
        units = _tensor(flat, table, layers[blk[B2_UNITS], LAYER_KERNEL])
        g_y = np.empty((units.shape[0], n_atoms), dt)
        for k in range(units.shape[0]):
            for a in range(n_atoms):
                g_y[k, a] = units[k, 0] * e_scale
                if two:
                    g_y[k, a] += units[k, 1] * charge_seed[a]
        g_y = _atoms_stack_back(g_y, flat, table, layers, blk[B2_OUT], blk[B2_N_OUT], z_out, 0, act)
        g_scales = np.zeros((n_parts * n_inter, n_atoms), dt)
        for c in range(n_inter):
            for a in range(n_atoms):
                g_scales[c, a] = g_y[c, a] + g_p1[c, a]
        # the mixing net's seed ∂E/∂S (the scalings' part too) before the paths' reverse, which needs its ∂E/∂D
        if vectors:
            _add_scale_grad(g_p3, v3, g_scales, 1, n_inter)
        if tensors:
            _add_scale_grad(g_p5, v5, g_scales, n_parts - 1, n_inter)
        g_mix_in = _atoms_stack_back(g_scales, flat, table, layers, blk[B2_MIX], blk[B2_N_MIX], z_mix, 0, act)
        n_pp = g_mix_in.shape[0] // n_parts
        g_summed = np.ascontiguousarray(_atoms_stack_back(np.ascontiguousarray(g_mix_in[:n_pp]), flat, table, layers,
                                                          blk[B2_PP], blk[B2_N_PP], z_pp, 0, act))
        g_summed3 = g_p3
        g_summed5 = g_p5
        if vectors:
            g_summed3 = _path_atoms_back(g_p3, scales, 1, n_inter, v3, a3, b3,
                                         np.ascontiguousarray(g_mix_in[n_pp:2 * n_pp]), flat, table, layers, blk, 0)
        if tensors:
            g_summed5 = _path_atoms_back(g_p5, scales, n_parts - 1, n_inter, v5, a5, b5,
                                         np.ascontiguousarray(g_mix_in[(n_parts - 1) * n_pp:]), flat, table, layers,
                                         blk, 1)
        n_first = rows[1] - rows[0]
        g_summed = _transpose(g_summed)
        g_summed3 = _transpose(g_summed3)
        g_summed5 = _transpose(g_summed5)
        for chunk in prange(n_chunks):
            if d > 0:
                for buf in range(6):
                    _zero(backs[buf][chunk])
            for k in range(chunk * tiles_per_chunk, min(n_tiles, (chunk + 1) * tiles_per_chunk)):
                p0 = k * tile
                _tile_backward(g_summed, g_summed3, g_summed5, d == 0, pair_i[p0:p0 + tile], pair_j[p0:p0 + tile],
                               min(tile, n_pairs - p0), geometry[k], flat, table, layers, blk, act, n_parts,
                               kept[d, k], rows, grads[k], backs[0][chunk], backs[1][chunk], backs[2][chunk],
                               backs[3][chunk], backs[4][chunk], backs[5][chunk])
        if d == 0:
            break
        g_prev = np.zeros((p1_in.shape[0], n_atoms), dt)
        if blk[B2_RESIDUAL] >= 0:
            res = _tensor(flat, table, layers[blk[B2_RESIDUAL], LAYER_KERNEL])
            _tile_matmul_t(g_p1, res, g_prev, p1_in.shape[0], n_inter)
        else:
            for c in range(n_inter):
                for a in range(n_atoms):
                    g_prev[c, a] = g_p1[c, a]
        w1 = _tensor(flat, table, layers[blk[B2_PI], LAYER_KERNEL])
        n_in = p1_in.shape[0]
        _tile_matmul_t(_sum_chunks(backs[0]), w1[:n_in], g_prev, n_in, n_first, True)
        _tile_matmul_t(_sum_chunks(backs[1]), w1[n_in:], g_prev, n_in, n_first, True)
        g_p1 = g_prev
        if vectors:
            _path_sides_back(_sum_chunks(backs[2]), _sum_chunks(backs[3]), flat, table, layers, blk, 0, 3, g_p3)
        if tensors:
            _path_sides_back(_sum_chunks(backs[4]), _sum_chunks(backs[5]), flat, table, layers, blk, 1, 5, g_p5)
    for k in prange(n_tiles):
        p0 = k * tile
        pair_gradients(p0, min(tile, n_pairs - p0), diff, dist, geometry[k, n_basis:2 * n_basis], grads[k, :n_basis],
                       grads[k, n_basis:n_basis + 3], grads[k, n_basis + 3:n_basis + 8], g_diff)


@_jit()
def _path_sides_back(by_i, by_j, flat, table, layers, blk, path, m, g_px):
    """The reverse of :func:`_path_sides`: adds ∂E/∂P (the incoming features) to ``g_px`` from ∂E/∂ the pair
    term's per-atom parts (``by_i`` read in the weighted style only)."""
    col = B2_PATH + PATH_COLUMNS * path
    if blk[col + PATH_PAIR_I] < 0:
        for r in range(by_j.shape[0]):
            for a in range(by_j.shape[1]):
                g_px[r, a] += by_j[r, a]
        return
    _mix_back(by_i, _tensor(flat, table, layers[blk[col + PATH_PAIR_I], LAYER_KERNEL]), m, g_px, True)
    _mix_back(by_j, _tensor(flat, table, layers[blk[col + PATH_PAIR_J], LAYER_KERNEL]), m, g_px, True)


@_jit()
def len_types(blocks, layers, flat, table):
    """The width of the first block's input: the number of element types (the one-hot encoding)."""
    return _tensor(flat, table, layers[blocks[0, B2_PI], LAYER_KERNEL]).shape[0] // 2


@_jit()
def _scaled_sum(p, v, scales, part, n_inter):
    """p + V · S_part, channel by channel for each component: the block's residual update of P3 or P5."""
    out = np.empty_like(p)
    m = p.shape[0] // n_inter
    for k in range(m):
        for c in range(n_inter):
            for a in range(p.shape[1]):
                out[k * n_inter + c, a] = p[k * n_inter + c, a] + v[k * n_inter + c, a] * scales[part * n_inter + c, a]
    return out


@_jit()
def _add_scale_grad(g_new, v, g_scales, part, n_inter):
    """∂E/∂S_part += Σ_components ∂E/∂P' · V (P' = V · S_part)."""
    m = g_new.shape[0] // n_inter
    for k in range(m):
        for c in range(n_inter):
            for a in range(v.shape[1]):
                g_scales[part * n_inter + c, a] += g_new[k * n_inter + c, a] * v[k * n_inter + c, a]


@_jit()
def _interactions_backward(g_inter, e, x0, h, middle, z_ii, flat, table, layers, blk, act, g_e):
    """The reverse of :func:`_tile_interactions`: ∂E/∂(first PI layer's pre-activation) [n_first, n_pairs]; adds
    ∂E/∂e_b to ``g_e``.  ``x0``: the first PI layer's kept value."""
    n_basis = e.shape[0]
    n_pairs = e.shape[1]
    dt = e.dtype
    g_pi = _pair_layers_back(g_inter, flat, table, layers, blk[B2_II], blk[B2_N_II], z_ii, act)
    n_pi = g_pi.shape[0]
    n_pi_layers = blk[B2_N_PI]
    if n_pi_layers == 1:
        g_x0 = np.empty((n_pi * n_basis, n_pairs), dt)
        for c in range(n_pi):
            for b in range(n_basis):
                for p in range(n_pairs):
                    g_x0[c * n_basis + b, p] = g_pi[c, p] * e[b, p]
                    g_e[b, p] += g_pi[c, p] * x0[c * n_basis + b, p]
        return g_x0
    last = layers[blk[B2_PI] + n_pi_layers - 1]
    kernel = _tensor(flat, table, last[LAYER_KERNEL])
    n_h = kernel.shape[0]
    g_h = np.zeros((n_h, n_pairs), dt)
    u = np.empty((n_h, n_pairs), dt)
    contraction_adjoint(np.ascontiguousarray(g_pi), kernel, flat, table[last[LAYER_BIAS], 0], h, e, n_h, n_pi, u,
                        g_h, g_e)
    g_x0 = _pair_layers_back(g_h, flat, table, layers, blk[B2_PI] + 1, n_pi_layers - 2, middle, act)
    _dact_kept(x0, g_x0, x0.shape[0], act)
    return g_x0


@_jit()
def pair_gradients(p0, n_t, diff, dist, de, g_e, g_u3, g_u5, g_diff):
    """∂E/∂diff of the pairs ``p0`` … ``p0 + n_t − 1`` (one tile) from ∂E/∂e_b (through de_b/dr), ∂E/∂u and
    ∂E/∂(rank-2 components of u), all [·, n_t]: g = (Σ_b ∂E/∂e_b de_b/dr) u + (1 − u u^T) ĝ / r, with
    ĝ = ∂E/∂u + J^T ∂E/∂u5 (J: d u5 / d u)."""
    for t in range(n_t):
        p = p0 + t
        g_r = 0.0
        for b in range(de.shape[0]):
            g_r += g_e[b, t] * de[b, t]
        r = dist[p]
        x = diff[p, 0] / r
        y = diff[p, 1] / r
        z = diff[p, 2] / r
        a0, a1, a2, a3, a4 = g_u5[0, t], g_u5[1, t], g_u5[2, t], g_u5[3, t], g_u5[4, t]
        gx = g_u3[0, t] + _SQRT2 * (y * a0 + z * a1 + x * a3) - 2.0 * x * a4 / _SQRT6
        gy = g_u3[1, t] + _SQRT2 * (x * a0 + z * a2 - y * a3) - 2.0 * y * a4 / _SQRT6
        gz = g_u3[2, t] + _SQRT2 * (x * a1 + y * a2) + 4.0 * z * a4 / _SQRT6
        along = x * gx + y * gy + z * gz
        g_diff[p, 0] = g_r * x + (gx - along * x) / r
        g_diff[p, 1] = g_r * y + (gy - along * y) / r
        g_diff[p, 2] = g_r * z + (gz - along * z) / r


@_jit()
def forces_virial(n_pairs, pair_i, pair_j, diff, g_diff, forces, virial):
    """F_i = Σ_{p: i} g_p − Σ_{p: j} g_p and the virial Σ_p diff_p ⊗ g_p, with g_p = ∂E/∂diff_p."""
    forces[:, :] = 0.0
    virial[:, :] = 0.0
    for p in range(n_pairs):
        i, j = pair_i[p], pair_j[p]
        for a in range(3):
            g = g_diff[p, a]
            forces[i, a] += g
            forces[j, a] -= g
            for b in range(3):
                virial[b, a] += diff[p, b] * g


evaluate_serial = _serial_build(evaluate, "evaluate_serial")
