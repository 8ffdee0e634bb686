"""PiNet2's energy and its derivative by the pair vectors, in Numba kernels (the MD engine's second network).

The equations are :mod:`pinn.networks.pinet2`'s (its module docstring); the weights and their layout are
:meth:`pinn.engines.spec.PiNet2Spec.arrays`' (columns :data:`~pinn.engines.numba.layout.B2_PI` …).  Arrays
are features by columns, the columns being atoms or pairs, so that the dense layers of
:mod:`pinn.engines.numba.md_kernels` (``_atoms_dense`` and its stacks, the register-blocked products) serve
both; equivariant features of m components are stacked as m row blocks of C channels, [m·C, n_atoms].

The forward pass keeps, per block, what its reverse needs (pre-activations, the pair terms, the
equivariant features and their weighted mixings); the reverse pass runs the blocks backwards from the
energy's seeds (the output units, and for a second output per atom the caller's ∂E/∂q) to ∂E/∂e_b per
pair (the radial basis) and ∂E/∂u per pair (the unit vector u_ij, and the five components of u u^T − 1/3),
which :func:`pair_gradients` turns into ∂E/∂(r_j − r_i).  The weights are not differentiated.

NumPy and Numba only.  One thread: the tensor work of a block is small next to the per-call costs for
molecules, and the pair loops of large cells run serially (a measured choice, docs/benchmarks.md).
"""
import math

import numpy as np

from pinn.engines.numba.layout import (B2_II, B2_MIX, B2_N_II, B2_N_INTER, B2_N_MIX, B2_N_OUT, B2_N_PI, B2_N_PP,
                                       B2_OUT, B2_PATH, B2_PI, B2_PP, B2_RESIDUAL, B2_UNITS, CODE_ACT,
                                       CODE_N_BASIS, LAYER_BIAS, LAYER_KERNEL, LAYER_N_OUT, PATH_COLUMNS,
                                       PATH_DOT_A, PATH_DOT_B, PATH_PAIR_I, PATH_PAIR_J, PATH_PP)
from pinn.engines.numba.md_kernels import (_act_tile, _atoms_stack, _atoms_stack_back, _dact_tile, _jit, _tensor,
                                           _tile_matmul, _tile_matmul_t, contraction_adjoint, radial_basis_tile)

#: arrays a block keeps per pair and per atom for the reverse pass (see :func:`_block_forward`)
PAIR_KEPT = 7
ATOM_KEPT = 11
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
def _gather_sum(a, b, pair_i, pair_j, n_rows, out):
    """out[c, p] += a[c, i_p] + b[c, j_p] for c < ``n_rows``."""
    for c in range(n_rows):
        for p in range(out.shape[1]):
            out[c, p] += a[c, pair_i[p]] + b[c, pair_j[p]]


@_jit()
def _scatter(src, atom, out):
    """out[c, atom[p]] += src[c, p] over every row and pair."""
    for c in range(src.shape[0]):
        for p in range(src.shape[1]):
            out[c, atom[p]] += src[c, p]


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
def directions(n_pairs, diff, dist, dtype_probe):
    """u_ij [3, n_pairs] and its rank-2 components [5, n_pairs] (:func:`pinn.networks.equivariant.rank2_components`),
    in the weights' precision (``dtype_probe``'s dtype)."""
    u3 = np.empty((3, n_pairs), dtype_probe.dtype)
    u5 = np.empty((5, n_pairs), dtype_probe.dtype)
    for p in range(n_pairs):
        x = diff[p, 0] / dist[p]
        y = diff[p, 1] / dist[p]
        z = diff[p, 2] / dist[p]
        u3[0, p] = x
        u3[1, p] = y
        u3[2, p] = z
        u5[0, p] = _SQRT2 * x * y
        u5[1, p] = _SQRT2 * x * z
        u5[2, p] = _SQRT2 * y * z
        u5[3, p] = (x * x - y * y) / _SQRT2
        u5[4, p] = (2.0 * z * z - x * x - y * y) / _SQRT6
    return u3, u5


@_jit()
def _pair_interactions(p1, pair_i, pair_j, e, flat, table, layers, blk, act, kept):
    """The PI and II nets on the pairs: the interactions [n_parts · n_inter, n_pairs].

    Keeps in ``kept`` (a list of [rows, n_pairs] arrays): the first PI layer's pre-activation, the last hidden
    PI activation, the middle PI layers' and the II layers' pre-activations."""
    n_pairs = e.shape[1]
    n_basis = e.shape[0]
    dt = e.dtype
    n_in = p1.shape[0]
    first = layers[blk[B2_PI]]
    w1 = _tensor(flat, table, first[LAYER_KERNEL])
    n_first = w1.shape[1]
    side_a = np.empty((n_first, p1.shape[1]), dt)
    side_b = np.empty((n_first, p1.shape[1]), dt)
    _tile_matmul(p1, w1[:n_in], side_a, n_in, n_first)
    _tile_matmul(p1, w1[n_in:], side_b, n_in, n_first)
    bias = table[first[LAYER_BIAS], 0]
    for c in range(n_first):
        for a in range(p1.shape[1]):
            side_a[c, a] += flat[bias + c]
    x0 = np.zeros((n_first, n_pairs), dt)
    _gather_sum(side_a, side_b, pair_i, pair_j, n_first, x0)
    n_pi_layers = blk[B2_N_PI]
    if n_pi_layers == 1:  # no hidden layer: x0 holds the basis weights, I_c = Σ_b x0[c·n_basis + b] e_b
        n_pi = n_first // n_basis
        inter_pi = np.zeros((n_pi, n_pairs), dt)
        for c in range(n_pi):
            for b in range(n_basis):
                for p in range(n_pairs):
                    inter_pi[c, p] += x0[c * n_basis + b, p] * e[b, p]
        kept.append(x0)
        kept.append(x0)
        kept.append(np.empty((0, n_pairs), dt))
    else:
        h = np.empty((n_first, n_pairs), dt)
        _act_tile(x0, h, n_first, act)
        middle = np.empty((_stack_rows(layers, blk[B2_PI] + 1, n_pi_layers - 2), n_pairs), dt)
        h = _atoms_stack(h, flat, table, layers, blk[B2_PI] + 1, n_pi_layers - 2, middle, 0, act)
        last = layers[blk[B2_PI] + n_pi_layers - 1]
        kernel = _tensor(flat, table, last[LAYER_KERNEL])
        n_h = kernel.shape[0]
        n_pi = kernel.shape[1] // n_basis
        boff = table[last[LAYER_BIAS], 0]
        inter_pi = np.zeros((n_pi, n_pairs), dt)
        u = np.empty((n_pi, n_pairs), dt)
        for b in range(n_basis):
            _tile_matmul(h, kernel[:, b::n_basis], u, n_h, n_pi)
            for c in range(n_pi):
                bc = flat[boff + c * n_basis + b]
                for p in range(n_pairs):
                    inter_pi[c, p] += (u[c, p] + bc) * e[b, p]
        kept.append(x0)
        kept.append(np.ascontiguousarray(h))
        kept.append(middle)
    z_ii = np.empty((_stack_rows(layers, blk[B2_II], blk[B2_N_II]), n_pairs), dt)
    inter = _atoms_stack(inter_pi, flat, table, layers, blk[B2_II], blk[B2_N_II], z_ii, 0, act)
    kept.append(z_ii)
    return np.ascontiguousarray(inter)


@_jit()
def _path_forward(px, inter, n_inter, part, dirs, pair_i, pair_j, flat, table, layers, blk, path, first, n_atoms,
                  kept_pair, kept_atom):
    """One equivariant path of a block: (new features V [m·C, n_atoms], dot products [C, n_atoms]).

    ``px``: the incoming features [m·C, n_atoms]; ``inter``: the interactions, whose rows ``part`` ·
    ``n_inter`` … are this path's; ``dirs``: [m, n_pairs] (u or its rank-2 components).  Keeps the pair
    terms (per pair) and V, and for the weighted dot its two mixings (per atom)."""
    col = B2_PATH + PATH_COLUMNS * path
    m = dirs.shape[0]
    n_pairs = dirs.shape[1]
    dt = inter.dtype
    pair = np.empty((m * n_inter, n_pairs), dt)
    for k in range(m):
        for c in range(n_inter):
            for p in range(n_pairs):
                pair[k * n_inter + c, p] = dirs[k, p]
    if not first:
        if blk[col + PATH_PAIR_I] >= 0:  # weighted: P_i W + P_j W'
            w_i = _tensor(flat, table, layers[blk[col + PATH_PAIR_I], LAYER_KERNEL])
            w_j = _tensor(flat, table, layers[blk[col + PATH_PAIR_J], LAYER_KERNEL])
            side_i = np.empty((m * n_inter, n_atoms), dt)
            side_j = np.empty((m * n_inter, n_atoms), dt)
            _mix(px, w_i, m, side_i)
            _mix(px, w_j, m, side_j)
            _gather_sum(side_i, side_j, pair_i, pair_j, m * n_inter, pair)
        else:
            for r in range(m * n_inter):
                for p in range(n_pairs):
                    pair[r, p] += px[r, pair_j[p]]
    summed = np.zeros((m * n_inter, n_atoms), dt)
    for k in range(m):
        for c in range(n_inter):
            for p in range(n_pairs):
                summed[k * n_inter + c, pair_i[p]] += pair[k * n_inter + c, p] * inter[part * n_inter + c, p]
    w_pp = _tensor(flat, table, layers[blk[col + PATH_PP], LAYER_KERNEL])
    n_out = w_pp.shape[1]
    v = np.empty((m * n_out, n_atoms), dt)
    _mix(summed, w_pp, m, v)
    dots = np.zeros((n_out, n_atoms), dt)
    kept_pair.append(pair)
    kept_atom.append(v)
    if blk[col + PATH_DOT_A] >= 0:
        mixed_a = np.empty((m * n_out, n_atoms), dt)
        mixed_b = np.empty((m * n_out, n_atoms), dt)
        _mix(v, _tensor(flat, table, layers[blk[col + PATH_DOT_A], LAYER_KERNEL]), m, mixed_a)
        _mix(v, _tensor(flat, table, layers[blk[col + PATH_DOT_B], LAYER_KERNEL]), m, mixed_b)
        for k in range(m):
            for c in range(n_out):
                for a in range(n_atoms):
                    dots[c, a] += mixed_a[k * n_out + c, a] * mixed_b[k * n_out + c, a]
        kept_atom.append(mixed_a)
        kept_atom.append(mixed_b)
    else:
        for k in range(m):
            for c in range(n_out):
                for a in range(n_atoms):
                    dots[c, a] += v[k * n_out + c, a] * v[k * n_out + c, a]
        kept_atom.append(v)
        kept_atom.append(v)
    return v, dots


@_jit()
def _path_backward(g_new, scales, inter, n_inter, part, dirs, pair_i, pair_j, flat, table, layers, blk, path,
                   first, g_dots, pair, v, mixed_a, mixed_b, g_inter, g_dirs, g_px):
    """The reverse of :func:`_path_forward` and of the scaling P' = V S (whose ∂E/∂S
    :func:`_add_scale_grad` takes): from ∂E/∂P' (``g_new``) and ∂E/∂D (``g_dots``) adds ∂E/∂I to ``g_inter``
    (this path's rows), ∂E/∂dirs to ``g_dirs`` and, past the first block, ∂E/∂(incoming features) to
    ``g_px``."""
    col = B2_PATH + PATH_COLUMNS * path
    m = dirs.shape[0]
    n_pairs = dirs.shape[1]
    n_atoms = v.shape[1]
    dt = v.dtype
    w_pp = _tensor(flat, table, layers[blk[col + PATH_PP], LAYER_KERNEL])
    n_out = w_pp.shape[1]
    g_v = np.empty((m * n_out, n_atoms), dt)
    for k in range(m):
        for c in range(n_out):
            r = k * n_out + c
            for a in range(n_atoms):
                g_v[r, a] = g_new[r, a] * scales[part * n_inter + c, a]
    if blk[col + PATH_DOT_A] >= 0:
        w_a = _tensor(flat, table, layers[blk[col + PATH_DOT_A], LAYER_KERNEL])
        w_b = _tensor(flat, table, layers[blk[col + PATH_DOT_B], LAYER_KERNEL])
        t_a = np.empty((m * n_out, n_atoms), dt)
        t_b = np.empty((m * n_out, n_atoms), dt)
        for k in range(m):
            for c in range(n_out):
                r = k * n_out + c
                for a in range(n_atoms):
                    t_a[r, a] = g_dots[c, a] * mixed_b[r, a]
                    t_b[r, a] = g_dots[c, a] * mixed_a[r, a]
        _mix_back(t_a, w_a, m, g_v, True)
        _mix_back(t_b, w_b, m, g_v, True)
    else:
        for k in range(m):
            for c in range(n_out):
                r = k * n_out + c
                for a in range(n_atoms):
                    g_v[r, a] += 2.0 * g_dots[c, a] * v[r, a]
    g_summed = np.empty((m * n_inter, n_atoms), dt)
    _mix_back(g_v, w_pp, m, g_summed)
    g_pair = np.empty((m * n_inter, n_pairs), dt)
    for k in range(m):
        for c in range(n_inter):
            r = k * n_inter + c
            for p in range(n_pairs):
                g = g_summed[r, pair_i[p]]
                g_inter[part * n_inter + c, p] += g * pair[r, p]
                g_pair[r, p] = g * inter[part * n_inter + c, p]
    for k in range(m):
        for c in range(n_inter):
            for p in range(n_pairs):
                g_dirs[k, p] += g_pair[k * n_inter + c, p]
    if first:
        return
    if blk[col + PATH_PAIR_I] >= 0:
        by_i = np.zeros((m * n_inter, n_atoms), dt)
        by_j = np.zeros((m * n_inter, n_atoms), dt)
        _scatter(g_pair, pair_i, by_i)
        _scatter(g_pair, pair_j, by_j)
        _mix_back(by_i, _tensor(flat, table, layers[blk[col + PATH_PAIR_I], LAYER_KERNEL]), m, g_px, True)
        _mix_back(by_j, _tensor(flat, table, layers[blk[col + PATH_PAIR_J], LAYER_KERNEL]), m, g_px, True)
    else:
        _scatter(g_pair, pair_j, g_px)


@_jit()
def evaluate(types, pair_i, pair_j, diff, dist, flat, table, layers, blocks, codes, scal, charge_seed, atomic,
             charge, g_diff):
    """Atomic energies and ∂E/∂(r_j − r_i) per pair of one structure (and a second output per atom, as
    :func:`pinn.engines.numba.md_kernels._evaluate` has it: the charges of an electrostatic embedding, whose
    energy's derivative the reverse pass takes from ``charge_seed``).

    Args:
        types: [n_atoms] int64 indices into atom_types.
        pair_i, pair_j: [n_pairs] int32 atoms of the pairs within the cutoff.
        diff: [n_pairs, 3] float64 r_j + offset − r_i (Å); dist: [n_pairs] float64 its length (Å).
        flat, table, layers, blocks, codes, scal: :meth:`pinn.engines.spec.PiNet2Spec.arrays`.
        charge_seed: [n_atoms] ∂E/∂(second output) (eV/e); read for two outputs only.
        atomic: [n_atoms] output, e_scale × the network's atomic energy (eV, no e_dress).
        charge: [n_atoms] output, the second output (e); written for two outputs only.
        g_diff: [>= n_pairs, 3] float64 output, ∂E/∂diff (eV/Å).
    """
    n_atoms = types.shape[0]
    n_pairs = pair_i.shape[0]
    depth = blocks.shape[0]
    act = codes[CODE_ACT]
    n_basis = codes[CODE_N_BASIS]
    e_scale = scal[2]
    dt = flat.dtype
    dist_dt = np.empty(n_pairs, dt)
    for p in range(n_pairs):
        dist_dt[p] = dist[p]
    e = np.zeros((n_basis, n_pairs), dt)
    de = np.zeros((n_basis, n_pairs), dt)
    radial_basis_tile(0, n_pairs, dist_dt, codes, scal, e, de)
    u3, u5 = directions(n_pairs, diff, dist, flat)
    n_inter = blocks[0, B2_N_INTER]
    vectors = blocks[0, B2_PATH + PATH_PP] >= 0
    tensors = blocks[0, B2_PATH + PATH_COLUMNS + PATH_PP] >= 0
    n_parts = 1 + int(vectors) + int(tensors)
    units0 = _tensor(flat, table, layers[blocks[0, B2_UNITS], LAYER_KERNEL])
    two = units0.shape[1] > 1
    p1 = np.zeros((len_types(blocks, layers, flat, table), n_atoms), dt)
    for a in range(n_atoms):
        p1[types[a], a] = 1.0
        atomic[a] = 0.0
        if two:
            charge[a] = 0.0
    p3 = np.zeros((3 * n_inter, n_atoms), dt)
    p5 = np.zeros((5 * n_inter, n_atoms), dt)
    kept_pair = [e]
    kept_atom = [p1]
    for d in range(depth):
        blk = blocks[d]
        kept_atom.append(p1)
        inter = _pair_interactions(p1, pair_i, pair_j, e, flat, table, layers, blk, act, kept_pair)
        kept_pair.append(inter)
        summed = np.zeros((n_parts * n_inter, n_atoms), dt)
        _scatter(inter, pair_i, summed)
        z_pp = np.empty((_stack_rows(layers, blk[B2_PP], blk[B2_N_PP]), n_atoms), dt)
        q = _atoms_stack(summed, flat, table, layers, blk[B2_PP], blk[B2_N_PP], z_pp, 0, act)
        kept_atom.append(z_pp)
        n_pp = q.shape[0]
        mix_in = np.empty((n_parts * n_pp, n_atoms), dt)
        mix_in[:n_pp] = q
        v3 = p3
        v5 = p5
        if vectors:
            v3, dots3 = _path_forward(p3, inter, n_inter, 1, u3, pair_i, pair_j, flat, table, layers, blk, 0, d == 0,
                                      n_atoms, kept_pair, kept_atom)
            mix_in[n_pp:2 * n_pp] = dots3
        else:
            kept_pair.append(e)
            kept_atom.append(p1)
            kept_atom.append(p1)
            kept_atom.append(p1)
        if tensors:
            v5, dots5 = _path_forward(p5, inter, n_inter, 2, u5, pair_i, pair_j, flat, table, layers, blk, 1, d == 0,
                                      n_atoms, kept_pair, kept_atom)
            mix_in[2 * n_pp:3 * n_pp] = dots5
        else:
            kept_pair.append(e)
            kept_atom.append(p1)
            kept_atom.append(p1)
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
        p5 = _scaled_sum(p5, v5, scales, 2, n_inter) if tensors else p5
    # ---- reverse pass
    g_e = np.zeros((n_basis, n_pairs), dt)
    g_u3 = np.zeros((3, n_pairs), dt)
    g_u5 = np.zeros((5, n_pairs), dt)
    g_p1 = np.zeros((n_inter, n_atoms), dt)
    g_p3 = np.zeros((3 * n_inter, n_atoms), dt)
    g_p5 = np.zeros((5 * n_inter, n_atoms), dt)
    for d in range(depth - 1, -1, -1):
        blk = blocks[d]
        kp = 1 + d * PAIR_KEPT
        ka = 1 + d * ATOM_KEPT
        x0, h, middle, z_ii, inter = (kept_pair[kp], kept_pair[kp + 1], kept_pair[kp + 2], kept_pair[kp + 3],
                                      kept_pair[kp + 4])
        pair3, pair5 = kept_pair[kp + 5], kept_pair[kp + 6]
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
        g_inter = np.zeros((n_parts * n_inter, n_pairs), dt)
        # the mixing net's seed ∂E/∂S (the scalings' part too) before the paths' reverse, which needs its ∂E/∂D
        if vectors:
            _add_scale_grad(g_p3, v3, g_scales, 1, n_inter)
        if tensors:
            _add_scale_grad(g_p5, v5, g_scales, 2, n_inter)
        g_mix_in = _atoms_stack_back(g_scales, flat, table, layers, blk[B2_MIX], blk[B2_N_MIX], z_mix, 0, act)
        n_pp = g_mix_in.shape[0] // n_parts
        g_px3 = np.zeros((3 * n_inter, n_atoms), dt)
        g_px5 = np.zeros((5 * n_inter, n_atoms), dt)
        if vectors:
            _path_backward(g_p3, scales, inter, n_inter, 1, u3, pair_i, pair_j, flat, table, layers, blk, 0, d == 0,
                           np.ascontiguousarray(g_mix_in[n_pp:2 * n_pp]), pair3, v3, a3, b3, g_inter, g_u3, g_px3)
        if tensors:
            _path_backward(g_p5, scales, inter, n_inter, 2, u5, pair_i, pair_j, flat, table, layers, blk, 1, d == 0,
                           np.ascontiguousarray(g_mix_in[2 * n_pp:3 * n_pp]), pair5, v5, a5, b5, g_inter, g_u5, g_px5)
        g_summed = _atoms_stack_back(np.ascontiguousarray(g_mix_in[:n_pp]), flat, table, layers, blk[B2_PP],
                                     blk[B2_N_PP], z_pp, 0, act)
        for c in range(n_parts * n_inter):
            for p in range(n_pairs):
                g_inter[c, p] += g_summed[c, pair_i[p]]
        g_x0 = _interactions_backward(g_inter, e, x0, h, middle, z_ii, flat, table, layers, blk, act, g_e)
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
        n_first = w1.shape[1]
        by_i = np.zeros((n_first, n_atoms), dt)
        by_j = np.zeros((n_first, n_atoms), dt)
        _scatter(g_x0, pair_i, by_i)
        _scatter(g_x0, pair_j, by_j)
        _tile_matmul_t(by_i, w1[:n_in], g_prev, n_in, n_first, True)
        _tile_matmul_t(by_j, w1[n_in:], g_prev, n_in, n_first, True)
        g_p1 = g_prev
        for r in range(3 * n_inter):
            for a in range(n_atoms):
                g_p3[r, a] += g_px3[r, a]
        for r in range(5 * n_inter):
            for a in range(n_atoms):
                g_p5[r, a] += g_px5[r, a]
    pair_gradients(n_pairs, diff, dist, de, g_e, g_u3, g_u5, u3, g_diff)


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
    """The reverse of :func:`_pair_interactions`: ∂E/∂(first PI layer's pre-activation) [n_first, n_pairs]; adds
    ∂E/∂e_b to ``g_e``."""
    n_basis = e.shape[0]
    n_pairs = e.shape[1]
    dt = e.dtype
    g_pi = _atoms_stack_back(g_inter, flat, table, layers, blk[B2_II], blk[B2_N_II], z_ii, 0, act)
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
    g_h = _atoms_stack_back(g_h, flat, table, layers, blk[B2_PI] + 1, n_pi_layers - 2, middle, 0, act)
    g_x0 = np.ascontiguousarray(g_h)
    _dact_tile(x0, g_x0, x0.shape[0], act)
    return g_x0


@_jit()
def pair_gradients(n_pairs, diff, dist, de, g_e, g_u3, g_u5, u3, g_diff):
    """∂E/∂diff per pair from ∂E/∂e_b (through de_b/dr), ∂E/∂u and ∂E/∂(rank-2 components of u):
    g = (Σ_b ∂E/∂e_b de_b/dr) u + (1 − u u^T) ĝ / r, with ĝ = ∂E/∂u + J^T ∂E/∂u5 (J: d u5 / d u)."""
    for p in range(n_pairs):
        g_r = 0.0
        for b in range(de.shape[0]):
            g_r += g_e[b, p] * de[b, p]
        x = diff[p, 0] / dist[p]
        y = diff[p, 1] / dist[p]
        z = diff[p, 2] / dist[p]
        a0, a1, a2, a3, a4 = g_u5[0, p], g_u5[1, p], g_u5[2, p], g_u5[3, p], g_u5[4, p]
        gx = g_u3[0, p] + _SQRT2 * (y * a0 + z * a1 + x * a3) - 2.0 * x * a4 / _SQRT6
        gy = g_u3[1, p] + _SQRT2 * (x * a0 + z * a2 - y * a3) - 2.0 * y * a4 / _SQRT6
        gz = g_u3[2, p] + _SQRT2 * (x * a1 + y * a2) + 4.0 * z * a4 / _SQRT6
        along = x * gx + y * gy + z * gz
        r = dist[p]
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
