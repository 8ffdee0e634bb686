"""Molecular dynamics with a trained model through the ASE calculator.

Usage:  python inputs/md_ase.py [MODEL_DIR] [N_STEPS] [STRUCTURE] [TEMPERATURE_K]

Runs NVE (velocity Verlet, 1 fs) from STRUCTURE (any ASE-readable file; by
default a 3x3x3 CuAu fcc cell of 108 atoms) started at TEMPERATURE_K (default
300 K), prints energies along the way, the total-energy drift and the time per
step.  The argon MiMiC demo:  python inputs/md_ase.py demo/mimic-model 500 demo/mimic/argon.xyz 60
"""
import sys
import time

import numpy as np
from ase import units
from ase.build import bulk
from ase.md.verlet import VelocityVerlet

from pinn.runtime import quiet_tensorflow

quiet_tensorflow()  # before TensorFlow is imported: its start-up messages only if TF_CPP_MIN_LOG_LEVEL is set

import pinn  # noqa: E402
from pinn.io import ase_files  # noqa: E402  (ase.io.read of this process's file, also under MPI)
from pinn.md.velocities import thermalize  # noqa: E402

model_dir = sys.argv[1] if len(sys.argv) > 1 else "demo/model"
n_steps = int(sys.argv[2]) if len(sys.argv) > 2 else 500
structure = sys.argv[3] if len(sys.argv) > 3 else None
temperature = float(sys.argv[4]) if len(sys.argv) > 4 else 300.0

if structure:
    atoms = ase_files.read(structure)
else:
    atoms = bulk("Cu", "fcc", a=3.75, cubic=True) * (3, 3, 3)
    atoms.numbers[np.random.RandomState(0).rand(len(atoms)) < 0.3] = 79
atoms.calc = pinn.get_calc(model_dir)
thermalize(atoms, temperature, rng=np.random.RandomState(1))
md = VelocityVerlet(atoms, 1.0 * units.fs)

e0 = atoms.get_total_energy()
md.run(5)  # warm-up (tracing)
start = time.perf_counter()
for block in range(n_steps // 100):
    md.run(100)
    print(f"step {(block + 1) * 100:5d}  Epot {atoms.get_potential_energy():10.4f} eV  "
          f"T {atoms.get_temperature():6.1f} K  Etot {atoms.get_total_energy():10.4f} eV")
elapsed = time.perf_counter() - start
drift = (atoms.get_total_energy() - e0) / len(atoms)
print(f"NVE {n_steps} steps of {len(atoms)} atoms: total-energy drift {drift * 1000:.3f} meV/atom, "
      f"{elapsed / max(n_steps // 100 * 100, 1) * 1000:.2f} ms/step")
