"""Training throughput of the reference configuration.

Usage:  python benchmarks/bench_train.py [cu108|ethanol ...] [--steps N] [--engine numba] [--parts N] [--jit off]
                                         [--network PiNet2 --rank 3]

Prints one JSON line per dataset: the median of the trainer's own throughput over the
100-step intervals after 200 warm-up steps (one train() call; the reference's protocol),
as steps/s, structures/s and atoms/s, with the peak RSS.  The trained model is kept in
bench-data/NAME-model for bench_md.py.
"""
import argparse
import os
import shutil

from common import REFERENCE_MODEL, REFERENCE_NETWORK, dataset_path, emit, peak_rss_mb


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("datasets", nargs="*", default=["ethanol", "cu108"])
    ap.add_argument("--steps", type=int, default=700, help="total steps (200 of them warm-up)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--parts", type=int, default=None, help="model.params.batch_parts (default: the trainer's)")
    ap.add_argument("--engine", default=None, choices=("auto", "tensorflow", "numba"),
                    help="model.params.engine (default: the trainer's)")
    ap.add_argument("--jit", default=None, choices=("on", "off"),
                    help="model.params.jit for the tensorflow engine (default: the trainer's, on for PiNet)")
    ap.add_argument("--network", default="PiNet", choices=("PiNet", "PiNet2"),
                    help="the reference PiNet, or PiNet2 with the same sizes (default PiNet)")
    ap.add_argument("--rank", type=int, default=3, choices=(1, 3, 5), help="PiNet2's rank (default 3)")
    args = ap.parse_args()
    import numpy as np
    from pinn.io import add_neighbors, ase_files, load_ase, sparse_batch
    from pinn.training.metrics import read_metrics
    from pinn.models import potential_model
    for name in args.datasets:
        path = dataset_path(name)
        first = ase_files.read(path, 0)
        types = sorted(set(first.numbers.tolist()))
        model_dir = path.replace(".xyz", "") + "-model"
        shutil.rmtree(model_dir, ignore_errors=True)
        network = dict(REFERENCE_NETWORK, atom_types=types)
        if args.network == "PiNet2":
            network["rank"] = args.rank
        params = {"model_dir": model_dir, "network": {"name": args.network, "params": network},
                  "model": {"name": "potential_model", "params": dict(REFERENCE_MODEL, data_resume="none",
                                                                        batch_parts=args.parts)}}
        if args.engine:
            params["model"]["params"]["engine"] = args.engine
        if args.jit:
            params["model"]["params"]["jit"] = args.jit == "on"
        model = potential_model(params)
        structures = load_ase(dataset_path(name, "train"))  # read once: the 90 % training split
        # the documented pipeline: neighbor lists once per structure, before the cache
        train = lambda: (structures.apply(add_neighbors(model.rc)).cache().repeat().shuffle(1000, seed=0)
                         .apply(sparse_batch(args.batch)))
        model.train(train, max_steps=args.steps)
        intervals = [r["structures_per_s"] for r in read_metrics(model_dir, "train") if r["step"] > 200]
        structures_per_s = float(np.median(intervals))
        steps_per_s = structures_per_s / args.batch
        emit(benchmark="train", dataset=name, atoms_per_structure=len(first), batch=args.batch, parts=model.parts,
             engine="tensorflow" if model.engine is None else "numba",
             steps_per_s=round(steps_per_s, 2), structures_per_s=round(steps_per_s * args.batch, 1),
             atoms_per_s=round(steps_per_s * args.batch * len(first)), peak_rss_mb=round(peak_rss_mb()),
             intervals=len(intervals),
             # read by TensorFlow at its first tensor; importing pinn sets it to true where it is unset
             tf_cpu_allocator_use_bfc=os.environ.get("TF_CPU_ALLOCATOR_USE_BFC"), network=params["network"], model=params["model"]["params"])


if __name__ == "__main__":
    main()
