"""The first epochs of ``pinn train`` on a user's files: how fast the structures reach the step.

The case of issue 79: periodic 64-atom copper cells (``bench_streaming.py``'s frames), PiNet of depth 3 with
the sizes of ``inputs/params_example.yml``, batches of 8, ``pinn train run.yml`` in a fresh process, timed
from the command. Sources of the same frames:

- ``held``: the extended XYZ of N frames (``--frames``; under 256 MiB: held and cached in memory);
- ``streamed``: the extended XYZ of 8·N frames (over 256 MiB: streamed, read again every epoch);
- ``tfrecord``: ``pinn convert``'s cache of either file (``tfrecord-held``, ``tfrecord-streamed``);
- ``lists``: not a run: the milliseconds of one neighbor list (``pinn.io.neighbors.neighbor_list``, the
  network's cutoff) of the held file's cells, the median over its first 500 frames, in this process.

Each run prints a JSON line: the seconds from the command to the first progress line (step
``--log-every``) and to the end, the structures per second of each epoch's progress lines (the median of
the intervals after the first), the steps per epoch.  ``--epochs`` passes are trained for held data, one
``--streamed-steps`` part of an epoch for streamed data (an epoch of 8·N frames is long).
Run on an idle machine: ``python benchmarks/bench_first_epoch.py``.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_streaming import write_data  # noqa: E402
from common import emit  # noqa: E402

NETWORK = {"name": "PiNet", "params": {"atom_types": [29], "rc": 4.5, "depth": 3, "pp_nodes": [16, 16],
                                       "pi_nodes": [16, 16], "ii_nodes": [16, 16], "out_nodes": [16, 16],
                                       "basis_type": "polynomial", "n_basis": 4}}


def run_file(workdir, data_file, steps, log_every, batch):
    """Write the run file of one measurement and return its path."""
    model_dir = os.path.join(workdir, "model")
    shutil.rmtree(model_dir, ignore_errors=True)
    config = {"model_dir": model_dir, "network": NETWORK,
              "model": {"name": "potential_model",
                        "params": {"use_force": True, "log_every_n_steps": log_every,
                                   "save_checkpoint_steps": 100000}},
              "data": {"train": data_file, "batch_size": batch},
              "train": {"max_steps": steps}}
    path = os.path.join(workdir, "run.yml")
    with open(path, "w") as f:
        yaml.safe_dump(config, f)
    return path


def figures(model_dir, started, steps_per_epoch):
    """The first progress line's time from the command (s) and each epoch's structures/s (median of its
    progress intervals, the first interval of the run left out: it holds the tracing)."""
    from pinn.training.metrics import read_metrics
    records = read_metrics(model_dir, "train")
    by_epoch = {}
    for record in records[1:]:
        epoch = (record["step"] - 1) // steps_per_epoch + 1
        by_epoch.setdefault(epoch, []).append(record["structures_per_s"])
    return {"first_progress_s": round(records[0]["time"] - started, 1), "first_progress_step": records[0]["step"],
            "structures_per_s_by_epoch": {e: round(statistics.median(v), 1) for e, v in sorted(by_epoch.items())}}


def measure(source, data_file, steps, steps_per_epoch, args):
    """One ``pinn train`` run on ``data_file``: its JSON figures."""
    workdir = os.path.join(args.dir, f"run-{source}")
    os.makedirs(workdir, exist_ok=True)
    path = run_file(workdir, data_file, steps, args.log_every, args.batch)
    pinn = os.path.join(os.path.dirname(sys.executable), "pinn")
    started = time.time()
    done = subprocess.run([pinn, "train", path], capture_output=True, text=True)
    wall = time.time() - started
    if done.returncode:
        sys.exit(f"{source}: pinn train failed:\n{done.stderr[-3000:]}")
    model_dir = os.path.join(workdir, "model")
    return {"wall_s": round(wall, 1), "steps": steps, "steps_per_epoch": steps_per_epoch,
            **figures(model_dir, started, steps_per_epoch)}


def list_ms(xyz, frames=500):
    """The median time of one neighbor list of the first ``frames`` cells of ``xyz`` (ms) and its pairs."""
    import numpy as np
    from pinn.io import ase_files
    from pinn.io.neighbors import neighbor_list
    rc = NETWORK["params"]["rc"]
    cells = [(a.positions, a.cell[:], a.pbc) for a in ase_files.read(xyz, f":{frames}")]
    neighbor_list(*cells[0], rc)  # compiled (or loaded from Numba's cache) outside the timing
    times = []
    for cell in cells:
        start = time.perf_counter()
        pairs, _ = neighbor_list(*cell, rc)
        times.append(time.perf_counter() - start)
    return {"list_ms": round(1e3 * float(np.median(times)), 3), "pairs": len(pairs), "cells": len(cells)}


def tfrecord_of(xyz):
    """``pinn convert``'s cache of ``xyz`` (made once)."""
    cache = xyz.replace(".xyz", ".tfr")
    if not os.path.exists(cache):
        pinn = os.path.join(os.path.dirname(sys.executable), "pinn")
        subprocess.run([pinn, "convert", xyz, "-o", cache[:-len(".tfr")]], check=True, capture_output=True)
    return cache


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=6700,
                        help="frames of the held file (default 6700: 47 MB, its 8-fold 377 MB)")
    parser.add_argument("--sources", nargs="+", default=["held", "tfrecord-held", "streamed", "tfrecord-streamed"],
                        choices=("held", "tfrecord-held", "streamed", "tfrecord-streamed", "lists"))
    parser.add_argument("--epochs", type=int, default=2, help="epochs of the held data (default 2)")
    parser.add_argument("--streamed-steps", type=int, default=800, help="steps on the streamed data (default 800)")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--log-every", type=int, default=25)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--dir", default="/tmp/pinn-bench-streaming", help="where the data files are written")
    parser.add_argument("--code", default="", help="the code version, for the JSON lines")
    parser.add_argument("--note", default="")
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    for source in args.sources:
        n = args.frames * (8 if source.endswith("streamed") else 1)
        xyz = os.path.join(args.dir, f"cu64-{n}.xyz")
        write_data(xyz, "xyz", n, 64)
        if source == "lists":
            emit(benchmark="first_epoch", source=source, atoms=64, code=args.code, note=args.note, **list_ms(xyz))
            continue
        data_file = tfrecord_of(xyz) if source.startswith("tfrecord") else xyz
        steps_per_epoch = n // args.batch + (n % args.batch > 0)
        steps = args.streamed_steps if source.endswith("streamed") else args.epochs * steps_per_epoch
        for _ in range(args.repeats):
            result = measure(source, data_file, steps, steps_per_epoch, args)
            emit(benchmark="first_epoch", source=source, frames=n, atoms=64, batch=args.batch,
                 file_mb=round(os.path.getsize(data_file) / 1e6, 1), code=args.code, note=args.note, **result)
            sys.stdout.flush()


if __name__ == "__main__":
    main()
