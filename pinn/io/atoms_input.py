"""An ``ase.Atoms`` as a model's input at inference: what it must hold to be evaluated, and what defines the result.

Every calculator of pinn (both engines, committees, D3 sums, the model file's) and so every program that runs one
(``pinn md``, ``pinn devi``, OpenMM, i-PI, LAMMPS) checks its atoms with :func:`atoms_problem` and knows its last
result stale by :func:`changed_since`.

- :func:`atoms_problem` refuses what the loaders refuse in training data (:func:`pinn.io.base.check_structure`,
  :func:`pinn.io.qmmm_atoms.qmmm_arrays`), with the same one-line messages: a non-finite position or cell,
  a non-finite MM charge, a region charge (``info["charge"]``) that is not a finite number, and two atoms at
  one place.  Two atoms of the network's own pairs at one place are found by the calculator's neighbor list
  (:class:`pinn.io.neighbors.VerletNeighbors`, which finds every pair closer than the cutoff), a QM and an MM atom
  here (in the minimum image: what the embedding sees).  Two MM atoms at one place, which the loaders refuse in
  training data, enter no model's result and are the MM engine's to refuse: not searched for at every step.
- :func:`changed_since` compares what a result depends on: ASE's ``all_changes`` (positions, numbers, cell,
  pbc, initial charges, magnetic moments) and the QM/MM frame's ``qm`` array and region charge
  (``info["charge"]``), which ASE's own check ignores.

NumPy and ASE only (the calculator of a model file runs without TensorFlow).
"""
import numpy as np
from ase.calculators.calculator import all_changes

from pinn import keys as K
from pinn.io.errors import DataError
from pinn.io.geometry import (MIN_DISTANCE, coincident_problem, complete_lattice, nonfinite_problem,
                              nonfinite_values_problem)
from pinn.io.qmmm_atoms import ASE_QM_ARRAY, qmmm_problem

#: what a result depends on besides ASE's ``all_changes``: the per-atom QM mask and the region's charge
#: (the key of ``atoms.info``)
QMMM_INPUTS = (ASE_QM_ARRAY, "charge")


def atoms_problem(atoms):
    """What no model can evaluate in an ``ase.Atoms``, or ``None``.

    Args:
        atoms: ``ase.Atoms``; a QM/MM frame (``arrays["qm"]``, ``initial_charges``, ``info["charge"]``;
            docs/qmmm.md) or a structure.

    Returns:
        str (one line, as the loaders word it, without naming a source) or ``None``.  In this order: a
        non-finite position or cell (naming the first atom); for a QM/MM frame (``qm``): a bad ``qm`` array or
        a region charge that is not a finite number, a non-finite MM charge (its index), a QM and an MM atom at
        one place (naming both).
    """
    pbc = np.asarray(atoms.pbc, bool)
    problem = nonfinite_problem(atoms.positions, atoms.cell.array if pbc.any() else None)
    if problem:
        return problem
    if ASE_QM_ARRAY not in atoms.arrays:
        return None
    problem = qmmm_problem(atoms)
    if problem:
        return problem
    qm = np.asarray(atoms.arrays[ASE_QM_ARRAY]).astype(bool)
    if qm.all():
        return None
    problem = nonfinite_values_problem(K.MM_CHARGE, np.where(qm, 0.0, atoms.get_initial_charges()))
    if problem:
        return problem
    return qm_mm_coincident_problem(atoms.positions, qm, atoms.cell.array, pbc)


def qm_mm_coincident_problem(coord, qm, cell, pbc):
    """The line for a QM and an MM atom at one place (closer than :data:`pinn.io.geometry.MIN_DISTANCE`, in the
    minimum image along periodic axes), or ``None``: the closest such pair, named as the loaders name it.

    Args:
        coord: [n, 3] finite positions, Å; qm: [n] bool; cell: [3, 3] rows a, b, c, Å; pbc: three booleans.

    Returns:
        str or ``None``.  The QM atoms' own pairs are the neighbor list's to refuse; MM–MM pairs enter no model.
    """
    qm_index = np.flatnonzero(qm)
    mm_index = np.flatnonzero(~qm)
    vectors = coord[mm_index][None, :, :] - coord[qm_index][:, None, :]  # [n_qm, n_mm, 3]
    if np.any(pbc):
        lattice = np.asarray(cell, np.float64)
        lattice = lattice if np.all(pbc) else complete_lattice(lattice, pbc)
        fractional = vectors @ np.linalg.inv(lattice)
        vectors = vectors - (np.round(fractional) * np.asarray(pbc, bool)) @ lattice
    squared = np.einsum("ijk,ijk->ij", vectors, vectors)
    if not squared.size:
        return None
    a, m = np.unravel_index(int(np.argmin(squared)), squared.shape)
    if not squared[a, m] < MIN_DISTANCE ** 2:
        return None
    i, j = sorted((int(qm_index[a]), int(mm_index[m])))
    return coincident_problem(i, j, float(np.sqrt(squared[a, m])), coord[i])


def check_atoms(atoms, source=None):
    """Raise :class:`pinn.io.errors.DataError` (a ValueError) with :func:`atoms_problem`'s line, if any, after
    ``source`` (e.g. ``'run.xyz, frame 3'``) where one is given."""
    problem = atoms_problem(atoms)
    if problem:
        raise DataError(f"{source}: {problem}" if source else problem)


class FollowsInputs:
    """A calculator's ``check_state`` (put it before ASE's calculator class among the bases): what changed since the
    last result, by exact comparison (:func:`changed_since`), the QM/MM inputs included.

    ASE asks for the forces three times per Verlet step, and its own test (``allclose`` with ``tol`` on every
    array) costs about as much as a small molecule's forces.  Here a property counts as changed when any of its
    values differs at all: the same answer as ASE's except for differences below ``tol`` (1e-15), which recompute;
    and a QM/MM frame's ``qm`` array and region charge (``info["charge"]``), which ASE's test ignores, count too.
    """

    def check_state(self, atoms, tol=1e-15):
        if self.atoms is None:
            return list(all_changes)
        ignored = getattr(self, "ignored_changes", ())
        return changed_since(self.atoms, atoms, [name for name in all_changes if name not in ignored])


def changed_since(old, new, properties):
    """What differs at all between the atoms ``old`` (of the last result) and ``new``.

    Exact comparison: ASE's own, with tolerances, costs about as much as a small molecule's forces.

    Args:
        old, new: ``ase.Atoms``.
        properties: names of ASE's ``all_changes`` to compare; the QM/MM inputs (:data:`QMMM_INPUTS`) are
            compared always.

    Returns:
        list of str: the names that differ (``'qm'`` and ``'charge'`` for the QM mask and the region charge).
    """
    changed = []
    for name in properties:
        if name in ("cell", "pbc"):
            same = np.array_equal(getattr(old, name), getattr(new, name))
        else:
            same = _same_array(old.arrays.get(name), new.arrays.get(name))
        if not same:
            changed.append(name)
    if not _same_array(old.arrays.get(ASE_QM_ARRAY), new.arrays.get(ASE_QM_ARRAY)):
        changed.append(ASE_QM_ARRAY)
    if not _same_value(old.info.get("charge"), new.info.get("charge")):
        changed.append("charge")
    return changed


def _same_array(a, b):
    return (a is None and b is None) or (a is not None and b is not None and np.array_equal(a, b))


def _same_value(a, b):
    if a is None or b is None:
        return a is None and b is None
    try:
        return bool(np.array_equal(np.asarray(a), np.asarray(b))) and type(a) is type(b)
    except (TypeError, ValueError):
        return False
