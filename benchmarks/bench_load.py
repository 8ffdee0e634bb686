"""Start-up of inference from a model directory: wall time and peak memory.

Usage:  python benchmarks/bench_load.py [--optimizer ekf|adam] [--repeat 2]

Trains (once, kept in bench-data/load-<optimizer>-model) pinn's default PiNet potential
for 2 steps on the ethanol data with the given optimizer (the EKF keeps P, n × n for n
weights, in every checkpoint), then measures, each in a process of its own so that its
peak RSS is its own, from the interpreter's start:

- ``eval``: ``pinn eval DIR ethanol-val.xyz --json`` (200 frames), the command itself
  (``python -m pinn.cli.commands``: the benchmark runs it, never imports it);
- ``get_calc_first``: ``pinn.get_calc(DIR)`` with no ``engine-weights.npz`` beside the
  checkpoint, and one energy and forces of ethanol;
- ``get_calc_cached``: the same once ``engine-weights.npz`` exists.

One JSON line per measurement: ``wall_s`` (process start to exit) and ``peak_rss_mb`` (the
process's, as the kernel reports it when the process ends).
"""
import argparse
import os
import subprocess
import sys
import tempfile
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
import sys
from ase.io import read
import pinn
atoms = read(sys.argv[2])
atoms.calc = pinn.get_calc(sys.argv[1])
atoms.get_forces()
"""

#: the arguments of the interpreter that runs the `pinn` command
PINN = ["-m", "pinn.cli.commands"]


def model_dir_of(optimizer):
    """The model directory of the benchmark, trained on first use."""
    path = os.path.join(DATA, f"load-{optimizer}-model")
    if not os.path.isdir(path):
        subprocess.run([sys.executable, "-c", TRAIN, path, optimizer, dataset_path("ethanol", "train")], check=True)
    return path


def measure(*argv):
    """(wall s, peak RSS MB) of the process ``python *argv``, from its start to its exit."""
    with tempfile.TemporaryFile() as errors:
        start = time.perf_counter()
        process = subprocess.Popen([sys.executable, *argv], stdout=subprocess.DEVNULL, stderr=errors)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - start
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode:
            errors.seek(0)
            raise subprocess.CalledProcessError(process.returncode, argv, stderr=errors.read().decode())
    return wall, usage.ru_maxrss / 1024.0


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
            argv = [*PINN, "eval", model_dir, data, "--json"] if kind == "eval" else ["-c", CALC, model_dir, data]
            wall, peak = measure(*argv)
            emit(bench="load", kind=kind, optimizer=args.optimizer, wall_s=round(wall, 2), peak_rss_mb=round(peak, 1),
                 version=pinn.__version__)


if __name__ == "__main__":
    main()
