"""A pinn potential inside i-PI's own process: the PES module of i-PI's ``<ffdirect>``.

i-PI loads this file by its path (``<pes>custom</pes><pes_path>…/pinn/md/ipi_driver.py</pes_path>``)
and calls :class:`PinnDriver` for each structure (each bead), with no socket in between; ``pinn ipi
MODEL --structure FILE --ffdirect NAME`` prints the element with the paths filled in.  i-PI's Python
driver takes it too, as a socket client: ``i-pi-py_driver -m custom -P …/ipi_driver.py -u -a NAME
-o model=MODEL,structure=FILE``.

The ``<parameters>`` (i-PI passes them as keyword arguments, from text):

- ``model``: what :func:`pinn.get_calc` takes: a model directory or model file; a committee's members
  joined by ``;``;
- ``structure``: the atoms in i-PI's order (its ``<initialize>`` file does), see
  :func:`pinn.md.ipi.ipi_atoms`;
- ``pbc`` (optional): ``true``, ``false``; by default the structure's, periodic for i-PI's xyz format;
- ``engine`` (optional, default ``auto``) and ``drive`` (optional, a committee's): as
  :func:`pinn.get_calc`'s.

Units: i-PI's atomic units in and out (Bohr, Hartree), converted with i-PI's own factors for Å and eV.
"""
import numpy as np
from ipi.pes.dummy import Dummy_driver
from ipi.utils.messages import info, verbosity
from ipi.utils.units import unit_to_internal, unit_to_user

__DRIVER_NAME__ = "pinn"
__DRIVER_CLASS__ = "PinnDriver"

_BOOLEANS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}


class PinnDriver(Dummy_driver):
    """i-PI's PES of a pinn potential.

    Args:
        model, structure, pbc, engine, drive: the ``<parameters>`` above.
        verbose: i-PI's (unused by pinn: pinn logs through its ``pinn`` logger).

    Raises:
        ValueError: a ``pbc`` that is neither true nor false, a missing ``model`` or ``structure``.
    """

    def __init__(self, model=None, structure=None, pbc=None, engine="auto", drive=None, *args, **kwargs):
        if not model or not structure:
            raise ValueError("pinn's i-PI driver needs <parameters>{model: MODEL, structure: FILE}</parameters> "
                             "(pinn ipi MODEL --structure FILE --ffdirect NAME prints them)")
        self.model = model.split(";") if isinstance(model, str) and ";" in model else model
        self.structure = structure
        self.engine = engine
        self.drive = drive
        self.pbc = _boolean("pbc", pbc)
        super().__init__(*args, **kwargs)

    def check_parameters(self):
        """Load the model and the structure (i-PI calls this once, at start-up)."""
        from pinn.calculator import get_calc
        from pinn.md.ipi import ipi_atoms
        self.atoms = ipi_atoms(self.structure, self.pbc)
        options = {"engine": self.engine, **({"drive": self.drive} if self.drive else {})}
        self.atoms.calc = self.calc = get_calc(self.model, **options)
        self.properties = ["energy", "forces", "stress"] if self.atoms.pbc.all() else ["energy", "forces"]
        info(f" @pinn: {self.model} ({type(self.calc).__name__}) on {len(self.atoms)} atoms "
             f"({self.atoms.get_chemical_formula()}) of {self.structure}, "
             + ("periodic in i-PI's cell" if self.atoms.pbc.all() else "not periodic (i-PI's cell ignored, no virial)"),
             verbosity.low)
        self.angstrom = unit_to_user("length", "angstrom", 1.0)  # Å per Bohr, by i-PI's factors
        self.hartree = unit_to_internal("energy", "electronvolt", 1.0)  # Hartree per eV
        # forces in Hartree/Bohr as these two make them (the gradient of the energy i-PI receives), not
        # by i-PI's own "ev/ang" factor, rounded 1e-7 apart

    def compute_structure(self, cell, pos):
        """One structure.

        Args:
            cell: (3, 3) i-PI's cell, vectors as columns, Bohr.
            pos: (n_atoms, 3) positions, Bohr.

        Returns:
            tuple: potential energy (Hartree), forces ((n_atoms, 3), Hartree/Bohr), virial ((3, 3),
            Hartree; −stress × volume, zero when not periodic) and extras (``""``).
        """
        atoms = self.atoms
        if len(pos) != len(atoms):
            raise ValueError(f"i-PI sent {len(pos)} atoms, {self.structure} has {len(atoms)}")
        atoms.positions[:] = pos * self.angstrom
        if atoms.pbc.all():
            atoms.cell[:] = np.asarray(cell).T * self.angstrom
        results = {name: self.calc.get_property(name, atoms) for name in self.properties}  # one calculation
        virial = np.zeros((3, 3))
        if "stress" in self.properties:
            stress = np.asarray(results["stress"])
            voigt = stress[[0, 5, 4, 5, 1, 3, 4, 3, 2]].reshape(3, 3) if stress.shape == (6,) else stress
            virial = -voigt * (atoms.get_volume() * self.hartree)
        return (float(results["energy"]) * self.hartree, np.asarray(results["forces"]) * (self.hartree * self.angstrom),
                virial, "")


def _boolean(key, value):
    if value is None or isinstance(value, bool):
        return value
    if str(value).strip().lower() in _BOOLEANS:
        return _BOOLEANS[str(value).strip().lower()]
    raise ValueError(f"pinn's i-PI driver: {key}={value!r} is neither true nor false")
