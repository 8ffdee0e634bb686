"""How the Numba MD engine's step scales with threads, and where its time goes.

Usage:  python benchmarks/bench_md_threads.py [cu108 cu864 cu10976 ...] [--threads 1 2 4 ...] [--steps N]
                                              [--model DIR]

For each system and thread count, in a process of its own started with ``NUMBA_NUM_THREADS``
set (so that Numba's thread pool has that size), after 5 warm-up steps of the MD of
``bench_md.py`` (velocity Verlet, 0.5 fs, Cu from the perfect lattice at 800 K), one JSON line:

- ``ms_per_step``: the median time of one ``md.run(1)`` (the figure of ``bench_md.py``);
- ``ms_engine``: the median time of the engine's call on the current positions and candidate
  pairs (cutoff filter, network, forces and virial; no neighbor list, no ASE);
- ``ms_network``: the median time of the network kernel alone (energies and dE/d distance of
  every pair: the parallel loops over pair tiles and the per-atom layers between them), in its
  parallel build also on one thread (where the engine's call runs the serial build);
- ``ms_without_pairs``: the same kernel given no pairs: its per-atom layers (on one thread:
  they are not split among threads), the zeroing and the sums of the threads' buffers, and the
  parallel regions' cost;
- ``ms_outside_engine``: ``ms_per_step - ms_engine`` (ASE's integrator, the calculator's checks,
  the Verlet list's update); a difference of two medians, so noise can make it negative.

These read the engine's internals (:class:`pinn.engines.md.FastPiNet`'s workspace): they
diagnose, they are not an API.  Uses ``--model`` (default: the cu108 model that ``bench_train.py``
left in bench-data), a PiNet potential (``ms_network`` times PiNet's kernel; a PiNet2 model is refused).
"""
import argparse
import os
import subprocess
import sys

import numpy as np

from common import DATA, emit, median_ms, peak_rss_mb

CELLS = {"cu108": 3, "cu256": 4, "cu864": 6, "cu10976": 14}


def measure(name, steps, model_dir):
    """One JSON line for ``name`` with this process's thread count."""
    import numba
    from ase import units
    from ase.build import bulk
    from pinn.md.velocities import thermalize
    from ase.md.verlet import VelocityVerlet

    import pinn
    from pinn.engines.numba import md_kernels as fast_pinet

    if not os.path.exists(model_dir):
        raise SystemExit(f"{model_dir} missing: run benchmarks/bench_train.py cu108 first")
    atoms = bulk("Cu", "fcc", a=3.61, cubic=True) * ((CELLS[name],) * 3)
    atoms.calc = calc = pinn.get_calc(model_dir, engine="numba")
    thermalize(atoms, 800, rng=np.random.RandomState(0))
    md = VelocityVerlet(atoms, 0.5 * units.fs)
    if calc._engine.fast.network != "PiNet":
        raise SystemExit(f"{model_dir} is a {calc._engine.fast.network} model: ms_network times PiNet's kernel; give "
                         "a PiNet potential with --model")
    md.run(5)
    ms_step = median_ms(lambda: md.run(1), steps, warm_up=False)

    fast, neighbors = calc._engine.fast, calc.neighbors
    cell, pbc = atoms.cell[:], atoms.pbc
    cand = neighbors.candidates(atoms.positions, cell, pbc)
    coord = np.ascontiguousarray(atoms.positions)
    ms_engine = median_ms(lambda: fast(atoms.numbers, coord, *cand, cell, pbc), steps, warm_up=False)
    n_pairs = fast.last_pairs
    types = fast._type_of[atoms.numbers]
    weights = (fast._flat, fast._table, fast._layers, fast._blocks, fast._codes_array, fast._scal)
    work = (fast._basis, fast._dbasis, fast._zpair, fast._zatom, fast._pa, fast._pb, fast._buf, fast._grad_r,
            fast._atomic, fast._charge_seed, fast._charge)
    numba.set_num_threads(fast.threads)

    def network(pairs):
        return lambda: fast_pinet._evaluate(types, pairs, fast._pair_i, fast._pair_j, fast._dist_dt, *weights,
                                            fast.threads, *work)
    ms_network = median_ms(network(n_pairs), steps, warm_up=False)
    ms_atoms = median_ms(network(0), steps, warm_up=False)
    emit(benchmark="md_threads", system=name, atoms=len(atoms), pairs=int(n_pairs), threads=fast.threads,
         threading_layer=numba.threading_layer(), omp_wait_policy=os.environ.get("OMP_WAIT_POLICY"),
         ms_per_step=ms_step, ms_engine=ms_engine, ms_network=ms_network, ms_without_pairs=ms_atoms,
         ms_outside_engine=round(ms_step - ms_engine, 3), repeats=steps, peak_rss_mb=round(peak_rss_mb()),
         engine_source=fast_pinet.__file__)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("systems", nargs="*", default=["cu864"], help=f"any of {list(CELLS)}")
    ap.add_argument("--threads", type=int, nargs="+", default=None,
                    help="thread counts (default: 1, 2, 4, ... up to the CPU count)")
    ap.add_argument("--steps", type=int, default=50, help="repeats of each timed call")
    ap.add_argument("--model", default=os.path.join(DATA, "cu108-model"), help="a PiNet potential's model directory "
                    "(default: bench-data/cu108-model)")
    args = ap.parse_args()
    unknown = [name for name in args.systems if name not in CELLS]
    if unknown:
        ap.error(f"unknown systems {unknown}; choose from {list(CELLS)}")
    if os.environ.get("_PINN_BENCH_CHILD"):
        for name in args.systems:
            measure(name, args.steps, args.model)
        return
    threads = args.threads or [t for t in (1, 2, 4, 8, 16, 32, 64, 128) if t <= os.cpu_count()]
    for name in args.systems:
        for count in threads:
            env = dict(os.environ, NUMBA_NUM_THREADS=str(count), _PINN_BENCH_CHILD="1")
            subprocess.run([sys.executable, __file__, name, "--steps", str(args.steps), "--model", args.model], env=env,
                           check=True)


if __name__ == "__main__":
    main()
