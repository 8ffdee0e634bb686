"""Read speed of pinn.io.readers.trr next to MDAnalysis, on the same file in the same run.

    python benchmarks/bench_trr.py [FILE.trr ...]     (default: MDAnalysisTests' cobrotoxin.trr)
    python benchmarks/bench_trr.py --concat 100       (also cobrotoxin.trr repeated 100 times, 209 MB,
                                                       written to bench-data/: a long streamed file)

For each file prints one JSON line: frames/s and MB/s for indexing (opening), a full
sequential pass decoding every block (x, v, f, box), and random access; the same for
MDAnalysis's TRRReader (C xdrfile, convert_units=False).  Each figure is the best of
``PINN_BENCH_REPEAT`` (default 5) repeats, with the file in the page cache.
"""
import json
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

REPEAT = int(os.environ.get("PINN_BENCH_REPEAT", "5"))


def best(fn):
    times = []
    for _ in range(REPEAT):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def bench(path):
    from MDAnalysis.coordinates.TRR import TRRReader
    from pinn.io.readers.trr import TRRFile
    size_mb = os.path.getsize(path) / 1e6
    with TRRFile(path) as trr:
        n, natoms = len(trr), int(trr.index["natoms"][0])
    order = np.random.RandomState(0).permutation(n)

    def pinn_open():
        TRRFile(path).close()

    def pinn_pass():
        with TRRFile(path) as trr:
            for frame in trr:
                pass

    def pinn_random():
        with TRRFile(path) as trr:
            for i in order:
                trr[int(i)]

    def mda_open():
        TRRReader(path, convert_units=False).close()

    def mda_pass():
        reader = TRRReader(path, convert_units=False)
        for ts in reader:
            for present, array in ((ts.has_positions, "positions"), (ts.has_velocities, "velocities"),
                                   (ts.has_forces, "forces")):
                if present:
                    getattr(ts, array)  # touch the arrays
        reader.close()

    def mda_random():
        reader = TRRReader(path, convert_units=False)
        for i in order:
            reader[int(i)]
        reader.close()

    # MDAnalysis caches its offsets in a hidden file beside the trr; remove it so opening is comparable
    offsets = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}_offsets.npz")
    record = {"file": os.path.basename(path), "frames": n, "natoms": natoms, "MB": round(size_mb, 2)}
    for who, fns in (("pinn", (pinn_open, pinn_pass, pinn_random)), ("mdanalysis", (mda_open, mda_pass, mda_random))):
        for what, fn in zip(("open", "pass", "random"), fns):
            if who == "mdanalysis" and what == "open" and os.path.exists(offsets):
                t = best(lambda: (os.path.exists(offsets) and os.remove(offsets), fn()))
            else:
                t = best(fn)
            record[f"{who}_{what}_s"] = round(t, 5)
            if what != "open":
                record[f"{who}_{what}_frames_per_s"] = round(n / t, 1)
                record[f"{who}_{what}_MB_per_s"] = round(size_mb / t, 1)
    record["machine"] = f"{platform.machine()} {os.cpu_count()} cores"
    print(json.dumps(record), flush=True)


def concatenated(copies):
    """cobrotoxin.trr repeated ``copies`` times (trr frames are self-contained, so this is a valid file)."""
    from MDAnalysisTests.datafiles import TRR_xvf
    data = os.environ.get("PINN_BENCH_DATA", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                                            "bench-data"))
    os.makedirs(data, exist_ok=True)
    path = os.path.join(data, f"cobrotoxin_x{copies}.trr")
    if not os.path.exists(path):
        raw = open(TRR_xvf, "rb").read()
        with open(path, "wb") as f:
            for _ in range(copies):
                f.write(raw)
    return path


def main(args):
    paths = list(args)
    if "--concat" in paths:
        at = paths.index("--concat")
        paths[at:at + 2] = [concatenated(int(paths[at + 1]))]
    if not args or args[:1] == ["--concat"]:
        from MDAnalysisTests.datafiles import TRR_xvf
        paths.insert(0, TRR_xvf)
    for path in paths:
        bench(path)


if __name__ == "__main__":
    main(sys.argv[1:])
