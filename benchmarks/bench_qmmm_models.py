"""Mechanical against electrostatic embedding, as pinn trains them (issue 59): the same QM/MM frames of the PySCF
water reference (pinn.qmmm_reference.make_water_qmmm_dataset), one split, one network, `pinn train`'s run files
with ``model.params.embedding`` mechanical (QM/MM frames cut to the QM region) or electrostatic; the test frames
held out of training.

Usage:  python benchmarks/bench_qmmm_models.py FRAMES.xyz [--train 160] [--steps 10000] [--seed 0]
                                                [--embeddings mechanical electrostatic] [--workdir DIR]

Prints one JSON line per embedding: test RMSE of the QM region's energy (meV), of the forces on the QM atoms and
on the MM atoms within 5 Å of a QM atom (eV/Å; a mechanical model predicts none there: its error is the labels'
RMS), the label RMS of both, seconds of training (`pinn train`, one process) and ms per predicted frame.
"""
import argparse
import os
import sys
import tempfile
import time

import numpy as np
import yaml

from common import emit

NETWORK = {"name": "PiNet", "params": {"atom_types": [1, 8], "rc": 4.5, "depth": 3, "pp_nodes": [16],
                                       "pi_nodes": [16], "ii_nodes": [16, 16], "out_nodes": [16]}}


def run_file(workdir, embedding, train_file, eval_file, args):
    """The run file of one embedding (the same settings but ``embedding`` and the network's outputs)."""
    network = {"name": "PiNet", "params": {**NETWORK["params"],
                                           "out_units": 1 if embedding == "mechanical" else 2}}
    params = {"embedding": embedding, "use_force": True, "fit_e_dress": True, "fit_e_dress_batches": 20,
              "e_loss_multiplier": args.e_mult, "f_loss_multiplier": args.f_mult,
              "learning_rate": args.lr, "lr_schedule": "exponential", "decay_step": args.steps,
              "decay_rate": 0.05, "lr_warmup_steps": 0, "ema_decay": None, "progress_bar": "off",
              "log_every_n_steps": 1000, "eval_every_n_steps": args.steps}
    config = {"model_dir": os.path.join(workdir, embedding), "network": network, "seed": args.seed,
              "model": {"name": "potential_model", "params": params},
              "data": {"train": train_file, "eval": eval_file, "batch_size": args.batch_size,
                       "seed": args.seed},
              "train": {"max_steps": args.steps}}
    path = os.path.join(workdir, f"{embedding}.yml")
    with open(path, "w") as f:
        yaml.safe_dump(config, f)
    return path


def test_errors(model_dir, test_file, embedding):
    """(energy errors, QM force errors, near-MM force errors, seconds per frame) of the model's averaged weights
    on the held-out frames, frame by frame."""
    import tensorflow as tf

    from pinn import keys as K
    from pinn.io import add_neighbors, load_ase, qm_region, sparse_batch
    from pinn.inference.handle import load_for_inference
    handle = load_for_inference(model_dir)
    rc = handle.model.network.rc
    whole = load_ase(test_file, shuffle=False)
    frames = whole.apply(qm_region()) if embedding == "mechanical" else whole
    e_err, f_qm, f_mm, seconds = [], [], [], []
    batches = frames.apply(add_neighbors(rc)).apply(sparse_batch(1))
    predict = tf.function(lambda b: handle.model.predict(b, stress=False), input_signature=[batches.element_spec])
    with handle.averaged_weights():
        for full, batch in zip(whole.as_numpy_iterator(), batches):
            start = time.perf_counter()
            pred = predict(batch)
            forces = pred["forces"].numpy()
            seconds.append(time.perf_counter() - start)
            qm = full[K.QM]
            positions = full[K.COORD]
            near = np.min(np.linalg.norm(positions[~qm][:, None] - positions[qm][None], axis=2), axis=1) < 5.0
            e_err.append(float(pred["energy"].numpy()[0] - full[K.E_DATA]))
            f_qm.append((forces[:qm.sum()] if embedding == "mechanical" else forces[qm]) - full[K.F_DATA][qm])
            mm_pred = np.zeros_like(full[K.F_DATA][~qm]) if embedding == "mechanical" else forces[~qm]
            f_mm.append((mm_pred - full[K.F_DATA][~qm])[near])
    return np.array(e_err), np.concatenate(f_qm), np.concatenate(f_mm), float(np.median(seconds[1:]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("frames")
    ap.add_argument("--train", type=int, default=160)
    ap.add_argument("--steps", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--e-mult", type=float, default=1.0)
    ap.add_argument("--f-mult", type=float, default=10.0)
    ap.add_argument("--embeddings", nargs="+", default=["mechanical", "electrostatic"])
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    from pinn.io import ase_files
    from pinn.training.run_file import run_training
    frames = ase_files.read(args.frames, index=":")
    order = np.random.default_rng(args.seed).permutation(len(frames))
    workdir = args.workdir or tempfile.mkdtemp(prefix="bench-qmmm-models-")
    os.makedirs(workdir, exist_ok=True)
    train_file, test_file = os.path.join(workdir, "train.xyz"), os.path.join(workdir, "test.xyz")
    ase_files.write(train_file, [frames[i] for i in order[:args.train]], format="extxyz")
    ase_files.write(test_file, [frames[i] for i in order[args.train:]], format="extxyz")
    rms = lambda x: float(np.sqrt(np.mean(np.square(x))))
    for embedding in args.embeddings:
        start = time.perf_counter()
        run_training(run_file(workdir, embedding, train_file, test_file, args))
        seconds = time.perf_counter() - start
        e_err, f_qm, f_mm, per_frame = test_errors(os.path.join(workdir, embedding), test_file, embedding)
        labels = ase_files.read(test_file, index=":")
        qm_labels = np.concatenate([a.get_forces()[a.arrays["qm"]] for a in labels])
        mm_labels = np.concatenate([a.get_forces()[~a.arrays["qm"]][
            np.min(np.linalg.norm(a.positions[~a.arrays["qm"]][:, None] - a.positions[a.arrays["qm"]][None],
                                  axis=2), axis=1) < 5.0] for a in labels])
        emit(benchmark="qmmm_models", embedding=embedding, frames=os.path.basename(args.frames), train=args.train,
             test=len(frames) - args.train, steps=args.steps, batch_size=args.batch_size, lr=args.lr,
             f_loss_multiplier=args.f_mult, e_loss_multiplier=args.e_mult, seed=args.seed,
             e_rmse_mev=round(1000 * rms(e_err), 2),
             f_qm_rmse_ev_a=round(rms(f_qm), 4), f_mm_near_rmse_ev_a=round(rms(f_mm), 4),
             f_qm_label_rms_ev_a=round(rms(qm_labels), 4), f_mm_near_label_rms_ev_a=round(rms(mm_labels), 4),
             train_s=round(seconds, 1), predict_ms_per_frame=round(1000 * per_frame, 2),
             python=sys.version.split()[0])


if __name__ == "__main__":
    main()
