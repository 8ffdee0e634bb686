"""Memory of one process that trains model after model (a committee, a warm-start chain or an active-learning
loop): default PiNets through the README's API, one after another, each in a model directory of its own; one JSON
line per model with the process's resident memory (RSS, MB) after it, then one with the growth per model.

Usage:  python benchmarks/bench_memory.py [--models 12] [--steps 50] [--engine tensorflow|numba] [--no-jit]

The data are pinn.demo's EMT Cu/Au cells (200 frames, written once to a temporary folder); each model trains
``--steps`` steps of batch 8 and is then evaluated once, as a committee member would be.  ``growth_mb_per_model``
is the least-squares slope of RSS over models 3..N (the first two also warm up TensorFlow and the Numba kernels).
"""
import argparse
import gc
import os
import sys
import tempfile

import numpy as np

from common import emit


def rss_mb():
    """This process's resident memory now, MB (from /proc/self/statm)."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def params(model_dir, engine, jit, seed):
    """A default PiNet potential for the Cu/Au data (the README's example, rc 4.5 Å)."""
    return {"model_dir": model_dir, "seed": seed,
            "network": {"name": "PiNet", "params": {"atom_types": [29, 79], "rc": 4.5}},
            "model": {"name": "potential_model",
                      "params": {"use_force": True, "fit_e_dress": True, "engine": engine, "jit": jit,
                                 "progress_bar": "off", "log_every_n_steps": 10**6, "tensorboard": False}}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", type=int, default=12)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--engine", default="tensorflow", choices=["tensorflow", "numba"])
    ap.add_argument("--no-jit", dest="jit", action="store_const", const=False, default=None,
                    help="the TensorFlow engine without XLA (jit: false; the default, jit: None, compiles PiNet's step)")
    args = ap.parse_args()
    import pinn
    from pinn.demo import make_alloy_dataset
    from pinn.io import add_neighbors, load_ase, sparse_batch
    from pinn.models import potential_model
    with tempfile.TemporaryDirectory() as folder:
        data = make_alloy_dataset(os.path.join(folder, "alloy.xyz"), n_frames=200)
        figures = []
        for k in range(args.models):
            def train():
                return (load_ase(data).apply(add_neighbors(4.5)).cache().repeat().shuffle(200, seed=k)
                        .apply(sparse_batch(8)))

            def vali():
                return load_ase(data).take(40).apply(sparse_batch(8))

            model = potential_model(params(os.path.join(folder, f"model-{k}"), args.engine, args.jit, k))
            model.train(input_fn=train, max_steps=args.steps)
            errors = model.evaluate(input_fn=vali)
            del model
            gc.collect()
            figures.append(rss_mb())
            emit(benchmark="memory_per_model", version=pinn.__version__, engine=args.engine, jit=args.jit,
                 steps=args.steps, model=k + 1, rss_mb=round(figures[-1], 1),
                 f_rmse=round(float(errors["F_RMSE"]), 4), python=sys.version.split()[0])
    tail = np.arange(2, len(figures))
    slope = float(np.polyfit(tail, np.array(figures)[tail], 1)[0]) if len(tail) > 1 else float("nan")
    emit(benchmark="memory_growth", version=pinn.__version__, engine=args.engine, jit=args.jit, steps=args.steps,
         models=args.models, rss_first_mb=round(figures[0], 1), rss_last_mb=round(figures[-1], 1),
         growth_mb_per_model=round(slope, 1), python=sys.version.split()[0])


if __name__ == "__main__":
    main()
