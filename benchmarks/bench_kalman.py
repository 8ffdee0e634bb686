"""EKF training on ethanol: seconds per step and peak memory, by how the Jacobian is computed.

Usage:  python benchmarks/bench_kalman.py [--batch 32] [--steps 3] [--rows 64 none]

For each ``model.params.ekf_jacobian_rows`` value (``none``: all rows in one vectorized pass),
in a process of its own so that its peak RSS is its own: pinn's default PiNet potential with
forces, ``optimizer: ekf``, one step to trace and compile, then ``--steps`` steps timed. One
JSON line each: ``s_per_step`` (the timed ``train()`` call's wall time over its steps, its closing
checkpoint of P included), ``peak_rss_mb`` (the whole process,
P's n × n float64 included), ``weights`` (n), ``loss`` after the last step (equal across the
settings up to rounding: the same update).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import dataset_path, emit  # noqa: E402

RUN = """
import json, resource, sys, time
from pinn.io import load_ase, sparse_batch
from pinn.models import potential_model
model_dir, data_path, batch, steps, rows = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
params = {"model_dir": model_dir, "network": {"name": "PiNet", "params": {"atom_types": [1, 6, 8]}},
          "model": {"name": "potential_model", "params": {
              "optimizer": "ekf", "use_force": True, "log_every_n_steps": 1, "tensorboard": False,
              "save_checkpoint_steps": 100000, "keep_checkpoint_max": 1,
              "ekf_jacobian_rows": None if rows == "none" else int(rows)}}}
data = load_ase(data_path)
source = lambda: data.take(256).repeat().apply(sparse_batch(batch))
model = potential_model(params)
model.train(source, max_steps=1)
start = time.perf_counter()
model.train(source, max_steps=1 + steps)
took = time.perf_counter() - start
print("RESULT", json.dumps({"s_per_step": took / steps, "weights": int(model.kalman.n),
                            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}))
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rows", nargs="+", default=["64", "none"])
    args = ap.parse_args()
    import pinn
    data = dataset_path("ethanol", "train")
    for rows in args.rows:
        with tempfile.TemporaryDirectory() as model_dir:
            out = subprocess.run([sys.executable, "-c", RUN, model_dir, data, str(args.batch), str(args.steps), rows],
                                 capture_output=True, text=True)
            if out.returncode != 0:
                sys.exit(f"ekf_jacobian_rows {rows}: exit status {out.returncode}\n{out.stderr[-3000:]}")
            result = json.loads([line for line in out.stdout.splitlines() if line.startswith("RESULT ")][-1][7:])
            losses = [line for line in out.stderr.splitlines() if f"step {1 + args.steps}/" in line]
            loss = float(losses[-1].split(" loss ")[1].split()[0]) if losses else None
        emit(bench="kalman", dataset="ethanol", batch=args.batch, steps=args.steps, ekf_jacobian_rows=rows,
             s_per_step=round(result["s_per_step"], 2), peak_rss_mb=round(result["peak_rss_mb"], 1),
             weights=result["weights"], loss=loss, version=pinn.__version__)


if __name__ == "__main__":
    main()
