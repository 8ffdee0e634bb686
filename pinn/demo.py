"""Small reference datasets computed here with ASE's EMT potential (no downloads).

``make_alloy_dataset('alloy.xyz', n_frames=400)`` writes periodic CuAu fcc
cells (32 atoms) sampled from Langevin molecular dynamics with EMT: each
trajectory has its own random composition (0–60 % Au), lattice constant from
Vegard's law, a small random strain and a temperature between 300 and 900 K.
Frames carry EMT energy (eV), forces (eV/Å) and stress (eV/Å³), in extended
XYZ.  Deterministic for a seed.

Every ``make_*`` function creates the folder it writes to when it is missing
(``make_alloy_dataset('demo/alloy.xyz')`` from any directory).

``active_learning_demo(directory)`` runs one round of the active-learning loop on EMT copper, end to
end (docs/committee.md).
"""
import os

import numpy as np

from pinn.io import ase_files
from pinn.units import COULOMB  # eV·Å/e²


@ase_files.per_process()  # ASE's Langevin and velocity distribution broadcast their random numbers over MPI's world
def alloy_frames(n_frames=400, seed=0, size=2, frames_per_trajectory=20, stride=10, max_strain=0.01):
    """Return a list of ``Atoms`` with EMT results attached (eV, eV/Å, eV/Å³)."""
    from ase import units
    from ase.build import bulk
    from ase.calculators.emt import EMT
    from ase.calculators.singlepoint import SinglePointCalculator
    from ase.md.langevin import Langevin
    from pinn.md.velocities import thermalize

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
        thermalize(atoms, temperature, rng=rng)
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


def _parent_made(path):
    """``path``, after creating its folder if missing (``make_alloy_dataset('new/dir/x.xyz')`` works)."""
    import os
    folder = os.path.dirname(os.fspath(path))
    if folder:
        os.makedirs(folder, exist_ok=True)
    return path


def make_alloy_dataset(path, n_frames=400, seed=0):
    """Write :func:`alloy_frames` to ``path`` (extended XYZ; its folder is created if missing) and return ``path``."""
    ase_files.write(_parent_made(path), alloy_frames(n_frames, seed), format="extxyz")
    return path


#: Lennard-Jones argon (eV, Å), the physical reference of the MiMiC demo
ARGON_LJ = {"sigma": 3.405, "epsilon": 0.0103, "rc": 7.5}


@ase_files.per_process()  # the MD's random numbers are this process's (see alloy_frames)
def make_mimic_demo(directory, n_runs=8, n_frames=40, seed=0, stride=10):
    """Write MiMiC-format output of argon runs: ``argon.mpt``, ``run{i}.trr`` and ``run{i}.ENERGIES``.

    Each run is Langevin MD (2 fs) of 32 Lennard-Jones argon atoms (fcc,
    periodic; ASE's smooth LJ calculator with :data:`ARGON_LJ`) at its own
    temperature between 40 and 120 K and density.  As in a MiMiC run, the
    ``.trr`` (single precision) holds positions (nm), box (nm) and forces
    (kJ mol⁻¹ nm⁻¹) every ``stride`` steps, and ``ENERGIES`` one line per step
    with the potential energy in Hartree (EKS) and NFI equal to the trr step.
    A starting structure for MD, ``argon.xyz``, is written too.  Deterministic
    for a seed.

    Returns:
        dict with lists ``mpt``, ``trr``, ``energies`` (one entry per run) and ``start``.
    """
    import os

    from ase import units as ase_units
    from ase.build import bulk
    from ase.calculators.lj import LennardJones
    from ase.md.langevin import Langevin
    from pinn.md.velocities import thermalize

    from pinn import units
    from pinn.io.readers.energies import write_energies
    from pinn.io.readers.mpt import write_mpt
    from pinn.io.readers.trr import write_trr

    os.makedirs(directory, exist_ok=True)
    rng = np.random.RandomState(seed)
    mpt = os.path.join(directory, "argon.mpt")
    write_mpt(mpt, [("AR", 32)], {"AR": {"number": [1], "type": ["Ar"], "resid": [1], "resname": ["AR"],
                                         "name": ["Ar"], "charge": [0.0], "element": ["Ar"], "mass": [39.948]}})
    out = {"mpt": [], "trr": [], "energies": []}
    for run in range(n_runs):
        temperature = 40.0 + 80.0 * run / max(n_runs - 1, 1)
        atoms = bulk("Ar", "fcc", a=rng.uniform(5.30, 5.60), cubic=True) * (2, 2, 2)
        atoms.calc = LennardJones(smooth=True, **ARGON_LJ)
        thermalize(atoms, temperature, rng=rng)
        md = Langevin(atoms, 2.0 * ase_units.fs, temperature_K=temperature, friction=0.01 / ase_units.fs,
                      fixcm=False, rng=rng)
        md.run(100)  # equilibration
        frames = []
        nfi = []
        eks = []
        temps = []
        kin = []
        for step in range(1, n_frames * stride + 1):
            md.run(1)
            nfi.append(step)
            eks.append(atoms.get_potential_energy() / units.HARTREE)
            kin.append(atoms.get_kinetic_energy() / units.HARTREE)
            temps.append(atoms.get_temperature())
            if step % stride == 0:
                frames.append({"step": step, "x": atoms.positions / units.NM, "box": atoms.cell[:] / units.NM,
                               "f": atoms.get_forces() / units.KJ_PER_MOL_NM})
        trr = write_trr(os.path.join(directory, f"run{run}.trr"), frames)
        energies = write_energies(os.path.join(directory, f"run{run}.ENERGIES"), nfi, eks, temps, kin)
        out["mpt"].append(mpt)
        out["trr"].append(trr)
        out["energies"].append(energies)
    start = bulk("Ar", "fcc", a=5.45, cubic=True) * (3, 3, 3)
    out["start"] = os.path.join(directory, "argon.xyz")
    ase_files.write(out["start"], start)
    return out


#: charge-equilibration parameters (Rappé & Goddard 1991): electronegativity χ and hardness J, eV
QEQ = {1: (4.528, 13.890), 6: (5.343, 10.126), 8: (8.741, 13.364)}
#: width of the shielded Coulomb interaction 1/sqrt(r² + a²) of the demo's charge model, Å
QEQ_SHIELDING = 2.0


def qeq_charges(atoms):
    """Charges of a neutral molecule or cluster by charge equilibration (the dipole demo's reference).

    Minimises Σ χ_i q_i + ½ Σ J_i q_i² + Σ_{i<j} k q_i q_j / sqrt(r_ij² + a²) under Σ q_i = 0
    (a linear system with a Lagrange multiplier).  Charges depend on the whole
    geometry, so a network has something real to learn.

    Args:
        atoms: ``ase.Atoms`` of H, C and O (open boundaries).

    Returns:
        charges [n_atoms] (e).
    """
    n = len(atoms)
    chi, hardness = np.array([QEQ[z] for z in atoms.numbers]).T
    r = atoms.get_all_distances()
    matrix = np.zeros((n + 1, n + 1))
    matrix[:n, :n] = COULOMB / np.sqrt(r ** 2 + QEQ_SHIELDING ** 2)
    matrix[np.arange(n), np.arange(n)] = hardness
    matrix[:n, n] = matrix[n, :n] = 1.0
    solution = np.linalg.solve(matrix, np.concatenate([-chi, [0.0]]))
    return solution[:n]


def water_dipole_frames(n_frames=200, seed=0, max_molecules=3, box=6.0):
    """Clusters of 1 to ``max_molecules`` distorted water molecules with QEq charges and their dipole.

    Returns:
        list of ``ase.Atoms`` whose calculator holds ``charges`` (e) and ``dipole`` (e·Å).
    """
    from ase import Atoms
    from ase.build import molecule
    from ase.calculators.singlepoint import SinglePointCalculator
    rng = np.random.default_rng(seed)
    frames = []
    for _ in range(n_frames):
        cluster = Atoms()
        for _ in range(rng.integers(1, max_molecules + 1)):
            for _attempt in range(50):
                water = molecule("H2O")
                water.rotate(rng.uniform(0, 360), rng.normal(size=3) + 1e-9, center="COP")
                water.positions += rng.normal(0, 0.06, (3, 3)) + rng.uniform(0, box, 3)
                if len(cluster) == 0 or np.min(np.linalg.norm(
                        cluster.positions[:, None] - water.positions[None], axis=-1)) > 2.2:
                    cluster += water
                    break
        charges = qeq_charges(cluster)
        cluster.calc = SinglePointCalculator(cluster, charges=charges, dipole=charges @ cluster.positions)
        frames.append(cluster)
    return frames


def make_dipole_dataset(path, n_frames=200, seed=0):
    """Write :func:`water_dipole_frames` to ``path`` (extended XYZ; its folder is created if missing) and return
    ``path``."""
    ase_files.write(_parent_made(path), water_dipole_frames(n_frames, seed), format="extxyz")
    return path


# ------------------------------------------------------------------ the active-learning loop, end to end
def _copper_frames(temperature, n, seed, calc=None, every=10, friction=0.02):
    """``n`` configurations of Langevin MD of Cu 32 (fcc, periodic) at ``temperature`` (K), driven by
    ``calc`` (default EMT); every ``every`` steps of 2 fs."""
    from ase import units
    from ase.build import bulk
    from ase.calculators.emt import EMT
    from ase.md.langevin import Langevin
    from pinn.md.velocities import thermalize

    atoms = bulk("Cu", "fcc", a=3.61, cubic=True) * (2, 2, 2)
    atoms.calc = calc if calc is not None else EMT()
    rng = np.random.RandomState(seed)
    thermalize(atoms, temperature, rng=rng)
    md = Langevin(atoms, 2 * units.fs, temperature_K=temperature, friction=friction, rng=rng, fixcm=False)
    frames = []
    for _ in range(n):
        md.run(every)
        frames.append(atoms.copy())
    return frames


def write_copper_frames(path, temperature=300.0, count=40, seed=0):
    """Write ``count`` configurations of Cu 32 (fcc, periodic) from Langevin MD at ``temperature`` (K) under
    ASE's EMT, labelled with EMT's energy and forces, to ``path`` (extended XYZ; its folder is created if
    missing): the starting data of an active-learning round (docs/md.md).  Returns ``path``."""
    ase_files.write(_parent_made(path), [_emt_labelled(f) for f in _copper_frames(temperature, count, seed)],
                    format="extxyz")
    return path


def _emt_labelled(frame):
    """A copy of ``frame`` with EMT's energy and forces attached (the reference "QM" label here)."""
    from ase.calculators.emt import EMT
    from ase.calculators.singlepoint import SinglePointCalculator
    atoms = frame.copy()
    atoms.calc = EMT()
    atoms.calc = SinglePointCalculator(atoms, energy=atoms.get_potential_energy(), forces=atoms.get_forces())
    return atoms


def _train_members(directory, data, steps, members, init=None):
    from pinn.io import load_ase, sparse_batch
    from pinn.models import potential_model
    net = {"atom_types": [29], "rc": 4.0, "depth": 2, "pp_nodes": [16], "pi_nodes": [16], "ii_nodes": [16],
           "out_nodes": [16]}
    for k in range(members):
        mp = {"use_force": True, "learning_rate": 5e-3, "fit_e_dress": True, "lr_schedule": "exponential",
              "lr_warmup_steps": 0, "ema_decay": None, "jit": False, "log_every_n_steps": 100000,
              "progress_bar": "off", **({"init_model": os.path.join(init, f"member-{k}")} if init else {})}
        params = {"model_dir": os.path.join(directory, f"member-{k}"), "seed": k,
                  "network": {"name": "PiNet", "params": net}, "model": {"name": "potential_model", "params": mp}}
        potential_model(params).train(
            lambda: load_ase(data).cache().repeat().shuffle(200, seed=k).apply(sparse_batch(4)), steps)


def _deviation_and_error(calc, frames):
    """The committee's force deviation and its force error against EMT (eV/Å), one evaluation per frame.

    Returns:
        ([n_frames, 2], [n_frames * n_atoms, 2]): per frame, the max over atoms of the deviation and of
        the error (the largest component); per atom, its deviation and the norm of its force error.
    """
    per_frame = []
    per_atom = []
    for frame in frames:
        atoms = frame.copy()
        atoms.calc = calc
        difference = atoms.get_forces() - _emt_labelled(frame).get_forces()
        per_frame.append((calc.results["max_forces_deviation"], np.abs(difference).max()))
        per_atom += zip(calc.results["forces_deviation"], np.linalg.norm(difference, axis=1))
    return np.array(per_frame), np.array(per_atom)


def spearman(x, y):
    """Spearman's rank correlation of two samples without ties."""
    rank = lambda v: np.argsort(np.argsort(v))  # noqa: E731
    return float(np.corrcoef(rank(np.asarray(x)), rank(np.asarray(y)))[0, 1])


@ase_files.per_process()
def active_learning_demo(directory, members=3, picked=20, steps=(400, 200), seed=0):
    """One round of active learning on EMT copper, end to end, in ``directory``.

    Generation 0, a committee of ``members`` small PiNets, trains on 40 configurations of Cu 32 at
    300 K (``gen0.xyz``, EMT labels); it runs MD at 1000 K (60 configurations it has never seen);
    the ``picked`` configurations on which its members disagree most (``max_forces_deviation``)
    get EMT labels, and generation 1 trains on the old and the new frames (``gen1.xyz``), each
    member warm-started from its generation-0 self.  Both generations are then measured on the
    explored configurations and on 20 held-back EMT configurations at 1000 K.

    Args:
        directory: where ``gen0/``, ``gen1/`` (committees of ``member-K``) and the data go.
        members, picked: committee size; configurations labelled.
        steps: training steps of generation 0 and of generation 1.
        seed: seed of the data and the MD.

    Returns:
        dict: per generation the mean over the explored configurations of the max force deviation
        and of the true max force error (eV/Å), ``explored_*``; on the held-back configurations,
        generation 1's ``spearman`` correlation between the two (20 frames), ``spearman_atoms`` the
        correlation of each atom's force deviation with the norm of its force error (640 atoms), and the
        ``seconds`` the round took.
    """
    import time

    from pinn.calculator import get_calc
    start = time.perf_counter()
    os.makedirs(directory, exist_ok=True)
    cold = [_emt_labelled(f) for f in _copper_frames(300, 40, seed)]
    ase_files.write(os.path.join(directory, "gen0.xyz"), cold)
    _train_members(os.path.join(directory, "gen0"), os.path.join(directory, "gen0.xyz"), steps[0], members)
    gen0 = get_calc(os.path.join(directory, "gen0"))
    explored = _copper_frames(1000, 60, seed + 1, calc=gen0, every=5, friction=0.05)
    before = _deviation_and_error(gen0, explored)[0]
    chosen = sorted(np.argsort(before[:, 0])[::-1][:picked])
    ase_files.write(os.path.join(directory, "gen1.xyz"), cold + [_emt_labelled(explored[i]) for i in chosen])
    _train_members(os.path.join(directory, "gen1"), os.path.join(directory, "gen1.xyz"), steps[1], members,
                   init=os.path.join(directory, "gen0"))
    gen1 = get_calc(os.path.join(directory, "gen1"))
    after = _deviation_and_error(gen1, explored)[0]
    held, held_atoms = _deviation_and_error(gen1, _copper_frames(1000, 20, seed + 2))
    return {"explored_deviation_gen0": float(before[:, 0].mean()), "explored_error_gen0": float(before[:, 1].mean()),
            "explored_deviation_gen1": float(after[:, 0].mean()), "explored_error_gen1": float(after[:, 1].mean()),
            "spearman": spearman(held[:, 0], held[:, 1]),
            "spearman_atoms": spearman(held_atoms[:, 0], held_atoms[:, 1]), "seconds": time.perf_counter() - start}
