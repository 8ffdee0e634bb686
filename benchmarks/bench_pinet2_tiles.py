"""PiNet2's training pass 2 with balanced tiles (as many a thread) against fixed 256-pair tiles: an in-process A/B.

Usage:  python benchmarks/bench_pinet2_tiles.py [ethanol|cu108 ...] [--calls 300] [--batch 32]

Builds PiNet2 (rank 3, the reference sizes, float32) and a :class:`pinn.engines.gradients.TrainingEngine`, takes
its pass-2 inputs for the first batch of the training split, and calls
:meth:`pinn.engines.pinet2_passes.PiNet2Passes.gradients` on two instances in turn: one with
:meth:`~pinn.engines.pinet2_passes.PiNet2Passes.tiling` (balanced tiles on several threads), one with the MD
kernel's fixed tiles.  Prints one JSON line per dataset: both tilings, the median ms of each, the median of the
per-call ratios (balanced / fixed) and the largest difference of the gradients (float32 sums in another order).
"""
import argparse
import time

from common import REFERENCE_NETWORK, dataset_path, emit


def pass2_inputs(name, batch):
    """(the engine's PiNet2Passes, the arguments of its ``gradients`` but the output)."""
    import tensorflow as tf
    from pinn.engines.gradients import TrainingEngine
    from pinn.io import add_neighbors, ase_files, load_ase, sparse_batch
    from pinn.networks import get_network
    from pinn.params import resolve
    from pinn.physics.potential import PotentialModel
    types = sorted(set(ase_files.read(dataset_path(name), 0).numbers.tolist()))
    net = dict(REFERENCE_NETWORK, atom_types=types, rank=3)
    params = resolve({"model_dir": "unused", "network": {"name": "PiNet2", "params": net}})
    model = PotentialModel(get_network(params), params["model"]["params"], types, tf.float32)
    data = load_ase(dataset_path(name, "train")).apply(add_neighbors(REFERENCE_NETWORK["rc"]))
    first = {k: v.numpy() for k, v in next(iter(data.apply(sparse_batch(batch)))).items()}
    engine = TrainingEngine(model)
    captured = {}
    gradients = engine.pinet2.gradients

    def capture(*args):
        captured["args"] = args[:-1]
        return gradients(*args)

    engine.pinet2.gradients = capture
    engine(first, {"energy": 1.0, "forces": 10.0}, engine.loss_counts(first, ["energy", "forces"]))
    return engine.pinet2, captured["args"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("datasets", nargs="*", default=["ethanol", "cu108"])
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--batch", type=int, default=32)
    args = ap.parse_args()
    import numpy as np
    from pinn.engines.numba import pinet2_kernels
    from pinn.engines.pinet2_passes import PiNet2Passes
    for name in args.datasets:
        engine_passes, inputs = pass2_inputs(name, args.batch)
        balanced = PiNet2Passes(engine_passes.arrays, engine_passes.threads)
        fixed = PiNet2Passes(engine_passes.arrays, engine_passes.threads)
        fixed.tiling = lambda n_pairs: pinet2_kernels.tiling(n_pairs, fixed.threads)
        outputs = {id(p): np.zeros(len(engine_passes.arrays["flat"]), engine_passes.arrays["flat"].dtype)
                   for p in (balanced, fixed)}

        def call(passes):
            start = time.perf_counter()
            passes.gradients(*inputs, outputs[id(passes)])
            return time.perf_counter() - start

        for _ in range(5):
            call(fixed)
            call(balanced)
        times = np.array([(call(fixed), call(balanced)) for _ in range(args.calls)])
        n_pairs = inputs[1]
        g_fixed, g_balanced = outputs[id(fixed)], outputs[id(balanced)]
        emit(benchmark="pinet2_tiles", dataset=name, batch=args.batch, pairs=int(n_pairs),
             tiling_balanced=list(map(int, balanced.tiling(n_pairs))), tiling_fixed=list(map(int, fixed.tiling(n_pairs))),
             calls=args.calls, ms_fixed=round(1000 * float(np.median(times[:, 0])), 3),
             ms_balanced=round(1000 * float(np.median(times[:, 1])), 3),
             ratio_balanced_to_fixed=round(float(np.median(times[:, 1] / times[:, 0])), 3),
             max_gradient_difference=float(np.abs(g_fixed - g_balanced).max()),
             max_gradient=float(np.abs(g_fixed).max()))


if __name__ == "__main__":
    main()
