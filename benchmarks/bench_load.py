"""Start-up of inference from a model directory: wall time and peak memory.

Usage:  python benchmarks/bench_load.py [--optimizer ekf|adam] [--repeat 2]

Trains (once, kept in bench-data/load-<optimizer>-model) pinn's default PiNet potential
for 2 steps on the ethanol data with the given optimizer (the EKF keeps P, n × n for n
weights, in every checkpoint), then measures, each in a process of its own so that its
peak RSS is its own, from the interpreter's start:

- ``eval``: ``pinn eval DIR ethanol-val.xyz --json`` (200 frames);
- ``get_calc_first``: ``pinn.get_calc(DIR)`` with no ``engine-weights.npz`` beside the
  checkpoint, and one energy and forces of ethanol;
- ``get_calc_cached``: the same once ``engine-weights.npz`` exists.

One JSON line per measurement: ``wall_s`` (process start to exit) and ``peak_rss_mb``.
"""
import argparse
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import DATA, dataset_path, emit  # noqa: E402

TRAIN = """
import sys
from pinn.io import load_ase, sparse_batch
from pinn.models import potential_model
params = {"model_dir": sys.argv[1], "network": {"name": "PiNet", "params": {"atom_types": [1, 6, 8]}},
          "model": {"name": "potential_model", "params": {"optimizer": sys.argv[2], "log_every_n_steps": 1}}}
data = load_ase(sys.argv[3])
potential_model(params).train(lambda: data.take(64).repeat().apply(sparse_batch(32)), max_steps=2)
"""

CALC = """
import resource, sys
from ase.io import read
import pinn
atoms = read(sys.argv[2])
atoms.calc = pinn.get_calc(sys.argv[1])
atoms.get_forces()
print("PEAK", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0)
"""

EVAL = """
import resource, sys
from pinn.cli import main
code = main(["eval", sys.argv[1], sys.argv[2], "--json"])
print("PEAK", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0)
sys.exit(code)
"""


def model_dir_of(optimizer):
    """The model directory of the benchmark, trained on first use."""
    path = os.path.join(DATA, f"load-{optimizer}-model")
    if not os.path.isdir(path):
        subprocess.run([sys.executable, "-c", TRAIN, path, optimizer, dataset_path("ethanol", "train")], check=True)
    return path


def measure(code, *args):
    """(wall s, peak RSS MB) of ``python -c code *args``."""
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code, *args], check=True, capture_output=True, text=True)
    wall = time.perf_counter() - start
    peak = [float(line.split()[1]) for line in out.stdout.splitlines() if line.startswith("PEAK ")][-1]
    return wall, peak


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--optimizer", default="ekf", choices=["ekf", "adam"])
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    import pinn
    model_dir = model_dir_of(args.optimizer)
    data = dataset_path("ethanol", "val")
    weights = os.path.join(model_dir, "engine-weights.npz")
    for _ in range(args.repeat):
        for kind in ("eval", "get_calc_first", "get_calc_cached"):
            if kind == "get_calc_first" and os.path.exists(weights):
                os.remove(weights)
            code, files = (EVAL, (model_dir, data)) if kind == "eval" else (CALC, (model_dir, data))
            wall, peak = measure(code, *files)
            emit(bench="load", kind=kind, optimizer=args.optimizer, wall_s=round(wall, 2), peak_rss_mb=round(peak, 1),
                 version=pinn.__version__)


if __name__ == "__main__":
    main()
