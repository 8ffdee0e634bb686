"""QM/MM reference frames from real codes: a QM region of water molecules computed by PySCF in the point
charges of the TIP3P water around it, on configurations of classical MD by OpenMM.

The frames follow pinn's QM/MM convention (docs/qmmm.md): one ``ase.Atoms`` of every atom, the per-atom
bool array ``qm`` marking the QM region, the MM atoms' TIP3P charges (e) in ``initial_charges`` (0 on the
QM atoms), ``info["charge"]`` the region's total charge (0), the energy (eV) of the QM region in the field
of the MM charges (PySCF's total energy with the charges: electrons and QM nuclei in their field, without
the MM atoms' interaction among themselves) and the forces (eV/Å) on every atom: on the QM atoms all of
them, on the MM atoms the QM region's pull on their charges.

PySCF (``pyscf.qmmm``) and OpenMM come from PyPI (``pip install pyscf openmm``); neither is needed by the
rest of pinn.
"""
import logging

import numpy as np

log = logging.getLogger("pinn")

#: the QM method and basis of the reference (restricted Hartree-Fock, 6-31G)
DEFAULT_BASIS = "6-31g"


def _water_box(box_nm, seed, temperature_k, timestep_fs):
    """An OpenMM simulation of flexible TIP3P water in a cubic box of ``box_nm`` nm (PME), minimised, with
    velocities at ``temperature_k``.  Returns (simulation, per-atom charges in e, atomic numbers)."""
    import openmm
    from openmm import app, unit

    forcefield = app.ForceField("amber14/tip3p.xml")
    modeller = app.Modeller(app.Topology(), [])
    modeller.addSolvent(forcefield, model="tip3p", boxSize=openmm.Vec3(box_nm, box_nm, box_nm) * unit.nanometer)
    system = forcefield.createSystem(modeller.topology, nonbondedMethod=app.PME,
                                     nonbondedCutoff=0.9 * unit.nanometer, constraints=None, rigidWater=False)
    nonbonded = next(f for f in system.getForces() if isinstance(f, openmm.NonbondedForce))
    charges = np.array([nonbonded.getParticleParameters(i)[0].value_in_unit(unit.elementary_charge)
                        for i in range(system.getNumParticles())])
    numbers = np.array([atom.element.atomic_number for atom in modeller.topology.atoms()])
    integrator = openmm.LangevinMiddleIntegrator(temperature_k * unit.kelvin, 1.0 / unit.picosecond,
                                                 timestep_fs * unit.femtosecond)
    integrator.setRandomNumberSeed(seed + 1)
    platform = openmm.Platform.getPlatformByName("CPU")
    simulation = app.Simulation(modeller.topology, system, integrator, platform, {"Threads": "1"})
    simulation.context.setPositions(modeller.positions)
    simulation.minimizeEnergy(maxIterations=200)
    simulation.context.setVelocitiesToTemperature(temperature_k * unit.kelvin, seed + 1)
    return simulation, charges, numbers


def _cluster(positions, box, oxygens, qm_waters, radius):
    """The QM waters (``qm_waters`` oxygens' indices) and every other water whose oxygen lies within ``radius``
    Å of the first QM oxygen (minimum image), each molecule whole, around the first QM oxygen.

    Returns (atom indices into ``positions``, their positions in Å, bool mask of the QM atoms)."""
    centre = positions[qm_waters[0]]
    indices, coords, qm = [], [], []
    ordered = list(qm_waters) + [o for o in oxygens if o not in qm_waters]
    for k, o in enumerate(ordered):
        d = positions[o] - centre
        d -= box * np.round(d / box)
        if k >= len(qm_waters) and np.linalg.norm(d) >= radius:
            continue
        for atom in (o, o + 1, o + 2):
            r = positions[atom] - positions[o]
            r -= box * np.round(r / box)
            indices.append(atom)
            coords.append(centre + d + r)
            qm.append(k < len(qm_waters))
    return np.array(indices), np.array(coords), np.array(qm)


def embedded_qm(numbers, coords, qm, mm_charges, basis=DEFAULT_BASIS, embedded=True):
    """The QM region's energy and forces in the MM point charges, by PySCF (RHF).

    Args:
        numbers: [n] atomic numbers of all atoms.
        coords: [n, 3] positions, Å.
        qm: [n] bool, the QM atoms (a closed-shell, neutral region).
        mm_charges: [n] float, e: the point charges of the MM atoms (entries of QM atoms ignored).
        basis: PySCF's basis name.
        embedded: False for the region alone in vacuum (the MM atoms' forces are then zero).

    Returns:
        (energy in eV, forces [n, 3] in eV/Å).

    Raises:
        RuntimeError: the SCF did not converge.
    """
    from ase.units import Bohr, Hartree
    from pyscf import gto, scf
    from pyscf.qmmm import itrf

    mm = ~np.asarray(qm)
    mol = gto.M(atom=[(int(z), tuple(r)) for z, r in zip(np.asarray(numbers)[qm], np.asarray(coords)[qm])],
                basis=basis, unit="Angstrom", verbose=0)
    method = scf.RHF(mol)
    if embedded:
        method = itrf.mm_charge(method, np.asarray(coords)[mm], np.asarray(mm_charges)[mm], unit="Angstrom")
    method.conv_tol = 1e-10
    energy = method.kernel()
    if not method.converged:
        raise RuntimeError("PySCF's SCF did not converge for this QM/MM frame")
    gradient = method.nuc_grad_method()
    forces = np.zeros((len(numbers), 3))
    forces[qm] = -gradient.kernel()
    if embedded:
        forces[mm] = -(gradient.grad_hcore_mm(method.make_rdm1()) + gradient.grad_nuc_mm())
    return energy * Hartree, forces * Hartree / Bohr


def water_qmmm_frames(n_frames, seed=0, qm_waters=2, radius=9.0, box_nm=2.2, stride_fs=500.0,
                      equilibration_fs=2000.0, temperature_k=300.0, timestep_fs=0.5, basis=DEFAULT_BASIS,
                      embedded=True):
    """QM/MM frames of water: ``qm_waters`` molecules treated by PySCF in the TIP3P charges of the waters
    within ``radius`` of them, from flexible-water MD (OpenMM, PME, Langevin at ``temperature_k``).

    Args:
        n_frames: how many frames.
        seed: seed of the MD (velocities, thermostat) and of the choice of the QM waters in each frame.
        qm_waters: molecules in the QM region: a water picked at random and its nearest neighbours.
        radius: MM waters whose oxygen lies within this distance (Å) of the first QM oxygen are kept.
        box_nm: edge of the cubic water box, nm (2.2 nm: 355 waters).
        stride_fs: MD time between frames, fs.
        equilibration_fs: MD time before the first frame, fs.
        temperature_k: temperature of the MD, K.
        timestep_fs: MD time step, fs.
        basis: PySCF's basis for the QM region (RHF).
        embedded: False for labels of the QM region in vacuum (the same frames, the MM forces zero).

    Returns:
        A list of ``ase.Atoms`` (non-periodic, of varying size) in pinn's QM/MM convention, each with a
        ``SinglePointCalculator`` holding the energy (eV) and forces (eV/Å).
    """
    from ase import Atoms
    from ase.calculators.singlepoint import SinglePointCalculator
    from openmm import unit

    simulation, charges, numbers = _water_box(box_nm, seed, temperature_k, timestep_fs)
    oxygens = np.flatnonzero(numbers == 8)
    steps_between = max(1, int(round(stride_fs / timestep_fs)))
    simulation.step(int(round(equilibration_fs / timestep_fs)))
    rng = np.random.default_rng(seed)
    box = 10.0 * box_nm
    frames = []
    for k in range(n_frames):
        simulation.step(steps_between)
        state = simulation.context.getState(getPositions=True)
        positions = state.getPositions(asNumpy=True).value_in_unit(unit.angstrom)
        first = oxygens[rng.integers(len(oxygens))]
        d = positions[oxygens] - positions[first]
        d -= box * np.round(d / box)
        nearest = oxygens[np.argsort(np.linalg.norm(d, axis=1))[:qm_waters]]
        indices, coords, qm = _cluster(positions, box, oxygens, list(nearest), radius)
        mm_charges = np.where(qm, 0.0, charges[indices])
        energy, forces = embedded_qm(numbers[indices], coords, qm, mm_charges, basis=basis, embedded=embedded)
        atoms = Atoms(numbers=numbers[indices], positions=coords, charges=mm_charges)
        atoms.new_array("qm", qm)
        atoms.info["charge"] = 0
        atoms.calc = SinglePointCalculator(atoms, energy=energy, forces=forces)
        frames.append(atoms)
        log.info("QM/MM reference frame %d/%d: %d QM and %d MM atoms, E %.4f eV", k + 1, n_frames, qm.sum(),
                 (~qm).sum(), energy)
    return frames


def make_water_qmmm_dataset(path, n_frames=50, seed=0, **options):
    """Write :func:`water_qmmm_frames` to ``path`` (extxyz, with ``qm`` and ``initial_charges`` per atom).
    Returns ``path``."""
    from pinn.io import ase_files
    frames = water_qmmm_frames(n_frames, seed=seed, **options)
    ase_files.write(path, frames, format="extxyz")
    return path
