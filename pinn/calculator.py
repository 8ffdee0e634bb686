"""ASE calculator for trained pinn models.

``calc = pinn.get_calc('model_dir')`` (or a model object in memory) gives,
for a potential model, energy (eV), forces (eV/Å) and, for periodic cells,
stress (eV/Å³, ASE's sign convention and Voigt order xx, yy, zz, yz, xz, xy);
for a dipole model, ``dipole`` (e·Å) and, for the models with atomic or bond charges, ``charges`` (e)
(``atoms.get_dipole_moment()``, ``atoms.get_charges()``; both × the model's ``d_unit``).  A model
with oxidation states (``AD_OS_dipole_model``) reads them from the atoms' initial charges
(``atoms.set_initial_charges``).  A model trained
with ``ema_decay`` predicts with its averaged weights.

Speed (for MD): two engines.

- ``'numba'`` (the default for a PiNet or PiNet2 potential): :class:`pinn.engines.md.FastPiNet`, the
  network's energy, forces and stress in compiled Numba kernels that use all cores, with no
  TensorFlow call per step (1.8-5x faster than the TensorFlow engine on 2 cores; the same
  numbers to float rounding, tested).
- ``'tensorflow'`` (every other model: BPNN, LJ, the dipole model): the model function is a
  ``tf.function`` with a fixed input signature, traced once, not per step.  For PiNet and LJ
  it is compiled with XLA (``jit=True``): the batch is padded to a few bucket sizes
  (:mod:`pinn.io.padding`; the padding contributes exactly zero), so a run compiles a few
  times, about 3 s each, and then reuses the code.

For a model directory, the Numba engine reads its weights from ``engine-weights.npz`` beside
the checkpoint when that file is up to date (:mod:`pinn.engines.exported`; written by the first
calculator made from the checkpoint), and then never imports TensorFlow.

Both use a Verlet neighbor list (:class:`pinn.io.neighbors.VerletNeighbors`) with a ``skin``:
rebuilt only when an atom has moved more than skin/2, filtered to the cutoff at every
step, so the pairs are exactly those within the cutoff.
"""
import dataclasses
import functools
import logging
import os

import numpy as np
from ase.calculators.calculator import Calculator, PropertyNotImplementedError, all_changes
from ase.stress import full_3x3_to_voigt_6_stress

from pinn.committee import CommitteeCalc, is_committee_directory, member_directories
from pinn.physics.embedding_kinds import MECHANICAL, embedding_of
from pinn.files.model_file import is_model_file
from pinn.io.atoms_input import FollowsInputs, check_atoms
from pinn.io.neighbors import VerletNeighbors
from pinn.io.qmmm_atoms import network_atoms

log = logging.getLogger(__name__)


class PiNNCalc(FollowsInputs, Calculator):
    """ASE calculator wrapping a trained model (see :func:`get_calc` for the arguments).

    ``model`` is a :class:`pinn.inference.handle.InferenceHandle` (or a
    :class:`pinn.training.trainer.Trainer`, whose handle :func:`pinn.models.restored.handle_of` takes),
    or the engine weights of a PiNet or PiNet2 potential (the dict of
    :func:`pinn.engines.exported.load_engine_weights`), which run on the Numba engine without TensorFlow.
    """

    implemented_properties = ["energy", "free_energy", "energies", "forces", "stress", "dipole", "charges"]

    def __init__(self, model, jit=None, skin=0.5, engine="auto", to_eV=1.0, properties=None, atoms=None,
                 label=None, directory="."):
        # ASE's Calculator stores any other keyword as a "parameter" and ignores it: only these are passed on
        super().__init__(atoms=atoms, label=label, directory=directory)
        if isinstance(model, dict):
            self._engine = _NumbaEngine(model, engine=engine)
        else:
            from pinn.inference.handle import InferenceHandle  # TensorFlow
            from pinn.models.restored import handle_of
            model = model if isinstance(model, InferenceHandle) else handle_of(model)
            self.handle = model
            chosen = _choose_engine(model, engine)
            self._engine = _NumbaEngine(model) if chosen == "numba" else _TensorFlowEngine(model, jit)
        self.engine = self._engine.name
        self.jit = getattr(self._engine, "jit", False)
        self.rc = self._engine.rc
        self.is_potential = self._engine.is_potential
        #: a potential model's embedding of QM/MM frames (:class:`pinn.physics.embedding_kinds.Embedding`, docs/qmmm.md)
        self.embedding = self._engine.embedding
        #: its ``embedding_damping`` (Å)
        self.embedding_damping = float(getattr(self._engine, "damping", 0.0))
        gives = list(self.embedding.gives) if self.is_potential else self._engine.dipole_outputs
        if properties is not None:
            properties = [properties] if isinstance(properties, str) else list(properties)
            unknown = [p for p in properties if p not in gives]
            if unknown or not properties:
                raise ValueError(f"get_calc: properties={properties!r}; this "
                                 f"{'potential' if self.is_potential else 'dipole'} model gives {gives}")
            gives = [p for p in gives if p in properties or (p == "free_energy" and "energy" in properties)]
        self.implemented_properties = gives
        if isinstance(to_eV, bool) or not isinstance(to_eV, (int, float)) or not np.isfinite(to_eV) or to_eV <= 0:
            raise ValueError(f"get_calc: to_eV must be a positive number, got {to_eV!r}")
        self.to_eV = float(to_eV)
        self.e_unit = self._engine.e_unit * self.to_eV  # the model's own energy unit, then upstream's factor
        self.atom_types = set(self._engine.atom_types)
        self.neighbors = VerletNeighbors(self.rc, skin)

    def calculate(self, atoms=None, properties=("energy",), system_changes=all_changes):
        missing = [p for p in properties if p not in self.implemented_properties]
        if missing:
            kind = "potential" if self.is_potential else "dipole"
            raise PropertyNotImplementedError(f"a {kind} model does not give {missing}; it gives "
                                              f"{self.implemented_properties}")
        super().calculate(atoms, properties, system_changes)
        atoms = self.atoms
        if "stress" in properties and not atoms.pbc.any():
            raise PropertyNotImplementedError("stress needs a periodic cell")
        check_atoms(atoms)
        network_atoms(atoms, self.embedding, self.atom_types, "the model")
        pred = self._engine(atoms, self.neighbors)
        if not self.is_potential:
            self.results["dipole"] = pred["dipole"][0].astype(np.float64) * self._engine.d_unit
            if "charges" in pred:
                self.results["charges"] = pred["charges"].astype(np.float64) * self._engine.d_unit
            return
        energy = float(pred["energy"][0]) * self.e_unit
        self.results["energy"] = energy
        self.results["free_energy"] = energy
        self.results["forces"] = pred["forces"].astype(np.float64) * self.e_unit
        if "charges" in self.embedding.gives:  # the QM atoms' predicted charges, the MM atoms' own
            self.results["charges"] = pred["charges"].astype(np.float64)
        if self.embedding.gives_atomic_energies:
            self.results["energies"] = pred["energies"].astype(np.float64) * self.e_unit
        if self.embedding.gives_stress and atoms.pbc.any():
            self.results["stress"] = full_3x3_to_voigt_6_stress(pred["stress"][0].astype(np.float64)) \
                * self.e_unit


class _NumbaEngine:
    """Predictions of a PiNet or PiNet2 potential by :class:`pinn.engines.md.FastPiNet`, from an inference handle
    (its averaged weights, copied again when the model has trained since) or from engine weights (no
    TensorFlow)."""

    name = "numba"
    is_potential = True

    def __init__(self, model, engine="numba"):
        from pinn.engines.md import FastPiNet
        if isinstance(model, dict):
            if engine not in ("auto", "numba"):
                raise ValueError(f"get_calc: engine weights run on engine='numba' (or 'auto'), not {engine!r}")
            self.handle = None
            self.fast = FastPiNet(model)
            self.e_unit = float(model.get("e_unit", 1.0))
            options = model
        else:
            self.handle = model
            with model.averaged_weights():
                self.fast = FastPiNet(model)
            self.weights_step = model.step
            self.e_unit = model.e_unit
            options = model.model.params
        self.rc = self.fast.rc
        self.atom_types = self.fast.atom_types
        #: the model's embedding of QM/MM frames; one that sees the environment runs through FastEmbeddedPiNet
        self.embedding = embedding_of(options)
        self.damping = float(options.get("embedding_damping", 0.0))
        self.embedded = None
        if self.embedding.sees_environment:
            from pinn.engines.embedded import FastEmbeddedPiNet
            self.embedded = FastEmbeddedPiNet(self.fast, self.damping)

    def __call__(self, atoms, neighbors):
        """``energy`` [1], ``energies`` [n], ``forces`` [n, 3], ``stress`` [1, 3, 3] of ``atoms`` (model units,
        NumPy); with an electrostatic embedding ``energy``, ``forces`` on every atom and ``charges`` of the
        QM/MM frame."""
        self._sync_weights()
        if self.embedded is not None:
            return self._qmmm(atoms, neighbors)
        first, second, offsets = neighbors.candidates(atoms.positions, atoms.cell[:], atoms.pbc)
        out = self.fast(atoms.numbers, atoms.positions, first, second, offsets, atoms.cell[:], atoms.pbc)
        return {"energy": np.array([out["energy"]]), "energies": out["energies"], "forces": out["forces"],
                "stress": out.get("stress", np.zeros((3, 3)))[None]}

    def _qmmm(self, atoms, neighbors):
        from pinn import keys as K
        from pinn.io.qmmm_atoms import region_arrays
        arrays = region_arrays(atoms)
        region = np.flatnonzero(arrays[K.QM])
        first, second, offsets = neighbors.candidates(atoms.positions[region], atoms.cell[:], atoms.pbc)
        out = self.embedded(atoms.numbers, atoms.positions, arrays[K.QM], arrays[K.MM_CHARGE], arrays[K.QM_CHARGE],
                            first, second, offsets, atoms.cell[:], atoms.pbc)
        return {"energy": np.array([out["energy"]]), "forces": out["forces"], "charges": out["charges"]}

    def _sync_weights(self):
        """The engine copies the weights: copy them again if the model has trained since (a model
        object in memory; a frozen one from a model directory cannot change)."""
        if self.handle is None or self.handle.frozen:
            return
        step = self.handle.step
        if step != self.weights_step:
            with self.handle.averaged_weights():
                self.fast.load_weights()
            self.weights_step = step


class _TensorFlowEngine:
    """Predictions of any model through a ``tf.function`` traced once (XLA on padded batches when
    ``jit``), with the model's averaged weights."""

    name = "tensorflow"

    def __init__(self, model, jit=None):
        import tensorflow as tf
        from pinn import keys as K
        from pinn.physics.potential import PotentialModel
        self.handle = model
        self.rc = model.rc
        self.is_potential = isinstance(model.model, PotentialModel)
        self.e_unit = model.e_unit
        #: a dipole model's outputs, its dipole unit (e·Å) and whether it reads oxidation states
        self.dipole_outputs = ["dipole", "charges"] if getattr(model.model, "has_charges", True) else ["dipole"]
        self.d_unit = 1.0 if self.is_potential else float(model.model.params.get("d_unit", 1.0))
        self.oxidation = bool(getattr(model.model, "OXIDATION", False))
        self.embedding = embedding_of(getattr(model.model, "embedding", MECHANICAL))
        self.damping = float(model.model.params.get("embedding_damping", 0.0))
        self.atom_types = model.atom_types
        dtype = model.dtype
        spec = {K.ELEMS: tf.TensorSpec([None], tf.int32), K.COORD: tf.TensorSpec([None, 3], dtype),
                K.CELL: tf.TensorSpec([None, 3, 3], dtype), K.PBC: tf.TensorSpec([None, 3], tf.bool),
                K.IND_1: tf.TensorSpec([None, 1], tf.int32), K.IND_2: tf.TensorSpec([None, 2], tf.int32),
                K.SHIFT: tf.TensorSpec([None, 3], dtype)}
        if self.oxidation:
            spec["oxidation"] = tf.TensorSpec([None], dtype)
        if self.embedding.sees_environment:
            spec.update({K.QM: tf.TensorSpec([None], tf.bool), K.MM_CHARGE: tf.TensorSpec([None], dtype),
                         K.QM_CHARGE: tf.TensorSpec([None], dtype)})
        if jit and not self.embedding.compiles_with_xla:
            raise ValueError(f"get_calc: jit=True; XLA cannot compile the model with embedding "
                             f"{self.embedding.name!r} (its QM–MM pairs vary); leave jit unset")
        self._np_dtype = dtype.as_numpy_dtype
        network = model.model.network
        self.jit = (bool(getattr(network, "JIT_COMPATIBLE", False)) and self.embedding.compiles_with_xla
                    if jit is None else bool(jit))
        self._pad_element = int(self.atom_types[0])
        # the concrete function, traced here once: calling it skips tf.function's argument
        # binding and signature matching, about a third of a small molecule's step
        # what the model gives: a potential's stress and per-atom energies where its embedding has them
        outputs = {} if not self.is_potential else {"stress": self.embedding.gives_stress,
                                                    "energies": self.embedding.gives_atomic_energies}
        predict = lambda tensors: model.model.predict(tensors, **outputs)  # noqa: E731
        self._function = tf.function(predict, input_signature=[spec], jit_compile=self.jit, autograph=False)
        self._predict = self._function.get_concrete_function()
        # its flat call on tensors made here skips the binding of a dict of NumPy arrays to the
        # signature as well (0.4-0.55 ms of a 2.6 ms PiNet2 step of ethanol); a TensorFlow without
        # ConcreteFunction._call_flat takes the public call
        self._spec = [(key, spec[key].dtype) for key in sorted(spec)]  # tf.nest.flatten's order of a dict
        self._call_flat = getattr(self._predict, "_call_flat", None)
        self._constant = tf.constant  # kept: no import lookup per MD step

    def _run(self, batch):
        """The concrete function on a batch of NumPy arrays (the keys of its signature) → NumPy arrays."""
        if self._call_flat is None:
            out = self._predict(batch)
        else:
            out = self._call_flat([self._constant(batch[key], dtype) for key, dtype in self._spec],
                                  self._predict.captured_inputs)
        return {key: value.numpy() for key, value in out.items()}

    def __call__(self, atoms, neighbors):
        """The model's predictions for ``atoms`` (NumPy), through the padded, compiled function when ``jit``."""
        from pinn.io.batch import batch_from_atoms
        from pinn.io.padding import pad_batch, unpad
        with self.handle.averaged_weights():
            if self.embedding.sees_environment:
                return self._run(self._qmmm_batch(atoms, neighbors))
            batch = batch_from_atoms(atoms, self.rc, self._np_dtype, neighbors=neighbors)
            if self.oxidation:
                batch["oxidation"] = atoms.get_initial_charges().astype(self._np_dtype)
            if not self.jit:
                return self._run(batch)
            padded, sizes = pad_batch(batch, self.rc, self._pad_element)
            if self.oxidation:  # padding atoms: no oxidation state
                extra = len(padded["elems"]) - len(batch["elems"])
                padded["oxidation"] = np.concatenate([batch["oxidation"], np.zeros(extra, self._np_dtype)])
            return unpad(self._run(padded), sizes)


    def _qmmm_batch(self, atoms, neighbors):
        """The batch of a QM/MM frame in pinn's convention (:mod:`pinn.io.qmmm`; Atoms without ``qm``: a QM
        region alone) with the pairs among its QM atoms."""
        from pinn import keys as K
        from pinn.io.batch import batch_from_atoms
        from pinn.io.qmmm_atoms import region_arrays
        arrays = region_arrays(atoms)
        region = np.flatnonzero(arrays[K.QM])

        def region_pairs(coord, cell, pbc):
            ind_2, shift = neighbors(coord[region], cell, pbc)
            return region[ind_2], shift

        batch = batch_from_atoms(atoms, self.rc, self._np_dtype, neighbors=region_pairs)
        batch[K.QM] = np.asarray(arrays[K.QM], bool)
        batch[K.MM_CHARGE] = np.asarray(arrays[K.MM_CHARGE], self._np_dtype)
        batch[K.QM_CHARGE] = np.array([arrays[K.QM_CHARGE]], self._np_dtype)
        return batch


ENGINES = ("auto", "numba", "tensorflow")


def _checked_engine(engine):
    """``engine``, refused unless it is one of :data:`ENGINES`: the one check of the name, which :func:`get_calc`
    makes before any model loads and :func:`_choose_engine` for a :class:`PiNNCalc` made directly."""
    if engine not in ENGINES:
        raise ValueError(f"get_calc: engine must be one of {ENGINES}, got {engine!r}")
    return engine


def _choose_engine(model, engine):
    """The engine for ``model``: ``engine``, or for 'auto' numba where it can
    (:func:`pinn.engines.lowering.refusal`), else tensorflow, with the reason in the log."""
    from pinn.engines import lowering
    if _checked_engine(engine) == "tensorflow":
        return engine
    reason = lowering.refusal(model, "md")
    if reason is None:
        return "numba"
    if engine == "numba":
        if not lowering.available():
            raise ImportError("get_calc: engine='numba' needs Numba (pip install numba)")
        raise ValueError(f"get_calc: engine='numba': {reason}; use engine='tensorflow' (or 'auto') for this model")
    log.info("get_calc: the tensorflow engine, since %s", reason)
    return "tensorflow"


def get_calc(model, checkpoint=None, jit=None, skin=0.5, engine="auto", *, checkpoint_path=None, to_eV=1.0,
             properties=None, drive=None, dispersion=None, functional=None, atoms=None, label=None, directory="."):
    """ASE calculator for a model directory or a model object.

    Args:
        model: a model directory (holding ``params.yml`` and a checkpoint); a model file of
            ``pinn export`` (:mod:`pinn.files.model_file`; a committee's too); a list of model directories
            or a directory holding ``member-0/``, ``member-1/``, … (a committee: :mod:`pinn.committee`,
            a :class:`pinn.committee.CommitteeCalc`); a params dict
            naming one in ``model_dir`` (upstream PiNN's ``get_calc(params)``; its network
            must be the directory's; a ``model_dir`` without a checkpoint gives the params'
            model with its initial weights, as upstream), or the object returned by
            :func:`pinn.models.potential_model` or :func:`pinn.models.dipole_model`.
        checkpoint: for a model directory, ``None``/``'last'``, ``'best'``
            or a checkpoint path.
        jit: for the TensorFlow engine, compile the model function with XLA on padded
            batches (default: for networks that support it, PiNet and LJ).  Each new bucket
            of atom and pair counts compiles once (seconds); ``False`` suits one-off
            evaluations of many differently sized structures.
        skin: Verlet skin of the neighbor list, Å (0: a fresh list at every call).
        engine: ``'auto'`` (numba for a PiNet or PiNet2 potential when Numba is installed, else
            tensorflow), ``'numba'`` (:class:`pinn.engines.md.FastPiNet`; an error for other
            models) or ``'tensorflow'``.
        checkpoint_path: upstream PiNN's name of ``checkpoint`` (give one of the two).
        to_eV: upstream PiNN's factor from the model's energy unit to eV, multiplying energy,
            forces and stress after the model's own ``e_unit`` (leave 1 when the params
            declare ``e_unit``).
        properties: the properties the calculator gives (upstream PiNN's ``properties``; a
            subset of energy, forces, stress, or of dipole, charges); default all.
        drive: for a committee, ``'mean'`` (default: energy, forces and stress are the members'
            mean) or ``'first'`` (the first member's; the others run only when a deviation is
            asked for); see :class:`pinn.committee.CommitteeCalc`.  Refused for one model.
        dispersion: ``'d3bj'`` (or another name of :data:`pinn.dispersion.DAMPINGS`): the model plus
            D3 dispersion from the ``dftd3`` package, summed by ASE's ``SumCalculator``
            (:class:`pinn.dispersion.DispersionCorrected`); for a model trained on D3-free labels.
        functional: with ``dispersion``, the DFT functional whose D3 parameters it takes (``'PBE'``, …).
        atoms, label, directory: as for any ASE calculator.

    Any other keyword is refused (a TypeError), not stored and ignored.

    For a model directory and the Numba engine, the weights come from the checkpoint's
    ``engine-weights.npz`` (:mod:`pinn.engines.exported`) when it is up to date, without importing
    TensorFlow; otherwise the checkpoint is read with TensorFlow and that file written for
    the next time.

    Returns:
        :class:`PiNNCalc` (:class:`pinn.committee.CommitteeCalc` for a committee;
        :class:`pinn.dispersion.DispersionCorrected` of either with ``dispersion``).

    Raises:
        ValueError: a bad engine, ``properties`` or ``to_eV``; ``checkpoint`` with a model object;
            params whose network is not the directory's; ``dispersion`` without ``functional`` or the
            other way round, or one ``dftd3`` does not know.
        ImportError: ``dispersion`` without the ``dftd3`` package.
        TypeError: a model of none of these kinds (naming what get_calc takes).
    """
    if checkpoint_path is not None:
        if checkpoint is not None:
            raise ValueError("get_calc: checkpoint= and checkpoint_path= are the same argument "
                             "(checkpoint_path= is upstream PiNN's name); pass one of them")
        checkpoint = checkpoint_path
    options = _Options(checkpoint, jit, skin, _checked_engine(engine), to_eV, properties, drive, atoms, label,
                       directory)
    source = _Source.from_(model)
    if dispersion is None and functional is None:
        return source.calc(options)
    return _with_dispersion(source, options, dispersion, functional)


def _with_dispersion(source, options, dispersion, functional):
    """``source``'s calculator plus D3 dispersion (:func:`pinn.dispersion.with_dispersion`): D3's arguments, and the
    elements of each model that the source declares, checked before the model loads."""
    from pinn.dispersion import check_d3, with_dispersion
    if dispersion is None:
        raise ValueError(f"get_calc: functional={functional!r} chooses D3's parameters; give dispersion= "
                         "(e.g. 'd3bj') too, or neither")
    check_d3(dispersion, functional)
    from pinn.dispersion.d3 import check_d3_elements
    for name, elements in source.declared_elements():
        check_d3_elements(elements, f"{name} (its atom_types)")
    calc = with_dispersion(source.calc(dataclasses.replace(options, atoms=None)), dispersion, functional)
    if options.atoms is not None:
        options.atoms.calc = calc
    return calc


@dataclasses.dataclass(frozen=True)
class _Options:
    """What :func:`get_calc` was asked for besides the model and D3: ``checkpoint`` (``checkpoint_path`` taken) and
    the ``engine``'s name checked, the rest as given."""
    checkpoint: object = None
    jit: object = None
    skin: float = 0.5
    engine: str = "auto"
    to_eV: float = 1.0
    properties: object = None
    drive: object = None
    atoms: object = None
    label: object = None
    directory: object = "."

    def of_member(self):
        """A committee member's options: the checkpoint and the engine's (the committee's calculator has the rest)."""
        return _Options(self.checkpoint, self.jit, self.skin, self.engine)

    def calc(self, model):
        """The :class:`PiNNCalc` of ``model`` (an inference handle, a model object or engine weights)."""
        return PiNNCalc(model, jit=self.jit, skin=self.skin, engine=self.engine, to_eV=self.to_eV,
                        properties=self.properties, atoms=self.atoms, label=self.label, directory=self.directory)


def _is_path(model):
    return isinstance(model, (str, bytes)) or hasattr(model, "__fspath__")


def _atom_types(params):
    """The ``atom_types`` of a params dict's network (none where it declares none)."""
    return ((params.get("network") or {}).get("params") or {}).get("atom_types") or []


class _Source:
    """One kind of model that :func:`get_calc` takes: :meth:`from_` recognises it (the kinds of :data:`_KINDS`, in
    order), :meth:`calc` gives its calculator.

    The options that only some kinds take are checked here, once for all: ``checkpoint`` (:attr:`takes_checkpoint`),
    ``drive`` (a committee's) and ``to_eV`` and ``properties`` (one model's).  A kind gives its one model's
    calculator (:meth:`one`) or, where :attr:`is_committee`, its members' (:meth:`members`), and, where it knows
    them without loading, the elements of each model (:meth:`declared_elements`, which D3 checks).
    """

    #: what get_calc takes of this kind (the error for a model of no kind lists them)
    what = ""
    #: whether ``checkpoint=`` chooses the weights of this kind
    takes_checkpoint = False
    #: whether it is a committee (a model file's header says)
    is_committee = False

    def __init__(self, model):
        self.model = model

    @staticmethod
    def recognises(model):
        """Whether ``model`` is of this kind (asked in the order of :data:`_KINDS`)."""
        raise NotImplementedError

    @staticmethod
    def from_(model):
        """The source of ``model``: the first kind of :data:`_KINDS` that recognises it."""
        for kind in _KINDS:
            if kind.recognises(model):
                return kind(model)
        raise TypeError(f"get_calc: the model is a {type(model).__name__}, none of what get_calc takes: "
                        + "; ".join(kind.what for kind in _KINDS))

    def declared_elements(self):
        """``(name, atom_types)`` of each model, read without loading it (none where they are not known so)."""
        return []

    def checkpoint_refusal(self):
        return ("get_calc: checkpoint= selects a checkpoint of a model directory; a model object is used with its "
                "current weights")

    def one_model(self):
        """The end of the message that refuses ``drive`` for one model."""
        return f"{f'a {type(self.model).__name__}'!r} is one model"

    def one(self, options):
        """The calculator of one model (options checked)."""
        return options.calc(self.model)

    def members(self, options):
        """A committee's names and members' calculators (options checked; a member's: :meth:`_Options.of_member`)."""
        raise NotImplementedError

    def calc(self, options):
        """The calculator with ``options``, checked here for every kind."""
        if options.checkpoint is not None and not self.takes_checkpoint:
            raise ValueError(self.checkpoint_refusal())
        if not self.is_committee:
            if options.drive is not None:
                raise ValueError(f"get_calc: drive={options.drive!r} chooses what drives a committee; "
                                 f"{self.one_model()}")
            return self.one(options)
        if options.to_eV != 1.0 or options.properties is not None:
            raise ValueError("get_calc: a committee takes neither to_eV nor properties (each member's own units "
                             "apply; it gives energy, forces, stress and the deviations)")
        names, members = self.members(options.of_member())
        return CommitteeCalc(members, names, skin=options.skin, drive=options.drive or "mean", atoms=options.atoms,
                             label=options.label, directory=options.directory)


class _ParamsDict(_Source):
    """Upstream PiNN's ``get_calc(params)``: the model directory of the params, or their model with its initial
    weights where it holds no checkpoint (:func:`pinn.inference.handle.model_of_params`)."""

    what = "a params dict naming its model_dir (upstream PiNN's get_calc(params))"
    takes_checkpoint = True

    @staticmethod
    def recognises(model):
        return isinstance(model, dict) and "network" in model

    def declared_elements(self):
        return [("the params' network", _atom_types(self.model))]

    def one_model(self):
        return f"the params' model_dir {self.model.get('model_dir')!r} is one model"

    def one(self, options):
        from pinn.inference.handle import model_of_params  # TensorFlow
        found = model_of_params(self.model, options.checkpoint)
        return (_ModelDirectory(found) if _is_path(found) else _InMemory(found)).one(options)


class _EngineWeights(_Source):
    """The engine weights of a PiNet or PiNet2 potential (:func:`pinn.engines.exported.load_engine_weights`): the
    Numba engine without TensorFlow."""

    what = "engine weights (the dict of pinn.engines.exported.load_engine_weights)"

    @staticmethod
    def recognises(model):
        return isinstance(model, dict)


class _ModelFile(_Source):
    """A model file of ``pinn export`` (:mod:`pinn.files.model_file`), one model or a committee: a member on the
    Numba engine from its engine arrays without TensorFlow where it can, else rebuilt with TensorFlow."""

    what = "a model file of pinn export (one model or a committee)"

    @staticmethod
    def recognises(model):
        return _is_path(model) and is_model_file(model)

    @functools.cached_property
    def file(self):
        """The file, read and checked once."""
        from pinn.files.model_file import read_model_file
        return read_model_file(self.model)

    @property
    def is_committee(self):
        return self.file.is_committee

    @property
    def names(self):
        return [f"{os.fspath(self.model)} ({member['name']})" for member in self.file.members]

    def declared_elements(self):
        return [(name, member["atom_types"]) for name, member in zip(self.names, self.file.members)]

    def checkpoint_refusal(self):
        return (f"get_calc: {os.fspath(self.model)} is a model file, which holds one checkpoint's weights; "
                "checkpoint= is for a model directory")

    def one_model(self):
        return f"{os.fspath(self.model)} holds one model"

    def one(self, options):
        return self._member(0, options)

    def members(self, options):
        return self.names, [self._member(k, options) for k in range(len(self.names))]

    def _member(self, k, options):
        from pinn.engines import lowering
        weights = self.file.engine_weights(k)
        if weights is not None and options.engine != "tensorflow" and lowering.available():
            return options.calc(weights)
        from pinn.inference.handle import handle_of_values  # TensorFlow
        info = self.file.members[k]
        return options.calc(handle_of_values(info["params"], self.file.variables(k), self.names[k], info["step"],
                                             info["averaged"]))

    def calc(self, options):
        calc = super().calc(options)
        log.info("%s: %s written by pinn %s (%s engine)", os.fspath(self.model), self.file.header["kind"],
                 self.file.header["pinn_version"], calc.engine)
        return calc


class _Committee(_Source):
    """A committee of model directories (:mod:`pinn.committee`): a list of them, or a directory of ``member-K/``."""

    what = "a list of model directories or a directory of member-K/ model directories (a committee)"
    takes_checkpoint = True  # every member's
    is_committee = True

    @staticmethod
    def recognises(model):
        return isinstance(model, (list, tuple)) or (_is_path(model) and is_committee_directory(model))

    @functools.cached_property
    def directories(self):
        return member_directories(self.model)

    def declared_elements(self):
        return [found for directory in self.directories for found in _ModelDirectory(directory).declared_elements()]

    def members(self, options):
        return self.directories, [_ModelDirectory(directory).one(options) for directory in self.directories]

    def calc(self, options):
        calc = super().calc(options)
        log.info("committee of %d members (%s engine): %s", calc.size, calc.engine, ", ".join(self.directories))
        return calc


class _ModelDirectory(_Source):
    """A model directory (``params.yml`` and checkpoints): on the Numba engine from the checkpoint's
    ``engine-weights.npz`` without TensorFlow when that file is up to date, else loaded for inference (and the file
    written for the next time)."""

    what = "a model directory"
    takes_checkpoint = True

    @staticmethod
    def recognises(model):
        return _is_path(model)

    def declared_elements(self):
        from pinn.params import read_params_file
        path = os.path.join(os.fsdecode(self.model), "params.yml")
        return [(os.fsdecode(self.model), _atom_types(read_params_file(path)))] if os.path.isfile(path) else []

    def one_model(self):
        return f"{os.fspath(self.model)!r} is one model"

    def one(self, options):
        from pinn.engines import exported, lowering
        if options.engine != "tensorflow" and lowering.available():
            weights = exported.load_engine_weights(self.model, options.checkpoint)
            if weights is not None:
                log.info("%s: weights from %s (no TensorFlow)", self.model, weights["source"])
                return options.calc(weights)
        from pinn.inference.handle import load_for_inference  # TensorFlow
        handle = load_for_inference(self.model, options.checkpoint)
        calc = options.calc(handle)
        if calc.engine == "numba":
            exported.save_engine_weights(calc._engine.fast.arrays, calc._engine.e_unit, self.model, handle.checkpoint,
                                         calc._engine.embedding, calc._engine.damping)
        return calc


class _InMemory(_Source):
    """A model object in memory (a Trainer, a ``RestoredModel``, an ``InferenceHandle``), with its current
    weights."""

    what = "a model object (potential_model(), dipole_model(), get_model(), an InferenceHandle)"

    @staticmethod
    def recognises(model):
        return hasattr(model, "params")  # asked last: TensorFlow's classes are not imported to recognise it


#: the kinds of model that get_calc takes, in the order they are asked
_KINDS = (_ParamsDict, _EngineWeights, _ModelFile, _Committee, _ModelDirectory, _InMemory)


#: upstream PiNN's name of the calculator class
PiNN_calc = PiNNCalc
