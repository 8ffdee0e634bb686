"""Inference on QM/MM frames as users write them (extended XYZ, docs/qmmm.md): a result follows everything that
defines it, and what training refuses inference refuses too (pinn.io.atoms_input).

- A calculator (both engines, a committee, the model file of `pinn export`) recomputes when the region's charge
  (``info["charge"]``), the QM mask (``arrays["qm"]``) or the MM charges change on the same Atoms, and gives what a
  fresh calculator gives; `pinn devi` gives a frame that differs from the one before only in its charge its own
  deviations.
- A NaN MM charge, an MM atom on a QM atom, an MM atom at a NaN position and a region charge that is not a number
  are refused by get_calc's calculators, `pinn devi` (naming the frame) and `pinn md` with the loaders' own
  lines, where they gave NaN or infinite energies, NaN rows, or blamed atom 0.
"""
import os

import numpy as np
import pytest
import yaml
from settings import qmmm_frame

import pinn
from pinn.cli import main
from pinn.io import ase_files, load_ase
from pinn.io.errors import DataError

NETWORK = {"name": "PiNet", "params": {"atom_types": [1, 8], "rc": 4.0, "depth": 2, "pp_nodes": [8],
                                       "pi_nodes": [8], "ii_nodes": [8], "out_nodes": [8], "out_units": 2}}


@pytest.fixture(scope="module")
def frames_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("qmmm-frames") / "frames.xyz"
    ase_files.write(str(path), [qmmm_frame(seed) for seed in range(6)], format="extxyz")
    return str(path)


@pytest.fixture(scope="module")
def committee(frames_file, tmp_path_factory):
    """A committee of two electrostatic models (`pinn train --committee 2`, 3 steps each: members that differ),
    and the model file of its first member (`pinn export`)."""
    workdir = tmp_path_factory.mktemp("qmmm-committee")
    run = {"model_dir": str(workdir / "committee"), "network": NETWORK, "precision": "float64",
           "model": {"name": "potential_model", "params": {"embedding": "electrostatic", "use_force": True,
                                                           "embedding_damping": 0.5}},
           "data": {"train": frames_file, "batch_size": 2}, "train": {"max_steps": 3}}
    (workdir / "run.yml").write_text(yaml.safe_dump(run))
    assert main(["train", str(workdir / "run.yml"), "--committee", "2"]) == 0
    members = str(workdir / "committee")
    assert main(["export", os.path.join(members, "member-0"), "-o", str(workdir / "es.pinn")]) == 0
    return members, str(workdir / "es.pinn")


def _calc(committee, kind):
    members, model_file = committee
    return {"numba": lambda: pinn.get_calc(os.path.join(members, "member-0"), engine="numba"),
            "tensorflow": lambda: pinn.get_calc(os.path.join(members, "member-0"), engine="tensorflow"),
            "committee": lambda: pinn.get_calc(members),
            "model file": lambda: pinn.get_calc(model_file)}[kind]()


def _fresh(committee, kind, atoms):
    copy = atoms.copy()
    copy.calc = _calc(committee, kind)
    return copy.get_potential_energy(), copy.get_forces()


def _mm_atom_the_model_knows(atoms):
    """The first MM atom that is H or O (the frames' MM atoms are single atoms; Na is no element of the model)."""
    mm = np.flatnonzero(~atoms.arrays["qm"])
    return int(next(k for k in mm if atoms.numbers[k] in (1, 8)))


@pytest.mark.parametrize("kind", ["numba", "tensorflow", "committee", "model file"])
def test_a_result_follows_the_region_charge_the_qm_mask_and_the_mm_charges(committee, frames_file, kind):
    atoms = ase_files.read(frames_file, index=0)
    atoms.calc = _calc(committee, kind)
    before = atoms.get_potential_energy()
    assert atoms.info["charge"] == 0
    atoms.info["charge"] = -1.0  # the same Atoms: only the region's charge changes
    energy, forces = atoms.get_potential_energy(), atoms.get_forces()
    assert abs(energy - before) > 1e-3
    fresh_energy, fresh_forces = _fresh(committee, kind, atoms)
    assert energy == pytest.approx(fresh_energy, abs=1e-9)
    np.testing.assert_allclose(forces, fresh_forces, atol=1e-9)
    if kind != "committee":  # a committee gives no charges
        assert atoms.get_charges()[atoms.arrays["qm"]].sum() == pytest.approx(-1.0, abs=1e-9)

    moved = _mm_atom_the_model_knows(atoms)  # an MM atom joins the QM region
    before = atoms.get_potential_energy()
    qm = atoms.arrays["qm"].copy()
    qm[moved] = True
    atoms.arrays["qm"] = qm
    charges = atoms.get_initial_charges()
    charges[moved] = 0.0
    atoms.set_initial_charges(charges)
    energy = atoms.get_potential_energy()
    assert abs(energy - before) > 1e-6
    assert energy == pytest.approx(_fresh(committee, kind, atoms)[0], abs=1e-9)
    before = energy
    atoms.arrays["qm"][moved] = False  # back to MM, in place (the same array), with no charge
    assert abs(atoms.get_potential_energy() - before) > 1e-6
    assert atoms.get_potential_energy() == pytest.approx(_fresh(committee, kind, atoms)[0], abs=1e-9)
    charges = atoms.get_initial_charges()
    charges[moved] = 0.3
    atoms.set_initial_charges(charges)
    assert atoms.get_potential_energy() == pytest.approx(_fresh(committee, kind, atoms)[0], abs=1e-9)


def test_devi_gives_each_frame_its_own_deviations(committee, frames_file, tmp_path):
    """Frames 1 and 2 of the trajectory differ from frame 0 in the QM mask alone (an MM atom without charge joins
    the region) and in that and the region's charge: each row is what the committee gives that frame alone.  (With
    this model the region's charge shifts every member's charges alike, so the deviations do not follow it.)"""
    members, _ = committee
    first = ase_files.read(frames_file, index=0)
    moved = _mm_atom_the_model_knows(first)
    charges = first.get_initial_charges()
    charges[moved] = 0.0
    first.set_initial_charges(charges)
    second = first.copy()
    second.arrays["qm"][moved] = True
    third = second.copy()
    third.info["charge"] = -1.0
    trajectory = str(tmp_path / "regions.xyz")
    ase_files.write(trajectory, [first, second, third], format="extxyz")
    assert main(["devi", members, trajectory, "-o", str(tmp_path / "devi.out")]) == 0
    rows = np.loadtxt(tmp_path / "devi.out")
    for row, atoms in zip(rows, (first, second, third)):
        atoms.calc = pinn.get_calc(members)
        assert row[4] == pytest.approx(atoms.calc.get_property("max_forces_deviation", atoms), rel=1e-5)
        assert row[7] == pytest.approx(atoms.calc.get_property("energy_deviation", atoms) / len(atoms), rel=1e-5)
    assert abs(rows[0, 4] - rows[1, 4]) > 1e-4 * rows[0, 4]


def _broken(frames_file, case):
    """Frame 1 of the file, broken as ``case`` says; the MM atom it breaks."""
    atoms = ase_files.read(frames_file, index=1)
    mm = int(np.flatnonzero(~atoms.arrays["qm"])[2])
    if case == "NaN MM charge":
        charges = atoms.get_initial_charges()
        charges[mm] = np.nan
        atoms.set_initial_charges(charges)
    elif case == "MM atom on a QM atom":
        atoms.positions[mm] = atoms.positions[1]
    elif case == "MM atom at a NaN position":
        atoms.positions[mm] = [np.nan, 0.0, 0.0]
    else:
        atoms.info["charge"] = "minus one"
    return atoms, mm


CASES = {"NaN MM charge": "non-finite values in 'mm_charge' (first at index [{mm}])",
         "MM atom on a QM atom": "atoms 1 and {mm} are at the same position",
         "MM atom at a NaN position": "atom {mm} has a non-finite position",
         "region charge not a number": "info['charge'] (the QM region's total charge) is 'minus one', not a number"}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_qmmm_frames_are_refused_with_the_loaders_lines(committee, frames_file, tmp_path, case):
    atoms, mm = _broken(frames_file, case)
    line = CASES[case].format(mm=mm)
    bad_file = str(tmp_path / "bad.xyz")
    ase_files.write(bad_file, [ase_files.read(frames_file, index=0), atoms], format="extxyz")
    with pytest.raises(DataError, match="frame 1") as loader:  # what training says
        list(load_ase(bad_file, shuffle=False).as_numpy_iterator())
    assert line in str(loader.value)
    for kind in ("numba", "tensorflow", "committee", "model file"):
        atoms.calc = _calc(committee, kind)
        with pytest.raises(ValueError) as refused:
            atoms.get_potential_energy()
        assert line in str(refused.value), kind
        assert "\n" not in str(refused.value)


@pytest.mark.parametrize("case", ["NaN MM charge", "MM atom on a QM atom"])
def test_devi_and_md_refuse_a_bad_frame_naming_it(committee, frames_file, tmp_path, case, capsys):
    members, _ = committee
    atoms, mm = _broken(frames_file, case)
    trajectory = str(tmp_path / "run.xyz")
    ase_files.write(trajectory, [ase_files.read(frames_file, index=0), atoms], format="extxyz")
    out = tmp_path / "devi.out"
    capsys.readouterr()
    assert main(["devi", members, trajectory, "-o", str(out), "--select", "0:1"]) == 1
    err = capsys.readouterr().err
    assert f"{trajectory}, frame 1: " + CASES[case].format(mm=mm) in err
    assert "Traceback" not in err and not out.exists() and not (tmp_path / "selected.xyz").exists()
    start = str(tmp_path / "start.xyz")
    ase_files.write(start, atoms, format="extxyz")
    os.chdir(tmp_path)
    assert main(["md", members, start, "--steps", "2", "--log", str(tmp_path / "md.log")]) == 1
    err = capsys.readouterr().err
    assert CASES[case].format(mm=mm) in err and "Traceback" not in err
    assert not (tmp_path / "md.log").exists()
