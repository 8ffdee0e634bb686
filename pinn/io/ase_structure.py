"""An ``ase.Atoms`` with its stored results as a structure dict (NumPy only, no TensorFlow: also used by
the process that parses streamed frames beside the training, :mod:`pinn.io.parse_process`)."""
import numpy as np

from pinn import keys as K
from pinn.io.errors import DataError
from pinn.io.qmmm_atoms import qmmm_arrays


def atoms_to_structure(atoms, source="Atoms"):
    """Convert an ``ase.Atoms`` (with an optional attached calculator holding
    results) to a structure dict.

    Args:
        atoms: ``ase.Atoms``.  Energy, forces and stress are taken from its
            calculator's stored results when present (no calculation is run).
        source: text naming the structure in error messages (a file and frame).

    Returns:
        dict with ``elems``, ``coord`` (Å), ``cell`` (Å), ``pbc`` and, when
        available, ``e_data`` (eV), ``f_data`` (eV/Å), ``s_data`` (eV/Å³,
        3x3, ASE sign convention); for a QM/MM frame (a per-atom ``qm`` array)
        also ``qm``, ``mm_charge`` (e) and ``qm_charge`` (e) (:mod:`pinn.io.qmmm`).

    Raises:
        DataError: naming ``source``: forces that are not one row of 3 per atom, a stress that is
            neither 6 Voigt components nor 3x3, a QM/MM frame's region or charges that do not hold.
    """
    structure = {
        K.ELEMS: atoms.numbers,
        K.COORD: atoms.positions,
        K.CELL: np.asarray(atoms.cell[:]),
        K.PBC: atoms.pbc,
    }
    results = getattr(atoms.calc, "results", None) or {}
    if "energy" in results or "free_energy" in results:
        structure[K.E_DATA] = results.get("energy", results.get("free_energy"))
    if "forces" in results:
        forces = np.asarray(results["forces"])
        if forces.shape != (len(atoms), 3):
            raise DataError(f"{source}: forces of shape {forces.shape} for {len(atoms)} atoms; expected "
                            f"({len(atoms)}, 3)")
        structure[K.F_DATA] = forces
    if "stress" in results:
        stress = np.asarray(results["stress"])
        if stress.shape == (6,):
            from ase.stress import voigt_6_to_full_3x3_stress
            stress = voigt_6_to_full_3x3_stress(stress)
        if stress.shape != (3, 3):
            raise DataError(f"{source}: stress of shape {stress.shape}; expected 6 Voigt components or 3x3")
        structure[K.S_DATA] = stress
    if "dipole" in results:
        structure[K.D_DATA] = results["dipole"]
    if "charges" in results:
        structure[K.Q_DATA] = results["charges"]
    structure.update(qmmm_arrays(atoms, source))
    return structure
