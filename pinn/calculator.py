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
import logging
import os

import numpy as np
from ase.calculators.calculator import Calculator, PropertyNotImplementedError, all_changes
from ase.stress import full_3x3_to_voigt_6_stress

from pinn.committee import CommitteeCalc, is_committee_directory, member_directories
from pinn.physics.embedding_kinds import MECHANICAL, embedding_of
from pinn.files.model_file import is_model_file
from pinn.io.atoms_input import changed_since, check_atoms
from pinn.io.neighbors import VerletNeighbors
from pinn.io.qmmm_atoms import network_atoms

log = logging.getLogger(__name__)


class PiNNCalc(Calculator):
    """ASE calculator wrapping a trained model (see :func:`get_calc` for the arguments).

    ``model`` is a :class:`pinn.models.inference.InferenceHandle` (or a
    :class:`pinn.training.trainer.Trainer`, whose handle :func:`pinn.models.inference.handle_of` takes),
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
            from pinn.models.inference import InferenceHandle, handle_of  # TensorFlow
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

    def check_state(self, atoms, tol=1e-15):
        """Changes since the last calculation, by exact comparison.

        ASE asks for the forces three times per Verlet step, and its own test (``allclose``
        with ``tol`` on every array) costs about as much as a small molecule's forces.  Here
        a property counts as changed when any of its values differs at all: the same answer
        as ASE's except for differences below ``tol`` (1e-15), which recompute.  A QM/MM frame's
        ``qm`` array and region charge (``info["charge"]``), which ASE's test ignores, count too
        (:func:`pinn.io.atoms_input.changed_since`).
        """
        if self.atoms is None:
            return list(all_changes)
        return changed_since(self.atoms, atoms, [name for name in all_changes if name not in self.ignored_changes])

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


def _choose_engine(model, engine):
    """The engine for ``model``: ``engine``, or for 'auto' numba where it can
    (:func:`pinn.engines.lowering.refusal`), else tensorflow, with the reason in the log."""
    from pinn.engines import lowering
    if engine not in ENGINES:
        raise ValueError(f"get_calc: engine must be one of {ENGINES}, got {engine!r}")
    if engine == "tensorflow":
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
    """
    from pinn.engines import lowering
    if dispersion is not None or functional is not None:
        from pinn.dispersion import check_d3, with_dispersion
        if dispersion is None:
            raise ValueError(f"get_calc: functional={functional!r} chooses D3's parameters; give dispersion= "
                             "(e.g. 'd3bj') too, or neither")
        check_d3(dispersion, functional)  # before the model loads
        from pinn.dispersion.d3 import check_d3_elements
        for name, elements in _declared_elements(model):
            check_d3_elements(elements, f"{name} (its atom_types)")
        calc = get_calc(model, checkpoint, jit, skin, engine, checkpoint_path=checkpoint_path, to_eV=to_eV,
                        properties=properties, drive=drive, label=label, directory=directory)
        calc = with_dispersion(calc, dispersion, functional)
        if atoms is not None:
            atoms.calc = calc
        return calc
    if checkpoint_path is not None:
        if checkpoint is not None:
            raise ValueError("get_calc: checkpoint= and checkpoint_path= are the same argument "
                             "(checkpoint_path= is upstream PiNN's name); pass one of them")
        checkpoint = checkpoint_path
    if isinstance(model, dict) and "network" in model:
        from pinn.models.inference import model_of_params
        model = model_of_params(model, checkpoint)
    options = dict(to_eV=to_eV, properties=properties, atoms=atoms, label=label, directory=directory)
    is_directory = isinstance(model, (str, bytes)) or hasattr(model, "__fspath__")
    if engine not in ENGINES:
        raise ValueError(f"get_calc: engine must be one of {ENGINES}, got {engine!r}")
    if is_directory and is_model_file(model):
        return _calc_of_model_file(model, checkpoint, jit, skin, engine, drive, options)
    if isinstance(model, (list, tuple)) or (is_directory and is_committee_directory(model)):
        if to_eV != 1.0 or properties is not None:
            raise ValueError("get_calc: a committee takes neither to_eV nor properties (each member's own units "
                             "apply; it gives energy, forces, stress and the deviations)")
        dirs = member_directories(model)
        members = [get_calc(d, checkpoint=checkpoint, jit=jit, skin=skin, engine=engine) for d in dirs]
        calc = CommitteeCalc(members, dirs, skin=skin, drive=drive or "mean", atoms=atoms, label=label,
                             directory=directory)
        log.info("committee of %d members (%s engine): %s", calc.size, calc.engine, ", ".join(dirs))
        return calc
    if drive is not None:
        one = os.fspath(model) if is_directory else f"a {type(model).__name__}"
        raise ValueError(f"get_calc: drive={drive!r} chooses what drives a committee; {one!r} is one model")
    if not is_directory:
        if checkpoint is not None:
            raise ValueError("get_calc: checkpoint= selects a checkpoint of a model directory; a model object is "
                             "used with its current weights")
        return PiNNCalc(model, jit=jit, skin=skin, engine=engine, **options)
    from pinn.engines import exported
    if engine != "tensorflow" and lowering.available():
        weights = exported.load_engine_weights(model, checkpoint)
        if weights is not None:
            log.info("%s: weights from %s (no TensorFlow)", model, weights["source"])
            return PiNNCalc(weights, skin=skin, engine=engine, **options)
    from pinn.models.inference import load_for_inference
    handle = load_for_inference(model, checkpoint)
    calc = PiNNCalc(handle, jit=jit, skin=skin, engine=engine, **options)
    if calc.engine == "numba":
        exported.save_engine_weights(calc._engine.fast.arrays, calc._engine.e_unit, model, handle.checkpoint,
                                     calc._engine.embedding, calc._engine.damping)
    return calc


def _declared_elements(model):
    """``(name, atom_types)`` of each model that ``model`` (what :func:`get_calc` takes) names on disk, read from its
    ``params.yml`` or its model file's header without loading it; none for a model object or a network without
    ``atom_types``."""
    from pinn.params import read_params_file
    if isinstance(model, dict) and "network" in model:
        return [("the params' network", model["network"].get("params", {}).get("atom_types") or [])]
    is_path = isinstance(model, (str, bytes)) or hasattr(model, "__fspath__")
    if is_path and is_model_file(model):
        from pinn.files.model_file import read_model_file
        members = read_model_file(model).members
        return [(f"{os.fspath(model)} ({member['name']})", member["atom_types"]) for member in members]
    if isinstance(model, (list, tuple)) or (is_path and is_committee_directory(model)):
        directories = member_directories(model)
    elif is_path and os.path.isfile(os.path.join(os.fsdecode(model), "params.yml")):
        directories = [os.fsdecode(model)]
    else:
        return []
    found = []
    for directory in directories:
        params = read_params_file(os.path.join(directory, "params.yml"))
        found.append((directory, ((params.get("network") or {}).get("params") or {}).get("atom_types") or []))
    return found


def _calc_of_model_file(path, checkpoint, jit, skin, engine, drive, options):
    """The calculator of a model file (:mod:`pinn.files.model_file`): a member on the Numba engine from its
    engine arrays without TensorFlow where it can, else rebuilt with TensorFlow; a committee of its members."""
    from pinn.engines import lowering
    from pinn.files.model_file import read_model_file
    if checkpoint is not None:
        raise ValueError(f"get_calc: {os.fspath(path)} is a model file, which holds one checkpoint's weights; "
                         "checkpoint= is for a model directory")
    model_file = read_model_file(path)

    def member(k, **extra):
        weights = model_file.engine_weights(k)
        if weights is not None and engine != "tensorflow" and lowering.available():
            return PiNNCalc(weights, skin=skin, engine=engine, **extra)
        from pinn.models.inference import handle_of_values  # TensorFlow
        info = model_file.members[k]
        handle = handle_of_values(info["params"], model_file.variables(k), f"{os.fspath(path)} ({info['name']})",
                                  info["step"], info["averaged"])
        return PiNNCalc(handle, jit=jit, skin=skin, engine=engine, **extra)

    names = [f"{os.fspath(path)} ({m['name']})" for m in model_file.members]
    if not model_file.is_committee:
        if drive is not None:
            raise ValueError(f"get_calc: drive={drive!r} chooses what drives a committee; {os.fspath(path)} holds "
                             "one model")
        calc = member(0, **options)
    else:
        if options["to_eV"] != 1.0 or options["properties"] is not None:
            raise ValueError("get_calc: a committee takes neither to_eV nor properties (each member's own units "
                             "apply; it gives energy, forces, stress and the deviations)")
        calc = CommitteeCalc([member(k) for k in range(len(names))], names, skin=skin, drive=drive or "mean",
                             atoms=options["atoms"], label=options["label"], directory=options["directory"])
    log.info("%s: %s written by pinn %s (%s engine)", os.fspath(path), model_file.header["kind"],
             model_file.header["pinn_version"], calc.engine)
    return calc


#: upstream PiNN's name of the calculator class
PiNN_calc = PiNNCalc
