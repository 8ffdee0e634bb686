"""pinn in openmm-ml: ``MLPotential('pinn', model=...)``, found by its entry point (``openmmml.potentials``) once
``pip install 'pinn[openmm]'`` has installed openmm-ml::

    from openmmml import MLPotential
    potential = MLPotential("pinn", model="solute.pinn")        # a model file, a model directory, or a committee
    system = potential.createSystem(topology)                    # ML only
    mixed = potential.createMixedSystem(topology, mm_system, solute_atoms)                 # mechanical embedding
    mixed = potential.createMixedSystem(topology, mm_system, solute_atoms, embedding="electrostatic",
                                        interpolate=True)        # lambda_interpolate: 0 the force field, 1 ML/MM

- ``MLPotential('pinn', model=PATH, **options)``: ``model`` a model directory, a model file
  (:func:`pinn.export_model`), a list of model directories or a directory of ``member-K`` (a committee: the members'
  mean); ``options`` are :func:`pinn.get_calc`'s (``engine``, ``checkpoint``, ...).  The model is loaded here: a
  wrong path fails at once.
- ``createSystem``: the pinn force (:func:`pinn.md.openmm.pinn_force`) on every atom.
- ``createMixedSystem(..., embedding='mechanical')``: openmm-ml's own mechanical embedding (its removal of the
  region's MM terms, its link atoms, its interpolation), with the pinn force on the region; ``mlLongRange`` is
  known (pinn's models are local: no), and ``linkAtomDistances`` goes to openmm-ml.
- ``createMixedSystem(..., embedding='electrostatic')``: pinn's own (:func:`pinn.md.openmm.create_mixed_system`:
  the region in the MM charges' field, a model with ``embedding: electrostatic``), with its options ``qm_charge``,
  ``cutoff``, ``switch_width``; the region's constraints are removed whatever ``removeConstraints`` says.
- ``interpolate=True`` (both embeddings): the global parameter ``lambda_interpolate`` (0: the force field, 1: the
  ML/MM system, linear in between, :mod:`pinn.md.openmm_interpolation`); the pinn force refuses a value outside
  [0, 1]; one model, not a committee.

Refused, with a message: a model without the embedding asked for, ``interpolate`` with a committee, options that
are neither pinn's nor openmm-ml's, and (electrostatic) a region that splits a molecule.
"""
import copy

from openmmml.mlpotential import MLPotentialImpl, MLPotentialImplFactory

from pinn.md.openmm_computation import PinnComputation, absolute_model, python_force
from pinn.md.openmm_interpolation import LAMBDA, refuse_a_committee
from pinn.physics.embedding_kinds import ELECTROSTATIC, MECHANICAL, embedding_of

#: the entry point's name
NAME = "pinn"
#: createMixedSystem options of openmm-ml's mechanical embedding, which it passes on to the potential's addForces
_MECHANICAL_OPTIONS = ("mlLongRange", "linkAtomDistances")
#: createMixedSystem options of pinn's electrostatic embedding
_ELECTROSTATIC_OPTIONS = ("qm_charge", "cutoff", "switch_width")


class PinnPotentialImplFactory(MLPotentialImplFactory):
    """What openmm-ml's entry point ``pinn`` names: makes a :class:`PinnPotentialImpl`."""

    def createImpl(self, name, model=None, **options):
        """``MLPotential('pinn', model=..., **options)`` (see the module)."""
        return PinnPotentialImpl(model, **options)


class PinnPotentialImpl(MLPotentialImpl):
    """A pinn model behind ``MLPotential('pinn')`` (see the module).

    Args:
        model: a model directory or file, or a committee (a list of model directories or a directory of
            ``member-K``).
        options: keyword arguments of :func:`pinn.get_calc`.

    Raises:
        ValueError: no model given; what :func:`pinn.get_calc` refuses (no model at the path, a bad option).
    """

    def __init__(self, model, **options):
        from pinn.calculator import get_calc
        from pinn.committee import CommitteeCalc
        if model is None:
            raise ValueError("MLPotential('pinn'): give model=, a model directory, a model file or a list of model "
                             "directories (a committee)")
        self.model = absolute_model(model)
        self.options = dict(options)
        calc = get_calc(self.model, **self.options)
        self.embedding = embedding_of(getattr(calc, "embedding", MECHANICAL))
        self.committee_size = calc.size if isinstance(calc, CommitteeCalc) else None
        #: global parameter the forces of this impl declare (set on the copy an interpolating embedding uses)
        self.lambda_parameter = None
        #: options of openmm-ml's embedding that reach addForces through it (set on the copy it uses)
        self.embedding_options = ()

    def addForces(self, topology, system, atoms, forceGroup, **args):
        """The pinn force on ``atoms`` (``None``: every atom) of ``topology``, added to ``system`` in group
        ``forceGroup``.

        Raises:
            ValueError: an option that is not openmm-ml's embedding's (naming it); an atom without an element.
        """
        _refuse_unknown(args, self.embedding_options, "createSystem" if atoms is None else "addForces")
        every = list(topology.atoms())
        chosen = list(range(len(every))) if atoms is None else [int(i) for i in atoms]
        missing = [i for i in chosen if every[i].element is None]
        if missing:
            raise ValueError(f"MLPotential('pinn'): atoms {missing[:5]} have no element in the topology")
        periodic = topology.getPeriodicBoxVectors() is not None or system.usesPeriodicBoundaryConditions()
        computation = PinnComputation(self.model, [every[i].element.atomic_number for i in chosen], periodic,
                                      self.options, lambda_parameter=self.lambda_parameter)
        computation.calc  # made now: a bad model fails here, not at the first step
        system.addForce(python_force(computation, None if atoms is None else chosen, periodic, forceGroup))

    def createMixedSystem(self, topology, system, atoms, forceGroup, interpolate, embedding, returnInfo=False,
                          **args):
        """An ML/MM system of the embedding asked for (see the module).

        Raises:
            ValueError: a model without that embedding; ``interpolate`` with a committee; an unknown option.
        """
        from pinn.md.openmm import create_mixed_system
        kind = embedding_of(embedding)
        if self.embedding is not kind:
            raise ValueError(f"MLPotential('pinn').createMixedSystem: embedding={kind.name!r}, but the model "
                             f"{self.model} has embedding {self.embedding.name!r} (model.params.embedding)")
        if interpolate and self.committee_size:
            refuse_a_committee(self.committee_size, "MLPotential('pinn').createMixedSystem")
        if kind is ELECTROSTATIC:
            _refuse_unknown(args, _ELECTROSTATIC_OPTIONS, "createMixedSystem(embedding='electrostatic')")
            return create_mixed_system(system, topology, atoms, self.model, force_group=forceGroup,
                                       embedding=kind.name, interpolate=interpolate, **args, **self.options)
        from openmmml.embeddings.mechanicalembedding import MechanicalEmbedding
        _refuse_unknown(args, _MECHANICAL_OPTIONS, "createMixedSystem(embedding='mechanical')")
        potential = copy.copy(self)
        potential.embedding_options = _MECHANICAL_OPTIONS
        potential.lambda_parameter = LAMBDA if interpolate else None
        made = MechanicalEmbedding().createMixedSystem(potential, topology, system, atoms, forceGroup, interpolate,
                                                       returnInfo=returnInfo, **args)
        if interpolate:
            _report_the_derivative(made["system"] if isinstance(made, dict) else made)
        return made

    def getSupportedEmbeddings(self):
        """pinn's own electrostatic embedding, and the mechanical one (openmm-ml's, with the pinn force made to
        read ``lambda_interpolate`` when interpolating)."""
        return [ELECTROSTATIC.name, MECHANICAL.name]

    def getMLLongRange(self):
        """pinn's models are local (their cutoff ``rc``): openmm-ml's mechanical embedding keeps the MM charges'
        interactions of the region with its own periodic images."""
        return False


def _report_the_derivative(system):
    """Declare dU/dλ on the interpolating CustomCVForce of openmm-ml's mechanical embedding, which does not: without
    it OpenMM reports 0 for ``getEnergyParameterDerivatives()['lambda_interpolate']`` (what thermodynamic
    integration reads)."""
    import openmm
    for force in system.getForces():
        if not isinstance(force, openmm.CustomCVForce):
            continue
        parameters = {force.getGlobalParameterName(k) for k in range(force.getNumGlobalParameters())}
        derivatives = {force.getEnergyParameterDerivativeName(k)
                       for k in range(force.getNumEnergyParameterDerivatives())}
        if LAMBDA in parameters and LAMBDA not in derivatives:
            force.addEnergyParameterDerivative(LAMBDA)


def _refuse_unknown(args, allowed, where):
    unknown = sorted(set(args) - set(allowed))
    if unknown:
        raise ValueError(f"MLPotential('pinn').{where}: unknown option(s) {unknown}; it takes "
                         f"{list(allowed) or 'none'} (pinn.get_calc's options go to MLPotential('pinn', model=..., "
                         "...))")
