"""Training throughput of the reference configuration.

Usage:  python benchmarks/bench_train.py [cu108|ethanol ...] [--steps N]

Prints one JSON line per dataset: steps/s over the steps after 200 warm-up steps
(one train() call, frames already in memory), structures/s, atoms/s, peak RSS.  The trained model is kept
in bench-data/model-NAME for bench_md.py.
"""
import argparse
import shutil
import time

from common import REFERENCE_MODEL, REFERENCE_NETWORK, dataset_path, emit, peak_rss_mb


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("datasets", nargs="*", default=["ethanol", "cu108"])
    ap.add_argument("--steps", type=int, default=700, help="total steps (200 of them warm-up)")
    ap.add_argument("--batch", type=int, default=32)
    args = ap.parse_args()
    import ase.io
    from pinn.io import add_neighbors, load_ase, sparse_batch
    from pinn.models import potential_model
    for name in args.datasets:
        path = dataset_path(name)
        first = ase.io.read(path, 0)
        types = sorted(set(first.numbers.tolist()))
        model_dir = path.replace(".xyz", "") + "-model"
        shutil.rmtree(model_dir, ignore_errors=True)
        params = {"model_dir": model_dir, "network": {"name": "PiNet", "params": dict(REFERENCE_NETWORK, atom_types=types)},
                  "model": {"name": "potential_model", "params": dict(REFERENCE_MODEL, data_resume="none")}}
        model = potential_model(params)
        splits = load_ase(path, split={"train": 9, "val": 1}, seed=0)  # read once
        # the documented pipeline: neighbor lists once per structure, before the cache
        train = lambda: (splits["train"].apply(add_neighbors(model.rc)).cache().repeat().shuffle(1000, seed=0)
                         .apply(sparse_batch(args.batch)))
        model.train(train, max_steps=200)  # warm-up: tracing, cache fill
        t0 = time.perf_counter()
        model.train(train, max_steps=args.steps)
        steps_per_s = (args.steps - 200) / (time.perf_counter() - t0)
        emit(benchmark="train", dataset=name, atoms_per_structure=len(first), batch=args.batch,
             steps_per_s=round(steps_per_s, 2), structures_per_s=round(steps_per_s * args.batch, 1),
             atoms_per_s=round(steps_per_s * args.batch * len(first)), peak_rss_mb=round(peak_rss_mb()),
             network=params["network"], note="mean over the steps after 200 warm-up steps in one train() call, "
             "input pipeline start and final checkpoint included")


if __name__ == "__main__":
    main()
