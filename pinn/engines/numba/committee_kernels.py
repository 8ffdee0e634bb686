"""A committee's members in one kernel call: the members over the threads, each member's pairs on one.

A single potential splits its pairs over the threads, and only from
:data:`~pinn.engines.numba.md_kernels.PARALLEL_MIN_PAIRS` pairs (PiNet2:
:data:`~pinn.engines.numba.pinet2_kernels.PARALLEL_MIN_PAIRS`): below, a parallel region costs
more than it saves, and a small molecule runs on one core.  The members of a committee are
independent networks on the same pairs, so they split over the threads without any reduction
between threads: :func:`pinet_members` and :func:`pinet2_members` run member ``which[k]`` on a
thread of its own, the serial build of the single-model kernel with that member's weights and
workspace (stacked on a leading axis), and its forces and virial.  Called by
:class:`pinn.engines.committee.FastCommittee`.
"""
try:
    from numba import prange
except ImportError:  # pragma: no cover - numba is a dependency
    prange = range

from pinn.engines.numba import pinet2_kernels
from pinn.engines.numba.md_kernels import _evaluate_serial, _forces_virial, _jit


@_jit(parallel=True)
def pinet_members(which, types, n_pairs, pair_i, pair_j, dist, diff, dist64, flat, table, layers, blocks, codes, scal,
                  basis, dbasis, zpair, zatom, pa, pb, buf, grad_r, atomic, charge_seed, charge, forces, virial):
    """PiNet members ``which`` on one structure's pairs, one member per thread at a time.

    Args:
        which: [K] int64 the members to evaluate (indices into the stacked arrays).
        types: [M, n_atoms] int64 each member's type index of each atom.
        n_pairs, pair_i, pair_j, dist: the pairs within the cutoff, ``dist`` in the weights' dtype (Å).
        diff: [n_pairs, 3] float64 r_j + offset − r_i (Å); dist64: [n_pairs] float64 its length (Å).
        flat: [M, ·] each member's weights; table, layers, blocks, codes: their shared layout;
            scal: [M, ·] each member's (rc, gamma, e_scale) (see
            :func:`pinn.engines.numba.md_kernels._evaluate`).
        basis … charge: :meth:`pinn.engines.md.FastPiNet.pinet_work` with a leading axis of M.
        forces: [M, n_atoms, 3] float64 output (eV/Å); virial: [M, 3, 3] float64 output (eV).

    Rows of the outputs of members not in ``which`` are left as they were.
    """
    for k in prange(which.shape[0]):
        m = which[k]
        _evaluate_serial(types[m], n_pairs, pair_i, pair_j, dist, flat[m], table, layers, blocks, codes, scal[m], 1,
                         basis[m], dbasis[m], zpair[m], zatom[m], pa[m], pb[m], buf[m], grad_r[m], atomic[m],
                         charge_seed[m], charge[m])
        _forces_virial(n_pairs, pair_i, pair_j, diff, dist64, grad_r[m], forces[m], virial[m])


@_jit(parallel=True)
def pinet2_members(which, types, pair_i, pair_j, diff, dist, flat, table, layers, blocks, codes, scal, charge_seed,
                   atomic, charge, g_diff, tile, kept, geometry, grads, sums, backs, forces, virial):
    """PiNet2 members ``which`` on one structure's pairs, one member per thread at a time.

    Args:
        which: [K] int64 the members to evaluate; types: [M, n_atoms] int64.
        pair_i, pair_j, diff, dist, tile: as :func:`pinn.engines.numba.pinet2_kernels.evaluate` takes them.
        flat, scal: [M, ·] each member's; table, layers, blocks, codes: the shared layout.
        charge_seed, atomic, charge: [M, n_atoms]; g_diff: [M, n_pairs, 3] float64 (eV/Å);
            kept, geometry, grads, sums, backs: :meth:`pinn.engines.md.FastPiNet.pinet2_work` with a
            leading axis of M (one chunk each).
        forces: [M, n_atoms, 3] float64 output (eV/Å); virial: [M, 3, 3] float64 output (eV).
    """
    n_pairs = dist.shape[0]
    for k in prange(which.shape[0]):
        m = which[k]
        g_diff[m, :, :] = 0.0
        pinet2_kernels.evaluate_serial(types[m], pair_i, pair_j, diff, dist, flat[m], table, layers, blocks, codes,
                                       scal[m], charge_seed[m], atomic[m], charge[m], g_diff[m], tile, kept[m],
                                       geometry[m], grads[m], (sums[0][m], sums[1][m], sums[2][m]),
                                       (backs[0][m], backs[1][m], backs[2][m], backs[3][m], backs[4][m],
                                        backs[5][m]))
        pinet2_kernels.forces_virial(n_pairs, pair_i, pair_j, diff, g_diff[m], forces[m], virial[m])
