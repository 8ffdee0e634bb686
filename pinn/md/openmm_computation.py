"""What a pinn force computes in OpenMM (``openmm.PythonForce``): picklable, so a system holding one is saved by
``XmlSerializer``, ``copy.deepcopy`` and ``pickle`` (the model travels as its absolute path and its SHA-256; the
calculator is made again where the computation first runs, after the model there is checked against that hash).
OpenMM's XML of such a system holds the pickled computation, and loading it runs code: :mod:`pinn.md.openmm_files`
saves and loads a system without pickle.

- :class:`PinnComputation`: the potential of the force's particles (mechanical embedding).
- :class:`EmbeddedComputation`: a QM region in the field of the MM charges (``embedding: electrostatic``). The
  model sees one open QM/MM frame per step, built from OpenMM's positions:

  * the QM atoms, made whole around the first (minimum images) and centred on their mean position c;
  * in a system without periodic box (NoCutoff): every MM atom with a charge, at its position;
  * in a periodic system (PME, Ewald, CutoffPeriodic): every MM residue whose centre (the mean of its atoms,
    the residue made whole) lies within ``cutoff`` of c in the minimum image, whole, at that image; the
    residue's charges scaled by a switch S(d) of the distance d of its centre to c, 1 up to
    ``cutoff − switch_width`` and 0 at ``cutoff`` (S = 1 − 10x³ + 15x⁴ − 6x⁵, x the place in the switching
    shell: continuous with its first and second derivatives), so the energy and forces are smooth as residues
    come and go.  The forces of the switch, −∂E/∂d · ∂d/∂r, come from the potential φ_m of the QM charges at
    each MM atom (∂E/∂Q_m = φ_m): −Σ_{m∈residue} φ_m Q_m S'(d) û / n_residue on the residue's atoms and the
    opposite, shared, on the QM atoms.

Energies eV → kJ/mol, forces eV/Å → kJ/mol/nm, positions nm → Å.
"""
import hashlib
import os

import numpy as np

from pinn.physics.embedding_kinds import ELECTROSTATIC, MECHANICAL, embedding_of

#: kJ/mol per eV (CODATA 2018, as ASE's units)
KJ_PER_MOL_PER_EV = 96.48533212331002
#: Å per nm
ANGSTROM_PER_NM = 10.0
#: the calc options that name a checkpoint (of :func:`pinn.get_calc`)
_CHECKPOINT_OPTIONS = ("checkpoint", "checkpoint_path")


def _is_path(value):
    return isinstance(value, (str, bytes, os.PathLike))


def absolute_model(model):
    """``model`` with its path(s) made absolute (a path, or a committee's list of paths, as ``str``); anything
    else (a model in memory, a calculator, a params dict) as it is."""
    if _is_path(model):
        return os.path.abspath(os.fsdecode(os.fspath(model)))
    if isinstance(model, (list, tuple)) and model and all(_is_path(m) for m in model):
        return [absolute_model(m) for m in model]
    return model


def model_place(model):
    """The model's path(s), for messages."""
    return ", ".join(model) if isinstance(model, list) else str(model)


def model_sha256(model, checkpoint=None):
    """SHA-256 (hex) of what defines a model's weights, without loading it.

    Args:
        model: a model file (its bytes); a model directory (its ``params.yml`` and the files of the checkpoint
            that :func:`pinn.get_calc` loads: ``.index`` and ``.data-*``); a directory of ``member-K/`` or a list
            of model directories (a committee: its members' hashes, in order).
        checkpoint: the ``checkpoint`` option of :func:`pinn.get_calc` (``None``, ``'last'``, ``'best'``, a path).

    Raises:
        ValueError: no model at a path (naming it).
    """
    from pinn.committee import is_committee_directory, member_directories
    if isinstance(model, list) or is_committee_directory(model):
        members = [_model_dir_sha256(d, checkpoint) for d in member_directories(model)]
        return hashlib.sha256("committee\n".join(members).encode()).hexdigest()
    if not os.path.exists(model):
        raise ValueError(f"pinn force: no model at {model}")
    if os.path.isfile(model):
        digest = hashlib.sha256()
        _hash_file(digest, model)
        return digest.hexdigest()
    return _model_dir_sha256(model, checkpoint)


def _model_dir_sha256(model_dir, checkpoint):
    from pinn.engines.exported import checkpoint_path
    from pinn.files.checkpoint_dir import files_of
    if not os.path.isdir(model_dir):
        raise ValueError(f"pinn force: no model directory at {model_dir}")
    ckpt = checkpoint_path(model_dir, checkpoint)
    files = [os.path.join(model_dir, "params.yml")]
    files += [f for f in files_of(ckpt) if os.path.isfile(f)] if ckpt else []
    digest = hashlib.sha256()
    for path in files:
        digest.update(os.path.basename(path).encode() + b"\0")
        _hash_file(digest, path)
    return digest.hexdigest()


def _hash_file(digest, path):
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except FileNotFoundError:
        raise ValueError(f"pinn force: no model file {path}") from None


def python_force(computation, particles, periodic, force_group, name="pinn"):
    """The ``openmm.PythonForce`` of ``computation`` on ``particles`` (``None``: all) in ``force_group``
    (``None``: 0); it declares the computation's ``lambda_parameter`` (default 1), which OpenMM then hands it."""
    import openmm
    parameters = {} if computation.lambda_parameter is None else {computation.lambda_parameter: 1.0}
    force = openmm.PythonForce(computation, parameters)
    force.setName(name)
    force.setUsesPeriodicBoundaryConditions(bool(periodic))
    if particles is not None:
        force.setParticles([int(i) for i in particles])
    if force_group is not None:
        force.setForceGroup(int(force_group))
    return force


class PinnComputation:
    """The energy and forces of a pinn potential on a force's particles (see the module).

    Args:
        model: a model directory or model file, or a committee's list of model directories (saved with the system:
            its absolute path, made here, and its :func:`model_sha256`), or what :func:`pinn.get_calc` takes
            (a model in memory, an ASE calculator: not saved).
        numbers: the particles' atomic numbers, in the force's order.
        periodic: whether OpenMM passes a periodic box.
        calc_options: keyword arguments of :func:`pinn.get_calc` (a checkpoint path made absolute).
        saved_sha256: the model's hash when the system was saved (a restored computation, as unpickling gives):
            the model at the path is checked against it when the calculator is made.
        lambda_parameter: the name of the global parameter of an interpolated system
            (:mod:`pinn.md.openmm_interpolation`) that the force declares and checks at each call: a value outside
            [0, 1] is refused, naming it; ``None``: none.

    Attributes:
        monitor: a :class:`~pinn.md.openmm_deviation.DeviationMonitor` that takes a committee's predictions of
            each step (:meth:`watch`), or ``None``; not saved with the system.
    """

    #: the embedding whose force this computes (its name is the ``kind`` of :meth:`describe`)
    EMBEDDING = MECHANICAL

    def __init__(self, model, numbers, periodic=False, calc_options=None, saved_sha256=None, lambda_parameter=None):
        self.model = absolute_model(model)
        self.lambda_parameter = lambda_parameter
        self.numbers = np.asarray(numbers, int)
        self.periodic = bool(periodic)
        self.calc_options = {key: absolute_model(value) if key in _CHECKPOINT_OPTIONS and _is_path(value)
                             and value not in ("last", "best") else value
                             for key, value in dict(calc_options or {}).items()}
        self._restored = saved_sha256 is not None
        self.model_sha256 = saved_sha256 if self._restored else (
            model_sha256(self.model, self._checkpoint()) if self._saveable() else None)
        self._calc = None
        self._atoms = None
        self.monitor = None

    def watch(self, monitor):
        """Give each step's committee predictions to ``monitor`` (a
        :class:`~pinn.md.openmm_deviation.DeviationMonitor`; ``None``: no longer).

        Raises:
            ValueError: the model is no committee.
        """
        if monitor is not None:
            monitor.attach_check(self.calc)
        self.monitor = monitor

    def _saveable(self):
        return isinstance(self.model, (str, list))

    def _checkpoint(self):
        return next((self.calc_options[k] for k in _CHECKPOINT_OPTIONS if self.calc_options.get(k) is not None),
                    None)

    @property
    def calc(self):
        """The ASE calculator, made on first use (for a restored computation, after the model's hash is checked)."""
        if self._calc is None:
            from ase.calculators.calculator import Calculator

            from pinn.calculator import get_calc
            if self._restored:
                self.check_model()
            self._calc = self.model if isinstance(self.model, Calculator) else get_calc(self.model,
                                                                                          **self.calc_options)
        return self._calc

    def check_model(self):
        """Refuse (ValueError, one line naming the path and both hashes) a model that is not the one the system
        was saved with."""
        place = model_place(self.model)
        if self.model_sha256 is None:
            raise ValueError(f"pinn force: the system was saved without the hash of its model {place} (by an older "
                             "pinn); build it again from the model")
        now = model_sha256(self.model, self._checkpoint())
        if now != self.model_sha256:
            raise ValueError(f"pinn force: the model at {place} is not the one the system was saved with (sha256 "
                             f"{self.model_sha256[:12]} saved, {now[:12]} there now); restore that model or build "
                             "the system again")

    def __getstate__(self):
        if not self._saveable():
            import logging
            import pickle
            message = (f"a pinn force of a {type(self.model).__name__} cannot be saved with the system "
                       "(XmlSerializer, copy.deepcopy, pickle): build it from the model directory or model file")
            logging.getLogger("pinn").error("%s", message)  # OpenMM's serializer replaces the exception's message
            raise pickle.PicklingError(message)
        state = dict(self.__dict__)
        state["_calc"] = state["_atoms"] = state["monitor"] = None
        state.pop("_restored", None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.__dict__.setdefault("model_sha256", None)
        self.__dict__.setdefault("monitor", None)
        self.__dict__.setdefault("lambda_parameter", None)
        self._restored = True

    def describe(self):
        """What rebuilds this computation (:meth:`from_description`), as JSON values.

        Raises:
            ValueError: a model that is not saved (in memory), or a calc option that is not JSON (naming it).
        """
        import json
        if not self._saveable():
            raise ValueError(f"a pinn force of a {type(self.model).__name__} cannot be saved: build it from the "
                             "model directory or model file")
        for key, value in self.calc_options.items():
            try:
                json.dumps(value, allow_nan=False)
            except (TypeError, ValueError):
                raise ValueError(f"the pinn force's calc option {key}={value!r} is not JSON: it cannot be "
                                 "saved") from None
        return {"kind": self.EMBEDDING.name, "model": self.model, "model_sha256": self.model_sha256,
                "numbers": self.numbers.tolist(), "periodic": self.periodic, "calc_options": self.calc_options,
                "lambda_parameter": self.lambda_parameter}

    @classmethod
    def from_description(cls, description):
        """The computation :meth:`describe` gave, restored: its model checked when the calculator is made."""
        d = description
        common = dict(model=d["model"], numbers=d["numbers"], periodic=d["periodic"], calc_options=d["calc_options"],
                      saved_sha256=d["model_sha256"], lambda_parameter=d.get("lambda_parameter"))
        if embedding_of(d["kind"]) is PinnComputation.EMBEDDING:
            return PinnComputation(**common)
        return EmbeddedComputation(qm=d["qm"], charges=d["charges"], residues=d["residues"], qm_charge=d["qm_charge"],
                                   cutoff=d["cutoff"], switch_width=d["switch_width"], damping=d["damping"], **common)

    def _box(self, state):
        return state.getPeriodicBoxVectors(asNumpy=True)._value * ANGSTROM_PER_NM

    def frame(self, positions, box=None):
        """The frame the model sees at the force's particles' ``positions`` ([n, 3] Å; ``box``: [3, 3] Å rows, for
        a periodic system), as an ``ase.Atoms`` (what a label of this force's model is of)."""
        from ase import Atoms
        atoms = Atoms(numbers=self.numbers, positions=np.asarray(positions, np.float64), pbc=self.periodic)
        if self.periodic:
            atoms.cell = np.asarray(box, np.float64)
        return atoms

    def check_lambda(self, state):
        """Refuse (ValueError, naming the parameter and its value) a ``lambda_parameter`` outside [0, 1] in
        ``state``: an interpolated system is the force field's at 0 and the ML/MM system's at 1, nothing beyond."""
        if self.lambda_parameter is None:
            return
        value = state.getParameters()[self.lambda_parameter]
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{self.lambda_parameter} = {value:g}: outside [0, 1] (0: the force field, 1: the "
                             "ML/MM system); set it with context.setParameter in that range")

    def __call__(self, state):
        """OpenMM's call: (energy kJ/mol, forces [n, 3] kJ/mol/nm) at ``state``'s positions."""
        from ase import Atoms
        self.check_lambda(state)
        if self._atoms is None:
            self._atoms = Atoms(numbers=self.numbers, pbc=self.periodic)
            self._atoms.calc = self.calc
        atoms = self._atoms
        atoms.positions = state.getPositions(asNumpy=True)._value * ANGSTROM_PER_NM
        if self.periodic:
            atoms.cell = self._box(state)
        energy = atoms.get_potential_energy() * KJ_PER_MOL_PER_EV
        forces = atoms.get_forces() * (KJ_PER_MOL_PER_EV * ANGSTROM_PER_NM)
        if self.monitor is not None:
            self.monitor.record(state.getStepCount(), state.getTime()._value, atoms, self.calc.results)
        return energy, forces


class EmbeddedComputation(PinnComputation):
    """A QM region in the MM charges' field (see the module): the force's particles are the QM atoms and the
    MM atoms that may carry charge into it.

    Args:
        model: as :class:`PinnComputation`; a potential model with ``embedding: electrostatic``.
        numbers: the particles' atomic numbers.
        qm: [n] bool, the QM particles.
        charges: [n] the MM particles' charges (e; the QM entries are ignored).
        residues: [n] int, each particle's residue (the groups the periodic cut keeps whole).
        qm_charge: the QM region's charge (e).
        periodic: whether the system is periodic (then ``cutoff`` applies).
        cutoff: Å, the distance of a residue's centre from the region's centre where its charges are gone.
        switch_width: Å, the width of the switching shell below ``cutoff``.
        damping: r_d of the model's Coulomb kernel (Å; ``model.params.embedding_damping``).
        calc_options: keyword arguments of :func:`pinn.get_calc`.
        saved_sha256, lambda_parameter: as :class:`PinnComputation`.
    """

    EMBEDDING = ELECTROSTATIC

    def __init__(self, model, numbers, qm, charges, residues, qm_charge=0.0, periodic=False, cutoff=None,
                 switch_width=1.0, damping=0.0, calc_options=None, saved_sha256=None, lambda_parameter=None):
        super().__init__(model, numbers, periodic, calc_options, saved_sha256, lambda_parameter)
        self.qm = np.asarray(qm, bool)
        self.charges = np.where(self.qm, 0.0, np.asarray(charges, float))
        self.residues = np.unique(np.asarray(residues), return_inverse=True)[1]
        self.qm_charge = float(qm_charge)
        self.cutoff = cutoff
        self.switch_width = float(switch_width)
        self.damping = float(damping)
        if periodic and not (cutoff and 0 < switch_width < cutoff):
            raise ValueError(f"the periodic embedding needs 0 < switch_width < cutoff (Å), got {switch_width!r} and "
                             f"{cutoff!r}")
        # the MM atoms grouped by residue, once: their indices in residue order, each one's residue among them,
        # each residue's first atom and atom count
        mm = np.flatnonzero(~self.qm)
        self._mm_by_residue = mm[np.argsort(self.residues[mm], kind="stable")]
        _, self._residue_place, self._residue_size = np.unique(self.residues[self._mm_by_residue],
                                                               return_inverse=True, return_counts=True)
        self._residue_first = np.r_[0, np.cumsum(self._residue_size)[:-1]].astype(int)

    def describe(self):
        return {**super().describe(), "qm": self.qm.tolist(), "charges": self.charges.tolist(),
                "residues": self.residues.tolist(), "qm_charge": self.qm_charge,
                "cutoff": None if self.cutoff is None else float(self.cutoff), "switch_width": self.switch_width,
                "damping": self.damping}

    def frame(self, positions, box=None):
        """The open QM/MM frame the model sees at the force's particles' ``positions`` ([n, 3] Å; ``box``: [3, 3] Å
        rows, for a periodic system; see the module), as an ``ase.Atoms`` in pinn's QM/MM convention."""
        return self._cut(np.asarray(positions, np.float64), None if box is None else np.asarray(box, np.float64))[0]

    def _cut(self, positions, box):
        """(frame, its QM and MM indices among the particles, the region's and the MM atoms' positions, S'(d) per
        MM atom, the residues' unit vectors, each MM atom's residue among them) at ``positions`` (Å)."""
        from ase import Atoms
        qm_index = np.flatnonzero(self.qm)
        region = positions[qm_index]
        if box is not None:
            box = _Box(box)
            heights = box.heights
            if self.cutoff > heights.min() / 2:
                raise ValueError(f"the embedding's cutoff {self.cutoff / ANGSTROM_PER_NM:g} nm exceeds half the box "
                                 f"({heights.min() / 2 / ANGSTROM_PER_NM:g} nm): residues would be cut by the box")
            region = region[0] + _minimum_image(region - region[0], box)
        centre = region.mean(axis=0)
        if box is None:
            mm_index = np.flatnonzero(~self.qm & (self.charges != 0))
            mm_positions = positions[mm_index]
            scale = 1.0
            dscale = None
            unit = None
            residue_of = None
        else:
            mm_index, mm_positions, scale, dscale, unit, residue_of = self._residues_near(positions, box, centre)
        index = np.concatenate([qm_index, mm_index])
        atoms = Atoms(numbers=self.numbers[index], positions=np.vstack([region, mm_positions]))
        n_qm = len(qm_index)
        atoms.arrays["qm"] = np.arange(len(index)) < n_qm
        atoms.set_initial_charges(np.concatenate([np.zeros(n_qm), self.charges[mm_index] * scale]))
        atoms.info["charge"] = self.qm_charge
        return atoms, qm_index, mm_index, region, mm_positions, dscale, unit, residue_of

    def __call__(self, state):
        self.check_lambda(state)
        positions = state.getPositions(asNumpy=True)._value * ANGSTROM_PER_NM
        box = self._box(state) if self.periodic else None
        atoms, qm_index, mm_index, region, mm_positions, dscale, unit, residue_of = self._cut(positions, box)
        index = np.concatenate([qm_index, mm_index])
        n_qm = len(qm_index)
        qm = atoms.arrays["qm"]
        atoms.calc = self.calc
        energy = atoms.get_potential_energy()
        forces = np.zeros((len(self.numbers), 3))
        forces[index] = atoms.get_forces()
        if self.monitor is not None:
            self.monitor.record(state.getStepCount(), state.getTime()._value, atoms, self.calc.results, seen_mm=~qm)
        if dscale is not None and len(mm_index):
            potential = _potential(atoms.get_charges()[:n_qm], region, mm_positions, self.damping)  # eV/e
            pull = np.bincount(residue_of, potential * self.charges[mm_index] * dscale, minlength=len(unit))
            per_residue = pull[:, None] * unit  # ∂E/∂c_residue (eV/Å)
            counts = np.bincount(residue_of, minlength=len(unit))
            forces[mm_index] -= (per_residue / np.maximum(counts, 1)[:, None])[residue_of]
            forces[qm_index] += per_residue.sum(axis=0) / n_qm
        return energy * KJ_PER_MOL_PER_EV, forces * (KJ_PER_MOL_PER_EV * ANGSTROM_PER_NM)

    def _residues_near(self, positions, box, centre):
        """The MM residues within the cutoff of ``centre``, whole, at their minimum image: (atom indices,
        positions, switch S per atom, S'(d) per atom (1/Å), unit vectors [n_residues, 3] from ``centre`` to
        each residue's centre, each atom's place among those residues)."""
        index = self._mm_by_residue
        place = self._residue_place
        counts = self._residue_size
        anchor = positions[index[self._residue_first]][place]
        whole = anchor + _minimum_image(positions[index] - anchor, box)
        centres = np.stack([np.bincount(place, whole[:, k]) for k in range(3)], axis=1) / counts[:, None]
        offset = _minimum_image(centres - centre, box)
        shifted = whole + (centre + offset - centres)[place]
        distance = np.linalg.norm(offset, axis=1)
        near = distance < self.cutoff
        x = np.clip((distance - (self.cutoff - self.switch_width)) / self.switch_width, 0.0, 1.0)
        switch = 1 - 10 * x ** 3 + 15 * x ** 4 - 6 * x ** 5
        dswitch = (-30 * x ** 2 + 60 * x ** 3 - 30 * x ** 4) / self.switch_width
        keep = near[place]  # whole residues: their centres move with every atom
        kept_residues, residue_of = np.unique(place[keep], return_inverse=True)
        unit = offset[kept_residues] / np.maximum(distance[kept_residues], 1e-12)[:, None]
        return (index[keep], shifted[keep], switch[place[keep]], dswitch[place[keep]], unit, residue_of)


class _Box:
    """A periodic box (rows a, b, c, Å; OpenMM's reduced form) with its inverse and face distances, made once per
    step for the step's three minimum images (the inverse: the cross products over the volume).

    Attributes:
        matrix: [3, 3] the rows a, b, c (Å).
        inverse: [3, 3] its inverse (1/Å).
        heights: [3] the distances between opposite faces (Å).
    """

    def __init__(self, matrix):
        self.matrix = np.asarray(matrix, np.float64)
        a, b, c = self.matrix
        crosses = np.array([np.cross(b, c), np.cross(c, a), np.cross(a, b)])
        volume = float(a @ crosses[0])
        self.inverse = crosses.T / volume
        self.heights = abs(volume) / np.linalg.norm(crosses, axis=1)


def _minimum_image(vectors, box):
    """Vectors (Å) in the minimum image of a :class:`_Box`."""
    fractional = vectors @ box.inverse
    return vectors - np.round(fractional) @ box.matrix


def _potential(qm_charges, qm_positions, mm_positions, damping):
    """φ at each MM position (eV/e) of the QM charges, with the model's Coulomb kernel
    (:func:`pinn.engines.embedded.kernel_and_slope`)."""
    from pinn.engines.embedded import kernel_and_slope
    from pinn.units import COULOMB
    r = np.linalg.norm(mm_positions[:, None, :] - qm_positions[None, :, :], axis=2)
    return COULOMB * kernel_and_slope(r, damping)[0] @ qm_charges
