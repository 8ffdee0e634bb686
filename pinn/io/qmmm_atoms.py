"""QM/MM frames as ``ase.Atoms`` (docs/qmmm.md), in NumPy alone (the calculator of a model file runs without
TensorFlow): the convention's arrays of an Atoms, and the atoms a model's network sees."""
import numpy as np

from pinn import keys as K
from pinn.io.errors import DataError

#: the name of the per-atom array of the QM region in ASE frames (and in extxyz files: ``qm:L:1``)
ASE_QM_ARRAY = "qm"


def qmmm_arrays(atoms, source):
    """The QM/MM keys of an ``ase.Atoms`` in pinn's convention, or ``{}`` for a frame without a ``qm`` array.

    Args:
        atoms: ``ase.Atoms``; ``atoms.arrays["qm"]`` (bool per atom) marks the QM region, the MM atoms' point
            charges (e) are its ``initial_charges``, ``atoms.info["charge"]`` the region's total charge (e;
            0 when absent).
        source: the file and frame, for error messages.

    Returns:
        dict with ``qm`` ([n] bool), ``mm_charge`` ([n] float, e; the QM atoms' entries 0) and ``qm_charge``
        ([] float, e), or ``{}``.

    Raises:
        DataError: naming ``source``: a ``qm`` array that is not one bool (or 0/1) per atom, no QM atom, MM
            atoms without ``initial_charges``, a non-numeric or non-finite region charge.
    """
    if ASE_QM_ARRAY not in atoms.arrays:
        return {}
    problem = qmmm_problem(atoms)
    if problem:
        raise DataError(f"{source}: {problem}")
    qm = np.asarray(atoms.arrays[ASE_QM_ARRAY]).astype(bool)
    charges = np.asarray(atoms.get_initial_charges(), dtype=float)
    return {K.QM: qm, K.MM_CHARGE: np.where(qm, 0.0, charges), K.QM_CHARGE: float(atoms.info.get("charge", 0))}


def qmmm_problem(atoms):
    """What makes an ``ase.Atoms`` with a ``qm`` array no QM/MM frame (:func:`qmmm_arrays`), or ``None``.

    Returns:
        str (one line, without a source) or ``None``: a ``qm`` array that is not one bool (or 0/1) per atom, no
        QM atom, MM atoms without ``initial_charges``, a region charge that is not a finite number.
    """
    raw = np.asarray(atoms.arrays[ASE_QM_ARRAY])
    if raw.shape != (len(atoms),) or not (raw.dtype == bool or np.all(np.isin(raw, (0, 1)))):
        return (f"the per-atom array 'qm' must be one bool (or 0/1) per atom, got dtype {raw.dtype} and shape "
                f"{raw.shape}")
    qm = raw.astype(bool)
    if not qm.any():
        return "its 'qm' array marks no atom as QM"
    if not qm.all() and "initial_charges" not in atoms.arrays:
        return (f"{int((~qm).sum())} MM atom(s) (qm False) but no point charges: give the MM charges (e) as the "
                "frame's initial_charges (extxyz: initial_charges:R:1)")
    return region_charge_problem(atoms.info.get("charge", 0), "info['charge']")


def region_charge_problem(value, name):
    """What is wrong with a QM region's total charge (e), or ``None``: it must be a finite number.

    Args:
        value: the charge as given.
        name: where it was given, for the message (``"info['charge']"``, ``"qm_charge"``).

    Returns:
        str (one line) or ``None``.
    """
    number = None
    if not isinstance(value, (bool, np.bool_)):
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = None
    if number is None:
        return f"{name} (the QM region's total charge) is {value!r}, not a number"
    if not np.isfinite(number):
        return f"{name} (the QM region's total charge) is {number}"
    return None


def region_arrays(atoms):
    """:func:`qmmm_arrays` of an ``ase.Atoms`` (errors name ``"atoms"``), or for Atoms without ``qm`` those of a QM
    region without environment: every atom QM, no MM charge, the region's charge ``info["charge"]`` (0)."""
    arrays = qmmm_arrays(atoms, "atoms")
    if arrays:
        return arrays
    problem = region_charge_problem(atoms.info.get("charge", 0), "info['charge']")
    if problem:
        raise DataError(f"atoms: {problem}")
    return {K.QM: np.ones(len(atoms), bool), K.MM_CHARGE: np.zeros(len(atoms)),
            K.QM_CHARGE: float(atoms.info.get("charge", 0))}


def network_atoms(atoms, embedding, atom_types, who):
    """The atoms of an ``ase.Atoms`` a model's network sees, checked: every atom for mechanical embedding (and
    Atoms with MM atoms refused), the QM region (``qm``; every atom without it) for an electrostatic one.

    Args:
        atoms: ``ase.Atoms``.
        embedding: the model's kind of embedding (:class:`pinn.physics.embedding_kinds.Embedding`: whether it
            sees a QM/MM frame's environment, and its name).
        atom_types: the elements the model knows.
        who: what to name in messages (``"the model"``, ``"the committee"``).

    Returns:
        [n] bool.

    Raises:
        ValueError: elements the model does not know among those atoms; a QM/MM frame given to a model with
            mechanical embedding; a bad QM/MM frame (:func:`qmmm_arrays`, as DataError).
    """
    from ase.data import chemical_symbols
    kind = embedding
    seen = np.ones(len(atoms), bool)
    partial = ASE_QM_ARRAY in atoms.arrays and not np.all(atoms.arrays[ASE_QM_ARRAY])
    if kind.sees_environment and ASE_QM_ARRAY in atoms.arrays:
        seen = qmmm_arrays(atoms, "atoms")[K.QM]
    unknown = set(atoms.numbers[seen].tolist()) - {int(z) for z in atom_types}
    if unknown:
        raise ValueError(f"atoms contain elements {sorted(chemical_symbols[z] for z in unknown)} that {who} does not "
                         f"know (atom_types {sorted(int(z) for z in atom_types)})"
                         + (" in their QM region" if not seen.all() else ""))
    if partial and not kind.sees_environment:
        raise ValueError(f"these atoms are a QM/MM frame (MM atoms: 'qm' False), and {who} has {kind.name} "
                         "embedding: it would read the MM atoms as part of the QM region. Give it the QM region "
                         "alone, atoms[atoms.arrays['qm']] (docs/qmmm.md)")
    return seen
