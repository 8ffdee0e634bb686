"""Accuracy per training budget: validation errors after a fixed number of steps.

Usage:  python benchmarks/bench_accuracy.py [ethanol|cu108] [--steps 5000] [--preset default|reference]
                                            [--set key=value ...] [--net key=value ...] [--seed 0]
                                            [--network PiNet|PiNet2] [--rank 1|3|5] [--batch 32]
                                            [--network-defaults] [--max-time 2m] [--train-error]

Trains the reference network (PiNet depth 4, [16, 16] nodes, polynomial basis 4, f1, tanh,
rc 4.5 Å) on ``NAME-train.xyz`` with batch 32 and forces in the loss, then prints one JSON
line with the energy and force MAE/RMSE on ``NAME-val.xyz`` (meV, meV/Å), the wall time and
the training settings.  Presets: ``reference`` is the reference configuration
(Adam 3e-4, clipping, force weight 10, energy weight 1); ``default`` is pinn's defaults with
forces in the loss and fitted energy offsets (``use_force``, ``fit_e_dress``);
``--set`` overrides single ``model.params`` keys, ``--net`` single ``network.params`` keys (values
parsed as YAML); ``--network PiNet2 --rank N`` trains PiNet2 with the same sizes;
``--network-defaults`` takes the network's defaults instead of the reference sizes; ``--train-error``
adds the errors on the training structures (``train_*`` keys, evaluated after the process's time is taken).

Time to accuracy, what a user gets without choosing (pinn's defaults, the batches of 16 structures
of a run file, the network's defaults)::

    python benchmarks/bench_accuracy.py ethanol --network-defaults --batch 16 --steps 50000
    python benchmarks/bench_accuracy.py ethanol --network-defaults --batch 16 --max-time 2m   (a time budget)
"""
import time

START = time.perf_counter()  # the process's wall time counts from here: imports, data, training, evaluation

import argparse  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402

import yaml  # noqa: E402

from common import DATA, REFERENCE_MODEL, REFERENCE_NETWORK, dataset_path, emit, peak_rss_mb  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dataset", nargs="?", default="ethanol")
    ap.add_argument("--steps", type=int, default=None, help="the run's steps (5000 without --max-time)")
    ap.add_argument("--max-time", default=None, help="a time budget (train(max_time=)), counted from the process's "
                    "start as pinn train counts it: the run ends inside it, its cosine laid over it")
    ap.add_argument("--preset", choices=("default", "reference"), default="default")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a model.params override")
    ap.add_argument("--net", action="append", default=[], metavar="KEY=VALUE", help="a network.params override")
    ap.add_argument("--network", default="PiNet", choices=("PiNet", "PiNet2"))
    ap.add_argument("--rank", type=int, default=3, choices=(1, 3, 5), help="PiNet2's rank (default 3)")
    ap.add_argument("--batch", type=int, default=32, help="structures per training batch")
    ap.add_argument("--network-defaults", action="store_true",
                    help="the network's own defaults (what a user gets without choosing) instead of the reference sizes")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--train-error", action="store_true",
                    help="also the errors on the training structures (train_F_MAE_meV_per_A, ...): how far the "
                    "validation error is from what the model fits, i.e. whether the data or the steps limit it")
    ap.add_argument("--model-dir", default=None, help="train into this directory and keep it (default: a temporary "
                    "one in bench-data, removed at the end)")
    args = ap.parse_args()
    if args.steps is None and args.max_time is None:
        args.steps = 5000
    if args.max_time is not None:
        from pinn.training.budget import count_the_process
        count_the_process()
    from pinn.io import add_neighbors, ase_files, load_ase, sparse_batch
    from pinn.models import potential_model
    train_path, val_path = dataset_path(args.dataset, "train"), dataset_path(args.dataset, "val")
    types = sorted(set(ase_files.read(train_path, 0).numbers.tolist()))
    if args.preset == "reference":
        settings = dict(REFERENCE_MODEL)
    else:
        settings = dict(use_force=True, fit_e_dress=True, log_every_n_steps=500, save_checkpoint_steps=100000)
    network = dict({} if args.network_defaults else REFERENCE_NETWORK, atom_types=types)
    if args.network == "PiNet2":
        network["rank"] = args.rank
    for target, items in ((settings, args.set), (network, args.net)):
        for item in items:
            key, _, value = item.partition("=")
            target[key] = yaml.safe_load(value)
    # one directory per process, so that runs side by side do not share one
    model_dir = args.model_dir or os.path.join(DATA, f"{args.dataset}-accuracy-model-{os.getpid()}")
    shutil.rmtree(model_dir, ignore_errors=True)
    params = {"model_dir": model_dir, "seed": args.seed,
              "network": {"name": args.network, "params": network},
              "model": {"name": "potential_model", "params": settings}}
    model = potential_model(params)
    train_set, val_set = load_ase(train_path), load_ase(val_path)
    train = lambda: (train_set.apply(add_neighbors(model.rc)).cache().repeat()  # noqa: E731
                     .shuffle(1000, seed=args.seed).apply(sparse_batch(args.batch)))
    val = lambda: val_set.apply(sparse_batch(32))  # noqa: E731
    t0 = time.perf_counter()
    model.train(train, max_steps=args.steps, max_time=args.max_time)
    wall = time.perf_counter() - t0
    m = model.evaluate(val)
    process_wall = time.perf_counter() - START  # what a user waits for: the training-set errors come after it
    extra = {}
    if args.train_error:
        fit = model.evaluate(lambda: train_set.apply(sparse_batch(32)))
        extra = dict(train_F_MAE_meV_per_A=round(1000 * fit["F_MAE"], 1),
                     train_F_RMSE_meV_per_A=round(1000 * fit["F_RMSE"], 1),
                     train_E_MAE_meV=round(1000 * fit["E_MAE"], 2))
    emit(benchmark="accuracy", dataset=args.dataset, steps=int(model.step.numpy()), max_time=args.max_time,
         preset=args.preset, seed=args.seed,
         batch=args.batch, network=args.network,
         F_MAE_meV_per_A=round(1000 * m["F_MAE"], 1), F_RMSE_meV_per_A=round(1000 * m["F_RMSE"], 1),
         E_MAE_meV=round(1000 * m["E_MAE"], 2), E_RMSE_meV=round(1000 * m["E_RMSE"], 2), **extra,
         train_wall_s=round(wall, 1), process_wall_s=round(process_wall, 1), peak_rss_mb=round(peak_rss_mb()), settings=settings, network_params=network)
    if not args.model_dir:
        shutil.rmtree(model_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
