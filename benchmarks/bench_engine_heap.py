"""Page faults and time of the Numba engines' calls with the heap kept (pinn.engines.heap) and with glibc's defaults.

Usage:  python benchmarks/bench_engine_heap.py [cu108|ethanol|md ...] [--calls 10] [--batch 32] [--rounds 2]

For each dataset and network (the reference PiNet, and PiNet2 of rank 3 with the same sizes), a training-engine
call (:class:`pinn.engines.gradients.TrainingEngine`: energies, forces, the loss and its weight gradients) on the
first batch of the training split; ``md``: an MD-engine call (:class:`pinn.engines.md.FastPiNet`: energy, forces,
stress) on a Cu fcc cell of 3 456 atoms (4 × 4 × 2 of the 108-atom cells, rattled by 0.05 Å, untrained weights).
Each in a child process with ``PINN_KEEP_HEAP`` 1 and 0, alternated for ``--rounds`` rounds.  Prints one JSON
line per child: the median ms of ``--calls`` calls after three warm-up calls, the minor page faults per call,
and the peak RSS.
"""
import argparse
import json
import os
import subprocess
import sys

from common import HERE, REFERENCE_NETWORK, dataset_path, emit


def timed(call, calls):
    """(median ms, minor page faults per call) of ``calls`` calls of ``call()`` after three warm-up calls."""
    import resource
    import time

    import numpy as np
    for _ in range(3):
        call()
    times = []
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(calls):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    return round(1000 * float(np.median(times)), 2), round(faults / calls, 1)


def md_call(network):
    """An MD-engine call on 3 456 Cu atoms: (the call, the atom count)."""
    from bench_kernel_profile import build
    from common import engine_system
    from pinn.engines.md import FastPiNet
    from pinn.io.neighbors import neighbor_list
    atoms = engine_system("cu108") * (4, 4, 2)
    atoms.rattle(0.05, seed=1)
    ind, shift = neighbor_list(atoms.positions, atoms.cell[:], atoms.pbc, REFERENCE_NETWORK["rc"] + 0.5)
    inputs = (atoms.numbers, atoms.positions, ind[:, 0].copy(), ind[:, 1].copy(), shift @ atoms.cell[:],
              atoms.cell[:], atoms.pbc)
    engine = FastPiNet(build(network, "float32", **({"rank": 3} if network == "PiNet2" else {})))
    return lambda: engine(*inputs), len(atoms)


def child(name, network, batch, calls):
    """One process's measurement: returns the record's figures."""
    import resource

    import tensorflow as tf
    from pinn.engines.gradients import TrainingEngine
    from pinn.engines.heap import keep_heap
    from pinn.io import add_neighbors, ase_files, load_ase, sparse_batch
    from pinn.networks import get_network
    from pinn.params import resolve
    from pinn.physics.potential import PotentialModel
    if name == "md":
        call, n_atoms = md_call(network)
        ms, faults = timed(call, calls)
        return {"ms_per_call": ms, "faults_per_call": faults, "heap_kept": keep_heap(), "atoms": n_atoms,
                "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0)}
    types = sorted(set(ase_files.read(dataset_path(name), 0).numbers.tolist()))
    net = dict(REFERENCE_NETWORK, atom_types=types)
    if network == "PiNet2":
        net["rank"] = 3
    params = resolve({"model_dir": "unused", "network": {"name": network, "params": net}})
    model = PotentialModel(get_network(params), params["model"]["params"], types, tf.float32)
    data = load_ase(dataset_path(name, "train")).apply(add_neighbors(REFERENCE_NETWORK["rc"]))
    first = {k: v.numpy() for k, v in next(iter(data.apply(sparse_batch(batch)))).items()}
    engine = TrainingEngine(model)
    counts = engine.loss_counts(first, ["energy", "forces"])
    weights = {"energy": 1.0, "forces": 10.0}
    ms, faults = timed(lambda: engine(first, weights, counts), calls)
    return {"ms_per_call": ms, "faults_per_call": faults, "heap_kept": keep_heap(), "atoms": int(len(first["elems"])),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("datasets", nargs="*", default=["cu108", "ethanol"])
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--child", nargs=2, metavar=("DATASET", "NETWORK"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(*args.child, args.batch, args.calls)))
        return
    for name in args.datasets:
        if name != "md":
            dataset_path(name)  # generated once, before the children
        for _ in range(args.rounds):
            for network in ("PiNet", "PiNet2"):
                for keep in ("1", "0"):
                    done = subprocess.run([sys.executable, os.path.join(HERE, "bench_engine_heap.py"), "--child", name,
                                           network, "--batch", str(args.batch), "--calls", str(args.calls)],
                                          env=dict(os.environ, PINN_KEEP_HEAP=keep), capture_output=True, text=True,
                                          check=True)
                    emit(benchmark="engine_heap", dataset=name, network=network,
                         call="md" if name == "md" else "training", batch=None if name == "md" else args.batch,
                         PINN_KEEP_HEAP=keep, calls=args.calls, **json.loads(done.stdout.splitlines()[-1]))


if __name__ == "__main__":
    main()
