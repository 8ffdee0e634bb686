"""Loading QM/MM frames with many MM atoms (docs/qmmm.md): what a frame costs to read, keep and cut to its QM
region, and what a neighbor list over the whole frame would cost instead.

Usage:  python benchmarks/bench_qmmm_loading.py [--frames 200] [--mm-atoms 3000] [--rc 4.5]

The frames are written once to a temporary extxyz: a 6-atom QM region at the centre of MM atoms on a jittered
cubic lattice (1.6 Å apart; charges ±0.4 e, neutral), energies and forces of random numbers (the figures are
of reading, not of physics).  Prints one JSON line: seconds to read the file with load_ase and to iterate the
dataset, the resident memory after (MB), bytes per frame held (the arrays of one structure) and in a TFRecord
cache, and seconds per frame for neighbor lists (rc) of the QM region alone and of the whole frame.
"""
import argparse
import os
import sys
import tempfile
import time

import numpy as np

from common import emit


def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def write_frames(path, n_frames, n_mm, seed):
    """``n_frames`` QM/MM frames of 6 QM and about ``n_mm`` MM atoms, extxyz."""
    from ase import Atoms
    from ase.calculators.singlepoint import SinglePointCalculator
    from pinn.io import ase_files
    rng = np.random.default_rng(seed)
    side = int(np.ceil(n_mm ** (1 / 3)))
    grid = np.stack(np.meshgrid(*[np.arange(side)] * 3, indexing="ij"), -1).reshape(-1, 3)[:n_mm] * 1.6
    grid = grid - grid.mean(axis=0)
    far = np.linalg.norm(grid, axis=1) > 3.0  # room for the QM region
    frames = []
    for _ in range(n_frames):
        qm = np.array([[0, 0, 0], [0.96, 0, 0], [-0.24, 0.93, 0], [2.9, 0, 0], [3.4, 0.8, 0], [3.4, -0.8, 0]])
        mm = grid[far] + rng.normal(0, 0.15, (far.sum(), 3))
        charges = np.where(np.arange(len(mm)) % 2, 0.4, -0.4)
        atoms = Atoms(numbers=[8, 1, 1, 8, 1, 1] + [8 if q < 0 else 1 for q in charges],
                      positions=np.vstack([qm + rng.normal(0, 0.05, qm.shape), mm]),
                      charges=np.concatenate([np.zeros(6), charges]))
        atoms.new_array("qm", np.arange(len(atoms)) < 6)
        atoms.calc = SinglePointCalculator(atoms, energy=-4137.0 + rng.normal(),
                                           forces=rng.normal(size=(len(atoms), 3)))
        frames.append(atoms)
    ase_files.write(path, frames, format="extxyz")
    return len(frames[0])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", type=int, default=200)
    ap.add_argument("--mm-atoms", type=int, default=3000)
    ap.add_argument("--rc", type=float, default=4.5)
    args = ap.parse_args()
    import tensorflow as tf
    from pinn.io import add_neighbors, load_ase, qm_region, write_tfrecord
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "frames.xyz")
        n_atoms = write_frames(path, args.frames, args.mm_atoms, seed=0)
        before = rss_mb()
        start = time.perf_counter()
        dataset = load_ase(path, shuffle=False)
        loaded = time.perf_counter() - start
        start = time.perf_counter()
        first = None
        for structure in dataset:
            first = first or structure
        iterated = time.perf_counter() - start
        held = sum(v.numpy().nbytes for v in first.values())
        after = rss_mb()
        write_tfrecord(os.path.join(folder, "cache.tfr"), dataset, log_every=0)
        cache_bytes = os.path.getsize(os.path.join(folder, "cache.tfr")) / args.frames
        timings = {}
        for name, pipeline in (("qm_region", dataset.apply(qm_region())), ("whole_frame", dataset)):
            with_pairs = pipeline.apply(add_neighbors(args.rc))
            start = time.perf_counter()
            pairs = sum(int(tf.shape(s["ind_2"])[0]) for s in with_pairs)
            timings[name] = (round((time.perf_counter() - start) / args.frames, 5), pairs // args.frames)
    emit(benchmark="qmmm_loading", frames=args.frames, atoms_per_frame=n_atoms, rc_a=args.rc,
         load_ase_s=round(loaded, 2), iterate_s=round(iterated, 2), rss_growth_mb=round(after - before, 1),
         bytes_per_frame=held, tfrecord_bytes_per_frame=round(cache_bytes),
         neighbors_s_per_frame_qm_region=timings["qm_region"][0], pairs_per_frame_qm_region=timings["qm_region"][1],
         neighbors_s_per_frame_whole=timings["whole_frame"][0], pairs_per_frame_whole=timings["whole_frame"][1],
         python=sys.version.split()[0])


if __name__ == "__main__":
    main()
