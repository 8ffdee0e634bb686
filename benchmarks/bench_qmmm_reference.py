"""The QM/MM water reference (pinn.qmmm_reference): how long a frame takes, how large frames are, and how much
the MM charges change the QM region's forces, which is what a model with mechanical embedding cannot learn.

Usage:  python benchmarks/bench_qmmm_reference.py [--frames 20] [--seed 0] [--radius 9.0] [--qm-waters 2]

Prints one JSON line: seconds per frame (MD between frames, PySCF's energy and gradients), QM and MM atoms per
frame, and over the QM atoms of all frames the mean and largest |F_embedded - F_vacuum| (eV/Å) and the mean
|F_embedded| (eV/Å); over the MM atoms the largest force (the QM region's pull on their charges).
"""
import argparse
import sys
import time

import numpy as np

from common import emit


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--radius", type=float, default=9.0)
    ap.add_argument("--qm-waters", type=int, default=2)
    args = ap.parse_args()
    import pyscf
    from pinn.qmmm_reference import DEFAULT_BASIS, embedded_qm, water_qmmm_frames
    start = time.perf_counter()
    frames = water_qmmm_frames(args.frames, seed=args.seed, radius=args.radius, qm_waters=args.qm_waters)
    seconds = time.perf_counter() - start
    shifts, embedded_norms, mm_forces, n_qm, n_mm = [], [], [], [], []
    for atoms in frames:
        qm = atoms.arrays["qm"]
        forces = atoms.get_forces()
        _, vacuum = embedded_qm(atoms.numbers, atoms.positions, qm, atoms.get_initial_charges(), embedded=False)
        shifts.extend(np.linalg.norm(forces[qm] - vacuum[qm], axis=1))
        embedded_norms.extend(np.linalg.norm(forces[qm], axis=1))
        mm_forces.append(np.linalg.norm(forces[~qm], axis=1).max())
        n_qm.append(int(qm.sum()))
        n_mm.append(int((~qm).sum()))
    emit(benchmark="qmmm_reference", method=f"RHF/{DEFAULT_BASIS}", frames=args.frames, seed=args.seed,
         radius_a=args.radius, qm_waters=args.qm_waters, seconds_per_frame=round(seconds / args.frames, 2),
         qm_atoms=n_qm[0], mm_atoms_min=min(n_mm), mm_atoms_max=max(n_mm),
         qm_force_shift_mean_ev_a=round(float(np.mean(shifts)), 3),
         qm_force_shift_max_ev_a=round(float(np.max(shifts)), 3),
         qm_force_mean_ev_a=round(float(np.mean(embedded_norms)), 3),
         mm_force_max_ev_a=round(float(np.max(mm_forces)), 3),
         pyscf=pyscf.__version__, python=sys.version.split()[0])


if __name__ == "__main__":
    main()
