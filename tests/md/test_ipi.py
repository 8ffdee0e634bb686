"""i-PI: pinn ipi serves a potential (a model file) to the real i-PI server from PyPI; a path-integral
run of ethanol with 4 beads, whose potential energies are the calculator's on the beads' positions."""
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

from pinn import get_calc
from pinn.cli.commands import main
from pinn.io.ase_files import iread

IPI = shutil.which("i-pi") or os.path.join(os.path.dirname(sys.executable), "i-pi")
if not os.path.exists(IPI):
    pytest.skip("i-PI is not installed (pip install 'pinn[md]' or ipi): the i-PI tests are skipped",
                allow_module_level=True)

STEPS, BEADS = 3, 4
INPUT = """<simulation verbosity="low" safe_stride="1000">
  <output prefix="sim">
    <properties stride="1" filename="out">[ step, potential{{electronvolt}} ]</properties>
    <trajectory filename="pos" stride="1" format="ase"> positions </trajectory>
  </output>
  <total_steps>{steps}</total_steps>
  <prng><seed>32345</seed></prng>
  <ffsocket name="pinn" mode="unix" pbc="false"><address>{address}</address><timeout>60</timeout></ffsocket>
  <system>
    <initialize nbeads="{beads}">
      <file mode="xyz" units="angstrom">init.xyz</file>
      <velocities mode="thermal" units="kelvin">300</velocities>
    </initialize>
    <forces><force forcefield="pinn"/></forces>
    <motion mode="dynamics">
      <dynamics mode="nvt">
        <timestep units="femtosecond">0.25</timestep>
        <thermostat mode="pile_l"><tau units="femtosecond">100</tau></thermostat>
      </dynamics>
    </motion>
    <ensemble><temperature units="kelvin">300</temperature></ensemble>
  </system>
</simulation>
"""


def _write_init(path):
    from ase.build import molecule
    atoms = molecule("CH3CH2OH")
    atoms.center(vacuum=6.0)
    a, b, c = atoms.cell.lengths()
    lines = [str(len(atoms)), f"# CELL(abcABC): {a:.6f} {b:.6f} {c:.6f} 90.0 90.0 90.0 cell{{angstrom}} "
             "positions{angstrom}"]
    lines += [f"{s} {x:.10f} {y:.10f} {z:.10f}" for s, (x, y, z) in zip(atoms.get_chemical_symbols(), atoms.positions)]
    path.write_text("\n".join(lines) + "\n")


def test_a_path_integral_run_of_ethanol_through_i_pi(ethanol_model, tmp_path):
    model_file = str(tmp_path / "ethanol.pinn")
    assert main(["export", ethanol_model, "-o", model_file]) == 0
    _write_init(tmp_path / "init.xyz")
    address = f"pinn-test-{os.getpid()}"
    (tmp_path / "input.xml").write_text(INPUT.format(steps=STEPS, beads=BEADS, address=address))
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
