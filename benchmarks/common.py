"""Shared pieces of the benchmarks: data, the reference configuration, JSON output."""
import json
import os
import platform
import resource
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.environ.get("PINN_BENCH_DATA", os.path.join(HERE, "..", "bench-data"))

#: the reference configuration (../shared/bench/README.md): PiNet depth 4, [16, 16] nodes,
#: polynomial basis with 4 functions, cutoff f1, tanh, rc 4.5 Å; Adam 3e-4 with clipping,
#: batch 32, force weight 10, per-element energy offsets fitted on the training split.
REFERENCE_NETWORK = {"rc": 4.5, "depth": 4, "pp_nodes": [16, 16], "pi_nodes": [16, 16], "ii_nodes": [16, 16],
                     "out_nodes": [16, 16], "basis_type": "polynomial", "n_basis": 4, "cutoff_type": "f1",
                     "act": "tanh"}
REFERENCE_MODEL = {"use_force": True, "e_loss_multiplier": 1.0, "f_loss_multiplier": 10.0, "fit_e_dress": True,
                   "learning_rate": 3e-4, "max_grad_norm": 10.0, "log_every_n_steps": 100,
                   "save_checkpoint_steps": 100000}


def peak_rss_mb():
    """Peak resident memory of this process, MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def emit(**record):
    """Print one JSON line with the machine next to the figures."""
    import tensorflow as tf
    record.setdefault("machine", f"{platform.machine()} {os.cpu_count()} cores")
    record.setdefault("tensorflow", tf.__version__)
    print(json.dumps(record), flush=True)


def dataset_path(name):
    """Path of benchmark dataset ``name`` ('cu108' or 'ethanol'), generated if missing.

    cu108: bulk Cu 3x3x3 (108 atoms), EMT, Langevin 800 K, 2 fs, one frame per 10 fs.
    ethanol: one molecule, GFN2-xTB (tblite) when installed, else EMT (then marked
    'ethanol-emt': fine for timings, not for accuracy figures), Langevin 500 K.
    """
    os.makedirs(DATA, exist_ok=True)
    path = os.path.join(DATA, f"{name}.xyz")
    if os.path.exists(path):
        return path
    print(f"generating {path}", file=sys.stderr)
    frames = _make(name, n_frames=int(os.environ.get("PINN_BENCH_FRAMES", 600)))
    import ase.io
    ase.io.write(path, frames, format="extxyz")
    return path


def _make(name, n_frames):
    from ase import units
    from ase.build import bulk, molecule
    from ase.calculators.emt import EMT
    from ase.calculators.singlepoint import SinglePointCalculator
    from ase.md.langevin import Langevin
    from ase.md.velocitydistribution import MaxwellBoltzmannDistribution
    rng = np.random.RandomState(0)
    if name == "cu108":
        atoms, calc, temp, dt, stride = bulk("Cu", "fcc", a=3.61, cubic=True) * (3, 3, 3), EMT(), 800, 2.0, 5
    else:
        atoms, temp, dt, stride = molecule("CH3CH2OH"), 500, 0.5, 10
        try:
            from tblite.ase import TBLite
            calc = TBLite(method="GFN2-xTB", verbosity=0)
        except ImportError:
            calc = EMT()
    atoms.calc = calc
    MaxwellBoltzmannDistribution(atoms, temperature_K=temp, rng=rng)
    md = Langevin(atoms, dt * units.fs, temperature_K=temp, friction=0.01 / units.fs, fixcm=False, rng=rng)
    md.run(200)
    frames = []
    for _ in range(n_frames):
        md.run(stride)
        res = {"energy": atoms.get_potential_energy(), "forces": atoms.get_forces()}
        if atoms.pbc.any():
            res["stress"] = atoms.get_stress()
        frame = atoms.copy()
        frame.calc = SinglePointCalculator(frame, **res)
        frames.append(frame)
    return frames
