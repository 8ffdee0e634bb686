"""Training gradients of PiNet potentials in Numba kernels (``model.params.engine: numba``).

The TensorFlow training step differentiates twice with nested gradient tapes: forces are the
gradient of the energy, and the force loss's gradient with respect to the weights is a second
derivative.  Here the same gradient is computed by hand, in compiled kernels that work on
tiles of pairs held in cache (those of the MD engine, :mod:`pinn.engines.numba.md_kernels`), from one
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
too), float32 or float64.  :func:`pinn.engines.lowering.capability` names what is not.

Numbers: the gradients equal TensorFlow's to float rounding (tested against the tape's, float64:
~1e-10 relative; float32: ~1e-5, float32 sums in a different order).  The kernels compile on
first use (about a minute) and are cached on disk by Numba.
"""
import math

import numpy as np

from pinn.engines.numba.layout import (TANH_FAST, CODE_ACT, CODE_N_BASIS, CODE_WIDTH, LAYER_KERNEL,
                                       LAYER_BIAS, LAYER_N_OUT, BLOCK_PP, BLOCK_N_PP, BLOCK_PI, BLOCK_N_PI,
                                       BLOCK_II, BLOCK_N_II, BLOCK_OUT, BLOCK_N_OUT, BLOCK_UNITS,
                                       BLOCK_RESIDUAL, BLOCK_WIDTH_IN, BLOCK_WIDTH_OUT)
from pinn.engines.numba.md_kernels import (TILE, _add_by_both_atoms, _add_by_first_atom, _atom_major, _jit,
                                           _pair_input, _spread_first_atom, _tanh32, _tensor, _tile_matmul,
                                           _tile_matmul_t, contraction_adjoint, radial_basis_tile)

try:
    import numba
    from numba import prange
except ImportError:  # pragma: no cover - numba is a dependency
    numba = None
    prange = range


# ------------------------------------------------------------------ layers
# Every array of values (Y), tangents (D) and first-order adjoints (A, ∂E/∂value) holds a
# block's rows in one layout, [rows, columns] with columns the atoms or a tile's pairs:
# per atom: the block input P, the PP outputs, the new properties, the output-net outputs;
# per pair: the first PI layer's output h₁, the hidden PI outputs, the interactions I, the II
# outputs.  A layer's input is the rows just before its output.
@_jit()
def _tanh_bias(y, flat, boff, n, code):
    """y[:n] = tanh(y + b), b at ``flat[boff:]``."""
    n_t = y.shape[1]
    for c in range(n):
        bc = flat[boff + c]
        if code == TANH_FAST:
            for t in range(n_t):
                y[c, t] = _tanh32(y[c, t] + bc)
        else:
            for t in range(n_t):
                y[c, t] = math.tanh(y[c, t] + bc)


@_jit()
def _dtanh_scale(y, x, n):
    """x[:n] *= 1 − y[:n]²: through a tanh layer's derivative, from its output y."""
    for c in range(n):
        for t in range(x.shape[1]):
            x[c, t] = x[c, t] - x[c, t] * y[c, t] * y[c, t]


@_jit()
def _layer_value(Y, in_row, n_in, out_row, n_out, w, flat, boff, code):
    """Y[out] = tanh(Wᵀ Y[in] + b)."""
    y = Y[out_row:out_row + n_out]
    _tile_matmul(Y[in_row:in_row + n_in], w, y, n_in, n_out)
    _tanh_bias(y, flat, boff, n_out, code)


@_jit()
def _layer_tangent(Y, D, in_row, n_in, out_row, n_out, w):
    """D[out] = (1 − y²) Wᵀ D[in]: the tangent of a tanh layer's output."""
    yd = D[out_row:out_row + n_out]
    _tile_matmul(D[in_row:in_row + n_in], w, yd, n_in, n_out)
    _dtanh_scale(Y[out_row:out_row + n_out], yd, n_out)


@_jit()
def _layer_adjoint(Y, A, in_row, n_in, out_row, n_out, w, tmp):
    """First-order reverse through a tanh layer: A[in] = W ((1 − y²) A[out])."""
    n_t = tmp.shape[1]
    y, a = Y[out_row:out_row + n_out], A[out_row:out_row + n_out]
    for c in range(n_out):
        for t in range(n_t):
            tmp[c, t] = a[c, t] - a[c, t] * y[c, t] * y[c, t]
    _tile_matmul_t(tmp, w, A[in_row:in_row + n_in], n_in, n_out)


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
def _second_order_adjoint(y, yd, y1, ab, a1, n):
    """A tanh layer's output adjoints turned into its pre-activation's: ``ab`` (of the value, in
    place) and ``a1`` (of the tangent, written) from the output ``y``, its tangent ``yd`` and its
    first-order adjoint ``y1``:  ā = (1 − y²) ȳ − 2 y ẏ ȳ₁,  ā₁ = (1 − y²) ȳ₁."""
    for c in range(n):
        for t in range(ab.shape[1]):
            v = y[c, t]
            b1 = y1[c, t]
            q = v * yd[c, t] * b1
            b = ab[c, t]
            ab[c, t] = b - b * v * v - q - q
            a1[c, t] = b1 - b1 * v * v


@_jit()
def _layer_back(Y, D, A, in_row, n_in, out_row, n_out, w, gw, gflat, gboff, ab, sb, a1):
    """Pass 3 through a tanh layer: ``ab`` [n_out, columns] holds the adjoint of its output's value on
    entry; the weight and bias gradients are added to ``gw`` and ``gflat[gboff:]`` and ``sb`` gets the
    adjoint of the input's value (``a1``: scratch)."""
    _second_order_adjoint(Y[out_row:out_row + n_out], D[out_row:out_row + n_out], A[out_row:out_row + n_out],
                          ab, a1, n_out)
    _outer_acc(Y[in_row:in_row + n_in], ab, gw, n_in, n_out)
    _outer_acc(D[in_row:in_row + n_in], a1, gw, n_in, n_out)
    zero = np.zeros(1, gflat.dtype)[0]
    for c in range(n_out):
        s = zero
        for t in range(ab.shape[1]):
            s += ab[c, t]
        gflat[gboff + c] += s
    _tile_matmul_t(ab, w, sb, n_in, n_out)


@_jit()
def _stack_forward(Y, D, flat, table, layers, first, count, row, n_h, code, tangent):
    """Layers ``first``.. (``count`` of them) forward on rows of ``Y``, each layer's input the
    ``n_h`` rows from ``row``, its output the rows after them; with ``tangent`` the tangents
    into ``D`` instead (the values are already there).  Returns (start, width) of the last
    output."""
    for layer in range(first, first + count):
        w = _tensor(flat, table, layers[layer, LAYER_KERNEL])
        if tangent:
            _layer_tangent(Y, D, row, n_h, row + n_h, w.shape[1], w)
        else:
            _layer_value(Y, row, n_h, row + n_h, w.shape[1], w, flat, table[layers[layer, LAYER_BIAS], 0], code)
        row += n_h
        n_h = w.shape[1]
    return row, n_h


@_jit()
def _stack_adjoint(Y, A, flat, table, layers, first, count, row, tmp):
    """First-order reverse through layers ``first + count − 1`` .. ``first`` (:func:`_layer_adjoint`),
    the last output's rows starting at ``row``; returns where the first layer's input starts."""
    for layer in range(first + count - 1, first - 1, -1):
        w = _tensor(flat, table, layers[layer, LAYER_KERNEL])
        n_in, n_out = w.shape
        _layer_adjoint(Y, A, row - n_in, n_in, row, n_out, w, tmp)
        row -= n_in
    return row


@_jit()
def _stack_back(Y, D, A, flat, table, layers, first, count, row, gflat, ab, sb, a1):
    """Pass 3 through layers ``first + count − 1`` .. ``first`` (:func:`_layer_back`), the last
    output's rows starting at ``row``, its value's adjoint in ``ab``.  Returns (adjoint of the
    first layer's input, the other scratch array)."""
    for layer in range(first + count - 1, first - 1, -1):
        w = _tensor(flat, table, layers[layer, LAYER_KERNEL])
        n_in, n_out = w.shape
        _layer_back(Y, D, A, row - n_in, n_in, row, n_out, w, _tensor(gflat, table, layers[layer, LAYER_KERNEL]), gflat,
                    table[layers[layer, LAYER_BIAS], 0], ab, sb, a1)
        ab, sb = sb, ab
        row -= n_in
    return ab, sb


@_jit()
def _chunk_atoms(chunk, n_chunks, n_atoms):
    """The atoms (or tiles) of one chunk of the work, (first, count): they are dealt in runs of
    ⌈n_atoms / n_chunks⌉, so the last chunk may be shorter (its last columns padding) or empty."""
    per = (n_atoms + n_chunks - 1) // n_chunks
    first = min(n_atoms, chunk * per)
    return first, min(n_atoms, first + per) - first


@_jit()
def _sum_chunks(buf, k, n, first, count, dest):
    """One chunk's per-atom sums, features by atoms: dest[c, j] = Σ over threads of
    buf[thread, k, first + j, c] for c < n and j < count, and 0 in the padding columns after."""
    for c in range(n):
        for j in range(count):
            s = buf[0, k, first + j, c]
            for chunk in range(1, buf.shape[0]):
                s += buf[chunk, k, first + j, c]
            dest[c, j] = s
        for j in range(count, dest.shape[1]):
            dest[c, j] = 0.0


@_jit()
def _next_input(X, Xn, blk, flat, table, layers, new_row):
    """The next block's input (or its tangent) Xn[:w_out] = R^T X[:w_in] + X[new] (R = identity when
    the widths agree)."""
    w_in, w_out = blk[BLOCK_WIDTH_IN], blk[BLOCK_WIDTH_OUT]
    if blk[BLOCK_RESIDUAL] >= 0:
        _tile_matmul(X[0:w_in], _tensor(flat, table, layers[blk[BLOCK_RESIDUAL], 0]), Xn[0:w_out], w_in, w_out)
    else:
        for c in range(w_out):
            for a in range(X.shape[1]):
                Xn[c, a] = X[c, a]
    for c in range(w_out):
        for a in range(X.shape[1]):
            Xn[c, a] += X[new_row + c, a]


@_jit()
def _pair_layout(layers, blk, n_basis):
    """A block's pair rows: (start of h, the last PI hidden output, its width, start of I, n_pi, end)."""
    row, n_h = 0, layers[blk[BLOCK_PI], 3]
    for layer in range(blk[BLOCK_PI] + 1, blk[BLOCK_PI] + blk[BLOCK_N_PI] - 1):
        row += n_h
        n_h = layers[layer, LAYER_N_OUT]
    i_row = row + n_h
    n_pi = layers[blk[BLOCK_PI] + blk[BLOCK_N_PI] - 1, 3] // n_basis
    end = i_row + n_pi
    for layer in range(blk[BLOCK_II], blk[BLOCK_II] + blk[BLOCK_N_II]):
        end += layers[layer, LAYER_N_OUT]
    return row, n_h, i_row, n_pi, end


@_jit()
def _atom_layout(layers, blk):
    """A block's atom rows: (start of Q, the last PP output, its width, start of the new properties,
    start of the last output-net output, its width)."""
    row, n_h = 0, blk[BLOCK_WIDTH_IN]
    for layer in range(blk[BLOCK_PP], blk[BLOCK_PP] + blk[BLOCK_N_PP]):
        row += n_h
        n_h = layers[layer, LAYER_N_OUT]
    q_row, n_pp = row, n_h
    new_row = q_row + n_pp
    row, n_h = new_row, blk[BLOCK_WIDTH_OUT]
    for layer in range(blk[BLOCK_OUT], blk[BLOCK_OUT] + blk[BLOCK_N_OUT]):
        row += n_h
        n_h = layers[layer, LAYER_N_OUT]
    return q_row, n_pp, new_row, row, n_h


# ------------------------------------------------------------------ pair tiles
@_jit()
def _pair_value(tile, n_pairs, pair_i, pair_j, e, pa, pb, flat, table, layers, blk, code, Y, u, out):
    """Pass 1, one tile forward: the PI and II nets' values kept in ``Y`` [rows, tile], the last II
    output summed by first atom into ``out`` [n_atoms, n_ii].  ``e``: the basis [n_basis, tile];
    ``pa``/``pb`` [n_atoms, n_first]: the first PI layer per atom (no bias); ``u``: scratch."""
    n_t = e.shape[1]
    p0 = tile * n_t
    n_valid = min(n_t, n_pairs - p0)
    n_basis = e.shape[0]
    n_first = layers[blk[BLOCK_PI], 3]
    x = Y[0:n_first]
    _pair_input(pa, pb, n_first, pair_i, pair_j, p0, n_valid, x)
    _tanh_bias(x, flat, table[layers[blk[BLOCK_PI], 1], 0], n_first, code)
    row, n_h = _stack_forward(Y, Y, flat, table, layers, blk[BLOCK_PI] + 1, blk[BLOCK_N_PI] - 2, 0, n_first, code,
                              False)
    # I_c = Σ_b e_b (h K_b + β_b)_c
    h = Y[row:row + n_h]
    pi_out = layers[blk[BLOCK_PI] + blk[BLOCK_N_PI] - 1]
    kernel = _tensor(flat, table, pi_out[0])
    n_pi = kernel.shape[1] // n_basis
    boff = table[pi_out[1], 0]
    i_row = row + n_h
    inter = Y[i_row:i_row + n_pi]
    for c in range(n_pi):
        for t in range(n_t):
            inter[c, t] = 0.0
    for b in range(n_basis):
        _tile_matmul(h, kernel[:, b::n_basis], u, n_h, n_pi)
        for c in range(n_pi):
            bc = flat[boff + c * n_basis + b]
            for t in range(n_t):
                inter[c, t] += (u[c, t] + bc) * e[b, t]
    row, n_h = _stack_forward(Y, Y, flat, table, layers, blk[BLOCK_II], blk[BLOCK_N_II], i_row, n_pi, code, False)
    _add_by_first_atom(Y[row:row + n_h], n_h, pair_i, p0, n_valid, out)


@_jit()
def _pair_adjoint(tile, n_pairs, pair_i, pair_j, e, de, gnew1, flat, table, layers, blk, Y, A, sc, ga1, gb1, grad_r):
    """Pass 1, one tile backward (first order): from ∂E/∂new per atom (``gnew1`` [n_atoms, n_ii]) the
    adjoints ∂E/∂(each kept value), kept in ``A``; ∂E/∂pa and ∂E/∂pb added per atom to ``ga1``/``gb1``
    [n_atoms, n_first]; ∂E/∂r added to ``grad_r`` (``de``: the basis's r-derivative)."""
    n_t = e.shape[1]
    p0 = tile * n_t
    n_valid = min(n_t, n_pairs - p0)
    n_basis = e.shape[0]
    n_first = ga1.shape[1]
    tmp, v, ebar = sc[0], sc[1], sc[2]
    h_row, n_h, i_row, n_pi, end = _pair_layout(layers, blk, n_basis)
    n_last = layers[blk[BLOCK_II] + blk[BLOCK_N_II] - 1, 3]
    _spread_first_atom(gnew1, n_last, pair_i, p0, n_valid, A[end - n_last:end])
    _stack_adjoint(Y, A, flat, table, layers, blk[BLOCK_II], blk[BLOCK_N_II], end - n_last, tmp)
    # h̄ = Σ_b e_b K_b Ī;  ∂E/∂e_b = Σ_c Ī_c (h K_b + β_b)_c = Σ_k h_k (K_b Ī)_k + Σ_c Ī_c β_bc
    pi_out = layers[blk[BLOCK_PI] + blk[BLOCK_N_PI] - 1]
    kernel = _tensor(flat, table, pi_out[0])
    boff = table[pi_out[1], 0]
    inter1 = A[i_row:i_row + n_pi]
    h = Y[h_row:h_row + n_h]
    hbar = A[h_row:h_row + n_h]
    for k in range(n_h):
        for t in range(n_t):
            hbar[k, t] = 0.0
    for b in range(n_basis):
        for t in range(n_t):
            ebar[b, t] = 0.0
    contraction_adjoint(inter1, kernel, flat, boff, h, e, n_h, n_pi, v, hbar, ebar)
    for t in range(n_valid):
        g = grad_r[p0 + t] * 0
        for b in range(n_basis):
            g += ebar[b, t] * de[b, t]
        grad_r[p0 + t] += g
    _stack_adjoint(Y, A, flat, table, layers, blk[BLOCK_PI] + 1, blk[BLOCK_N_PI] - 2, h_row, tmp)
    # the first PI layer's pre-activation, per atom
    for c in range(n_first):
        for t in range(n_t):
            tmp[c, t] = A[c, t] - A[c, t] * Y[c, t] * Y[c, t]
    _add_by_both_atoms(tmp, n_first, pair_i, pair_j, p0, n_valid, ga1, gb1)


@_jit()
def _pair_tangent(tile, n_pairs, pair_i, pair_j, e, ed, pad, pbd, flat, table, layers, blk, Y, D, sc, outd):
    """Pass 2, one tile: the tangents of the kept values along w, into ``D``; the last II output's
    summed by first atom into ``outd``.  ``ed``: the basis's tangent; ``pad``/``pbd`` [n_atoms,
    n_first]: the first PI layer's per atom."""
    n_t = e.shape[1]
    p0 = tile * n_t
    n_valid = min(n_t, n_pairs - p0)
    n_basis = e.shape[0]
    n_first = layers[blk[BLOCK_PI], 3]
    u, wv = sc[0], sc[1]
    xd = D[0:n_first]
    _pair_input(pad, pbd, n_first, pair_i, pair_j, p0, n_valid, xd)
    _dtanh_scale(Y[0:n_first], xd, n_first)
    row, n_h = _stack_forward(Y, D, flat, table, layers, blk[BLOCK_PI] + 1, blk[BLOCK_N_PI] - 2, 0, n_first, 0, True)
    # İ = Σ_b (ė_b h + e_b ḣ) K_b + ė_b β_b
    h, hd = Y[row:row + n_h], D[row:row + n_h]
    pi_out = layers[blk[BLOCK_PI] + blk[BLOCK_N_PI] - 1]
    kernel = _tensor(flat, table, pi_out[0])
    n_pi = kernel.shape[1] // n_basis
    boff = table[pi_out[1], 0]
    i_row = row + n_h
    interd = D[i_row:i_row + n_pi]
    for c in range(n_pi):
        for t in range(n_t):
            interd[c, t] = 0.0
    for b in range(n_basis):
        for k in range(n_h):
            for t in range(n_t):
                wv[k, t] = ed[b, t] * h[k, t] + e[b, t] * hd[k, t]
        _tile_matmul(wv, kernel[:, b::n_basis], u, n_h, n_pi)
        for c in range(n_pi):
            bc = flat[boff + c * n_basis + b]
            for t in range(n_t):
                interd[c, t] += u[c, t] + ed[b, t] * bc
    row, n_h = _stack_forward(Y, D, flat, table, layers, blk[BLOCK_II], blk[BLOCK_N_II], i_row, n_pi, 0, True)
    _add_by_first_atom(D[row:row + n_h], n_h, pair_i, p0, n_valid, outd)


@_jit()
def _pair_back(tile, n_pairs, pair_i, pair_j, e, ed, gnew, flat, table, layers, blk, Y, D, A, sc, ga, gb, gflat):
    """Pass 3, one tile: from the adjoint of the block's new properties' values (``gnew`` [n_atoms,
    n_ii]) the weight gradients of the PI and II nets (added to ``gflat``) and the adjoints of the
    first PI layer's per-atom values (added to ``ga``/``gb`` [n_atoms, n_first])."""
    n_t = e.shape[1]
    p0 = tile * n_t
    n_valid = min(n_t, n_pairs - p0)
    n_basis = e.shape[0]
    n_first = ga.shape[1]
    ab, sb, a1, hb = sc[0], sc[1], sc[2], sc[3]
    h_row, n_h, i_row, n_pi, end = _pair_layout(layers, blk, n_basis)
    n_last = layers[blk[BLOCK_II] + blk[BLOCK_N_II] - 1, 3]
    _spread_first_atom(gnew, n_last, pair_i, p0, n_valid, ab)
    ab, sb = _stack_back(Y, D, A, flat, table, layers, blk[BLOCK_II], blk[BLOCK_N_II], end - n_last, gflat, ab, sb, a1)
    # ab: Ī.  ū_b = e_b Ī + ė_b Ī₁, ū₁_b = e_b Ī₁ (u_b = h K_b): K̄_b += h ū_bᵀ + ḣ ū₁_bᵀ, h̄ = Σ_b K_b ū_b
    pi_out = layers[blk[BLOCK_PI] + blk[BLOCK_N_PI] - 1]
    kernel = _tensor(flat, table, pi_out[0])
    gkernel = _tensor(gflat, table, pi_out[0])
    boff = table[pi_out[1], 0]
    inter1 = A[i_row:i_row + n_pi]
    h, hd = Y[h_row:h_row + n_h], D[h_row:h_row + n_h]
    zero = np.zeros(1, gflat.dtype)[0]
    for b in range(n_basis):
        for c in range(n_pi):
            s = zero
            for t in range(n_t):
                v = e[b, t] * ab[c, t] + ed[b, t] * inter1[c, t]
                sb[c, t] = v
                a1[c, t] = e[b, t] * inter1[c, t]
                s += v
            gflat[boff + c * n_basis + b] += s
        gkb = gkernel[:, b::n_basis]
        _outer_acc(h, sb, gkb, n_h, n_pi)
        _outer_acc(hd, a1, gkb, n_h, n_pi)
        _tile_matmul_t(sb, kernel[:, b::n_basis], hb, n_h, n_pi, b > 0)
    ab, sb = _stack_back(Y, D, A, flat, table, layers, blk[BLOCK_PI] + 1, blk[BLOCK_N_PI] - 2, h_row, gflat, hb, ab, a1)
    # the first PI layer's pre-activation, per atom
    _second_order_adjoint(Y[0:n_first], D[0:n_first], A[0:n_first], ab, a1, n_first)
    _add_by_both_atoms(ab, n_first, pair_i, pair_j, p0, n_valid, ga, gb)


# ------------------------------------------------------------------ the passes
# The per-atom work is split over threads too: the atoms are dealt in ``n_chunks`` runs
# (:func:`_chunk_atoms`), and each chunk keeps its own per-atom arrays, features by its atoms
# ([n_chunks, depth, rows, columns]), so that every layer runs on contiguous rows, as a tile of
# pairs does.  The arrays the pairs read or add to stay atom-major over all atoms (``pa``,
# ``pb``, ``buf``, the adjoints of the new properties).  Padding columns (the last chunk's, when
# the atoms do not divide evenly) hold zero tangents and zero pass-3 adjoints, so they add
# nothing to the weight gradients.
@_jit()
def _chunk_tiles(chunk, n_chunks, n_tiles):
    """The tiles of one chunk, dealt as :func:`_chunk_atoms` deals atoms: range(start, stop)."""
    start, count = _chunk_atoms(chunk, n_chunks, n_tiles)
    return start, start + count


@_jit()
def _first_layer_per_atom(X, flat, table, layers, blk, tmp, pa, pb):
    """The first PI layer's per-atom terms (or their tangents) Qᵀ Ka and Qᵀ Kb, no bias, from the
    PP net's output Q in ``X`` [rows, columns], into ``pa``/``pb`` [count, n_first], atom-major
    (``tmp``: scratch [>= n_first, columns])."""
    q_row, n_pp, _, _, _ = _atom_layout(layers, blk)
    kernel = _tensor(flat, table, layers[blk[BLOCK_PI], 0])
    n_first = kernel.shape[1]
    _tile_matmul(X[q_row:q_row + n_pp], kernel[:n_pp], tmp, n_pp, n_first)
    _atom_major(tmp, n_first, pa)
    _tile_matmul(X[q_row:q_row + n_pp], kernel[n_pp:], tmp, n_pp, n_first)
    _atom_major(tmp, n_first, pb)


@_jit()
def _value_head(Y, types, first, count, first_block, flat, table, layers, blk, code, tmp, pa, pb):
    """Pass 1, one chunk of atoms before a block's pairs: the PP net forward on the block input
    (``first_block``: set to the one-hot element types first), and the first PI layer's per-atom
    terms Qᵀ Ka, Qᵀ Kb (no bias) into the chunk's rows of ``pa``/``pb`` [count, n_first]."""
    w_in = blk[BLOCK_WIDTH_IN]
    if first_block:
        for c in range(w_in):
            for j in range(Y.shape[1]):
                Y[c, j] = 0.0
        for j in range(count):
            Y[types[first + j], j] = 1.0
    _stack_forward(Y, Y, flat, table, layers, blk[BLOCK_PP], blk[BLOCK_N_PP], 0, w_in, code, False)
    _first_layer_per_atom(Y, flat, table, layers, blk, tmp, pa, pb)


@_jit()
def _value_tail(Y, Yn, has_next, buf, first, count, flat, table, layers, blk, code, e_scale, atomic):
    """Pass 1, one chunk of atoms after a block's pairs: the new properties (the threads' sums), the
    output net, the atomic energies added to ``atomic`` [n_atoms], and (``has_next``) the next
    block's input ``Yn``."""
    w_out = blk[BLOCK_WIDTH_OUT]
    _, _, new_row, out_row, n_last = _atom_layout(layers, blk)
    _sum_chunks(buf, 0, w_out, first, count, Y[new_row:new_row + w_out])
    _stack_forward(Y, Y, flat, table, layers, blk[BLOCK_OUT], blk[BLOCK_N_OUT], new_row, w_out, code, False)
    units = _tensor(flat, table, layers[blk[BLOCK_UNITS], 0])
    for k in range(n_last):
        uk = units[k, 0] * e_scale
        for j in range(count):
            atomic[first + j] += uk * Y[out_row + k, j]
    if has_next:
        _next_input(Y, Yn, blk, flat, table, layers, new_row)


@_jit()
def _adjoint_head(Y, A, An, has_next, first, count, flat, table, layers, blk, e_scale, tmp, g_atoms):
    """Pass 1 backward, one chunk of atoms before a block's pairs: ∂E/∂(output net values) and
    ∂E/∂new (with the next block's input's adjoint ``An``, ``has_next``), the latter written
    atom-major to the chunk's rows of ``g_atoms`` [count, width]."""
    w_out = blk[BLOCK_WIDTH_OUT]
    _, _, new_row, out_row, n_last = _atom_layout(layers, blk)
    units = _tensor(flat, table, layers[blk[BLOCK_UNITS], 0])
    for k in range(n_last):
        uk = units[k, 0] * e_scale
        for j in range(A.shape[1]):
            A[out_row + k, j] = uk
    _stack_adjoint(Y, A, flat, table, layers, blk[BLOCK_OUT], blk[BLOCK_N_OUT], out_row, tmp)
    if has_next:  # new also feeds the next block's input
        for c in range(w_out):
            for j in range(A.shape[1]):
                A[new_row + c, j] += An[c, j]
    _atom_major(A[new_row:new_row + w_out], w_out, g_atoms)


@_jit()
def _adjoint_tail(Y, A, An, has_next, buf, first, count, pa1, pb1, flat, table, layers, blk, tmp):
    """Pass 1 backward, one chunk of atoms after a block's pairs: ∂E/∂pa, ∂E/∂pb (the threads'
    sums, into ``pa1``/``pb1`` [n_first, columns]), back through the PP net to the block input,
    with the residual path's share (``has_next``: ``An``, the next input's adjoint)."""
    w_in, w_out = blk[BLOCK_WIDTH_IN], blk[BLOCK_WIDTH_OUT]
    q_row, n_pp, _, _, _ = _atom_layout(layers, blk)
    kernel = _tensor(flat, table, layers[blk[BLOCK_PI], 0])
    n_first = kernel.shape[1]
    _sum_chunks(buf, 0, n_first, first, count, pa1)
    _sum_chunks(buf, 1, n_first, first, count, pb1)
    # Q̄ = Ka Ā + Kb B̄
    _tile_matmul_t(pa1, kernel[:n_pp], A[q_row:q_row + n_pp], n_pp, n_first)
    _tile_matmul_t(pb1, kernel[n_pp:], A[q_row:q_row + n_pp], n_pp, n_first, True)
    _stack_adjoint(Y, A, flat, table, layers, blk[BLOCK_PP], blk[BLOCK_N_PP], q_row, tmp)
    if has_next:  # the residual path: P̄ += R (next input's adjoint)
        if blk[BLOCK_RESIDUAL] >= 0:
            residual = _tensor(flat, table, layers[blk[BLOCK_RESIDUAL], 0])
            _tile_matmul_t(An[0:w_out], residual, A[0:w_in], w_in, w_out, True)
        else:
            for c in range(w_in):
                for j in range(A.shape[1]):
                    A[c, j] += An[c, j]


@_jit(parallel=True)
def _energies_forces(types, n_pairs, pair_i, pair_j, dist, flat, table, layers, blocks, codes, scal, n_chunks,
                     basis, dbasis, keep, adj, aty, ata, pa, pb, pa1, pb1, buf, grad_r, atomic):
    """Pass 1: atomic energies and ∂E/∂r per pair; the values (``keep``, ``aty``) and their
    first-order adjoints ∂E/∂value (``adj``, ``ata``; ``pa1``/``pb1``: of the per-atom first PI
    layer) kept for passes 2 and 3.

    Args:
        types: [n_atoms] int64 indices into atom_types.
        n_pairs, pair_i, pair_j, dist: the pairs within the cutoff.
        flat, table, layers, blocks, codes, scal: the network (:meth:`pinn.engines.spec.PiNetSpec.arrays`).
        n_chunks: the pair tiles, and the atoms, are split into this many chunks, one per thread.
        basis, dbasis: [n_tiles, n_basis, tile] outputs, the basis and its r-derivative.
        keep, adj: [depth, n_tiles, rows, tile]; aty, ata: [n_chunks, depth, rows, columns]; pa1,
            pb1: [n_chunks, depth, n_first, columns] (columns: ⌈n_atoms / n_chunks⌉, the chunk's
            atoms); pa, pb: [depth, n_atoms, n_first]; buf: [n_chunks, 2, n_atoms, width]: workspace.
        grad_r: [>= n_pairs] output, ∂E/∂r (eV/Å); atomic: [n_atoms] output, e_scale × the
            network's atomic energies (eV, no e_dress).
    """
    n_atoms = types.shape[0]
    depth = blocks.shape[0]
    code, width = codes[CODE_ACT], codes[CODE_WIDTH]
    e_scale = scal[2]
    n_t = basis.shape[2]
    n_tiles = (n_pairs + n_t - 1) // n_t
    dt = flat.dtype
    for tile in prange(n_tiles):
        radial_basis_tile(tile, n_pairs, dist, codes, scal, basis[tile], dbasis[tile])
        p0 = tile * n_t
        for t in range(min(n_t, n_pairs - p0)):
            grad_r[p0 + t] = 0.0
    for a in range(n_atoms):
        atomic[a] = 0.0
    scratch = np.empty((n_chunks, 1, width, aty.shape[3]), dt)
    g_atoms = np.empty((n_atoms, width), dt)  # a block's ∂E/∂new, atom-major
    # ---- forward: per chunk of atoms, the previous block's tail and this block's head in one region
    for d in range(depth):
        blk = blocks[d]
        w_out = blk[BLOCK_WIDTH_OUT]
        for chunk in prange(n_chunks):
            first, count = _chunk_atoms(chunk, n_chunks, n_atoms)
            if d > 0:
                _value_tail(aty[chunk, d - 1], aty[chunk, d], True, buf, first, count, flat, table, layers,
                            blocks[d - 1], code, e_scale, atomic)
            _value_head(aty[chunk, d], types, first, count, d == 0, flat, table, layers, blk, code,
                        scratch[chunk, 0], pa[d][first:first + count], pb[d][first:first + count])
        for chunk in prange(n_chunks):
            out = buf[chunk, 0, :, :w_out]
            for a in range(n_atoms):
                for c in range(w_out):
                    out[a, c] = 0.0
            u = np.empty((width, n_t), dt)
            start, stop = _chunk_tiles(chunk, n_chunks, n_tiles)
            for tile in range(start, stop):
                _pair_value(tile, n_pairs, pair_i, pair_j, basis[tile], pa[d], pb[d], flat, table, layers, blk, code,
                            keep[d, tile], u, out)
    for chunk in prange(n_chunks):
        first, count = _chunk_atoms(chunk, n_chunks, n_atoms)
        _value_tail(aty[chunk, depth - 1], aty[chunk, depth - 1], False, buf, first, count, flat, table, layers,
                    blocks[depth - 1], code, e_scale, atomic)
    # ---- backward, first order: A = ∂E/∂value (the next block's tail and this block's head in one region)
    for d in range(depth - 1, -1, -1):
        blk = blocks[d]
        for chunk in prange(n_chunks):
            first, count = _chunk_atoms(chunk, n_chunks, n_atoms)
            rows = g_atoms[first:first + count]
            if d + 1 < depth:
                e = d + 1
                _adjoint_tail(aty[chunk, e], ata[chunk, e], ata[chunk, min(e + 1, depth - 1)], e + 1 < depth, buf,
                              first, count, pa1[chunk, e], pb1[chunk, e], flat, table, layers, blocks[e],
                              scratch[chunk, 0])
                _adjoint_head(aty[chunk, d], ata[chunk, d], ata[chunk, e], True, first, count, flat, table, layers,
                              blk, e_scale, scratch[chunk, 0], rows)
            else:
                _adjoint_head(aty[chunk, d], ata[chunk, d], ata[chunk, d], False, first, count, flat, table, layers,
                              blk, e_scale, scratch[chunk, 0], rows)
        gnew1 = g_atoms[:, :blk[BLOCK_WIDTH_OUT]]
        n_first = layers[blk[BLOCK_PI], 3]
        for chunk in prange(n_chunks):
            ga1, gb1 = buf[chunk, 0, :, :n_first], buf[chunk, 1, :, :n_first]
            for a in range(n_atoms):
                for c in range(n_first):
                    ga1[a, c] = 0.0
                    gb1[a, c] = 0.0
            sc = np.empty((3, width, n_t), dt)
            start, stop = _chunk_tiles(chunk, n_chunks, n_tiles)
            for tile in range(start, stop):
                _pair_adjoint(tile, n_pairs, pair_i, pair_j, basis[tile], dbasis[tile], gnew1, flat, table, layers,
                              blk, keep[d, tile], adj[d, tile], sc, ga1, gb1, grad_r)
    for chunk in prange(n_chunks):
        first, count = _chunk_atoms(chunk, n_chunks, n_atoms)
        _adjoint_tail(aty[chunk, 0], ata[chunk, 0], ata[chunk, min(1, depth - 1)], depth > 1, buf, first, count,
                      pa1[chunk, 0], pb1[chunk, 0], flat, table, layers, blocks[0], scratch[chunk, 0])


@_jit()
def _tangent_head(Y, D, first_block, flat, table, layers, blk, t_atoms, pad, pbd):
    """Pass 2, one chunk of atoms before a block's pairs: the PP net's tangents (``first_block``:
    the input's set to zero first) and the first PI layer's per-atom tangents into the chunk's
    rows of ``pad``/``pbd`` [count, n_first]."""
    w_in = blk[BLOCK_WIDTH_IN]
    if first_block:
        for c in range(w_in):
            for j in range(D.shape[1]):
                D[c, j] = 0.0
    _stack_forward(Y, D, flat, table, layers, blk[BLOCK_PP], blk[BLOCK_N_PP], 0, w_in, 0, True)
    _first_layer_per_atom(D, flat, table, layers, blk, t_atoms, pad, pbd)


@_jit()
def _tangent_tail(Y, D, Dn, has_next, buf, first, count, flat, table, layers, blk):
    """Pass 2, one chunk of atoms after a block's pairs: the new properties' tangents (the threads'
    sums), the output net's, and (``has_next``) the next block input's, ``Dn``."""
    w_out = blk[BLOCK_WIDTH_OUT]
    _, _, new_row, _, _ = _atom_layout(layers, blk)
    _sum_chunks(buf, 0, w_out, first, count, D[new_row:new_row + w_out])
    _stack_forward(Y, D, flat, table, layers, blk[BLOCK_OUT], blk[BLOCK_N_OUT], new_row, w_out, 0, True)
    if has_next:
        _next_input(D, Dn, blk, flat, table, layers, new_row)


@_jit()
def _back_head(Y, D, A, An, has_next, c_atom, first, count, flat, table, layers, blk, e_scale, gp, ab, sb, a1,
               pres, g, g_atoms):
    """Pass 3, one chunk of atoms before a block's pairs.  From ∂L/∂E per atom (``c_atom``
    [n_atoms]), and (``has_next``) the adjoint ``gp`` of the next block input's value (``An``: its
    first-order adjoint), the adjoint of the new properties' values, written
    atom-major to the chunk's rows of ``g_atoms`` [count, width]; ``pres`` gets the residual
    path's share of the block input's adjoint.  The output net's and the residual map's weight
    gradients are added to ``g`` (the thread's, ``flat``'s layout).  ``ab``, ``sb``, ``a1``:
    scratch; ``gp`` is not written."""
    w_in, w_out = blk[BLOCK_WIDTH_IN], blk[BLOCK_WIDTH_OUT]
    _, _, new_row, out_row, n_last = _atom_layout(layers, blk)
    # the linear unit: E_atom = e_scale Σ_k u_k y_k; Φ = Σ c_a E_atom + Σ Ė_atom
    units = _tensor(flat, table, layers[blk[BLOCK_UNITS], 0])
    gunits = _tensor(g, table, layers[blk[BLOCK_UNITS], 0])
    zero = np.zeros(1, g.dtype)[0]
    for k in range(n_last):
        uk = units[k, 0] * e_scale
        s = zero
        for j in range(count):
            ab[k, j] = uk * c_atom[first + j]
            s += c_atom[first + j] * Y[out_row + k, j] + D[out_row + k, j]
        for j in range(count, ab.shape[1]):
            ab[k, j] = 0.0
        gunits[k, 0] += s * e_scale
    ab, sb = _stack_back(Y, D, A, flat, table, layers, blk[BLOCK_OUT], blk[BLOCK_N_OUT], out_row, g, ab, sb, a1)
    # the residual: the next input P R + new (adjoints gp, and An first order)
    if has_next:
        if blk[BLOCK_RESIDUAL] >= 0:
            res = _tensor(flat, table, layers[blk[BLOCK_RESIDUAL], 0])
            gres = _tensor(g, table, layers[blk[BLOCK_RESIDUAL], 0])
            _outer_acc(Y[0:w_in], gp, gres, w_in, w_out)
            _outer_acc(D[0:w_in], An[0:w_out], gres, w_in, w_out)
            _tile_matmul_t(gp, res, pres, w_in, w_out)
        else:
            for c in range(w_in):
                for j in range(pres.shape[1]):
                    pres[c, j] = gp[c, j]
        for c in range(w_out):
            for j in range(ab.shape[1]):
                ab[c, j] += gp[c, j]
    else:
        for c in range(w_in):
            for j in range(pres.shape[1]):
                pres[c, j] = 0.0
    _atom_major(ab, w_out, g_atoms)


@_jit()
def _back_tail(Y, D, A, pa1, pb1, buf, first, count, flat, table, layers, blk, ab, sb, gp, a1, pres, g):
    """Pass 3, one chunk of atoms after a block's pairs: Ā, B̄ (the adjoints of the first PI layer's
    per-atom terms, the threads' sums, into ``ab``/``sb``; ``pa1``/``pb1``: their first-order
    adjoints from pass 1; ``A``: the block's), the first PI layer's weight gradients
    and the PP net's (added to ``g``), and back through the PP net.  Returns (the adjoint of the
    block input's value, with the residual's ``pres`` added; a free scratch array), each one of
    ``gp``/``sb``."""
    w_in = blk[BLOCK_WIDTH_IN]
    q_row, n_pp, _, _, _ = _atom_layout(layers, blk)
    kernel = _tensor(flat, table, layers[blk[BLOCK_PI], 0])
    n_first = kernel.shape[1]
    _sum_chunks(buf, 0, n_first, first, count, ab)
    _sum_chunks(buf, 1, n_first, first, count, sb)
    # the first PI layer per atom: pa = Ka^T Q, pb = Kb^T Q (its bias in the pair tiles' ā)
    gkernel = _tensor(g, table, layers[blk[BLOCK_PI], 0])
    q, qd = Y[q_row:q_row + n_pp], D[q_row:q_row + n_pp]
    _outer_acc(q, ab, gkernel[:n_pp], n_pp, n_first)
    _outer_acc(qd, pa1, gkernel[:n_pp], n_pp, n_first)
    _outer_acc(q, sb, gkernel[n_pp:], n_pp, n_first)
    _outer_acc(qd, pb1, gkernel[n_pp:], n_pp, n_first)
    boff = table[layers[blk[BLOCK_PI], 1], 0]
    zero = np.zeros(1, g.dtype)[0]
    for c in range(n_first):
        s = zero
        for j in range(count):
            s += ab[c, j]
        g[boff + c] += s
    _tile_matmul_t(ab, kernel[:n_pp], gp, n_pp, n_first)
    _tile_matmul_t(sb, kernel[n_pp:], gp, n_pp, n_first, True)
    # back through the PP net (gp holds Q̄): the block input's adjoint, plus the residual path's
    p_bar, other = _stack_back(Y, D, A, flat, table, layers, blk[BLOCK_PP], blk[BLOCK_N_PP], q_row, g, gp, sb, a1)
    for c in range(w_in):
        for j in range(p_bar.shape[1]):
            p_bar[c, j] += pres[c, j]
    return p_bar, other


@_jit(parallel=True)
def _weight_gradients(types, n_pairs, pair_i, pair_j, rdot, flat, table, layers, blocks, codes, scal, n_chunks,
                      basis, dbasis, c_atom, keep, tang, adj, aty, atd, ata, pa, pb, pa1, pb1, pad, pbd, buf, gchunk,
                      gflat):
    """Passes 2 and 3 (see the module docstring): the loss's gradient with respect to the weights.

    Args:
        types, n_pairs, pair_i, pair_j, flat, table, layers, blocks, codes, scal, n_chunks, basis,
            dbasis, keep, adj, aty, ata, pa, pb, pa1, pb1, buf: as for :func:`_energies_forces`, after it.
        rdot: [>= n_pairs] ṙ per pair, the tangent of the distance along w.
        c_atom: [n_atoms] ∂L/∂E of each atom's structure (per eV).
        tang: [depth, n_tiles, rows, tile], atd: [n_chunks, depth, rows, columns], pad, pbd: [depth,
            n_atoms, n_first]: workspace for the tangents.
        gchunk: [n_chunks, n_flat] workspace; gflat: [n_flat] output, ∂L/∂(each weight) in ``flat``'s layout.
    """
    n_atoms = types.shape[0]
    depth = blocks.shape[0]
    n_basis, width = codes[CODE_N_BASIS], codes[CODE_WIDTH]
    e_scale = scal[2]
    n_t = basis.shape[2]
    n_tiles = (n_pairs + n_t - 1) // n_t
    dt = flat.dtype
    ebt = np.empty_like(basis[:n_tiles])  # the basis's tangent ė = e'(r) ṙ
    for tile in prange(n_tiles):
        for t in range(n_t):
            p = tile * n_t + t
            r = rdot[min(p, n_pairs - 1)]
            for b in range(n_basis):
                ebt[tile, b, t] = dbasis[tile, b, t] * r  # dbasis is 0 past n_pairs
    for i in range(gflat.shape[0]):
        gflat[i] = 0.0
    for chunk in range(n_chunks):
        for i in range(gflat.shape[0]):
            gchunk[chunk, i] = 0.0
    scratch = np.empty((n_chunks, 5, width, aty.shape[3]), dt)
    g_atoms = np.empty((n_atoms, width), dt)  # a block's adjoint of new, atom-major
    # ---- pass 2: tangents (the previous block's tail and this block's head in one region)
    for d in range(depth):
        blk = blocks[d]
        w_out = blk[BLOCK_WIDTH_OUT]
        for chunk in prange(n_chunks):
            first, count = _chunk_atoms(chunk, n_chunks, n_atoms)
            if d > 0:
                _tangent_tail(aty[chunk, d - 1], atd[chunk, d - 1], atd[chunk, d], True, buf, first, count, flat,
                              table, layers, blocks[d - 1])
            _tangent_head(aty[chunk, d], atd[chunk, d], d == 0, flat, table, layers, blk, scratch[chunk, 0],
                          pad[d][first:first + count], pbd[d][first:first + count])
        for chunk in prange(n_chunks):
            outd = buf[chunk, 0, :, :w_out]
            for a in range(n_atoms):
                for c in range(w_out):
                    outd[a, c] = 0.0
            sc = np.empty((2, width, n_t), dt)
            start, stop = _chunk_tiles(chunk, n_chunks, n_tiles)
            for tile in range(start, stop):
                _pair_tangent(tile, n_pairs, pair_i, pair_j, basis[tile], ebt[tile], pad[d], pbd[d], flat, table,
                              layers, blk, keep[d, tile], tang[d, tile], sc, outd)
    for chunk in prange(n_chunks):
        first, count = _chunk_atoms(chunk, n_chunks, n_atoms)
        _tangent_tail(aty[chunk, depth - 1], atd[chunk, depth - 1], atd[chunk, depth - 1], False, buf, first, count,
                      flat, table, layers, blocks[depth - 1])
    # ---- pass 3: the reverse pass through values and tangents, seeded with ∂L/∂E and 1.  Each
    # chunk's scratch: 0, 1: Ā and B̄ (then free), 2: the next block input's adjoint, 3: free,
    # 4: the residual's share of the block input's adjoint (from one block's head to its tail)
    for d in range(depth - 1, -1, -1):
        blk = blocks[d]
        for chunk in prange(n_chunks):
            first, count = _chunk_atoms(chunk, n_chunks, n_atoms)
            s = scratch[chunk]
            rows = g_atoms[first:first + count]
            if d + 1 < depth:  # the next block's tail (its pairs are done), then this block's head
                e = d + 1
                gp, other = _back_tail(aty[chunk, e], atd[chunk, e], ata[chunk, e], pa1[chunk, e], pb1[chunk, e],
                                       buf, first, count, flat, table, layers, blocks[e], s[0], s[1], s[2], s[3],
                                       s[4], gchunk[chunk])
                _back_head(aty[chunk, d], atd[chunk, d], ata[chunk, d], ata[chunk, e], True, c_atom, first, count,
                           flat, table, layers, blk, e_scale, gp, s[0], other, s[3], s[4], gchunk[chunk], rows)
            else:
                _back_head(aty[chunk, d], atd[chunk, d], ata[chunk, d], ata[chunk, d], False, c_atom, first, count,
                           flat, table, layers, blk, e_scale, s[2], s[0], s[1], s[3], s[4], gchunk[chunk], rows)
        gnew = g_atoms[:, :blk[BLOCK_WIDTH_OUT]]
        n_first = layers[blk[BLOCK_PI], 3]
        for chunk in prange(n_chunks):
            ga, gb = buf[chunk, 0, :, :n_first], buf[chunk, 1, :, :n_first]
            for a in range(n_atoms):
                for c in range(n_first):
                    ga[a, c] = 0.0
                    gb[a, c] = 0.0
            sc = np.empty((4, width, n_t), dt)
            start, stop = _chunk_tiles(chunk, n_chunks, n_tiles)
            for tile in range(start, stop):
                _pair_back(tile, n_pairs, pair_i, pair_j, basis[tile], ebt[tile], gnew, flat, table, layers, blk,
                           keep[d, tile], tang[d, tile], adj[d, tile], sc, ga, gb, gchunk[chunk])
    for chunk in prange(n_chunks):  # the first block's tail
        first, count = _chunk_atoms(chunk, n_chunks, n_atoms)
        s = scratch[chunk]
        _back_tail(aty[chunk, 0], atd[chunk, 0], ata[chunk, 0], pa1[chunk, 0], pb1[chunk, 0], buf, first, count,
                   flat, table, layers, blocks[0], s[0], s[1], s[2], s[3], s[4], gchunk[chunk])
    for chunk in range(n_chunks):
        for i in range(gflat.shape[0]):
            gflat[i] += gchunk[chunk, i]


# ------------------------------------------------------------------ tiling
def balanced_tiles(n_pairs, threads):
    """The tiling of ``n_pairs`` pairs for ``threads`` threads that each take a run of whole tiles
    (:func:`_chunk_tiles`): ``(tile, n_tiles)``, tiles of at most :data:`~pinn.engines.numba.md_kernels.TILE`
    pairs (a multiple of 16), as few as allow an equal number per thread.  With tiles of 256
    pairs, a batch of 32 ethanol molecules (2 304 pairs) makes 9 tiles, 5 for one thread and 4
    for the other; here 10 of 240, 5 each.
    ``n_tiles · tile >= n_pairs``; at most :func:`pair_slots` ``(n_pairs, threads)`` slots."""
    per_thread = max(1, -(-n_pairs // (TILE * threads)))
    tile = 16 * max(1, -(-n_pairs // (16 * per_thread * threads)))
    return tile, max(1, -(-n_pairs // tile))


def pair_slots(n_pairs, threads):
    """An upper bound on ``n_tiles · tile`` of :func:`balanced_tiles` for up to ``n_pairs`` pairs: each
    tile rounds up by less than 16 pairs."""
    return n_pairs + 16 * (n_pairs // TILE + threads + 1)


@_jit(parallel=True)
def _image_offsets(shift, cell, struct, cand_i, out):
    """out[p] = shift[p] · cell of the structure of pair p's first atom (Å)."""
    for p in prange(shift.shape[0]):
        c = cell[struct[cand_i[p]]]
        for x in range(3):
            out[p, x] = shift[p, 0] * c[0, x] + shift[p, 1] * c[1, x] + shift[p, 2] * c[2, x]


@_jit(parallel=True)
def _distance_tangents(n_pairs, pair_i, pair_j, diff, dist, w, rdot):
    """rdot[p] = diff_p · (w_j − w_i) / r_p: the tangent of each distance along displacements ``w``."""
    for p in prange(n_pairs):
        i, j = pair_i[p], pair_j[p]
        rdot[p] = (diff[p, 0] * (w[j, 0] - w[i, 0]) + diff[p, 1] * (w[j, 1] - w[i, 1])
                   + diff[p, 2] * (w[j, 2] - w[i, 2])) / dist[p]
