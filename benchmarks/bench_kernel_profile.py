"""Where a PiNet2 MD step goes: the Numba kernels' parts timed alone, on one thread, against PiNet's whole call.

Usage:  python benchmarks/bench_kernel_profile.py [--system cu108|ethanol] [--precision float32] [--calls 30]

Builds PiNet and PiNet2 (ranks 1, 3 and 5) with the reference sizes (untrained weights: the time does not
depend on them), runs the MD engine (:class:`pinn.engines.md.FastPiNet`, ``threads=1``) on the system
rattled by 0.05 Å, and times, as the median of ``--calls`` calls each: the whole engine call, and for one
block (the second) the tile functions of :mod:`pinn.engines.numba.pinet2_kernels` called from Python tile
by tile (each call's dispatch, ~2 µs, included): the PI and II nets forward (``inter_forward``) and in
reverse (``inter_reverse``), the transposition of the interactions (``transpose``), the vector path's pair
terms forward (``path_forward``), and a whole tile forward and reverse (``block_forward``,
``block_reverse``).  One JSON line per network, times in ms.
"""
import argparse

import numpy as np

from common import ENGINE_SYSTEMS, REFERENCE_NETWORK, emit, engine_system, median_ms


def build(network, precision, **extra):
    import tensorflow as tf
    from pinn.networks import get_network
    from pinn.params import resolve
    from pinn.physics.potential import PotentialModel
    net = dict(REFERENCE_NETWORK, atom_types=[1, 6, 8, 29], **extra)
    params = resolve({"model_dir": "unused", "precision": precision, "network": {"name": network, "params": net}})
    return PotentialModel(get_network(params), params["model"]["params"], net["atom_types"], tf.as_dtype(precision))


def block_parts(engine, rank, calls):
    """The tile functions of the second block, over all tiles, each timed alone."""
    from pinn.engines.numba import pinet2_kernels as kernels
    _, kept, geometry, grads, forward, backward, pair_i, pair_j = engine._pinet2_work
    flat, table, layers, blocks, codes = engine._flat, engine._table, engine._layers, engine._blocks, engine._codes_array
    n_atoms = forward[0].shape[1]
    tile, n_tiles, n_pairs = kept.shape[3], kept.shape[1], engine.last_pairs
    n_parts = 1 + (rank >= 3) + (rank >= 5)
    n_inter = int(blocks[1, 12])
    blk = blocks[1]
    rows = kernels.pair_rows(layers, blk, n_parts)
    rng = np.random.RandomState(0)
    dt = engine.dtype
    p1 = rng.rand(n_inter, n_atoms).astype(dt)
    side_a, side_b = (kernels._transpose(side) for side in kernels._first_layer_sides(p1, flat, table, layers, blk))
    p3 = kernels._transpose(rng.rand(3 * n_inter, n_atoms).astype(dt))
    p5 = kernels._transpose(rng.rand(5 * n_inter, n_atoms).astype(dt))
    sums = [np.zeros(buf.shape[1:], dt) for buf in forward]
    backs = [np.zeros(buf.shape[1:], dt) for buf in backward]
    g_sums = rng.rand(n_atoms, n_parts * n_inter).astype(dt)
    g3 = rng.rand(n_atoms, 3 * n_inter).astype(dt)
    g5 = rng.rand(n_atoms, 5 * n_inter).astype(dt)
    n_basis = int(codes[3])
    act = codes[0]

    def tiles(run):
        for k in range(n_tiles):
            p0 = k * tile
            run(k, pair_i[p0:p0 + tile], pair_j[p0:p0 + tile], min(tile, n_pairs - p0))

    def block_forward():
        tiles(lambda k, i, j, n: kernels._tile_forward(side_a, side_b, p3[:, :0], p3, p5[:, :0], p5, False, i, j, n,
                                                       geometry[k], flat, table, layers, blk, act, n_parts,
                                                       kept[1, k], rows, *sums))

    def block_reverse():
        tiles(lambda k, i, j, n: kernels._tile_backward(g_sums, g3, g5, False, i, j, n, geometry[k], flat, table,
                                                        layers, blk, act, n_parts, kept[1, k], rows, grads[k],
                                                        *backs))

    def inter_forward():
        tiles(lambda k, i, j, n: kernels._tile_interactions(side_a, side_b, i, j, geometry[k][:n_basis], flat, table,
                                                            layers, blk, act, kept[1, k], rows))

    def inter_reverse():
        tiles(lambda k, i, j, n: kernels._interactions_backward(
            kept[1, k][rows[4]:rows[5]], geometry[k][:n_basis], kept[1, k][rows[0]:rows[1]],
            kept[1, k][rows[1]:rows[2]], kept[1, k][rows[2]:rows[3]], kept[1, k][rows[3]:rows[4]], flat, table,
            layers, blk, act, grads[k][:n_basis]))

    def transpose():
        tiles(lambda k, i, j, n: kernels._transpose(kept[1, k][rows[4]:rows[5]]))

    parts = {"block_forward": median_ms(block_forward, calls), "block_reverse": median_ms(block_reverse, calls),
             "inter_forward": median_ms(inter_forward, calls), "inter_reverse": median_ms(inter_reverse, calls),
             "transpose": median_ms(transpose, calls)}
    if rank >= 3:
        inter_t = kernels._transpose(kept[1, 0][rows[4]:rows[5]])

        def path_forward():
            tiles(lambda k, i, j, n: kernels._tile_path(p3[:, :0], p3, False, inter_t, n_inter, 1,
                                                        geometry[k][2 * n_basis:2 * n_basis + 3], i, j, n,
                                                        sums[1],
                                                        kept[1, k][rows[5]:rows[6]].reshape((tile, 3 * n_inter))))
        parts["path_forward"] = median_ms(path_forward, calls)
    return parts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--system", default="cu108", choices=sorted(ENGINE_SYSTEMS))
    ap.add_argument("--precision", default="float32", choices=("float32", "float64"))
    ap.add_argument("--calls", type=int, default=30)
    args = ap.parse_args()
    from pinn.engines.md import FastPiNet
    from pinn.io.neighbors import neighbor_list
    atoms = engine_system(args.system)
    atoms.rattle(0.05, seed=1)
    ind, shift = neighbor_list(atoms.positions, atoms.cell[:], atoms.pbc, REFERENCE_NETWORK["rc"] + 0.5)
    inputs = (atoms.numbers, atoms.positions, ind[:, 0].copy(), ind[:, 1].copy(), shift @ atoms.cell[:],
              atoms.cell[:], atoms.pbc)
    for network, extra in (("PiNet", {}), ("PiNet2", {"rank": 1}), ("PiNet2", {"rank": 3}), ("PiNet2", {"rank": 5})):
        engine = FastPiNet(build(network, args.precision, **extra), threads=1)
        record = {"whole_call": median_ms(lambda: engine(*inputs), args.calls)}
        if network == "PiNet2":
            record.update(block_parts(engine, extra["rank"], args.calls))
        emit(benchmark="kernel_profile", system=args.system, atoms=len(atoms), pairs=engine.last_pairs,
             network=network, **extra, precision=args.precision, threads=1, ms=record)


if __name__ == "__main__":
    main()
