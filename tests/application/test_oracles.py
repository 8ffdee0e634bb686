"""Oracles label frames in the QM/MM convention: PySCF's forces on QM and MM atoms are the energy's finite
differences, with the region's charge and spin; an ASE calculator labels frames without an MM part; a command's
round trip through files gives what the Python oracle gives, and what cannot be labelled (a failed or timed-out
command, NaN, another frame) is set aside by index with the reason."""
import sys

import numpy as np
import pytest
from ase import Atoms
from ase.calculators.emt import EMT

from pinn.learn.oracles import ASEOracle, CommandOracle, PySCFOracle


def water_in_charges(charge=0.0):
    """One water (QM) and three TIP3P-like point charges (MM), in the convention."""
    atoms = Atoms("OHHOHH", positions=[[0, 0, 0], [0.96, 0, 0], [-0.24, 0.93, 0],
                                      [2.9, 0.1, 0.2], [3.4, 0.8, 0.5], [3.3, -0.7, 0.4]])
    atoms.arrays["qm"] = np.array([1, 1, 1, 0, 0, 0], bool)
    atoms.set_initial_charges([0, 0, 0, -0.834, 0.417, 0.417])
    atoms.info["charge"] = charge
    return atoms


def test_pyscf_forces_are_the_energys_finite_differences_on_qm_and_mm_atoms():
    pytest.importorskip("pyscf")
    oracle = PySCFOracle(method="HF", basis="sto-3g")
    atoms = water_in_charges()
    energy, forces = oracle.label_frame(atoms)
    h = 1e-3
    for atom, axis in ((1, 0), (0, 1), (3, 0), (4, 2)):  # QM atoms, then MM atoms
        shifted = []
        for sign in (1, -1):
            moved = atoms.copy()
            moved.positions[atom, axis] += sign * h
            shifted.append(oracle.label_frame(moved)[0])
        assert -(shifted[0] - shifted[1]) / (2 * h) == pytest.approx(forces[atom, axis], abs=2e-4)
    assert np.abs(forces[3:]).max() > 1e-2  # the region pulls on the MM charges
    vacuum = water_in_charges()
    del vacuum.arrays["qm"]
    assert oracle.label_frame(vacuum[:3])[0] != pytest.approx(energy, abs=1e-3)  # the charges enter


def test_pyscf_takes_the_regions_charge_and_spin():
    pytest.importorskip("pyscf")
    hydroxide = water_in_charges(charge=-1)
    hydroxide = hydroxide[[0, 1, 3, 4, 5]]  # OH⁻ in the charges
    anion = PySCFOracle(basis="sto-3g").label([hydroxide])  # the frame's charge: −1, closed shell
    assert len(anion.labelled) == 1 and not anion.failed
    radical_oracle = PySCFOracle(basis="sto-3g", charge=0, spin=1)  # OH•, unrestricted
    radical = radical_oracle.label([hydroxide])
    assert len(radical.labelled) == 1
    forces = radical.labelled[0][1].get_forces()
    h = 1e-3
    for atom in (0, 3):  # a QM atom and an MM atom of the unrestricted region
        shifted = []
        for sign in (1, -1):
            moved = hydroxide.copy()
            moved.positions[atom, 0] += sign * h
            shifted.append(radical_oracle.label_frame(moved)[0])
        assert -(shifted[0] - shifted[1]) / (2 * h) == pytest.approx(forces[atom, 0], abs=2e-4)
    assert anion.labelled[0][1].get_potential_energy() != pytest.approx(radical.labelled[0][1].get_potential_energy(),
                                                                        abs=1e-2)
    wrong = PySCFOracle(basis="sto-3g", charge=0, spin=0).label([hydroxide])  # 9 electrons, closed shell: refused
    assert not wrong.labelled and wrong.failed[0][0] == 0 and "PySCF" in wrong.failed[0][1]
    with pytest.raises(TypeError, match=r"pass \[atoms\]"):
        PySCFOracle(basis="sto-3g").label(hydroxide)


def copper_frames(count=3):
    from ase.build import bulk
    frames = []
    for seed in range(count):
        atoms = bulk("Cu", "fcc", a=3.6, cubic=True)
        atoms.rattle(0.05, seed=seed)
        frames.append(atoms)
    return frames


def test_an_ase_calculator_labels_frames_without_an_mm_part():
    frames = copper_frames()
    labels = ASEOracle(EMT()).label(frames + [water_in_charges()])
    assert [index for index, _ in labels.labelled] == [0, 1, 2]
    for index, frame in labels.labelled:
        reference = frames[index].copy()
        reference.calc = EMT()
        assert frame.get_potential_energy() == pytest.approx(reference.get_potential_energy(), abs=1e-12)
        np.testing.assert_allclose(frame.get_forces(), reference.get_forces(), atol=1e-12)
    assert labels.failed == [(3, "EMT labels frames without an MM part; this one has 3 MM atoms")]


STAND_IN = """
import sys
import numpy as np
from ase.calculators.emt import EMT
from ase.io import read, write
frames = read(sys.argv[1], ":")
mode = sys.argv[3]
out = []
for atoms in reversed(frames):  # another order: the labels carry their frame's index
    atoms.calc = EMT()
    energy, forces = atoms.get_potential_energy(), atoms.get_forces()
    atoms.calc = None
    if mode == "nan" and atoms.info["index"] == 1:
        energy = float("nan")
    if mode == "moved" and atoms.info["index"] == 2:
        atoms.positions[0] += 0.1
    atoms.info["energy"] = energy
    atoms.arrays["forces"] = forces
    out.append(atoms)
if mode == "sleep":
    import time
    time.sleep(30)
if mode == "fail":
    sys.exit("no licence for the QM code")
write(sys.argv[2], out, format="extxyz")
"""


def test_a_commands_round_trip_gives_the_python_oracles_labels(tmp_path):
    script = tmp_path / "label.py"
    script.write_text(STAND_IN)
    frames = copper_frames()
    direct = ASEOracle(EMT()).label(frames)
    oracle = CommandOracle(f"{sys.executable} {script} {{in}} {{out}} plain", workdir=tmp_path / "calls")
    labels = oracle.label(frames)
    assert not labels.failed and [i for i, _ in labels.labelled] == [0, 1, 2]
    for (_, mine), (_, theirs) in zip(labels.labelled, direct.labelled):  # extended XYZ: positions to 1e-8 Å
        assert mine.get_potential_energy() == pytest.approx(theirs.get_potential_energy(), abs=1e-7)
        np.testing.assert_allclose(mine.get_forces(), theirs.get_forces(), atol=1e-6)
    assert (tmp_path / "calls" / "call-1" / "frames.xyz").exists()  # kept in the workdir
    nan = CommandOracle(f"{sys.executable} {script} {{in}} {{out}} nan").label(frames)
    assert [i for i, _ in nan.labelled] == [0, 2] and nan.failed == [(1, "the label holds non-finite values (NaN or inf)")]
    moved = CommandOracle(f"{sys.executable} {script} {{in}} {{out}} moved").label(frames)
    assert [i for i, _ in moved.failed] == [2] and "differ from the frame's by 0.1" in moved.failed[0][1]
    failed = CommandOracle(f"{sys.executable} {script} {{in}} {{out}} fail").label(frames)
    assert not failed.labelled and len(failed.failed) == 3
    assert "exited with status 1: no licence for the QM code" in failed.failed[0][1]
    slow = CommandOracle(f"{sys.executable} {script} {{in}} {{out}} sleep", timeout_s=2).label(frames)
    assert not slow.labelled and "ran past timeout_s = 2 s" in slow.failed[0][1] and slow.seconds < 20
    with pytest.raises(ValueError, match="must name"):
        CommandOracle("label.sh frames.xyz")


MIMIC_STAND_IN = """
import os, sys
from ase.io import read
from pinn.io.mimic_single_point import write_mimic_single_point
from pinn.learn.oracles import PySCFOracle
oracle = PySCFOracle(method="HF", basis="sto-3g")
for atoms in read(sys.argv[1], ":"):
    energy, forces = oracle.label_frame(atoms)
    write_mimic_single_point(os.path.join(sys.argv[2], f"frame-{atoms.info['index']}"), atoms, energy, forces,
                             mm_energy=-1.25, mm_forces=0.01 * atoms.positions)
"""


def test_a_commands_round_trip_through_mimic_files_gives_the_python_oracles_labels(tmp_path):
    """A stand-in for MiMiC labels each frame with PySCF and writes it as a MiMiC single point (MM energy and forces
    beside the QM/MM label, as MiMiC's files hold them); pinn reads the labels back with load_mimic: the Python
    oracle's labels (to float32)."""
    pytest.importorskip("pyscf")
    script = tmp_path / "mimic_label.py"
    script.write_text(MIMIC_STAND_IN)
    frames = [water_in_charges(), water_in_charges()]
    frames[1].positions[3] += [0.3, -0.2, 0.1]  # another MM environment
    direct = PySCFOracle(method="HF", basis="sto-3g").label(frames)
    labels = CommandOracle(f"{sys.executable} {script} {{in}} {{out}}", output="mimic",
                           workdir=tmp_path / "calls").label(frames)
    assert not labels.failed and [i for i, _ in labels.labelled] == [0, 1]
    for (_, mine), (_, theirs) in zip(labels.labelled, direct.labelled):
        assert mine.get_potential_energy() == pytest.approx(theirs.get_potential_energy(), abs=5e-4)  # float32
        np.testing.assert_allclose(mine.get_forces(), theirs.get_forces(), atol=1e-5)
        assert (mine.arrays["qm"] == theirs.arrays["qm"]).all()
    assert (tmp_path / "calls" / "call-1" / "labels" / "frame-1" / "FTRAJECTORY").exists()
    empty = tmp_path / "empty.py"
    empty.write_text("import os, sys\nos.makedirs(sys.argv[2])\n")
    none = CommandOracle(f"{sys.executable} {empty} {{in}} {{out}}", output="mimic").label(frames)
    assert [i for i, _ in none.failed] == [0, 1] and "no MiMiC single point of this frame" in none.failed[0][1]
