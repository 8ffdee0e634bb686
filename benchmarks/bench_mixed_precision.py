"""Mixed precision against float32 on the same steps: errors, loss-scale overflows, ms per step (CPU).

Usage:  python benchmarks/bench_mixed_precision.py [--steps 40]

The setting of tests/training/test_mixed_precision.py: a small PiNet (depth 2, 16 nodes, rc 4.5 Å) on
60 frames of pinn.demo's EMT Cu/Au data (120 frames, seed 0), batches of 6, Adam 3e-3, the same seed
(energy offsets fitted on 10 batches);
then the force and energy RMSE on those frames (each model as it trained: mixed precision evaluates
with its low-precision products).  One line per precision with the ratios to float32's errors,
mixed_float16's overflow skips and final loss scale, and the median ms per step (the TensorFlow
engine, XLA, 2 cores; on a CPU mixed precision is slower: the casts, and no native float16).
"""
import argparse
import os
import tempfile

from common import emit, small_alloy_params


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    args = ap.parse_args()
    from pinn.demo import make_alloy_dataset
    from pinn.io import load_ase, sparse_batch
    from pinn.models import potential_model
    from pinn.training.metrics import read_metrics
    work = tempfile.mkdtemp(prefix="bench-mixed-")
    data = load_ase(make_alloy_dataset(os.path.join(work, "alloy.xyz"), n_frames=120, seed=0)).take(60).cache()
    reference = None
    for precision in ("float32", "mixed_bfloat16", "mixed_float16"):
        params = small_alloy_params(os.path.join(work, precision), 10, precision=precision)
        trainer = potential_model(params)
        trainer.train(lambda: data.apply(sparse_batch(6)).repeat(), max_steps=args.steps)
        errors = trainer.evaluate(lambda: data.apply(sparse_batch(10)))
        records = read_metrics(params["model_dir"], "train")
        ms = sorted(6000.0 / r["structures_per_s"] for r in records[len(records) // 2:] if r.get("structures_per_s"))
        line = {"benchmark": "mixed_precision", "precision": precision, "steps": args.steps,
                "F_RMSE": round(float(errors["F_RMSE"]), 5), "E_RMSE": round(float(errors["E_RMSE"]), 5),
                "overflow_skipped": sum(r.get("overflow_skipped", 0) for r in records),
                "ms_per_step": round(ms[len(ms) // 2], 2) if ms else None}
        if trainer.state.loss_scale is not None:
            line["loss_scale"] = float(trainer.state.loss_scale.scale)
        if reference is None:
            reference = line
        else:
            line["F_ratio"] = round(line["F_RMSE"] / reference["F_RMSE"], 3)
            line["E_ratio"] = round(line["E_RMSE"] / reference["E_RMSE"], 3)
        emit(**line)


if __name__ == "__main__":
    main()
