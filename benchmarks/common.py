"""Shared pieces of the benchmarks: data, the reference configuration, JSON output."""
import json
import os
import platform
import resource
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.environ.get("PINN_BENCH_DATA", os.path.join(HERE, "..", "bench-data"))

#: the reference configuration (upstream PiNN's published benchmark, docs/benchmarks.md):
#: PiNet depth 4, [16, 16] nodes,
#: polynomial basis with 4 functions, cutoff f1, tanh, rc 4.5 Å; Adam 3e-4 with clipping,
#: batch 32, force weight 10, per-element energy offsets fitted on the training split.
REFERENCE_NETWORK = {"rc": 4.5, "depth": 4, "pp_nodes": [16, 16], "pi_nodes": [16, 16], "ii_nodes": [16, 16],
                     "out_nodes": [16, 16], "basis_type": "polynomial", "n_basis": 4, "cutoff_type": "f1",
                     "act": "tanh"}
REFERENCE_MODEL = {"use_force": True, "e_loss_multiplier": 1.0, "f_loss_multiplier": 10.0, "fit_e_dress": True,
                   "learning_rate": 3e-4, "lr_schedule": "exponential", "lr_warmup_steps": 0, "ema_decay": None,
                   "max_grad_norm": 10.0, "log_every_n_steps": 100, "save_checkpoint_steps": 100000}



def small_alloy_params(model_dir, fit_e_dress_batches, **top):
    """Params of the small-PiNet benchmarks on pinn.demo's EMT Cu/Au data (bench_mixed_precision.py,
    bench_mirrored.py): depth 2, 16 nodes, rc 4.5 Å, Adam 3e-3, seed 3, the TensorFlow engine;
    ``top``: more top-level keys (precision, parallel, ...)."""
    return {"model_dir": model_dir, "seed": 3,
            "network": {"name": "PiNet", "params": {"atom_types": [29, 79], "rc": 4.5, "depth": 2,
                                                    "pp_nodes": [16], "pi_nodes": [16, 16], "ii_nodes": [16],
                                                    "out_nodes": [16]}},
            "model": {"name": "potential_model",
                      "params": {"use_force": True, "learning_rate": 3e-3, "fit_e_dress": True,
                                 "fit_e_dress_batches": fit_e_dress_batches, "engine": "tensorflow",
                                 "log_every_n_steps": 1, "tensorboard": False}}, **top}


def peak_rss_mb():
    """Peak resident memory of this process, MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def median_ms(call, calls, warm_up=True, digits=3):
    """Median wall time of ``calls`` calls of ``call()``, ms (rounded to ``digits``); ``warm_up``: one call first,
    not counted (compilation, first allocations)."""
    import time
    if warm_up:
        call()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return round(1e3 * float(np.median(times)), digits)


def engine_system(name):
    """A system of the engine benchmarks: ``'cu108'`` (Cu fcc 3×3×3, periodic) or ``'ethanol'`` (one molecule)."""
    from ase.build import bulk, molecule
    builders = {"cu108": lambda: bulk("Cu", "fcc", a=3.61, cubic=True) * (3, 3, 3),
                "ethanol": lambda: molecule("CH3CH2OH")}
    return builders[name]()


#: the names :func:`engine_system` knows
ENGINE_SYSTEMS = ("cu108", "ethanol")


def emit(**record):
    """Print one JSON line with the machine next to the figures (and, where this process imported
    TensorFlow, its version: an MD run with the Numba engine need not)."""
    record.setdefault("machine", f"{platform.machine()} {os.cpu_count()} cores")
    if "tensorflow" in sys.modules:
        record.setdefault("tensorflow", sys.modules["tensorflow"].__version__)
    else:
        record.setdefault("tensorflow_imported", False)
    print(json.dumps(record), flush=True)


def dataset_path(name, part=None):
    """Path of benchmark dataset ``name`` ('cu108' or 'ethanol'), generated if missing.

    ``part`` None: all frames in MD order (``NAME.xyz``); 'train' / 'val': the fixed 90 % / 10 %
    split (``NAME-train.xyz``, ``NAME-val.xyz``).  The recipe is the reference one
    (upstream PiNN's published benchmark, docs/benchmarks.md), with the same seeds: 2000 frames after 1 ps of Langevin
    equilibration (friction 0.01/fs, fixcm off, Maxwell-Boltzmann start without net momentum
    or rotation); cu108: bulk Cu 3x3x3 (a = 3.61 Å), EMT, 800 K, 2 fs, a frame every 5 steps,
    seed 2024; ethanol: GFN2-xTB (tblite, ``pip install tblite``), 500 K, 0.5 fs, a frame
    every 10 steps, seed 2025; split by the permutation of seed 12345.
    """
    paths = _paths(name)
    if not all(os.path.exists(p) for p in paths.values()):
        # in a process of its own, so that the reference calculator's memory is not in the
        # benchmark's peak RSS (EMT MD of 2 000 frames added 0.25 GB to the first cu108 run)
        import subprocess
        subprocess.run([sys.executable, os.path.abspath(__file__), name], check=True)
    return paths[part]


def _write_dataset(name, paths):
    print(f"generating {paths[None]} and its split", file=sys.stderr)
    frames = _make(name, n_frames=int(os.environ.get("PINN_BENCH_FRAMES", 2000)))
    from pinn.io import ase_files
    order = np.random.RandomState(12345).permutation(len(frames))
    n_val = int(round(0.1 * len(frames)))
    parts = {None: np.arange(len(frames)), "val": np.sort(order[:n_val]), "train": np.sort(order[n_val:])}
    for key, idx in parts.items():
        ase_files.write(paths[key], [frames[i] for i in idx], format="extxyz")


def _make(name, n_frames):
    from ase import units
    from ase.build import bulk, molecule
    from ase.calculators.singlepoint import SinglePointCalculator
    from ase.md.langevin import Langevin
    from ase.md.velocitydistribution import Stationary, ZeroRotation
    from pinn.md.velocities import thermalize
    if name == "cu108":
        from ase.calculators.emt import EMT
        atoms, calc = bulk("Cu", "fcc", a=3.61, cubic=True) * (3, 3, 3), EMT()
        temp, dt, n_equil, stride, seed = 800.0, 2.0, 500, 5, 2024
    elif name == "ethanol":
        try:
            from tblite.ase import TBLite
        except ImportError as err:
            raise SystemExit(f"the ethanol benchmark data need tblite (pip install tblite): {err}")
        atoms, calc = molecule("CH3CH2OH"), TBLite(method="GFN2-xTB", verbosity=0)
        atoms.pbc = False
        temp, dt, n_equil, stride, seed = 500.0, 0.5, 2000, 10, 2025
    else:
        raise SystemExit(f"unknown benchmark dataset {name!r} (cu108, ethanol)")
    rng = np.random.RandomState(seed)
    atoms.calc = calc
    thermalize(atoms, temp, rng=rng)
    Stationary(atoms)
    if not atoms.pbc.any():
        ZeroRotation(atoms)
    md = Langevin(atoms, dt * units.fs, temperature_K=temp, friction=0.01 / units.fs, fixcm=False, rng=rng)
    md.run(n_equil)
    frames = []
    for _ in range(n_frames):
        md.run(stride)
        res = {"energy": atoms.get_potential_energy(), "forces": atoms.get_forces()}
        if atoms.pbc.any():
            res["stress"] = atoms.get_stress()
        frame = atoms.copy()
        frame.arrays.pop("momenta", None)
        frame.calc = SinglePointCalculator(frame, **res)
        frames.append(frame)
    return frames


def _paths(name):
    os.makedirs(DATA, exist_ok=True)
    return {None: os.path.join(DATA, f"{name}.xyz"), "train": os.path.join(DATA, f"{name}-train.xyz"),
            "val": os.path.join(DATA, f"{name}-val.xyz")}


if __name__ == "__main__":  # python common.py NAME: generate dataset NAME (what dataset_path runs)
    _write_dataset(sys.argv[1], _paths(sys.argv[1]))
