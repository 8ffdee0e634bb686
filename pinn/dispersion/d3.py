"""D3 beside a model: :class:`D3Term` (the ``dftd3`` package's D3 with per-atom energies) and
:class:`DispersionCorrected` (ASE's ``SumCalculator`` of a pinn calculator and the D3 term)."""
import numpy as np
from ase.calculators.calculator import Calculator, all_changes
from ase.calculators.mixing import SumCalculator

from pinn.committee import COMMITTEE_PROPERTIES
from pinn.physics.embedding_kinds import MECHANICAL, embedding_of
from pinn.io.atoms_input import FollowsInputs

#: the damping functions a ``dispersion=`` may name (``dftd3.ase.DFTD3``'s names) → ``dftd3.interface``'s
#: parameter class: d3bj Becke–Johnson (rational), d3zero zero damping, their modified forms, optimized power
DAMPINGS = {"d3bj": "RationalDampingParam", "d3zero": "ZeroDampingParam", "d3bjm": "ModifiedRationalDampingParam",
            "d3zerom": "ModifiedZeroDampingParam", "d3op": "OptimizedPowerDampingParam"}

#: the heaviest element dftd3 has D3 parameters for: Lr (Z 103).  Heavier ones it does not refuse: measured with
#: dftd3 1.7, PBE/d3bj, Z 104 and 107-111 give 0, Z 105 -6e205 eV, Z 106 NaN; Z 118 takes the process down
D3_LAST_ELEMENT = 103

#: a committee's per-member properties, which get the D3 term added (one per member)
_MEMBER_PARTS = {"member_energies": "energy", "member_forces": "forces", "member_stresses": "stress"}


def _dftd3():
    """The ``dftd3`` package's ASE and API modules, or an ImportError that says how to install them."""
    try:
        import dftd3.ase
        import dftd3.interface
    except ImportError as error:
        raise ImportError("D3 dispersion needs the dftd3 package (s-dftd3): pip install dftd3, or pip install "
                          "'pinn[d3]'") from error
    return dftd3.ase, dftd3.interface


def check_d3(dispersion, functional):
    """Check a D3 variant and a functional before any structure is evaluated.

    Args:
        dispersion: a name of :data:`DAMPINGS` (e.g. ``'d3bj'``).
        functional: the DFT functional the labels were computed with, as ``dftd3`` names it
            (``'PBE'``, ``'B3LYP'``, ``'wB97X'``, … case-insensitive).

    Returns:
        ``(dispersion, functional)``, the damping's name lower-cased.

    Raises:
        ValueError: an unknown damping, a missing functional, or a functional ``dftd3`` has no
            parameters for with that damping (named).
        ImportError: ``dftd3`` is not installed.
    """
    if not isinstance(dispersion, str) or dispersion.lower() not in DAMPINGS:
        raise ValueError(f"dispersion must be one of {', '.join(DAMPINGS)} (D3 with that damping), "
                         f"got {dispersion!r}")
    if not isinstance(functional, str) or not functional.strip():
        raise ValueError(f"dispersion={dispersion!r} needs functional=, the DFT functional of the labels (e.g. "
                         f"'PBE'), whose D3 parameters it takes; got {functional!r}")
    damping = dispersion.lower()
    try:
        damping_parameters(damping, functional)
    except RuntimeError as error:
        raise ValueError(f"dispersion={damping!r}: dftd3 has no parameters for functional {functional!r} with that "
                         f"damping ({error})") from error
    return damping, functional


def check_d3_elements(numbers, what):
    """Refuse elements D3 has no parameters for (above :data:`D3_LAST_ELEMENT`), naming them.

    Args:
        numbers: atomic numbers (a structure's, or the elements a model knows).
        what: what holds them, for the message (``"atoms"``, ``"the model (atom_types)"``).

    Raises:
        ValueError: naming the elements and the range D3 covers.
    """
    from ase.data import chemical_symbols
    beyond = sorted({int(z) for z in np.ravel(list(numbers)) if int(z) > D3_LAST_ELEMENT or int(z) < 1})
    if beyond:
        names = ", ".join(f"{chemical_symbols[z] if 0 < z < len(chemical_symbols) else '?'} ({z})" for z in beyond)
        raise ValueError(f"D3 dispersion: {what} hold(s) element(s) {names}, which dftd3 has no parameters for "
                         f"(it covers Z 1 to {D3_LAST_ELEMENT}, H to Lr)")


def damping_parameters(damping, functional):
    """``dftd3.interface``'s damping parameters of ``damping`` (a key of :data:`DAMPINGS`) for ``functional``."""
    _, interface = _dftd3()
    return getattr(interface, DAMPINGS[damping])(method=functional)


class D3Term(Calculator):
    """The D3 dispersion of a structure (``dftd3.ase.DFTD3``), with per-atom energies.

    Gives ``energy`` (eV), ``forces`` (eV/Å), ``stress`` (eV/Å³, periodic structures; ASE's Voigt order)
    from ``dftd3``'s ASE calculator, and ``energies`` (eV per atom, summing to the energy to rounding):
    each atom's half of its pairs' two-body energies and its share of the three-body ones, from
    ``dftd3``'s pairwise decomposition.
    """

    implemented_properties = ["energy", "free_energy", "forces", "stress", "energies"]

    def __init__(self, dispersion="d3bj", functional=None, atoms=None):
        """``dispersion``: a name of :data:`DAMPINGS`; ``functional``: the DFT functional (see :func:`check_d3`)."""
        self.damping, self.functional = check_d3(dispersion, functional)
        super().__init__(atoms=atoms)
        ase_module, _ = _dftd3()
        self._d3 = ase_module.DFTD3(method=self.functional, damping=self.damping)

    def calculate(self, atoms=None, properties=("energy",), system_changes=all_changes):
        super().calculate(atoms, properties, system_changes)
        check_d3_elements(self.atoms.numbers, "the atoms")
        summed = [p for p in properties if p != "energies"] or ["energy"]
        self._d3.results = {}  # called directly (not through get_property): nothing of the last structure stays
        self._d3.calculate(self.atoms, summed, system_changes)
        self.results.update(self._d3.results)
        if "energies" in properties:
            self.results["energies"] = self._atomic_energies(self.atoms)

    def _atomic_energies(self, atoms):
        """Per-atom D3 energies, eV: the row sums of dftd3's pairwise (two- and three-body) energies."""
        from ase.units import Bohr, Hartree
        _, interface = _dftd3()
        model = interface.DispersionModel(atoms.numbers, atoms.positions / Bohr, atoms.cell.array / Bohr,
                                          np.asarray(atoms.pbc))
        pairs = model.get_pairwise_dispersion(param=damping_parameters(self.damping, self.functional))
        return (pairs["additive pairwise energy"] + pairs["non-additive pairwise energy"]).sum(axis=1) * Hartree

    def __str__(self):
        return f"D3Term({self.damping}, {self.functional})"


class DispersionCorrected(FollowsInputs, SumCalculator):
    """A pinn calculator plus :class:`D3Term`: ASE's ``SumCalculator`` that also passes a committee's deviations on.

    ``energy``, ``forces``, ``stress`` and (where the model gives them) ``energies`` are the sums of
    the model's and the D3 term's; ``results['energy_contributions']`` (and the other
    ``*_contributions``) hold the two parts.  A committee's deviations
    (``max_forces_deviation``, ``forces_deviation``, …) are the committee's; its ``member_energies``,
    ``member_forces`` and ``member_stresses`` each get the D3 term added.

    Attributes:
        model: the model's calculator (:class:`pinn.calculator.PiNNCalc` or
            :class:`pinn.committee.CommitteeCalc`).
        dispersion: the :class:`D3Term`.
    """

    def __init__(self, model, dispersion):
        if not getattr(model, "is_potential", True) or "energy" not in model.implemented_properties:
            raise ValueError("get_calc: D3 dispersion is added to a potential; this model gives no energy")
        embedding = embedding_of(getattr(model, "embedding", MECHANICAL))
        if not embedding.takes_dispersion:
            raise ValueError(f"get_calc: D3 dispersion with a QM/MM model (embedding {embedding.name!r}) would "
                             "count the MM atoms as the QM region's partners; not supported")
        check_d3_elements(model.atom_types, "the model's elements (atom_types)")
        super().__init__([model, dispersion])
        self.model = model
        self.dispersion = dispersion
        forwarded = [p for p in model.implemented_properties if p in COMMITTEE_PROPERTIES]
        self.implemented_properties = list(self.implemented_properties) + forwarded
        #: the model's engine (``'numba'`` or ``'tensorflow'``; a committee's: also ``'mixed'``)
        self.engine = model.engine

    def calculate(self, atoms=None, properties=("energy",), system_changes=all_changes):
        summed = [p for p in properties if p not in COMMITTEE_PROPERTIES] or ["energy"]
        super().calculate(atoms, summed, system_changes)
        for name in COMMITTEE_PROPERTIES.intersection(properties):
            value = self.model.get_property(name, atoms)
            part = _MEMBER_PARTS.get(name)
            self.results[name] = value + self.dispersion.get_property(part, atoms) if part else value


def with_dispersion(calc, dispersion, functional):
    """``calc`` (a pinn calculator) plus D3: :class:`DispersionCorrected` (see :func:`check_d3` for the args)."""
    return DispersionCorrected(calc, D3Term(dispersion, functional))

