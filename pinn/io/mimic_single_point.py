"""One QM/MM frame as a MiMiC single point, in MiMiC's files, and back: the contract of a site's command oracle
that runs MiMiC (CPMD + GROMACS) on its cluster (:class:`pinn.learn.oracles.CommandOracle` with
``output="mimic"``).

A single point of frame K is a folder ``frame-K`` of the files a one-step MiMiC run leaves, in MiMiC's units and
atom orders:

- ``topol.mpt``: the MiMiCPy topology, one molecule of all the frame's atoms (GROMACS order = the frame's order;
  types: the element, and the QM atoms' ``Q`` + element), the MM atoms' charges (e) as the frame holds them;
- ``traj.trr``: step 1, positions (nm) and the MM force field's forces on every atom (kJ mol⁻¹ nm⁻¹);
- ``ENERGIES``: CPMD's EKS at step 1 (Hartree): the QM region's energy in the MM charges plus the MM energy;
- ``FTRAJECTORY``: the total forces (Hartree/bohr), CPMD's atom order (the QM atoms first, by OVERLAPS);
- ``cpmd.inp``: ``&MIMIC OVERLAPS`` (the QM atoms' GROMACS and CPMD indices);
- ``mm.xvg``: GROMACS's ``Potential`` at step 1 (kJ/mol).

:func:`read_mimic_single_point` reads it back with :func:`pinn.io.load_mimic` (``mm_energies``: the QM/MM label is
EKS minus the MM energy, FTRAJECTORY minus the trr forces) as an ``ase.Atoms`` in pinn's QM/MM convention, with
its energy and forces.  :func:`write_mimic_single_point` writes the files from a frame and its label (what a
stand-in for MiMiC writes, e.g. in tests).
"""
import os

import numpy as np

from pinn import units

#: the files of a single point, by load_mimic's argument
FILES = {"mpt": "topol.mpt", "trr": "traj.trr", "energies": "ENERGIES", "ftrajectory": "FTRAJECTORY",
         "cpmd_input": "cpmd.inp", "mm_energies": "mm.xvg"}


def write_mimic_single_point(directory, atoms, energy, forces, mm_energy=0.0, mm_forces=None):
    """Write one frame and its label as a MiMiC single point (see the module).

    Args:
        directory: the folder (made if missing).
        atoms: the frame, in pinn's QM/MM convention (``qm``, the MM charges as initial charges).
        energy: the QM region's energy in the MM charges (eV).
        forces: [n, 3] the QM/MM forces on every atom (eV/Å).
        mm_energy: the MM force field's energy (eV), added to EKS as MiMiC's CPMD does.
        mm_forces: [n, 3] the MM force field's forces (eV/Å; default 0), in the trr and added to FTRAJECTORY.

    Returns:
        dict of the paths by :func:`pinn.io.load_mimic` argument.
    """
    from ase.data import atomic_masses, chemical_symbols
    from ase.units import Bohr, Hartree

    from pinn.io.readers.cpmd import gromacs_to_cpmd_order, write_ftrajectory
    from pinn.io.readers.energies import write_energies
    from pinn.io.readers.mpt import write_mpt
    from pinn.io.readers.trr import write_trr
    from pinn.io.readers.xvg import write_xvg
    os.makedirs(directory, exist_ok=True)
    paths = {key: os.path.join(directory, name) for key, name in FILES.items()}
    n = len(atoms)
    qm = np.asarray(atoms.arrays["qm"]).astype(bool)
    charges = np.where(qm, 0.0, atoms.get_initial_charges())
    symbols = [chemical_symbols[z] for z in atoms.numbers]
    types = [("Q" if q else "") + s for q, s in zip(qm, symbols)]
    table = {"number": list(range(1, n + 1)), "type": types, "resid": [1] * n, "resname": ["FRM"] * n,
             "name": [f"{s}{k + 1}" for k, s in enumerate(symbols)], "charge": [float(c) for c in charges],
             "element": symbols, "mass": [float(atomic_masses[z]) for z in atoms.numbers]}
    write_mpt(paths["mpt"], [("FRAME", 1)], {"FRAME": table})
    mm_forces = np.zeros((n, 3)) if mm_forces is None else np.asarray(mm_forces, np.float64)
    positions_nm = atoms.positions / 10.0
    write_trr(paths["trr"], [{"step": 1, "time": 1.0, "x": positions_nm, "f": mm_forces / units.KJ_PER_MOL_NM}],
              double=True)
    write_energies(paths["energies"], [1], [(float(energy) + float(mm_energy)) / Hartree])
    write_xvg(paths["mm_energies"], [1.0], {"Potential": [float(mm_energy) / units.KJ_PER_MOL]})
    qm_gromacs = np.flatnonzero(qm)
    overlaps = np.column_stack([qm_gromacs, np.arange(len(qm_gromacs))])
    with open(paths["cpmd_input"], "w") as f:
        f.write("\n".join(["&MIMIC", "PATHS", "1", os.path.abspath(directory), "OVERLAPS", str(len(overlaps))]
                          + [f"2 {g + 1} 1 {c + 1}" for g, c in overlaps] + ["&END", ""]))
    order = gromacs_to_cpmd_order(types, overlaps)
    cpmd_positions = np.zeros((1, n, 3))
    cpmd_forces = np.zeros((1, n, 3))
    cpmd_positions[0, order] = atoms.positions / Bohr
    cpmd_forces[0, order] = (np.asarray(forces, np.float64) + mm_forces) / (Hartree / Bohr)
    write_ftrajectory(paths["ftrajectory"], [1], cpmd_positions, cpmd_forces)
    return paths


def read_mimic_single_point(directory, qm_charge=0.0):
    """The frame and label of a MiMiC single point folder (see the module).

    Args:
        directory: the folder.
        qm_charge: the QM region's charge (e; CPMD's ``&SYSTEM CHARGE``).

    Returns:
        ``ase.Atoms`` in pinn's QM/MM convention (positions Å, ``qm``, the MM charges, ``info["charge"]``) with the
        QM/MM energy (eV) and forces (eV/Å) in a ``SinglePointCalculator``.

    Raises:
        DataError: a missing or malformed file (naming it), from :func:`pinn.io.load_mimic`.
    """
    from ase import Atoms
    from ase.calculators.singlepoint import SinglePointCalculator

    from pinn import keys as K
    from pinn.io.mimic import load_mimic
    from pinn.io.qmmm_atoms import ASE_QM_ARRAY
    paths = {key: os.path.join(directory, name) for key, name in FILES.items()}
    dataset = load_mimic(shuffle=False, qm_charge=qm_charge, **paths)
    frame = next(iter(dataset))
    frame = {key: value.numpy() for key, value in frame.items()}
    atoms = Atoms(numbers=frame[K.ELEMS], positions=frame[K.COORD].astype(np.float64))
    atoms.arrays[ASE_QM_ARRAY] = frame[K.QM].astype(bool)
    atoms.set_initial_charges(frame[K.MM_CHARGE].astype(np.float64))
    atoms.info["charge"] = float(frame[K.QM_CHARGE])
    atoms.calc = SinglePointCalculator(atoms, energy=float(frame[K.E_DATA]),
                                       forces=frame[K.F_DATA].astype(np.float64))
    return atoms
