"""Small reference datasets computed here with ASE's EMT potential (no downloads).

``make_alloy_dataset('alloy.xyz', n_frames=400)`` writes periodic CuAu fcc
cells (32 atoms, random composition, random strain, thermal rattling) with
EMT energy, forces and stress, in extended XYZ.  Deterministic for a seed.
"""
import numpy as np


def alloy_frames(n_frames=400, seed=0, size=2, rattle=0.05, max_strain=0.01):
    """Return a list of ``Atoms`` with EMT results attached (eV, eV/Å, eV/Å³)."""
    from ase.build import bulk
    from ase.calculators.emt import EMT
    from ase.calculators.singlepoint import SinglePointCalculator

    rng = np.random.RandomState(seed)
    frames = []
    for _ in range(n_frames):
        x_au = rng.uniform(0.0, 0.6)
        a0 = 3.61 * (1 - x_au) + 4.08 * x_au  # Vegard's law, Å
        atoms = bulk("Cu", "fcc", a=a0, cubic=True) * (size, size, size)
        atoms.numbers[rng.rand(len(atoms)) < x_au] = 79
        strain = np.eye(3) + rng.uniform(-max_strain, max_strain, (3, 3))
        atoms.set_cell(atoms.cell[:] @ (strain + strain.T) / 2, scale_atoms=True)
        atoms.positions += rng.normal(0.0, rattle, atoms.positions.shape)
        atoms.calc = EMT()
        results = {"energy": atoms.get_potential_energy(), "forces": atoms.get_forces(),
                   "stress": atoms.get_stress()}
        atoms.calc = SinglePointCalculator(atoms, **results)
        frames.append(atoms)
    return frames


def make_alloy_dataset(path, n_frames=400, seed=0):
    """Write :func:`alloy_frames` to ``path`` (extended XYZ) and return ``path``."""
    import ase.io
    ase.io.write(path, alloy_frames(n_frames, seed), format="extxyz")
    return path
