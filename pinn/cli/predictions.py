"""``pinn eval --per-atom``: a model's predictions, per-atom energies included, written as extended XYZ.

Each structure of the evaluated data is written with a single-point calculator holding the model's
``energy`` (eV), ``forces`` (eV/Å), ``energies`` (eV per atom, summing to the energy) and, for a
periodic structure, ``stress`` (eV/Å³); ASE reads them back as ``atoms.get_potential_energy()``,
``get_forces()``, ``get_potential_energies()`` and ``get_stress()``.  The file is written to a
temporary name beside it and renamed when complete: a failed run leaves no partial file.
"""
import os

import numpy as np


def refuse_per_atom(model, model_dir):
    """Refuse ``--per-atom`` for a model that has no per-atom energies.

    Args:
        model: the restored model (:attr:`pinn.inference.handle.InferenceHandle.model`).
        model_dir: its directory, for the message.

    Raises:
        ValueError: a dipole or polarizability model, or a potential with an embedding (whose Coulomb
            energy is the region's, not the atoms').
    """
    from pinn.physics.potential import PotentialModel
    if not isinstance(model, PotentialModel):
        raise ValueError(f"--per-atom: {model_dir} is a {type(model).__name__}; per-atom energies are a "
                         "potential model's")
    if not model.embedding.gives_atomic_energies:
        raise ValueError(f"--per-atom: {model_dir} has embedding {model.embedding.name!r}; its energy includes the "
                         "QM region's Coulomb energy, which is not split over atoms")


def write_predictions(structures, path):
    """Write per-structure predictions to an extended XYZ file.

    Args:
        structures: iterable of dicts of :meth:`pinn.physics.potential.PotentialModel.structure_outputs`
            (``energy``, ``energies``, ``forces``, ``elems``, ``coord``, ``cell``, ``pbc``, maybe ``stress``).
        path: the file to write.

    Returns:
        int: the structures written.
    """
    from ase import Atoms
    from ase.calculators.singlepoint import SinglePointCalculator
    from pinn.io.ase_files import write
    from ase.stress import full_3x3_to_voigt_6_stress
    tmp = f"{path}.tmp-{os.getpid()}"
    count = 0
    try:
        with open(tmp, "w") as handle:
            for out in structures:
                atoms = Atoms(numbers=out["elems"], positions=np.asarray(out["coord"], np.float64),
                              cell=np.asarray(out["cell"], np.float64), pbc=np.asarray(out["pbc"], bool))
                results = {"energy": float(out["energy"]), "forces": np.asarray(out["forces"], np.float64),
                           "energies": np.asarray(out["energies"], np.float64)}
                if "stress" in out:
                    results["stress"] = full_3x3_to_voigt_6_stress(np.asarray(out["stress"], np.float64))
                atoms.calc = SinglePointCalculator(atoms, **results)
                write(handle, atoms, format="extxyz")
                count += 1
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return count
