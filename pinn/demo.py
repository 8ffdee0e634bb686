"""Small reference datasets computed here with ASE's EMT potential (no downloads).

``make_alloy_dataset('alloy.xyz', n_frames=400)`` writes periodic CuAu fcc
cells (32 atoms) sampled from Langevin molecular dynamics with EMT: each
trajectory has its own random composition (0–60 % Au), lattice constant from
Vegard's law, a small random strain and a temperature between 300 and 900 K.
Frames carry EMT energy (eV), forces (eV/Å) and stress (eV/Å³), in extended
XYZ.  Deterministic for a seed.
"""
import numpy as np


def alloy_frames(n_frames=400, seed=0, size=2, frames_per_trajectory=20, stride=10, max_strain=0.01):
    """Return a list of ``Atoms`` with EMT results attached (eV, eV/Å, eV/Å³)."""
    from ase import units
    from ase.build import bulk
    from ase.calculators.emt import EMT
    from ase.calculators.singlepoint import SinglePointCalculator
    from ase.md.langevin import Langevin
    from ase.md.velocitydistribution import MaxwellBoltzmannDistribution

    rng = np.random.RandomState(seed)
    frames = []
    while len(frames) < n_frames:
        x_au = rng.uniform(0.0, 0.6)
        temperature = rng.uniform(300.0, 900.0)
        a0 = 3.61 * (1 - x_au) + 4.08 * x_au  # Vegard's law, Å
        atoms = bulk("Cu", "fcc", a=a0, cubic=True) * (size, size, size)
        atoms.numbers[rng.rand(len(atoms)) < x_au] = 79
        strain = np.eye(3) + rng.uniform(-max_strain, max_strain, (3, 3))
        atoms.set_cell(atoms.cell[:] @ (strain + strain.T) / 2, scale_atoms=True)
        atoms.calc = EMT()
        MaxwellBoltzmannDistribution(atoms, temperature_K=temperature, rng=rng)
        md = Langevin(atoms, 2.0 * units.fs, temperature_K=temperature, friction=0.02 / units.fs,
                      fixcm=False, rng=rng)
        md.run(50)  # short equilibration
        for _ in range(min(frames_per_trajectory, n_frames - len(frames))):
            md.run(stride)
            results = {"energy": atoms.get_potential_energy(), "forces": atoms.get_forces(),
                       "stress": atoms.get_stress()}
            frame = atoms.copy()
            frame.calc = SinglePointCalculator(frame, **results)
            frames.append(frame)
    return frames


def make_alloy_dataset(path, n_frames=400, seed=0):
    """Write :func:`alloy_frames` to ``path`` (extended XYZ) and return ``path``."""
    import ase.io
    ase.io.write(path, alloy_frames(n_frames, seed), format="extxyz")
    return path
