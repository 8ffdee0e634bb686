"""Data larger than memory: peak memory and throughput of ``load_ase`` streamed and held, and of TFRecords.

Writes N and 8·N (``--scales``) labelled frames of a periodic 64-atom copper cell (energy, forces,
stress; positions rattled, labels random: the loader, not physics, is measured) as extended XYZ, an
ASE SQLite database and, where ``ase-db-backends`` is installed, an LMDB database (``.aselmdb``).
Each measurement runs in a fresh process that builds the dataset and iterates it once to the end:

- ``held``: ``load_ase(file, stream=False)`` (every frame read and held first);
- ``streamed``: ``load_ase(file, stream=True)`` (an index of the frames, each read when reached);
- ``convert``: ``pinn convert``'s work, ``write_tfrecord(load_ase(file, stream=True))``;
- ``tfrecord``: ``load_tfrecord`` of that cache.

Each prints a JSON line: the frames, the file's MB, the peak resident memory (MB, the process's whole:
TensorFlow's share included), the peak anonymous memory (without the file pages LMDB maps in) of the process
and its children (the process that parses streamed extended XYZ, :mod:`pinn.io.parse_process`), the
seconds to build the dataset and to iterate it, and frames per second
over both.  Run on an idle machine: ``python benchmarks/bench_streaming.py --frames 2500``.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import emit, peak_rss_mb  # noqa: E402

FORMATS = {"xyz": ".xyz", "db": ".db", "aselmdb": ".aselmdb"}


def _frames(n, atoms_per_cell, seed):
    """``n`` labelled frames of a rattled copper cell (one at a time)."""
    from ase.build import bulk
    from ase.calculators.singlepoint import SinglePointCalculator
    repeat = {32: (2, 2, 2), 64: (2, 2, 4), 108: (3, 3, 3)}[atoms_per_cell]
    base = bulk("Cu", "fcc", a=3.61, cubic=True) * repeat
    rng = np.random.RandomState(seed)
    for _ in range(n):
        atoms = base.copy()
        atoms.positions += rng.normal(scale=0.1, size=atoms.positions.shape)
        atoms.calc = SinglePointCalculator(atoms, energy=float(rng.normal(-3.5 * len(atoms), 0.5)),
                                           forces=rng.normal(scale=0.5, size=(len(atoms), 3)),
                                           stress=rng.normal(scale=0.01, size=6))
        yield atoms


def write_data(path, fmt, n, atoms_per_cell):
    """Write ``n`` frames to ``path`` in ``fmt`` (once: an existing file is kept)."""
    from pinn.io import ase_files
    if os.path.exists(path):
        return
    part = path + ".part" + FORMATS[fmt]
    if fmt == "xyz":
        ase_files.write(part, list(_frames(n, atoms_per_cell, seed=n)), format="extxyz")
    else:
        with ase_files.connect(part) as db:
            for atoms in _frames(n, atoms_per_cell, seed=n):
                db.write(atoms)
    os.replace(part, path)


def children():
    """The process ids of this process's children (``/proc/self/task/*/children``)."""
    found = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as listed:
                found.extend(listed.read().split())
        except OSError:
            continue
    return found


class AnonymousPeak:
    """The peak of the anonymous resident memory (``RssAnon``: not the file pages an LMDB database or the page
    cache maps in) of this process and its children (the process that parses streamed extended XYZ,
    :mod:`pinn.io.parse_process`), sampled every 20 ms on a thread, MB."""

    def __init__(self):
        import threading
        self.peak = self.now()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    @staticmethod
    def now():
        total = 0.0
        for pid in ["self"] + children():
            try:
                with open(f"/proc/{pid}/status") as status:
                    total += next(int(line.split()[1]) for line in status if line.startswith("RssAnon:")) / 1024.0
            except (OSError, StopIteration):
                if pid == "self":
                    return float("nan")
        return total

    def _sample(self):
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self.now())

    def stop(self):
        self._stop.set()
        self._thread.join()
        return round(max(self.peak, self.now()), 1)


def measure(mode, path, cache):
    """One measurement in this process: build the dataset of ``mode`` and iterate it."""
    from pinn.io import load_ase, load_tfrecord, write_tfrecord
    anonymous = AnonymousPeak()
    start = time.perf_counter()
    if mode in ("held", "streamed"):
        dataset = load_ase(path, stream=mode == "streamed")
        built = time.perf_counter()
        count = sum(1 for _ in dataset)
    elif mode == "convert":
        dataset = load_ase(path, stream=True)
        built = time.perf_counter()
        count = write_tfrecord(cache, dataset)
    else:
        dataset = load_tfrecord(cache)
        built = time.perf_counter()
        count = sum(1 for _ in dataset)
    done = time.perf_counter()
    import tensorflow as tf
    return {"tensorflow": tf.__version__, "frames": count, "build_s": round(built - start, 2),
            "iterate_s": round(done - built, 2),
            "frames_per_s": round(count / (done - start), 1), "peak_rss_mb": round(peak_rss_mb(), 1),
            "peak_anonymous_mb": anonymous.stop()}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=2500, help="frames at scale 1 (default 2500)")
    parser.add_argument("--scales", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--atoms", type=int, choices=(32, 64, 108), default=64)
    parser.add_argument("--formats", nargs="+", choices=sorted(FORMATS), default=["xyz", "db", "aselmdb"])
    parser.add_argument("--modes", nargs="+", choices=("held", "streamed", "convert", "tfrecord"),
                        default=["held", "streamed", "convert", "tfrecord"])
    parser.add_argument("--dir", default="/tmp/pinn-bench-streaming", help="where the data files are written")
    parser.add_argument("--code", default="", help="the code version, for the JSON lines")
    parser.add_argument("--measure", nargs=3, metavar=("MODE", "FILE", "CACHE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(*args.measure)))
        return
    os.makedirs(args.dir, exist_ok=True)
    for fmt in args.formats:
        if fmt == "aselmdb":
            try:
                import ase_db_backends  # noqa: F401
            except ImportError:
                print("aselmdb: ase-db-backends is not installed; skipped", file=sys.stderr)
                continue
        for scale in args.scales:
            n = args.frames * scale
            path = os.path.join(args.dir, f"cu{args.atoms}-{n}{FORMATS[fmt]}")
            write_data(path, fmt, n, args.atoms)
            cache = os.path.join(args.dir, f"cu{args.atoms}-{n}-{fmt}.tfr")
            for mode in args.modes:
                if mode == "tfrecord" and not os.path.exists(cache):
                    continue
                done = subprocess.run([sys.executable, __file__, "--measure", mode, path, cache],
                                      capture_output=True, text=True, check=True)
                figures = json.loads(done.stdout.strip().splitlines()[-1])
                emit(benchmark="streaming", format=fmt, mode=mode, scale=scale, atoms=args.atoms,
                     file_mb=round(os.path.getsize(path) / 1e6, 1), code=args.code, tensorflow_imported=True,
                     **figures)


if __name__ == "__main__":
    main()
