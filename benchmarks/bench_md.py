"""ASE molecular-dynamics time per step with the pinn calculator.

Usage:  python benchmarks/bench_md.py [ethanol ethanol16 cu108 cu256 cu864 cu10976] [--engine numba|tensorflow]
                                      [--model DIR] [--members N] [--dispersion d3bj --functional PBE]

VelocityVerlet, 0.5 fs, 200 steps, median ms/step after 5 warm-up steps; Cu from
the perfect lattice at 800 K, ethanol (and ``ethanol16``'s 16 molecules, 12 Å apart) from its
equilibrium geometry at 500 K.
Uses the models that bench_train.py left in bench-data (Cu 256/864 use the cu108 model).
Each system runs in its own process, so that its peak RSS is its own.  ``--members N`` runs
a committee of N (``pinn.get_calc([DIR] * N)``: N copies of the model, which cost what N
different members cost) and reports its ms/step beside the plain calculator's (``members`` 0);
with ``--drive first --deviation-every K`` the first member drives the MD and an observer asks
for the deviation every K steps (the other members run then only).  Each line has the median
and the mean over the steps (the mean counts the steps that evaluate the whole committee).
``--dispersion d3bj --functional PBE``: the model plus D3 (``pinn.get_calc(dispersion=, functional=)``).
"""
import argparse
import os
import subprocess
import sys
import time

import numpy as np
from ase import units
from ase.build import bulk, molecule
from ase.md.verlet import VelocityVerlet

from common import DATA, emit, peak_rss_mb

from pinn.md.velocities import thermalize


def _molecules(count, spacing=12.0):
    """``count`` ethanol molecules in a row, ``spacing`` Å apart (no pairs between them): a mid-size system."""
    atoms = molecule("CH3CH2OH")
    for k in range(1, count):
        other = molecule("CH3CH2OH")
        other.translate([spacing * k, 0.0, 0.0])
        atoms += other
    return atoms


SYSTEMS = {"ethanol": ("ethanol", lambda: molecule("CH3CH2OH"), 500),
           # 16 molecules, 144 atoms, ~1 150 pairs: between one molecule and Cu 108 (not in the default set)
           "ethanol16": ("ethanol", lambda: _molecules(16), 500),
           "cu108": ("cu108", lambda: bulk("Cu", "fcc", a=3.61, cubic=True) * (3, 3, 3), 800),
           "cu256": ("cu108", lambda: bulk("Cu", "fcc", a=3.61, cubic=True) * (4, 4, 4), 800),
           "cu864": ("cu108", lambda: bulk("Cu", "fcc", a=3.61, cubic=True) * (6, 6, 6), 800),
           # the 10 000-atom cell (14x14x14 cubic cells), not in the default set
           "cu10976": ("cu108", lambda: bulk("Cu", "fcc", a=3.61, cubic=True) * (14, 14, 14), 800)}
DEFAULT_SYSTEMS = ["ethanol", "cu108", "cu256", "cu864"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("systems", nargs="*", default=DEFAULT_SYSTEMS, help=f"any of {list(SYSTEMS)}")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--engine", default="auto", choices=["auto", "numba", "tensorflow"],
                    help="the calculator's engine (auto: numba for PiNet)")
    ap.add_argument("--model", default=None, help="model directory for every system (default: the one "
                    "bench_train.py left in bench-data for the system)")
    ap.add_argument("--members", type=int, default=0, help="a committee of this many copies of the model "
                    "(0: the plain calculator of one model)")
    ap.add_argument("--drive", default="mean", choices=["mean", "first"], help="a committee's drive "
                    "(get_calc(drive=...))")
    ap.add_argument("--deviation-every", type=int, default=0, help="ask for the committee's max force "
                    "deviation every this many steps (0: never; with --drive mean it comes with every step)")
    ap.add_argument("--dispersion", default=None, help="add D3 with this damping (d3bj, ...): get_calc(dispersion=)")
    ap.add_argument("--functional", default=None, help="with --dispersion: the functional (e.g. PBE)")
    args = ap.parse_args()
    if (args.drive != "mean" or args.deviation_every) and not args.members:
        ap.error("--drive and --deviation-every are for a committee (--members N)")
    unknown = [name for name in args.systems if name not in SYSTEMS]
    if unknown:
        ap.error(f"unknown systems {unknown}; choose from {list(SYSTEMS)}")
    if len(args.systems) > 1:  # one process per system: peak RSS of that system alone
        d3 = ["--dispersion", args.dispersion, "--functional", args.functional] if args.dispersion else []
        for name in args.systems:
            model = ["--model", args.model] if args.model else []
            subprocess.run([sys.executable, __file__, name, "--steps", str(args.steps), "--engine", args.engine,
                            "--members", str(args.members), "--drive", args.drive,
                            "--deviation-every", str(args.deviation_every)] + model + d3, check=True)
        return
    import pinn
    for name in args.systems:
        model_name, build, temperature = SYSTEMS[name]
        model_dir = args.model or os.path.join(DATA, f"{model_name}-model")
        if not os.path.exists(model_dir):
            raise SystemExit(f"{model_dir} missing: run benchmarks/bench_train.py {model_name} first")
        atoms = build()
        committee = dict(drive=args.drive) if args.members else {}
        atoms.calc = calc = pinn.get_calc([model_dir] * args.members if args.members else model_dir,
                                          engine=args.engine, dispersion=args.dispersion, functional=args.functional,
                                          **committee)
        model = getattr(calc, "model", calc)  # the model's calculator (with D3: the sum's first part)
        thermalize(atoms, temperature, rng=np.random.RandomState(0))
        md = VelocityVerlet(atoms, 0.5 * units.fs)
        if args.deviation_every:
            md.attach(lambda: calc.get_property("max_forces_deviation", atoms), interval=args.deviation_every)
        md.run(5)
        times = []
        for _ in range(args.steps):
            t0 = time.perf_counter()
            md.run(1)
            times.append(time.perf_counter() - t0)
        emit(benchmark="md", system=name, atoms=len(atoms), engine=calc.engine,
             ms_per_step=round(1000 * float(np.median(times)), 3),
             mean_ms_per_step=round(1000 * float(np.mean(times)), 3), peak_rss_mb=round(peak_rss_mb()),
             neighbor_builds=model.neighbors.builds, threads=_threads(model), model=model_dir, members=args.members,
             **(dict(dispersion=args.dispersion, functional=args.functional) if args.dispersion else {}),
             **(dict(drive=args.drive, deviation_every=args.deviation_every,
                     committee_evaluations=model.committee_evaluations) if args.members else {}))


def _threads(calc):
    if calc.engine == "numba":
        fast = calc._fast.members[0] if hasattr(calc, "_fast") else calc._engine.fast  # a committee's, or the model's
        return fast.threads
    import tensorflow as tf
    return tf.config.threading.get_intra_op_parallelism_threads() or os.cpu_count()


if __name__ == "__main__":
    main()
