"""Committees of potentials: the mean prediction, how much the members disagree, and the ASE calculator.

A committee is a few potentials trained on the same data from different seeds.  Where they
agree the data covered the configuration; where they disagree, it did not, and a label there
is worth its cost.  ``pinn.get_calc([dir_a, dir_b, ...])`` (or a directory holding
``member-0/``, ``member-1/``, …) gives the members' mean energy, forces and stress, and in
``calc.results``:

- ``energy_deviation``: the standard deviation of the members' energies (eV);
- ``forces_deviation`` [n_atoms]: per atom ε_i = √(⟨|f_i − ⟨f_i⟩|²⟩) over the members (eV/Å),
  DeePMD-kit's model deviation of the forces; ``max_forces_deviation``: its maximum over the
  atoms (DeePMD-kit's ``max_devi_f``), the usual criterion for picking frames to label;
- ``energies_deviation`` [n_atoms]: per atom the standard deviation of the members' atomic energies (eV),
  beside ``energies``, the members' mean per-atom energies (ASE's ``atoms.get_potential_energies()``);
- ``member_energies`` [M], ``member_forces`` [M, n_atoms, 3] and, for a periodic cell,
  ``member_stresses`` [M, 6] (Voigt, eV/Å³): what each member predicted;
- with an electrostatic embedding, ``charges`` [n_atoms], the members' mean charges of the QM atoms (the MM
  atoms' own), whose field is the mean energy's (the Coulomb energy is linear in them), and ``member_charges``
  [M, n_atoms].

Standard deviations are over the members with 1/M (NumPy's default, DeePMD-kit's).
:func:`deviations` computes the figures of DeePMD-kit's ``model_devi.out`` (``pinn devi``): the
virial's (per atom) and the energy's per atom besides the forces'.

What the deviation is not: an error bar.  Members trained on the same data share its gaps in
part, so a small deviation does not prove a small error; it ranks configurations by how far
they lie from the data (docs/committee.md shows how well, on held-back frames).
"""
import logging

import numpy as np
from ase.calculators.calculator import Calculator, PropertyNotImplementedError, all_changes
from ase.stress import full_3x3_to_voigt_6_stress

# a committee directory's members, here for get_calc and the scripts that import them from pinn.committee
from pinn.files.committee_dir import MEMBER_PREFIX, is_committee_directory, member_directories  # noqa: F401
from pinn.io.atoms_input import FollowsInputs, check_atoms
from pinn.io.qmmm_atoms import network_atoms

log = logging.getLogger(__name__)

#: what drives MD: the members' mean (every member at every step) or the first member (the others
#: only when a deviation is asked for: DeePMD-kit's LAMMPS practice with ``out_freq``)
DRIVES = ("mean", "first")
#: the results that need every member
COMMITTEE_PROPERTIES = frozenset({"energy_deviation", "energies_deviation", "forces_deviation",
                                  "max_forces_deviation", "member_energies", "member_forces", "member_stresses",
                                  "member_charges"})


def deviations(energies, forces, n_atoms=None, virials=None):
    """How much a committee's members disagree on one structure (DeePMD-kit's model deviation).

    Args:
        energies: [M] the members' energies (eV).
        forces: [M, n_atoms, 3] their forces (eV/Å).
        n_atoms: atoms of the structure (default: from ``forces``).
        virials: [M, 3, 3] their virials (eV; −stress × volume), or ``None``.

    Returns:
        dict: ``energy_deviation`` (std of E, eV), ``energy_deviation_per_atom`` (std of E / n_atoms,
        eV, DeePMD-kit's ``devi_e``), ``forces_deviation`` [n_atoms] (eV/Å), ``max_forces_deviation``,
        ``min_forces_deviation``, ``avg_forces_deviation`` (its maximum, minimum and mean over atoms),
        and with ``virials`` ``max_virial_deviation``, ``min_virial_deviation``,
        ``avg_virial_deviation`` (eV per atom: the maximum and minimum over the nine components of
        the std of virial / n_atoms, and their root sum of squares / 3, as DeePMD-kit's
        ``max_devi_v``, ``min_devi_v``, ``avg_devi_v``).
    """
    energies = np.asarray(energies, np.float64)
    forces = np.asarray(forces, np.float64)
    n_atoms = forces.shape[1] if n_atoms is None else int(n_atoms)
    spread = forces - forces.mean(axis=0)
    per_atom = np.sqrt(np.mean(np.sum(spread * spread, axis=-1), axis=0)) if forces.shape[1] else np.zeros(0)
    out = {"energy_deviation": float(np.std(energies)),
           "energy_deviation_per_atom": float(np.std(energies / max(n_atoms, 1))),
           "forces_deviation": per_atom,
           "max_forces_deviation": float(per_atom.max()) if per_atom.size else 0.0,
           "min_forces_deviation": float(per_atom.min()) if per_atom.size else 0.0,
           "avg_forces_deviation": float(per_atom.mean()) if per_atom.size else 0.0}
    if virials is not None:
        std = np.std(np.asarray(virials, np.float64).reshape(len(energies), 9) / max(n_atoms, 1), axis=0)
        out.update(max_virial_deviation=float(std.max()), min_virial_deviation=float(std.min()),
                   avg_virial_deviation=float(np.linalg.norm(std) / 3))
    return out


class CommitteeCalc(FollowsInputs, Calculator):
    """ASE calculator of a committee of potentials: the members' mean, and their deviation in ``results``.

    Made by :func:`pinn.get_calc` from a list of model directories or a directory of members.  On the
    Numba engine the members share one neighbor search (:class:`pinn.engines.committee.FastCommittee`);
    otherwise each member runs its own engine on a shared Verlet list.

    Args:
        members: one :class:`pinn.calculator.PiNNCalc` per member (potential models of the same
            cutoff and elements).
        names: the members' names (their directories), for errors and logs.
        skin: Verlet skin of the shared neighbor list, Å.
        drive: what energy, forces and stress are: ``'mean'``, the members' mean, every member
            evaluated on every structure; or ``'first'``, the first member's, the others evaluated
            only when a deviation or a member's prediction is asked for
            (``calc.get_property('max_forces_deviation', atoms)``), so that MD that looks at the
            deviation every N steps costs one member per step plus the committee every N
            (DeePMD-kit's ``pair_style deepmd`` with several models and ``out_freq``).
        atoms, label, directory: as for any ASE calculator.

    Attributes:
        calculations: the structures calculated; committee_evaluations: of them, those on which
            every member was evaluated.

    Raises:
        ValueError: a bad ``drive``, a member that is not a potential, or members whose cutoff or
            elements differ.
    """

    implemented_properties = ["energy", "free_energy", "energies", "forces", "stress", "charges", "energy_deviation",
                              "energies_deviation", "forces_deviation", "max_forces_deviation", "member_energies",
                              "member_forces", "member_stresses", "member_charges"]

    def __init__(self, members, names, skin=0.5, drive="mean", atoms=None, label=None, directory="."):
        from pinn.engines.committee import FastCommittee, check_same_kind
        from pinn.engines.embedded import FastEmbeddedCommittee
        from pinn.io.neighbors import VerletNeighbors
        super().__init__(atoms=atoms, label=label, directory=directory)
        if drive not in DRIVES:
            raise ValueError(f"get_calc: drive must be one of {DRIVES}, got {drive!r}")
        self.drive = drive
        self.members = list(members)
        self.names = list(names)
        not_potential = [n for n, m in zip(self.names, self.members) if not m.is_potential]
        if not_potential:
            raise ValueError(f"get_calc: a committee is of potential models; {not_potential[0]} is a dipole model")
        check_same_kind([(n, m.rc, m.atom_types) for n, m in zip(self.names, self.members)])
        embeddings = {m.embedding for m in self.members}
        if len(embeddings) > 1:
            raise ValueError(f"get_calc: the committee's members differ in model.params.embedding "
                             f"({sorted(kind.name for kind in embeddings)})")
        #: the members' embedding of QM/MM frames
        self.embedding = embeddings.pop()
        #: their ``embedding_damping`` (Å), which they share
        self.embedding_damping = _shared_damping(self.members, self.names)
        self.rc = self.members[0].rc
        self.atom_types = self.members[0].atom_types
        self.e_units = np.array([m.e_unit for m in self.members])
        self.engine = "numba" if all(m.engine == "numba" for m in self.members) else "mixed" \
            if any(m.engine == "numba" for m in self.members) else "tensorflow"
        # one neighbor search for all members' networks (with an embedding that sees the MM atoms: of the QM atoms,
        # in the MM field they share), the members of one layout in one kernel call
        self._fast = None
        self._fast_embedded = None
        if self.engine == "numba":
            fast = FastCommittee([m._engine.fast for m in self.members], self.names)
            if self.embedding.sees_environment:
                self._fast_embedded = FastEmbeddedCommittee(fast, self.embedding_damping)
            else:
                self._fast = fast
        self.neighbors = VerletNeighbors(self.rc, skin)
        self.calculations = 0  # structures calculated
        self.committee_evaluations = 0  # of them, those on which every member was evaluated
        self._first = None  # drive='first': member 0's prediction for the current structure

    @property
    def size(self):
        """The number of members."""
        return len(self.members)

    def _predict(self, atoms, members):
        """The energy [K], per-atom energies [K, n], forces [K, n, 3] and, periodic, stress [K, 3, 3] (eV, Å)
        of the K members whose indices are ``members``."""
        if self._fast is not None or self._fast_embedded is not None:
            for k in members:
                self.members[k]._engine._sync_weights()
            out = self._fast_predictions(atoms, members)
        else:
            preds = [self.members[k]._engine(atoms, self.neighbors) for k in members]
            out = {"energy": np.array([float(p["energy"][0]) for p in preds]),
                   "forces": np.stack([np.asarray(p["forces"], np.float64) for p in preds])}
            if self.embedding.gives_atomic_energies:
                out["energies"] = np.stack([np.asarray(p["energies"], np.float64) for p in preds])
            if "charges" in self.embedding.gives:
                out["charges"] = np.stack([np.asarray(p["charges"], np.float64) for p in preds])
            if atoms.pbc.any() and all("stress" in p for p in preds):
                out["stress"] = np.stack([np.asarray(p["stress"][0], np.float64) for p in preds])
        scale = self.e_units[list(members)]
        result = {"energy": out["energy"] * scale, "forces": out["forces"] * scale[:, None, None]}
        if "energies" in out:
            result["energies"] = out["energies"] * scale[:, None]
        if "charges" in out:
            result["charges"] = np.asarray(out["charges"], np.float64)
        if atoms.pbc.any() and "stress" in out:
            result["stress"] = out["stress"] * scale[:, None, None]
        return result

    def _fast_predictions(self, atoms, members):
        """The Numba engine's predictions of ``members`` (indices), from one neighbor search."""
        if self._fast is not None:
            first, second, offsets = self.neighbors.candidates(atoms.positions, atoms.cell[:], atoms.pbc)
            return self._fast(atoms.numbers, atoms.positions, first, second, offsets, atoms.cell[:], atoms.pbc,
                              members=list(members))
        from pinn import keys as K
        from pinn.io.qmmm_atoms import region_arrays
        arrays = region_arrays(atoms)
        region = np.flatnonzero(arrays[K.QM])
        first, second, offsets = self.neighbors.candidates(atoms.positions[region], atoms.cell[:], atoms.pbc)
        return self._fast_embedded(atoms.numbers, atoms.positions, arrays[K.QM], arrays[K.MM_CHARGE],
                                   arrays[K.QM_CHARGE], first, second, offsets, atoms.cell[:], atoms.pbc,
                                   members=list(members))

    def calculate(self, atoms=None, properties=("energy",), system_changes=all_changes):
        super().calculate(atoms, properties, system_changes)
        atoms = self.atoms
        if "stress" in properties and not atoms.pbc.any():
            raise PropertyNotImplementedError("stress needs a periodic cell")
        charged = "charges" in self.embedding.gives
        for name, given in (("stress", self.embedding.gives_stress), ("energies", self.embedding.gives_atomic_energies),
                            ("energies_deviation", self.embedding.gives_atomic_energies), ("charges", charged),
                            ("member_charges", charged)):
            if name in properties and not given:
                raise PropertyNotImplementedError(f"a model with embedding {self.embedding.name!r} gives no {name}")
        check_atoms(atoms)
        network_atoms(atoms, self.embedding, self.atom_types, "the committee")
        if system_changes:
            self.calculations += 1
            self._first = None
        if self.drive == "mean":
            self._set_committee(self._predict(atoms, range(self.size)), mean=True)
            return
        if self._first is None:
            self._first = self._predict(atoms, [0])
            self._set_prediction({key: value[0] for key, value in self._first.items()})
        if COMMITTEE_PROPERTIES.intersection(properties) and "max_forces_deviation" not in self.results:
            rest = self._predict(atoms, range(1, self.size)) if self.size > 1 else None
            everyone = self._first if rest is None else \
                {key: np.concatenate([self._first[key], rest[key]]) for key in rest}
            self._set_committee(everyone, mean=False)

    def _set_prediction(self, pred):
        """Energy, per-atom energies, forces and, periodic, stress in ``results`` (Voigt stress)."""
        self.results.update(energy=float(pred["energy"]), free_energy=float(pred["energy"]), forces=pred["forces"])
        if "energies" in pred:
            self.results["energies"] = pred["energies"]
        if "charges" in pred:
            self.results["charges"] = pred["charges"]
        if "stress" in pred:
            self.results["stress"] = full_3x3_to_voigt_6_stress(pred["stress"])

    def _set_committee(self, pred, mean):
        """The deviations and every member's prediction in ``results`` (and, ``mean``, the members' mean
        as energy, forces and stress), from all members' ``pred``."""
        self.committee_evaluations += 1
        energies = pred["energy"]
        forces = pred["forces"]
        m = len(energies)
        energy = float(energies.sum() / m)
        mean_forces = forces.sum(axis=0) / m
        spread = forces - mean_forces  # the deviations' definitions (see deviations()) in the fewest NumPy calls: MD
        per_atom = np.sqrt((spread * spread).sum(axis=(0, 2)) / m)
        self.results.update(member_energies=energies, member_forces=forces, forces_deviation=per_atom,
                            max_forces_deviation=float(per_atom.max()) if per_atom.size else 0.0,
                            energy_deviation=float(np.sqrt(((energies - energy) ** 2).sum() / m)))
        atomic = {}
        if "energies" in pred:
            atomic["energies"] = pred["energies"].sum(axis=0) / m
            spread = pred["energies"] - atomic["energies"]
            self.results["energies_deviation"] = np.sqrt((spread * spread).sum(axis=0) / m)
        if "stress" in pred:
            self.results["member_stresses"] = np.stack([full_3x3_to_voigt_6_stress(s) for s in pred["stress"]])
        if "charges" in pred:
            self.results["member_charges"] = pred["charges"]
            atomic["charges"] = pred["charges"].sum(axis=0) / m
        if mean:
            self._set_prediction({"energy": energy, **atomic, "forces": mean_forces,
                                  **({"stress": pred["stress"].mean(axis=0)} if "stress" in pred else {})})


def _shared_damping(members, names):
    """``model.params.embedding_damping`` of a committee's members (Å), which they must share (one MM field for
    all).

    Raises:
        ValueError: members of different damping, naming the first that differs.
    """
    damping = [m.embedding_damping for m in members]
    for name, value in zip(names[1:], damping[1:]):
        if value != damping[0]:
            raise ValueError(f"get_calc: the committee's members differ in model.params.embedding_damping ({name}: "
                             f"{value:g} Å, {names[0]}: {damping[0]:g} Å)")
    return damping[0]
