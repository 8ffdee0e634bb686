"""Training gradients of PiNet potentials in Numba kernels (``model.params.engine: numba``).

The TensorFlow training step differentiates twice with nested gradient tapes: forces are the
gradient of the energy, and the force loss's gradient with respect to the weights is a second
derivative.  Here the same gradient is computed by hand, in compiled kernels that work on
tiles of pairs held in cache (those of the MD engine, :mod:`pinn.fast_pinet`), from one
identity: with ``v_i = ∂L/∂F_i`` held fixed,

    Σ_i v_i · ∂F_i/∂θ = ∂/∂θ (∇_x E · w),   w = −v

the weight derivative of the energy's directional derivative along the displacements ``w``.
A step is three passes over the pairs:

1. energies and ∂E/∂r per pair (the MD engine's kernel), hence forces, errors, the loss and
   its derivatives ``∂L/∂E_s`` per structure and ``v = ∂L/∂F`` per atom (NumPy);
2. the network forward once more, each value carrying its tangent along ``w`` (the radial
   basis's tangent is ``e'(r) ṙ``, ``ṙ_p = diff_p · (w_j − w_i) / r_p``), the values and the
   tangents kept per pair and per atom;
3. one reverse pass through both, seeded with ``∂L/∂E_s`` at each structure's energy and 1 at
   the tangent of the total energy.  Per tanh layer ``y = tanh(Wᵀs + b)`` with tangent ``ẏ``
   and the two adjoints ``ȳ`` (of the value) and ``ȳ₁`` (of the tangent, which is ∂E/∂y):

       ā₁ = (1 − y²) ȳ₁,   ā = (1 − y²) ȳ − 2 y ẏ ȳ₁,
       W̄ += s āᵀ + ṡ ā₁ᵀ,  b̄ += Σ ā,  s̄ = W ā,  s̄₁ = W ā₁.

Positions do not depend on the weights, so the basis functions and their derivatives are
constants of pass 3: no second derivative of the cutoff or the basis is needed.

Supported: PiNet with tanh activations and at least one hidden PI layer (the default
``pi_nodes``), the energy and force loss terms (``mse`` or ``huber``, per-atom energies
too), float32 or float64.  :func:`check_supported` names what is not.

Numbers: the gradients equal TensorFlow's to float rounding (tested against the tape's, float64:
~1e-10 relative; float32: ~1e-5, float32 sums in a different order).  The kernels compile on
first use (about a minute) and are cached on disk by Numba.
"""
import math

import numpy as np

from pinn import keys as K
from pinn.fast_pinet import (_B_II, _B_NII, _B_NOUT, _B_NPI, _B_NPP, _B_OUT, _B_PI, _B_PP, _B_RES, _B_UNITS,
                             _B_WIN, _B_WOUT, _TANH_FAST, _jit, _spread_by_first_atom, _sum_by_first_atom, _tanh32,
                             _tensor, _tile_matmul, _tile_matmul_t)

try:
    import numba
    from numba import prange
except ImportError:  # pragma: no cover - numba is a dependency
    numba = None
    prange = range


# ------------------------------------------------------------------ layers with tangents
@_jit()
def _tanh_rows(y, yd, flat, boff, n, code):
    """y[:n] = tanh(y + b) and yd[:n] *= 1 − y²: a layer's value and tangent from its pre-activation
    ``y`` and the pre-activation's tangent ``yd`` (b at ``flat[boff:]``)."""
    n_t = y.shape[1]
    for c in range(n):
        bc = flat[boff + c]
        if code == _TANH_FAST:
            for t in range(n_t):
                v = _tanh32(y[c, t] + bc)
                y[c, t] = v
                yd[c, t] = yd[c, t] - yd[c, t] * v * v
        else:
            for t in range(n_t):
                v = math.tanh(y[c, t] + bc)
                y[c, t] = v
                yd[c, t] = yd[c, t] - yd[c, t] * v * v


@_jit()
def _layer_fwd(Y, D, in_row, n_in, out_row, n_out, w, flat, boff, code):
    """A tanh layer on rows of ``Y`` (values) and ``D`` (tangents), [rows, columns]: rows
    ``out_row``.. get tanh(Wᵀ s + b) and its tangent from the input rows ``in_row``.."""
    y = Y[out_row:out_row + n_out]
    yd = D[out_row:out_row + n_out]
    _tile_matmul(Y[in_row:in_row + n_in], w, y, n_in, n_out)
    _tile_matmul(D[in_row:in_row + n_in], w, yd, n_in, n_out)
    _tanh_rows(y, yd, flat, boff, n_out, code)


@_jit()
def _outer_acc(s, a, g, n_in, n_out):
    """g[k, c] += Σ_t s[k, t] a[c, t]: a layer's weight gradient from one tile (or all atoms).

    Register-blocked: two rows of ``s`` by four of ``a`` per pass, eight vector accumulators
    (74 GFLOP/s on one core for 16 × 16 on 256-pair tiles, against 21 with one row of ``s``
    by four; the accumulators must have the arrays' dtype, or nothing vectorises).
    """
    n_t = a.shape[1]
    zero = np.zeros(1, g.dtype)[0]
    k2 = n_in - n_in % 2
    c4 = n_out - n_out % 4
    for k in range(0, k2, 2):
        s0, s1 = s[k], s[k + 1]
        for c in range(0, c4, 4):
            a0, a1, a2, a3 = a[c], a[c + 1], a[c + 2], a[c + 3]
            x0 = x1 = x2 = x3 = y0 = y1 = y2 = y3 = zero
            for t in range(n_t):
                u, v = s0[t], s1[t]
                b0, b1, b2, b3 = a0[t], a1[t], a2[t], a3[t]
                x0 += u * b0
                x1 += u * b1
                x2 += u * b2
                x3 += u * b3
                y0 += v * b0
                y1 += v * b1
                y2 += v * b2
                y3 += v * b3
            g[k, c] += x0
            g[k, c + 1] += x1
            g[k, c + 2] += x2
            g[k, c + 3] += x3
            g[k + 1, c] += y0
            g[k + 1, c + 1] += y1
            g[k + 1, c + 2] += y2
            g[k + 1, c + 3] += y3
        for c in range(c4, n_out):
            ac = a[c]
            x0 = y0 = zero
            for t in range(n_t):
                x0 += s0[t] * ac[t]
                y0 += s1[t] * ac[t]
            g[k, c] += x0
            g[k + 1, c] += y0
    for k in range(k2, n_in):
        sk = s[k]
        for c in range(n_out):
            ac = a[c]
            x0 = zero
            for t in range(n_t):
                x0 += sk[t] * ac[t]
            g[k, c] += x0


@_jit()
def _tanh_back(y, yd, ab, ab1, n):
    """Adjoints of a tanh layer's output (``ab`` of the value, ``ab1`` of the tangent, [n, columns])
    turned into those of its pre-activation, in place (see the module docstring)."""
    for c in range(n):
        for t in range(ab.shape[1]):
            v = y[c, t]
            b1 = ab1[c, t]
            q = v * yd[c, t] * b1
            b = ab[c, t]
            ab[c, t] = b - b * v * v - q - q
            ab1[c, t] = b1 - b1 * v * v


@_jit()
def _layer_back(Y, D, in_row, n_in, out_row, n_out, w, gw, gflat, gboff, ab, ab1, sb, sb1):
    """The reverse of :func:`_layer_fwd`: ``ab``/``ab1`` [n_out, columns] hold the adjoints of the
    output (value, tangent) on entry; the weight and bias gradients are added to ``gw`` and
    ``gflat[gboff:]``; ``sb``/``sb1`` get the input's adjoints."""
    _tanh_back(Y[out_row:out_row + n_out], D[out_row:out_row + n_out], ab, ab1, n_out)
    _outer_acc(Y[in_row:in_row + n_in], ab, gw, n_in, n_out)
    _outer_acc(D[in_row:in_row + n_in], ab1, gw, n_in, n_out)
    zero = np.zeros(1, gflat.dtype)[0]
    for c in range(n_out):
        s = zero
        for t in range(ab.shape[1]):
            s += ab[c, t]
        gflat[gboff + c] += s
    _tile_matmul_t(ab, w, sb, n_in, n_out)
    _tile_matmul_t(ab1, w, sb1, n_in, n_out)


# ------------------------------------------------------------------ pair tiles
@_jit()
def _pair_fwd(tile, n_pairs, pair_i, pair_j, e, ed, pa, pb, pad, pbd, flat, table, layers, blk, code, Y, D, sc,
              starts, out, outd):
    """One tile of pairs forward with tangents: the PI and II nets, values kept in ``Y`` and
    tangents in ``D`` ([rows, tile]: the first PI layer's output, the hidden PI outputs, the
    interactions I, the II outputs), the last II output and its tangent summed by first atom
    into ``out``/``outd`` [n_atoms, n_ii].  ``e``/``ed``: the basis and its tangent [n_basis, tile];
    ``pa``/``pb`` (``pad``/``pbd``): the first PI layer per atom [n_first, n_atoms] and tangents."""
    n_t = e.shape[1]
    p0 = tile * n_t
    n_valid = min(n_t, n_pairs - p0)
    n_basis = e.shape[0]
    n_first = pa.shape[0]
    u = sc[0]
    x = Y[0:n_first]
    xd = D[0:n_first]
    n_runs = _spread_by_first_atom(pa, n_first, pair_i, p0, n_valid, starts, x)
    _spread_by_first_atom(pad, n_first, pair_i, p0, n_valid, starts, xd)
    for c in range(n_first):
        row_b, row_bd = pb[c], pbd[c]
        for t in range(n_valid):
            j = pair_j[p0 + t]
            x[c, t] += row_b[j]
            xd[c, t] += row_bd[j]
    first = layers[blk[_B_PI]]
    _tanh_rows(x, xd, flat, table[first[1], 0], n_first, code)
    row, n_h = 0, n_first
    for layer in range(blk[_B_PI] + 1, blk[_B_PI] + blk[_B_NPI] - 1):
        w = _tensor(flat, table, layers[layer, 0])
        _layer_fwd(Y, D, row, n_h, row + n_h, w.shape[1], w, flat, table[layers[layer, 1], 0], code)
        row += n_h
        n_h = w.shape[1]
    # I_c = Σ_b e_b (h K_b + β_b)_c;  İ_c = Σ_b ė_b (h K_b + β_b)_c + e_b (ḣ K_b)_c
    h = Y[row:row + n_h]
    hd = D[row:row + n_h]
    pi_out = layers[blk[_B_PI] + blk[_B_NPI] - 1]
    kernel = _tensor(flat, table, pi_out[0])
    n_pi = kernel.shape[1] // n_basis
    boff = table[pi_out[1], 0]
    i_row = row + n_h
    inter = Y[i_row:i_row + n_pi]
    interd = D[i_row:i_row + n_pi]
    for c in range(n_pi):
        for t in range(n_t):
            inter[c, t] = 0.0
            interd[c, t] = 0.0
    for b in range(n_basis):
        kb = kernel[:, b::n_basis]
        _tile_matmul(h, kb, u, n_h, n_pi)
        for c in range(n_pi):
            bc = flat[boff + c * n_basis + b]
            for t in range(n_t):
                v = u[c, t] + bc
                inter[c, t] += v * e[b, t]
                interd[c, t] += v * ed[b, t]
        _tile_matmul(hd, kb, u, n_h, n_pi)
        for c in range(n_pi):
            for t in range(n_t):
                interd[c, t] += u[c, t] * e[b, t]
    row, n_h = i_row, n_pi
    for layer in range(blk[_B_II], blk[_B_II] + blk[_B_NII]):
        w = _tensor(flat, table, layers[layer, 0])
        _layer_fwd(Y, D, row, n_h, row + n_h, w.shape[1], w, flat, table[layers[layer, 1], 0], code)
        row += n_h
        n_h = w.shape[1]
    _sum_by_first_atom(Y[row:row + n_h], n_h, pair_i, p0, n_runs, starts, out)
    _sum_by_first_atom(D[row:row + n_h], n_h, pair_i, p0, n_runs, starts, outd)


@_jit()
def _pair_back(tile, n_pairs, pair_i, pair_j, e, ed, gnew, gnew1, flat, table, layers, blk, Y, D, sc, starts,
               ga, gb, ga1, gb1, gflat):
    """The reverse of :func:`_pair_fwd` for one tile: from the adjoints of the block's new properties
    (``gnew`` of the value, ``gnew1`` of the tangent, [n_ii, n_atoms]) the weight gradients of the
    PI and II nets (added to ``gflat``) and the adjoints of the first PI layer's per-atom values
    (added to ``ga``/``gb`` and ``ga1``/``gb1``, [n_atoms, n_first])."""
    n_t = e.shape[1]
    p0 = tile * n_t
    n_valid = min(n_t, n_pairs - p0)
    n_basis = e.shape[0]
    n_first = ga.shape[1]
    ab, ab1, sb, sb1, hb, hb1, tmp = sc[0], sc[1], sc[2], sc[3], sc[4], sc[5], sc[6]
    # rows: the last PI hidden output (h), I, then the II layers
    row, n_h = 0, n_first
    for layer in range(blk[_B_PI] + 1, blk[_B_PI] + blk[_B_NPI] - 1):
        row += n_h
        n_h = layers[layer, 3]
    h_row = row
    pi_out = layers[blk[_B_PI] + blk[_B_NPI] - 1]
    kernel = _tensor(flat, table, pi_out[0])
    gkernel = _tensor(gflat, table, pi_out[0])
    n_pi = kernel.shape[1] // n_basis
    i_row = h_row + n_h
    end = i_row + n_pi
    for layer in range(blk[_B_II], blk[_B_II] + blk[_B_NII]):
        end += layers[layer, 3]
    n_last = layers[blk[_B_II] + blk[_B_NII] - 1, 3]
    n_runs = _spread_by_first_atom(gnew, n_last, pair_i, p0, n_valid, starts, ab)
    _spread_by_first_atom(gnew1, n_last, pair_i, p0, n_valid, starts, ab1)
    row = end
    for layer in range(blk[_B_II] + blk[_B_NII] - 1, blk[_B_II] - 1, -1):
        w = _tensor(flat, table, layers[layer, 0])
        n_in, n_out = w.shape
        row -= n_out
        _layer_back(Y, D, row - n_in, n_in, row, n_out, w, _tensor(gflat, table, layers[layer, 0]), gflat,
                    table[layers[layer, 1], 0], ab, ab1, sb, sb1)
        ab, sb = sb, ab
        ab1, sb1 = sb1, ab1
    # ab, ab1: adjoints of I.  ū_b = e_b Ī + ė_b Ī₁, ū₁_b = e_b Ī₁ (u_b = h K_b)
    h = Y[h_row:h_row + n_h]
    hd = D[h_row:h_row + n_h]
    for k in range(n_h):
        for t in range(n_t):
            hb[k, t] = 0.0
            hb1[k, t] = 0.0
    boff = table[pi_out[1], 0]
    zero = np.zeros(1, gflat.dtype)[0]
    for b in range(n_basis):
        for c in range(n_pi):
            s = zero
            for t in range(n_t):
                v = e[b, t] * ab[c, t] + ed[b, t] * ab1[c, t]
                sb[c, t] = v
                sb1[c, t] = e[b, t] * ab1[c, t]
                s += v
            gflat[boff + c * n_basis + b] += s
        kb = kernel[:, b::n_basis]
        gkb = gkernel[:, b::n_basis]
        _outer_acc(h, sb, gkb, n_h, n_pi)
        _outer_acc(hd, sb1, gkb, n_h, n_pi)
        _tile_matmul_t(sb, kb, tmp, n_h, n_pi)
        for k in range(n_h):
            for t in range(n_t):
                hb[k, t] += tmp[k, t]
        _tile_matmul_t(sb1, kb, tmp, n_h, n_pi)
        for k in range(n_h):
            for t in range(n_t):
                hb1[k, t] += tmp[k, t]
    ab, ab1 = hb, hb1
    row = h_row
    for layer in range(blk[_B_PI] + blk[_B_NPI] - 2, blk[_B_PI], -1):
        w = _tensor(flat, table, layers[layer, 0])
        n_in, n_out = w.shape
        _layer_back(Y, D, row - n_in, n_in, row, n_out, w, _tensor(gflat, table, layers[layer, 0]), gflat,
                    table[layers[layer, 1], 0], ab, ab1, sb, sb1)
        ab, sb = sb, ab
        ab1, sb1 = sb1, ab1
        row -= n_in
    # the first PI layer: its pre-activation's adjoints, summed per atom
    _tanh_back(Y[0:n_first], D[0:n_first], ab, ab1, n_first)
    _sum_by_first_atom(ab, n_first, pair_i, p0, n_runs, starts, ga)
    _sum_by_first_atom(ab1, n_first, pair_i, p0, n_runs, starts, ga1)
    for t in range(n_valid):
        j = pair_j[p0 + t]
        for c in range(n_first):
            gb[j, c] += ab[c, t]
            gb1[j, c] += ab1[c, t]


# ------------------------------------------------------------------ passes 2 and 3
@_jit()
def _atom_rows(layers, blk):
    """Rows of a block's per-atom arrays: (input P, then the PP outputs: start of the last PP
    output Q and its width; start of the new properties; start of the first output-net row)."""
    row, n_h = 0, blk[_B_WIN]
    for layer in range(blk[_B_PP], blk[_B_PP] + blk[_B_NPP]):
        row += n_h
        n_h = layers[layer, 3]
    new_row = row + n_h
    return row, n_h, new_row


@_jit(parallel=True)
def _weight_gradients(types, n_pairs, pair_i, pair_j, rdot, flat, table, layers, blocks, codes, scal, n_chunks,
                      basis, dbasis, c_atom, keep, tang, aty, atd, pa, pb, pad, pbd, buf, gchunk, gflat):
    """Passes 2 and 3 (see the module docstring): the loss's gradient with respect to the weights.

    Args:
        types: [n_atoms] int64 indices into atom_types.
        n_pairs, pair_i, pair_j: the pairs, sorted by first atom.
        rdot: [>= n_pairs] ṙ per pair, the tangent of the distance along w (Å per unit of w).
        flat, table, layers, blocks, codes, scal: the network (:func:`pinn.fast_pinet.pinet_arrays`).
        n_chunks: the pair tiles are split into this many chunks, one per thread.
        basis, dbasis: [n_tiles, n_basis, tile] the basis and its r-derivative per pair (pass 1's).
        c_atom: [n_atoms] ∂L/∂E of each atom's structure (per eV).
        keep, tang: [depth, n_tiles, rows, tile] per-pair values and tangents (workspace).
        aty, atd: [depth, rows, n_atoms] per-atom values and tangents (workspace).
        pa, pb, pad, pbd: [depth, n_first, n_atoms] workspace.
        buf: [n_chunks, 4, n_atoms, width] workspace.
        gchunk: [n_chunks, n_flat] workspace; gflat: [n_flat] output, ∂L/∂(each weight) in ``flat``'s layout.
    """
    n_atoms = types.shape[0]
    depth = blocks.shape[0]
    code, n_basis, width = codes[0], codes[3], codes[4]
    e_scale = scal[2]
    n_t = basis.shape[2]
    n_tiles = (n_pairs + n_t - 1) // n_t
    tiles_per_chunk = (n_tiles + n_chunks - 1) // n_chunks
    dt = flat.dtype
    ebt = np.empty_like(basis[:n_tiles])  # the basis's tangent ė = e'(r) ṙ
    for tile in prange(n_tiles):
        for t in range(n_t):
            p = tile * n_t + t
            r = rdot[p] if p < n_pairs else 0.0
            for b in range(n_basis):
                ebt[tile, b, t] = dbasis[tile, b, t] * r
    for i in range(gflat.shape[0]):
        gflat[i] = 0.0
    # ---- pass 2: forward with tangents
    for d in range(depth):
        blk = blocks[d]
        Y, D = aty[d], atd[d]
        w_in, w_out = blk[_B_WIN], blk[_B_WOUT]
        if d == 0:
            for c in range(w_in):
                for a in range(n_atoms):
                    Y[c, a] = 0.0
                    D[c, a] = 0.0
            for a in range(n_atoms):
                Y[types[a], a] = 1.0
        row, n_h = 0, w_in
        for layer in range(blk[_B_PP], blk[_B_PP] + blk[_B_NPP]):
            w = _tensor(flat, table, layers[layer, 0])
            _layer_fwd(Y, D, row, n_h, row + n_h, w.shape[1], w, flat, table[layers[layer, 1], 0], code)
            row += n_h
            n_h = w.shape[1]
        q_row, n_pp, new_row = _atom_rows(layers, blk)
        first = layers[blk[_B_PI]]
        kernel = _tensor(flat, table, first[0])
        n_first = kernel.shape[1]
        _tile_matmul(Y[q_row:q_row + n_pp], kernel[:n_pp], pa[d], n_pp, n_first)
        _tile_matmul(Y[q_row:q_row + n_pp], kernel[n_pp:], pb[d], n_pp, n_first)
        _tile_matmul(D[q_row:q_row + n_pp], kernel[:n_pp], pad[d], n_pp, n_first)
        _tile_matmul(D[q_row:q_row + n_pp], kernel[n_pp:], pbd[d], n_pp, n_first)
        for chunk in prange(n_chunks):
            out, outd = buf[chunk, 0, :, :w_out], buf[chunk, 1, :, :w_out]
            for a in range(n_atoms):
                for c in range(w_out):
                    out[a, c] = 0.0
                    outd[a, c] = 0.0
            sc = np.empty((1, width, n_t), dt)
            starts = np.empty(n_t + 1, np.int64)
            for tile in range(chunk * tiles_per_chunk, min(n_tiles, (chunk + 1) * tiles_per_chunk)):
                _pair_fwd(tile, n_pairs, pair_i, pair_j, basis[tile], ebt[tile], pa[d], pb[d], pad[d], pbd[d], flat,
                          table, layers, blk, code, keep[d, tile], tang[d, tile], sc, starts, out, outd)
        for c in range(w_out):
            for a in range(n_atoms):
                Y[new_row + c, a] = 0.0
                D[new_row + c, a] = 0.0
        for chunk in range(n_chunks):
            for a in range(n_atoms):
                for c in range(w_out):
                    Y[new_row + c, a] += buf[chunk, 0, a, c]
                    D[new_row + c, a] += buf[chunk, 1, a, c]
        row, n_h = new_row, w_out
        for layer in range(blk[_B_OUT], blk[_B_OUT] + blk[_B_NOUT]):
            w = _tensor(flat, table, layers[layer, 0])
            _layer_fwd(Y, D, row, n_h, row + n_h, w.shape[1], w, flat, table[layers[layer, 1], 0], code)
            row += n_h
            n_h = w.shape[1]
        if d + 1 < depth:  # the next block's input P R + new (R = identity when the widths agree)
            Yn, Dn = aty[d + 1], atd[d + 1]
            if blk[_B_RES] >= 0:
                res = _tensor(flat, table, layers[blk[_B_RES], 0])
                _tile_matmul(Y[0:w_in], res, Yn[0:w_out], w_in, w_out)
                _tile_matmul(D[0:w_in], res, Dn[0:w_out], w_in, w_out)
            else:
                for c in range(w_out):
                    for a in range(n_atoms):
                        Yn[c, a] = Y[c, a]
                        Dn[c, a] = D[c, a]
            for c in range(w_out):
                for a in range(n_atoms):
                    Yn[c, a] += Y[new_row + c, a]
                    Dn[c, a] += D[new_row + c, a]
    # ---- pass 3: reverse through values and tangents
    gp = np.zeros((width, n_atoms), dt)   # adjoint of the next block's input (value)
    gp1 = np.zeros((width, n_atoms), dt)  # (tangent)
    ab = np.empty((width, n_atoms), dt)
    ab1 = np.empty((width, n_atoms), dt)
    sb = np.empty((width, n_atoms), dt)
    sb1 = np.empty((width, n_atoms), dt)
    tmp = np.empty((width, n_atoms), dt)
    pres = np.empty((width, n_atoms), dt)   # the block input's adjoints by the residual path
    pres1 = np.empty((width, n_atoms), dt)
    for chunk in range(n_chunks):
        for i in range(gflat.shape[0]):
            gchunk[chunk, i] = 0.0
    zero = np.zeros(1, dt)[0]
    for d in range(depth - 1, -1, -1):
        blk = blocks[d]
        Y, D = aty[d], atd[d]
        w_in, w_out = blk[_B_WIN], blk[_B_WOUT]
        q_row, n_pp, new_row = _atom_rows(layers, blk)
        # the output net's last layer, then its linear unit: E_atom = e_scale Σ_k u_k y_k
        row, n_h = new_row, w_out
        for layer in range(blk[_B_OUT], blk[_B_OUT] + blk[_B_NOUT]):
            row += n_h
            n_h = layers[layer, 3]
        units = _tensor(flat, table, layers[blk[_B_UNITS], 0])
        gunits = _tensor(gflat, table, layers[blk[_B_UNITS], 0])
        for k in range(n_h):
            uk = units[k, 0] * e_scale
            s = zero
            for a in range(n_atoms):
                ab[k, a] = uk * c_atom[a]
                ab1[k, a] = uk
                s += c_atom[a] * Y[row + k, a] + D[row + k, a]
            gunits[k, 0] += s * e_scale
        for layer in range(blk[_B_OUT] + blk[_B_NOUT] - 1, blk[_B_OUT] - 1, -1):
            w = _tensor(flat, table, layers[layer, 0])
            n_in, n_out = w.shape
            _layer_back(Y, D, row - n_in, n_in, row, n_out, w, _tensor(gflat, table, layers[layer, 0]), gflat,
                        table[layers[layer, 1], 0], ab, ab1, sb, sb1)
            ab, sb = sb, ab
            ab1, sb1 = sb1, ab1
            row -= n_in
        # the residual: the next block's input P R + new (adjoints gp, gp1): P̄ gets R ḡ, R̄ += P ḡᵀ + Ṗ ḡ₁ᵀ
        if blk[_B_RES] >= 0:
            res = _tensor(flat, table, layers[blk[_B_RES], 0])
            gres = _tensor(gflat, table, layers[blk[_B_RES], 0])
            _outer_acc(Y[0:w_in], gp, gres, w_in, w_out)
            _outer_acc(D[0:w_in], gp1, gres, w_in, w_out)
            _tile_matmul_t(gp, res, pres, w_in, w_out)
            _tile_matmul_t(gp1, res, pres1, w_in, w_out)
        else:
            for c in range(w_in):
                for a in range(n_atoms):
                    pres[c, a] = gp[c, a]
                    pres1[c, a] = gp1[c, a]
        # the new properties feed the output net and the next block's input
        for c in range(w_out):
            for a in range(n_atoms):
                ab[c, a] += gp[c, a]
                ab1[c, a] += gp1[c, a]
        gnew = ab[:w_out].copy()
        gnew1 = ab1[:w_out].copy()
        kernel = _tensor(flat, table, layers[blk[_B_PI], 0])
        n_first = kernel.shape[1]
        for chunk in prange(n_chunks):
            ga, gb = buf[chunk, 0, :, :n_first], buf[chunk, 1, :, :n_first]
            ga1, gb1 = buf[chunk, 2, :, :n_first], buf[chunk, 3, :, :n_first]
            for a in range(n_atoms):
                for c in range(n_first):
                    ga[a, c] = 0.0
                    gb[a, c] = 0.0
                    ga1[a, c] = 0.0
                    gb1[a, c] = 0.0
            sc = np.empty((7, width, n_t), dt)
            starts = np.empty(n_t + 1, np.int64)
            for tile in range(chunk * tiles_per_chunk, min(n_tiles, (chunk + 1) * tiles_per_chunk)):
                _pair_back(tile, n_pairs, pair_i, pair_j, basis[tile], ebt[tile], gnew, gnew1, flat, table, layers,
                           blk, keep[d, tile], tang[d, tile], sc, starts, ga, gb, ga1, gb1, gchunk[chunk])
        # per atom: Ā, B̄ (adjoints of pa, pb) as [n_first, n_atoms]
        for c in range(n_first):
            for a in range(n_atoms):
                ab[c, a] = 0.0
                ab1[c, a] = 0.0
                sb[c, a] = 0.0
                sb1[c, a] = 0.0
        for chunk in range(n_chunks):
            for a in range(n_atoms):
                for c in range(n_first):
                    ab[c, a] += buf[chunk, 0, a, c]
                    sb[c, a] += buf[chunk, 1, a, c]
                    ab1[c, a] += buf[chunk, 2, a, c]
                    sb1[c, a] += buf[chunk, 3, a, c]
        # the first PI layer per atom: pa = Ka^T Q + b, pb = Kb^T Q
        gkernel = _tensor(gflat, table, layers[blk[_B_PI], 0])
        q, qd = Y[q_row:q_row + n_pp], D[q_row:q_row + n_pp]
        _outer_acc(q, ab, gkernel[:n_pp], n_pp, n_first)
        _outer_acc(qd, ab1, gkernel[:n_pp], n_pp, n_first)
        _outer_acc(q, sb, gkernel[n_pp:], n_pp, n_first)
        _outer_acc(qd, sb1, gkernel[n_pp:], n_pp, n_first)
        boff = table[layers[blk[_B_PI], 1], 0]
        for c in range(n_first):
            s = zero
            for a in range(n_atoms):
                s += ab[c, a]
            gflat[boff + c] += s
        # Q̄ = Ka Ā + Kb B̄ (and the same for the tangents' adjoints), into gp / gp1
        _tile_matmul_t(ab, kernel[:n_pp], gp, n_pp, n_first)
        _tile_matmul_t(sb, kernel[n_pp:], tmp, n_pp, n_first)
        for c in range(n_pp):
            for a in range(n_atoms):
                gp[c, a] += tmp[c, a]
        _tile_matmul_t(ab1, kernel[:n_pp], gp1, n_pp, n_first)
        _tile_matmul_t(sb1, kernel[n_pp:], tmp, n_pp, n_first)
        for c in range(n_pp):
            for a in range(n_atoms):
                gp1[c, a] += tmp[c, a]
        # back through the PP net to the block's input
        ab, gp = gp, ab
        ab1, gp1 = gp1, ab1
        row = q_row
        for layer in range(blk[_B_PP] + blk[_B_NPP] - 1, blk[_B_PP] - 1, -1):
            w = _tensor(flat, table, layers[layer, 0])
            n_in, n_out = w.shape
            _layer_back(Y, D, row - n_in, n_in, row, n_out, w, _tensor(gflat, table, layers[layer, 0]), gflat,
                        table[layers[layer, 1], 0], ab, ab1, sb, sb1)
            ab, sb = sb, ab
            ab1, sb1 = sb1, ab1
            row -= n_in
        # ab, ab1: the block input's adjoints through the PP net; plus the residual path's
        for c in range(w_in):
            for a in range(n_atoms):
                ab[c, a] += pres[c, a]
                ab1[c, a] += pres1[c, a]
        gp, ab = ab, gp
        gp1, ab1 = ab1, gp1
    for chunk in range(n_chunks):
        for i in range(gflat.shape[0]):
            gflat[i] += gchunk[chunk, i]


# ------------------------------------------------------------------ Python side
def check_supported(model):
    """Why the training engine cannot train ``model`` (a PotentialModel), or None when it can.

    Returns:
        None, or a message naming the param that is not supported.
    """
    from pinn.fast_pinet import available, supports
    if not available():
        return "the numba training engine needs Numba (pip install numba)"
    if not supports(model):
        return "the numba training engine trains potential models with a PiNet network only"
    net = model.network
    p = net.params
    if p["act"] != "tanh":
        return f"network.params.act: the numba training engine supports 'tanh' only, not {p['act']!r}"
    if len(p["pi_nodes"]) < 2:
        return "network.params.pi_nodes: the numba training engine needs at least one hidden PI layer (2 sizes)"
    if model.params["use_stress"]:
        return "model.params.use_stress: the numba training engine trains on energies and forces only"
    return None


def _penalty_and_slope(err, loss_type, delta):
    """The penalty of each error and its derivative (see :meth:`pinn.models.base.Model.penalty`)."""
    if loss_type == "mse":
        return err * err, 2.0 * err
    size = np.abs(err)
    inside = size <= delta
    return (np.where(inside, err * err, 2.0 * delta * size - delta * delta),
            np.where(inside, 2.0 * err, 2.0 * delta * np.sign(err)))


class TrainingEngine:
    """The loss of a PiNet potential and its gradient with respect to the weights, in Numba kernels.

    Args:
        model: a :class:`~pinn.models.potential.PotentialModel` with a PiNet network (see
            :func:`check_supported`).
        threads: threads for the pair work (default: Numba's, i.e. the CPU cores).

    Call it with a NumPy batch and the current weights (:meth:`__call__`); it computes what
    the TensorFlow step's ``part_gradients`` computes (:mod:`pinn.trainer`).
    """

    def __init__(self, model, threads=None):
        from pinn.fast_pinet import FastPiNet, pinet_arrays
        reason = check_supported(model)
        if reason:
            raise ValueError(reason)
        self.model = model
        self.variables = list(model.trainable_variables)
        sources = []
        arrays = pinet_arrays(model, sources)
        self.pass1 = FastPiNet(arrays, threads=threads)
        self.threads = self.pass1.threads
        position = {id(v): k for k, v in enumerate(self.variables)}
        table = arrays["table"]
        #: (variable index, offset in flat, size) of each trainable tensor
        self.slots = []
        for tid, source in enumerate(sources):
            if source is None:
                continue
            if id(source) not in position:
                raise ValueError(f"the numba training engine: weight {source.name} is not a trainable variable")
            self.slots.append((position[id(source)], int(table[tid, 0]), int(table[tid, 1] * table[tid, 2])))
        if sorted(s[0] for s in self.slots) != list(range(len(self.variables))):
            raise ValueError("the numba training engine: the network's trainable variables are not all PiNet "
                             "layer weights")
        a = arrays
        self.flat = self.pass1._flat  # pass 1 reads the weights from here: set_weights updates it in place
        self.dtype = self.flat.dtype
        self.table, self.layers, self.blocks = a["table"], a["layers"], a["blocks"]
        self.codes, self.scal, self.type_of = a["codes"], a["scal"], a["type_of"]
        width = int(self.codes[4])
        self.atom_rows = max(b[_B_WIN] + sum(self.layers[b[_B_PP]:b[_B_PP] + b[_B_NPP], 3]) + b[_B_WOUT]
                             + sum(self.layers[b[_B_OUT]:b[_B_OUT] + b[_B_NOUT], 3]) for b in self.blocks)
        self.pair_rows = max(sum(self.layers[b[_B_PI]:b[_B_PI] + b[_B_NPI] - 1, 3])
                             + self.layers[b[_B_PI] + b[_B_NPI] - 1, 3] // int(self.codes[3])
                             + sum(self.layers[b[_B_II]:b[_B_II] + b[_B_NII], 3]) for b in self.blocks)
        self.n_first = max(int(self.layers[b[_B_PI], 3]) for b in self.blocks)
        self.width = max(width, self.atom_rows)
        self._shape = None
        self._pairs_capacity = 0

    def set_weights(self, values):
        """Copy the current weights: ``values`` in the order of ``model.trainable_variables`` (arrays)."""
        for k, offset, size in self.slots:
            self.flat[offset:offset + size] = np.asarray(values[k], self.dtype).ravel()

    def _workspace(self, n_atoms, n_tiles, tile):
        depth = len(self.blocks)
        if self._shape is None or self._shape[0] != n_atoms or self._shape[2] != tile:
            dt = self.dtype
            self.aty = np.zeros((depth, self.atom_rows, n_atoms), dt)
            self.atd = np.zeros((depth, self.atom_rows, n_atoms), dt)
            self.pa, self.pb, self.pad, self.pbd = (np.zeros((depth, self.n_first, n_atoms), dt) for _ in range(4))
            self.buf = np.zeros((self.threads, 4, n_atoms, self.width), dt)
            self.gchunk = np.zeros((self.threads, len(self.flat)), dt)
            self.gflat = np.zeros(len(self.flat), dt)
            self._pairs_capacity = 0
        if n_tiles > self._pairs_capacity:
            capacity = max(n_tiles, int(1.25 * self._pairs_capacity))
            self.keep = np.zeros((depth, capacity, self.pair_rows, tile), self.dtype)
            self.tang = np.zeros((depth, capacity, self.pair_rows, tile), self.dtype)
            self._pairs_capacity = capacity
        self._shape = (n_atoms, n_tiles, tile)

    def __call__(self, batch, weights, counts):
        """Loss, gradients and error sums of one sparse batch.

        Args:
            batch: dict of NumPy arrays of a sparse batch with its neighbor list (``elems``,
                ``coord``, ``cell``, ``ind_1``, ``ind_2``, ``shift``, ``e_data``, ``f_data`` when
                the forces are trained; ``real`` in a padded batch).
            weights: dict loss term → weight.
            counts: dict loss term → the number of values the loss is normalised by (all ranks'
                and parts', see :meth:`~pinn.models.potential.PotentialModel.loss_counts`).

        Returns:
            dict with ``loss`` (float), ``gradients`` (list of arrays shaped as the trainable
            variables, ∂loss/∂weight), ``energy`` [n_struct] (eV), ``forces`` [n_atoms, 3] (eV/Å),
            ``sums`` (term → penalty sum) and ``finite`` (whether loss and gradients are).
        """
        model = self.model
        p = model.params
        elems = np.asarray(batch[K.ELEMS])
        coord = np.asarray(batch[K.COORD], np.float64)
        n_atoms = len(elems)
        struct = np.asarray(batch[K.IND_1])[:, 0]
        cell = np.asarray(batch[K.CELL], np.float64)
        n_struct = len(cell)
        ind_2 = np.asarray(batch[K.IND_2])
        shift = np.asarray(batch[K.SHIFT], np.float64)
        if len(ind_2) > 1 and np.any(np.diff(ind_2[:, 0]) < 0):
            order = np.argsort(ind_2[:, 0], kind="stable")
            ind_2, shift = ind_2[order], shift[order]
        offset = np.einsum("pk,pkl->pl", shift, cell[struct[ind_2[:, 0]]]) if len(ind_2) else np.zeros((0, 3))
        cand_i = np.ascontiguousarray(ind_2[:, 0], np.int32)
        cand_j = np.ascontiguousarray(ind_2[:, 1], np.int32)
        # pass 1: energies, forces
        out = self.pass1(elems, coord, cand_i, cand_j, np.ascontiguousarray(offset))
        engine = self.pass1
        n_pairs = engine.last_pairs
        types = engine._type_of[elems]
        dress = np.asarray(model.e_dress.numpy(), np.float64)[types]
        energy = (np.bincount(struct, engine._atomic[:n_atoms].astype(np.float64), minlength=n_struct)
                  + np.bincount(struct, dress, minlength=n_struct))
        forces = out["forces"]
        real = np.asarray(batch[K.REAL], np.float64) if K.REAL in batch else np.ones(n_struct)
        atom_w = real[struct]
        loss_type = p["loss_type"]
        delta = p["huber_delta"]

        def delta_of(term):
            return float(delta.get(term, 1.0) if isinstance(delta, dict) else delta)

        e_err = energy - np.asarray(batch[K.E_DATA], np.float64)
        sums, loss = {}, 0.0
        e_scale_err = e_err
        per_atom = 1.0
        if p["use_e_per_atom"]:
            per_atom = 1.0 / np.bincount(struct, minlength=n_struct)
            e_scale_err = e_err * per_atom
        pen, slope = _penalty_and_slope(e_scale_err, loss_type, delta_of("energy"))
        sums["energy"] = float(np.sum(real * pen))
        c_struct = np.zeros(n_struct)
        if counts["energy"] > 0:
            loss += weights["energy"] * sums["energy"] / counts["energy"]
            c_struct = weights["energy"] / counts["energy"] * real * slope * per_atom
        w = np.zeros((n_atoms, 3))
        if "forces" in counts:
            f_err = forces - np.asarray(batch[K.F_DATA], np.float64)
            pen, slope = _penalty_and_slope(f_err, loss_type, delta_of("forces"))
            sums["forces"] = float(np.sum(atom_w[:, None] * pen))
            if counts["forces"] > 0:
                loss += weights["forces"] * sums["forces"] / counts["forces"]
                w = -(weights["forces"] / counts["forces"]) * atom_w[:, None] * slope
        # pass 2 and 3: ṙ along w, then the gradients
        diff, dist = engine._diff[:n_pairs], engine._dist[:n_pairs]
        pi, pj = engine._pair_i[:n_pairs], engine._pair_j[:n_pairs]
        rdot = np.einsum("pk,pk->p", diff, w[pj] - w[pi]) / dist
        rdot = rdot.astype(self.dtype)
        tile = engine._basis.shape[2]
        n_tiles = (n_pairs + tile - 1) // tile
        self._workspace(n_atoms, n_tiles, tile)
        _weight_gradients(types.astype(np.int64), n_pairs, engine._pair_i, engine._pair_j, rdot, self.flat,
                          self.table, self.layers, self.blocks, self.codes, self.scal, self.threads,
                          engine._basis, engine._dbasis, c_struct[struct].astype(self.dtype), self.keep, self.tang,
                          self.aty, self.atd, self.pa, self.pb, self.pad, self.pbd, self.buf, self.gchunk,
                          self.gflat)
        gradients = [None] * len(self.variables)
        for k, offset_k, size in self.slots:
            gradients[k] = self.gflat[offset_k:offset_k + size].reshape(self.variables[k].shape).copy()
        finite = bool(np.isfinite(loss) and np.isfinite(self.gflat).all())
        return {"loss": loss, "gradients": gradients, "energy": energy, "forces": forces, "sums": sums,
                "finite": finite}

