"""i-PI: the real i-PI server from PyPI with a pinn potential (a model file), both ways: pinn ipi serving
i-PI's socket (a path-integral run of ethanol with 4 beads, whose potential energies are the
calculator's on the beads' positions), and pinn inside i-PI's process (``<ffdirect>``: periodic Cu,
potential and virial the calculator's); how the structure file says what is periodic."""
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

from pinn import get_calc
from pinn.cli.commands import main
from pinn.files.model_file import read_model_file
from pinn.io.ase_files import iread, write
from pinn.md.ipi import ipi_atoms

IPI = shutil.which("i-pi") or os.path.join(os.path.dirname(sys.executable), "i-pi")
if not os.path.exists(IPI):
    pytest.skip("i-PI is not installed (pip install 'pinn[md]' or ipi): the i-PI tests are skipped",
                allow_module_level=True)

STEPS, BEADS = 3, 4
INPUT = """<simulation verbosity="low" safe_stride="1000">
  <output prefix="sim">
    <properties stride="1" filename="out">[ step, potential{{electronvolt}}{extra} ]</properties>
    <trajectory filename="pos" stride="1" format="ase"> positions </trajectory>
  </output>
  <total_steps>{steps}</total_steps>
  <prng><seed>32345</seed></prng>
  {forcefield}
  <system>
    <initialize nbeads="{beads}">
      <file mode="xyz" units="angstrom">init.xyz</file>
      <velocities mode="thermal" units="kelvin">{kelvin}</velocities>
    </initialize>
    <forces><force forcefield="{name}"/></forces>
    <motion mode="dynamics">{dynamics}</motion>
    {ensemble}
  </system>
</simulation>
"""
#: PIMD of ethanol through the socket: PILE-L at 300 K
SOCKET = dict(extra="", beads=BEADS, kelvin=300, name="pinn", ensemble="<ensemble><temperature units=\"kelvin\">300"
              "</temperature></ensemble>", dynamics='<dynamics mode="nvt"><timestep units="femtosecond">0.25</timestep>'
              '<thermostat mode="pile_l"><tau units="femtosecond">100</tau></thermostat></dynamics>',
              forcefield='<ffsocket name="pinn" mode="unix" pbc="false"><address>{address}</address>'
              '<timeout>60</timeout></ffsocket>')
#: NVE of copper with pinn in i-PI's process (the forcefield: what pinn ipi --ffdirect prints)
DIRECT = dict(extra=", virial_md{ev/ang3}", beads=1, kelvin=600, name="copper", ensemble="",
              dynamics='<dynamics mode="nve"><timestep units="femtosecond">2.0</timestep></dynamics>')


def _ethanol():
    from ase.build import molecule
    atoms = molecule("CH3CH2OH")
    atoms.center(vacuum=6.0)
    return atoms


def _write_init(path, atoms=None):
    """``atoms`` (default: ethanol in a box) in i-PI's xyz format, its cell in the comment line."""
    atoms = _ethanol() if atoms is None else atoms
    a, b, c = atoms.cell.lengths()
    lines = [str(len(atoms)), f"# CELL(abcABC): {a:.6f} {b:.6f} {c:.6f} 90.0 90.0 90.0 cell{{angstrom}} "
             "positions{angstrom}"]
    lines += [f"{s} {x:.10f} {y:.10f} {z:.10f}" for s, (x, y, z) in zip(atoms.get_chemical_symbols(), atoms.positions)]
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("network", ["PiNet", "PiNet2"])
def test_a_path_integral_run_of_ethanol_through_i_pi(network, request, tmp_path):
    """i-PI's path integrals with pinn's driver on a model file (PiNet, or PiNet2: both on the Numba engine)."""
    ethanol_model = request.getfixturevalue("ethanol_model" if network == "PiNet" else "ethanol_pinet2_model")
    model_file = str(tmp_path / "ethanol.pinn")
    assert main(["export", ethanol_model, "-o", model_file]) == 0
    assert read_model_file(model_file).members[0]["numba_engine"]
    _write_init(tmp_path / "init.xyz")
    address = f"pinn-test-{os.getpid()}"
    settings = dict(SOCKET, forcefield=SOCKET["forcefield"].format(address=address))
    (tmp_path / "input.xml").write_text(INPUT.format(steps=STEPS, **settings))
    socket = f"/tmp/ipi_{address}"
    with open(tmp_path / "ipi.log", "w") as log:
        server = subprocess.Popen([IPI, "input.xml"], cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(socket):
            assert server.poll() is None, (tmp_path / "ipi.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "i-PI did not open its socket within 60 s"
            time.sleep(0.2)
        assert main(["ipi", model_file, "--structure", str(tmp_path / "init.xyz"), "--unix", address]) == 0
        assert server.wait(timeout=60) == 0, (tmp_path / "ipi.log").read_text()[-2000:]
    finally:
        if server.poll() is None:
            server.kill()
    rows = np.loadtxt(tmp_path / "sim.out", ndmin=2)
    assert rows[:, 0].tolist() == list(range(STEPS + 1))
    beads = [list(iread(str(tmp_path / f"sim.pos_{k}.extxyz"))) for k in range(BEADS)]
    calc = get_calc(ethanol_model)
    for step, potential in rows:
        frames = [bead[int(step)] for bead in beads]
        if step > 0:  # the beads start as one structure
            assert not np.allclose(frames[0].positions, frames[1].positions), "the beads should differ"
        mean = np.mean([calc.get_potential_energy(frame) for frame in frames])
        assert potential == pytest.approx(mean, abs=2e-5)  # i-PI prints 9 significant digits




def test_pinn_inside_i_pis_process_on_periodic_copper(committee_dir, tmp_path, capsys):
    """``pinn ipi --ffdirect`` prints the element; i-PI loads pinn's driver and runs NVE of Cu 108 (its
    xyz file: periodic); potential and virial (−stress, i-PI's xx yy zz xy xz yz) are the periodic
    calculator's on each step's positions and cell."""
    from ase.build import bulk
    model_file = str(tmp_path / "copper.pinn")
    assert main(["export", str(committee_dir / "member-0"), "-o", model_file]) == 0
    atoms = bulk("Cu", "fcc", a=3.61, cubic=True) * (3, 3, 3)
    _write_init(tmp_path / "init.xyz", atoms)
    capsys.readouterr()
    assert main(["ipi", model_file, "--structure", str(tmp_path / "init.xyz"), "--ffdirect", "copper"]) == 0
    ffdirect = capsys.readouterr().out
    assert "<pes>custom</pes>" in ffdirect and "pbc" not in ffdirect, ffdirect
    (tmp_path / "input.xml").write_text(INPUT.format(steps=STEPS, forcefield=ffdirect, **DIRECT))
    done = subprocess.run([IPI, "input.xml"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    rows = np.loadtxt(tmp_path / "sim.out", ndmin=2)
    frames = list(iread(str(tmp_path / "sim.pos_0.extxyz")))
    assert rows[:, 0].tolist() == list(range(STEPS + 1)) and len(frames) == STEPS + 1
    assert not np.allclose(frames[0].positions, frames[-1].positions), "the atoms should move"
    from ipi.utils.units import unit_to_internal, unit_to_user
    # the trajectory is in ASE's Å; pinn's driver converts with i-PI's Å (the init file's), 1.4e-8 apart
    to_angstrom = unit_to_user("length", "angstrom", unit_to_internal("length", "ase", 1.0))
    calc = get_calc(model_file)
    for row, frame in zip(rows, frames):
        frame.set_cell(frame.cell * to_angstrom, scale_atoms=True)
        assert frame.pbc.all() and np.allclose(frame.cell, atoms.cell, atol=1e-8)
        frame.calc = calc
        assert row[1] == pytest.approx(frame.get_potential_energy(), abs=2e-5)
        xx, yy, zz, yz, xz, xy = -frame.get_stress()
        assert np.allclose(row[2:], [xx, yy, zz, xy, xz, yz], rtol=1e-5, atol=1e-8), (row[2:], -frame.get_stress())


def test_the_structure_file_says_what_is_periodic(tmp_path, caplog):
    """i-PI sends a cell but not whether it is periodic: an extxyz says (its pbc), i-PI's own xyz format
    (whose cell line ASE does not read) means periodic, ``pbc`` overrides, and a half-periodic
    structure is refused."""
    from ase.build import bulk
    copper = bulk("Cu", "fcc", a=3.61, cubic=True)
    molecule = _ethanol()
    molecule.pbc = False
    write(str(tmp_path / "molecule.extxyz"), molecule, format="extxyz")
    write(str(tmp_path / "copper.extxyz"), copper, format="extxyz")
    _write_init(tmp_path / "ipi.xyz", copper)
    with caplog.at_level("INFO", logger="pinn"):
        assert not ipi_atoms(str(tmp_path / "molecule.extxyz")).pbc.any()
        assert ipi_atoms(str(tmp_path / "copper.extxyz")).pbc.all()
        assert ipi_atoms(str(tmp_path / "ipi.xyz")).pbc.all()
        assert not ipi_atoms(str(tmp_path / "ipi.xyz"), pbc=False).pbc.any()
    assert "periodic in i-PI's cell" in caplog.text and "not periodic" in caplog.text
    slab = copper.copy()
    slab.pbc = [True, True, False]
    with pytest.raises(ValueError, match="periodic in some directions only"):
        ipi_atoms(slab)
    assert ipi_atoms(slab, pbc=True).pbc.all()


def test_the_driver_takes_a_committee_and_text_parameters(committee_dir, tmp_path):
    """i-PI passes ``<parameters>`` as text: members joined by ``;``, ``pbc: true``, ``drive: first``;
    the driver answers in Hartree and Hartree/Bohr what the committee's calculator gives in eV."""
    from ase.build import bulk
    from ipi.utils.units import unit_to_internal
    from pinn.md.ipi_driver import PinnDriver
    Bohr = 1.0 / unit_to_internal("length", "angstrom", 1.0)  # Å, by i-PI's factors (the driver's)
    Hartree = 1.0 / unit_to_internal("energy", "electronvolt", 1.0)  # eV
    atoms = bulk("Cu", "fcc", a=3.61, cubic=True) * (2, 2, 2)
    atoms.rattle(0.05, seed=1)
    write(str(tmp_path / "copper.extxyz"), atoms, format="extxyz")
    members = [str(committee_dir / f"member-{k}") for k in range(2)]
    driver = PinnDriver(model=";".join(members), structure=str(tmp_path / "copper.extxyz"), pbc="true",
                        drive="first", verbosity=0)
    energy, forces, virial, extras = driver(atoms.cell.array.T / Bohr, atoms.positions / Bohr)
    calc = get_calc(members, drive="first")
    atoms.calc = calc
    assert energy * Hartree == pytest.approx(atoms.get_potential_energy(), rel=1e-10)
    assert np.allclose(forces * Hartree / Bohr, atoms.get_forces(), rtol=1e-8, atol=1e-10)
    xx, yy, zz, yz, xz, xy = -atoms.get_stress() * atoms.get_volume()
    assert np.allclose(virial * Hartree, [[xx, xy, xz], [xy, yy, yz], [xz, yz, zz]], rtol=1e-8, atol=1e-10)
    assert extras == "" and driver.calc.size == 2
    with pytest.raises(ValueError, match="neither true nor false"):
        PinnDriver(model=members[0], structure=str(tmp_path / "copper.extxyz"), pbc="maybe")
    with pytest.raises(ValueError, match="i-PI sent 3 atoms"):
        driver(atoms.cell.array.T / Bohr, atoms.positions[:3] / Bohr)
