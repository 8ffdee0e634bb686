"""The mirrored backend (one process, one batch per device) against one device on the union batch (CPU).

Usage:  python benchmarks/bench_mirrored.py [--steps 60] [--devices 2]

The setting of bench_mixed_precision.py (a small PiNet, depth 2, 16 nodes, rc 4.5 Å, on 60 frames of
pinn.demo's EMT Cu/Au data, Adam 3e-3, seed 3, the TensorFlow engine with XLA), trained two ways on the
same structures per step: one device on batches of 12, and ``parallel_params.backend: mirrored`` on the
CPU split into ``--devices`` logical devices, each given a batch of 12 / devices (``lr_scaling: none``,
so both take the same steps).  Each runs in its own process (the CPU is split before TensorFlow
starts).  One line per run: the force and energy RMSE on the 60 frames after training and the median
ms per step.  On a CPU the logical devices share the cores: this measures what the mirrored machinery
costs, not what it gains (that is on GPUs, to be measured where one with TensorFlow is available).
"""
import argparse
import os
import subprocess
import sys
import tempfile

from common import emit, small_alloy_params

UNION_BATCH = 12


def run(devices, steps, work):
    """One training run in this process (``devices`` > 1: the mirrored backend on that many CPU devices)."""
    import tensorflow as tf
    if devices > 1:
        tf.config.set_logical_device_configuration(tf.config.list_physical_devices("CPU")[0],
                                                   [tf.config.LogicalDeviceConfiguration()] * devices)
    from pinn.demo import make_alloy_dataset
    from pinn.io import load_ase, sparse_batch
    from pinn.models import potential_model
    from pinn.training.metrics import read_metrics
    data = load_ase(make_alloy_dataset(os.path.join(work, "alloy.xyz"), n_frames=120, seed=0)).take(60).cache()
    params = small_alloy_params(os.path.join(work, f"model-{devices}"), 5)
    if devices > 1:
        params.update(parallel=True, parallel_params={"backend": "mirrored", "lr_scaling": "none"})
    trainer = potential_model(params)
    trainer.train(lambda: data.apply(sparse_batch(UNION_BATCH // devices)).repeat(), max_steps=steps)
    errors = trainer.evaluate(lambda: data.apply(sparse_batch(10)))
    records = read_metrics(params["model_dir"], "train")
    ms = sorted(1000.0 * UNION_BATCH / r["structures_per_s"] for r in records[len(records) // 2:]
                if r.get("structures_per_s"))
    emit(benchmark="mirrored", devices=devices, backend="mirrored" if devices > 1 else "one device",
         union_batch=UNION_BATCH, steps=steps, F_RMSE=round(float(errors["F_RMSE"]), 5),
         E_RMSE=round(float(errors["E_RMSE"]), 5), ms_per_step=round(ms[len(ms) // 2], 2) if ms else None)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--devices", type=int, default=2)
    ap.add_argument("--run", type=int, default=None, help=argparse.SUPPRESS)  # one run, in a child process
    ap.add_argument("--work", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run is not None:
        run(args.run, args.steps, args.work)
        return
    work = tempfile.mkdtemp(prefix="bench-mirrored-")
    for devices in (1, args.devices):
        subprocess.run([sys.executable, __file__, "--run", str(devices), "--steps", str(args.steps), "--work", work],
                       check=True)


if __name__ == "__main__":
    main()
