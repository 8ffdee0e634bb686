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


def _whole(positions, box, centre, oxygen):
    """The water of ``oxygen`` (its atoms ``oxygen``..``oxygen + 2``) whole, at its minimum image from ``centre``
    (Å): its three positions, and the distance of its oxygen from ``centre``."""
    d = positions[oxygen] - centre
    d -= box * np.round(d / box)
    r = positions[oxygen:oxygen + 3] - positions[oxygen]
    r -= box * np.round(r / box)
    return centre + d + r, float(np.linalg.norm(d))


def _cluster(positions, box, oxygens, qm_waters, radius):
    """The QM waters (``qm_waters`` oxygens' indices) and every other water whose oxygen lies within ``radius``
    Å of the first QM oxygen (minimum image), each molecule whole, around the first QM oxygen.

    Returns (atom indices into ``positions``, their positions in Å, bool mask of the QM atoms)."""
    centre = positions[qm_waters[0]]
    indices = []
    coords = []
    qm = []
    ordered = list(qm_waters) + [o for o in oxygens if o not in qm_waters]
    for k, o in enumerate(ordered):
        placed, distance = _whole(positions, box, centre, o)
        if k >= len(qm_waters) and distance >= radius:
            continue
        indices.extend((o, o + 1, o + 2))
        coords.extend(placed)
        qm.extend([k < len(qm_waters)] * 3)
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


def _mm_part(topology, qm):
    """An OpenMM context of the MM force field of a water cluster as MiMiC's GROMACS computes it (no cutoff,
    flexible TIP3P): the QM atoms' charges zero, no Lennard-Jones between QM atoms, no bond or angle among QM
    atoms only."""
    import openmm
    from openmm import app

    system = app.ForceField("amber14/tip3p.xml").createSystem(topology, nonbondedMethod=app.NoCutoff,
                                                              constraints=None, rigidWater=False)
    qm_atoms = [int(i) for i in np.flatnonzero(qm)]
    for force in system.getForces():
        if isinstance(force, openmm.NonbondedForce):
            for i in qm_atoms:
                _, sigma, epsilon = force.getParticleParameters(i)
                force.setParticleParameters(i, 0.0, sigma, epsilon)
            for a, i in enumerate(qm_atoms):
                for j in qm_atoms[a + 1:]:
                    force.addException(i, j, 0.0, 1.0, 0.0, True)
        elif isinstance(force, openmm.HarmonicBondForce):
            for k in range(force.getNumBonds()):
                i, j, length, stiffness = force.getBondParameters(k)
                if qm[i] and qm[j]:
                    force.setBondParameters(k, i, j, length, 0.0)
        elif isinstance(force, openmm.HarmonicAngleForce):
            for k in range(force.getNumAngles()):
                i, j, m, angle, stiffness = force.getAngleParameters(k)
                if qm[i] and qm[j] and qm[m]:
                    force.setAngleParameters(k, i, j, m, angle, 0.0)
    integrator = openmm.VerletIntegrator(0.001)
    return openmm.Context(system, integrator, openmm.Platform.getPlatformByName("Reference"))


def write_water_mimic_run(directory, n_frames=4, seed=0, qm_waters=2, radius=6.0, box_nm=2.2, stride_fs=100.0,
                          equilibration_fs=500.0, temperature_k=300.0, timestep_fs=0.5, basis=DEFAULT_BASIS):
    """Write a synthetic MiMiC run of a water cluster in MiMiC's files and units, with the QM region by PySCF in
    the MM point charges and the MM part by OpenMM as MiMiC's GROMACS computes it: what ``load_mimic(...,
    mm_energies=...)`` reads back as QM/MM frames (docs/qmmm.md).

    The cluster (``qm_waters`` molecules and the waters within ``radius`` Å of the first, chosen in the first
    frame and kept) is cut from flexible-water MD as :func:`water_qmmm_frames` does, non-periodic, in GROMACS's
    atom order. Files: ``water.mpt`` (TIP3P types and charges), ``run.trr`` (double precision: positions, nm,
    and the MM force field's forces, kJ mol⁻¹ nm⁻¹, at steps 1..n with time = step, as MiMiC writes),
    ``ENERGIES`` (EKS = the region's energy + the MM energy, Hartree), ``FTRAJECTORY`` (the total forces,
    Hartree/bohr, in CPMD's atom order: the QM atoms first, then the MM atoms by type, all shifted as CPMD
    centres its box), ``cpmd.inp`` (``&MIMIC OVERLAPS``) and ``mm.xvg`` (GROMACS's ``Potential``, kJ/mol).

    Args:
        directory: where to write (made if missing).
        n_frames: frames (MD steps 1..n_frames of the files).
        seed: seed of the MD and of the choice of the QM waters.
        qm_waters: molecules in the QM region.
        radius: waters whose oxygen lies within this distance (Å) of the first QM oxygen in the first frame
            form the MM part, kept for every frame.
        box_nm: edge of the water box of the MD, nm.
        stride_fs: MD time between frames, fs.
        equilibration_fs: MD time before the cluster is chosen, fs.
        temperature_k: temperature of the MD, K.
        timestep_fs: MD time step, fs.
        basis: PySCF's basis of the QM region (RHF).

    Returns:
        dict: the file paths (``mpt``, ``trr``, ``energies``, ``ftrajectory``, ``cpmd_input``, ``mm_energies``)
        and the reference of every frame: ``qm`` ([n] bool, GROMACS order), ``charges`` ([n] e, the TIP3P
        charges), ``energy`` ([n_frames] eV, the QM region's in the MM charges' field) and ``forces``
        ([n_frames, n, 3] eV/Å, on every atom, GROMACS order).
    """
    import os

    from ase.units import Bohr, Hartree
    from openmm import app, unit

    from pinn import units
    from pinn.io.readers.cpmd import gromacs_to_cpmd_order, write_ftrajectory
    from pinn.io.readers.energies import write_energies
    from pinn.io.readers.mpt import write_mpt
    from pinn.io.readers.trr import write_trr
    from pinn.io.readers.xvg import write_xvg

    os.makedirs(directory, exist_ok=True)
    simulation, charges, numbers = _water_box(box_nm, seed, temperature_k, timestep_fs)
    oxygens = np.flatnonzero(numbers == 8)
    box = 10.0 * box_nm
    simulation.step(int(round(equilibration_fs / timestep_fs)))
    positions = simulation.context.getState(getPositions=True).getPositions(asNumpy=True).value_in_unit(unit.angstrom)
    rng = np.random.default_rng(seed)
    first = oxygens[rng.integers(len(oxygens))]
    distances = np.array([_whole(positions, box, positions[first], o)[1] for o in oxygens])
    region = set(oxygens[np.argsort(distances)[:qm_waters]].tolist())
    kept = [o for o, d in zip(oxygens, distances) if d < radius or o in region]  # GROMACS order
    atoms = np.array([a for o in kept for a in (o, o + 1, o + 2)])
    qm = np.array([o in region for o in kept for _ in range(3)])
    modeller = app.Modeller(simulation.topology, simulation.context.getState(getPositions=True).getPositions())
    keep = set(int(o) // 3 for o in kept)
    modeller.delete([r for r in modeller.topology.residues() if r.index not in keep])
    mm_context = _mm_part(modeller.topology, qm)
    steps_between = max(1, int(round(stride_fs / timestep_fs)))
    trr_frames = []
    eks = []
    mm_energy = []
    total_forces = []
    reference_energy = []
    reference_forces = []
    for k in range(n_frames):
        simulation.step(steps_between)
        state = simulation.context.getState(getPositions=True)
        full = state.getPositions(asNumpy=True).value_in_unit(unit.angstrom)
        centre = full[min(region)]
        coords = np.concatenate([_whole(full, box, centre, o)[0] for o in kept])
        energy, forces = embedded_qm(numbers[atoms], coords, qm, charges[atoms], basis=basis)
        mm_context.setPositions(coords * 0.1)
        mm_state = mm_context.getState(getEnergy=True, getForces=True)
        e_mm = mm_state.getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole)
        f_mm = mm_state.getForces(asNumpy=True).value_in_unit(unit.kilojoule_per_mole / unit.nanometer)
        trr_frames.append({"step": k + 1, "time": float(k + 1), "x": coords * 0.1, "f": f_mm})
        eks.append((energy + e_mm * units.KJ_PER_MOL) / Hartree)
        mm_energy.append(e_mm)
        total_forces.append(forces + f_mm * units.KJ_PER_MOL_NM)
        reference_energy.append(energy)
        reference_forces.append(forces)
    n = len(atoms)
    types = np.where(numbers[atoms] == 8, "OW", "HW")
    table = {"number": [1, 2, 3], "type": ["OW", "HW", "HW"], "resid": [1, 1, 1], "resname": ["SOL"] * 3,
             "name": ["OW", "HW1", "HW2"], "charge": [float(c) for c in charges[:3]], "element": ["O", "H", "H"],
             "mass": [15.999, 1.008, 1.008]}
    paths = {"mpt": write_mpt(os.path.join(directory, "water.mpt"), [("SOL", len(kept))], {"SOL": table}),
             "trr": write_trr(os.path.join(directory, "run.trr"), trr_frames, double=True),
             "energies": write_energies(os.path.join(directory, "ENERGIES"), np.arange(1, n_frames + 1), eks),
             "mm_energies": write_xvg(os.path.join(directory, "mm.xvg"), np.arange(1, n_frames + 1),
                                      {"Potential": mm_energy})}
    qm_gromacs = np.flatnonzero(qm)
    qm_cpmd_order = np.concatenate([qm_gromacs[numbers[atoms][qm_gromacs] == z] for z in (8, 1)])  # by species
    overlaps = np.column_stack([qm_cpmd_order, np.arange(len(qm_cpmd_order))])
    lines = ["&MIMIC", "PATHS", "1", os.path.abspath(directory), "BOX",
             " ".join([f"{10 * box_nm / Bohr:.6f}"] * 3), "OVERLAPS", str(len(overlaps))]
    lines += [f"2 {g + 1} 1 {c + 1}" for g, c in overlaps]
    paths["cpmd_input"] = os.path.join(directory, "cpmd.inp")
    with open(paths["cpmd_input"], "w") as f:
        f.write("\n".join(lines + ["&END", ""]))
    order = gromacs_to_cpmd_order(types, overlaps)  # order[gromacs atom] = its CPMD index
    shift = np.array([3.0, -2.0, 1.5])  # CPMD centres the QM region in its box
    cpmd_positions = np.zeros((n_frames, n, 3))
    cpmd_forces = np.zeros((n_frames, n, 3))
    for k, frame in enumerate(trr_frames):
        cpmd_positions[k, order] = (frame["x"] * 10 + shift) / Bohr
        cpmd_forces[k, order] = total_forces[k] / (Hartree / Bohr)
    paths["ftrajectory"] = write_ftrajectory(os.path.join(directory, "FTRAJECTORY"), np.arange(1, n_frames + 1),
                                             cpmd_positions, cpmd_forces)
    return {**paths, "qm": qm, "charges": charges[atoms], "energy": np.array(reference_energy),
            "forces": np.array(reference_forces)}
