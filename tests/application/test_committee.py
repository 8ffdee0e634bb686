"""Committees: get_calc of several model directories gives their mean and how much they disagree.

The members are small PiNets trained a few steps from different seeds on the alloy data, so they
differ; each member's own calculator is the reference for the committee's numbers.
"""
import os

import numpy as np
import pytest
from ase.io import read

from pinn import get_calc
from pinn.committee import CommitteeCalc, deviations

from settings import small_net, train_alloy_member as _train, training_params


@pytest.fixture(scope="module")
def frame(alloy_xyz):
    atoms = read(alloy_xyz, index=3)
    atoms.calc = None
    return atoms


def test_deviations_are_deepmds_model_deviation():
    """Per atom √(mean over members |f − ⟨f⟩|²), its max/min/mean; std of E and of E per atom; the
    virial's per atom: max/min of the nine components' std, and their root sum of squares / 3."""
    rng = np.random.RandomState(0)
    members, n = 4, 5
    energies, forces, virials = rng.normal(size=members), rng.normal(size=(members, n, 3)), \
        rng.normal(size=(members, 3, 3))
    out = deviations(energies, forces, n, virials)
    expected = [np.sqrt(sum(np.sum((forces[m, i] - forces[:, i].mean(0)) ** 2) for m in range(members)) / members)
                for i in range(n)]
    np.testing.assert_allclose(out["forces_deviation"], expected, rtol=1e-12)
    assert out["max_forces_deviation"] == pytest.approx(max(expected))
    assert out["min_forces_deviation"] == pytest.approx(min(expected))
    assert out["avg_forces_deviation"] == pytest.approx(np.mean(expected))
    mean_e = energies.mean()
    assert out["energy_deviation"] == pytest.approx(np.sqrt(np.mean((energies - mean_e) ** 2)))
    assert out["energy_deviation_per_atom"] == pytest.approx(out["energy_deviation"] / n)
    per_component = [np.sqrt(np.mean((virials[:, a, b] / n - virials[:, a, b].mean() / n) ** 2))
                     for a in range(3) for b in range(3)]
    assert out["max_virial_deviation"] == pytest.approx(max(per_component))
    assert out["min_virial_deviation"] == pytest.approx(min(per_component))
    assert out["avg_virial_deviation"] == pytest.approx(np.sqrt(np.sum(np.square(per_component))) / 3)


@pytest.mark.parametrize("engine", ["numba", "tensorflow"])
def test_mean_and_deviation_are_the_members(committee_dir, frame, engine):
    dirs = [str(committee_dir / f"member-{k}") for k in range(3)]
    singles = [get_calc(d, engine=engine) for d in dirs]
    energies = np.array([c.get_potential_energy(frame) for c in singles])
    forces = np.stack([c.get_forces(frame) for c in singles])
    stresses = np.stack([c.get_stress(frame) for c in singles])
    calc = get_calc(dirs, engine=engine)
    assert isinstance(calc, CommitteeCalc) and calc.engine == engine and calc.size == 3
    atoms = frame.copy()
    atoms.calc = calc
    assert atoms.get_potential_energy() == pytest.approx(energies.mean(), abs=1e-9)
    np.testing.assert_allclose(atoms.get_forces(), forces.mean(0), atol=1e-9)
    np.testing.assert_allclose(atoms.get_stress(), stresses.mean(0), atol=1e-10)
    np.testing.assert_allclose(calc.results["member_energies"], energies, atol=1e-9)
    np.testing.assert_allclose(calc.results["member_forces"], forces, atol=1e-9)
    np.testing.assert_allclose(calc.results["member_stresses"], stresses, atol=1e-10)
    expected = deviations(energies, forces)
    np.testing.assert_allclose(calc.results["forces_deviation"], expected["forces_deviation"], atol=1e-9)
    assert calc.get_property("max_forces_deviation", atoms) == pytest.approx(expected["max_forces_deviation"])
    assert calc.results["energy_deviation"] == pytest.approx(expected["energy_deviation"], abs=1e-9)
    assert expected["max_forces_deviation"] > 1e-3, "the members should differ (different seeds)"


@pytest.mark.parametrize("engine", ["numba", "tensorflow"])
def test_the_first_member_drives_and_the_others_run_when_asked(committee_dir, frame, engine):
    """drive='first': energy, forces and stress are member 0's; the committee runs only for a deviation."""
    mean = get_calc(str(committee_dir), engine=engine)
    mean.get_forces(frame)
    calc = get_calc(str(committee_dir), engine=engine, drive="first")
    first = get_calc(str(committee_dir / "member-0"), engine=engine)
    atoms = frame.copy()
    atoms.calc = calc
    for step in range(3):
        atoms.positions[0, 0] += 0.01 * step
        np.testing.assert_allclose(atoms.get_forces(), first.get_forces(atoms), atol=1e-9)
        np.testing.assert_allclose(atoms.get_stress(), first.get_stress(atoms), atol=1e-10)
        assert atoms.get_potential_energy() == pytest.approx(first.get_potential_energy(atoms), abs=1e-9)
        assert "max_forces_deviation" not in calc.results
    assert (calc.calculations, calc.committee_evaluations) == (3, 0)
    atoms.positions[0, 0] -= 0.03  # back to the frame: the deviation of the mean-driven committee
    atoms.get_forces()
    assert calc.get_property("max_forces_deviation", atoms) == pytest.approx(mean.results["max_forces_deviation"])
    np.testing.assert_allclose(calc.results["member_forces"], mean.results["member_forces"], atol=1e-9)
    np.testing.assert_allclose(calc.results["member_stresses"], mean.results["member_stresses"], atol=1e-10)
    np.testing.assert_allclose(atoms.get_forces(), mean.results["member_forces"][0], atol=1e-9)
    assert (calc.calculations, calc.committee_evaluations) == (4, 1)
    calc.get_property("forces_deviation", atoms)  # already there: no second evaluation
    assert calc.committee_evaluations == 1
    if engine == "numba":  # member 0's pairs found by another caller are not reused for this structure
        moved = frame.copy()
        moved.positions[1, 1] += 0.05
        calc.members[0]._engine.fast(moved.numbers, moved.positions, *calc.neighbors.candidates(
            moved.positions, moved.cell[:], moved.pbc), moved.cell[:], moved.pbc)
        calc.results.pop("max_forces_deviation")
        assert calc.get_property("max_forces_deviation", atoms) == pytest.approx(
            mean.results["max_forces_deviation"])
    alone = get_calc([str(committee_dir / "member-0")], engine=engine, drive="first")  # a committee of one
    assert alone.get_property("max_forces_deviation", frame) == 0.0
    with pytest.raises(ValueError, match="drive must be one of"):
        get_calc(str(committee_dir), drive="last")
    with pytest.raises(ValueError, match="chooses what drives a committee; .*member-0' is one model"):
        get_calc(str(committee_dir / "member-0"), drive="first")


def test_a_directory_of_members_is_a_committee(committee_dir, frame):
    calc = get_calc(str(committee_dir))
    assert isinstance(calc, CommitteeCalc) and calc.size == 3
    assert calc.names == [str(committee_dir / f"member-{k}") for k in range(3)]


def test_the_committees_forces_are_minus_the_gradient_of_its_energy(committee_dir, frame):
    """The mean of conservative forces is conservative: central differences of the mean energy."""
    calc = get_calc(str(committee_dir), skin=0.0)
    atoms = frame.copy()
    atoms.calc = calc
    forces = atoms.get_forces()
    h = 1e-5
    for atom in (0, 5):
        for axis in range(3):
            shifted = []
            for sign in (1, -1):
                moved = frame.copy()
                moved.positions[atom, axis] += sign * h
                moved.calc = calc
                shifted.append(moved.get_potential_energy())
            assert forces[atom, axis] == pytest.approx(-(shifted[0] - shifted[1]) / (2 * h), abs=1e-6, rel=1e-5)


def test_identical_members_do_not_deviate(committee_dir, frame):
    member = str(committee_dir / "member-0")
    calc = get_calc([member, member])
    atoms = frame.copy()
    atoms.calc = calc
    assert atoms.get_potential_energy() == pytest.approx(get_calc(member).get_potential_energy(frame), abs=1e-10)
    assert calc.results["max_forces_deviation"] == 0.0 and calc.results["energy_deviation"] == 0.0


def test_what_is_not_a_committee_is_refused_by_name(committee_dir, alloy_xyz, tmp_path):
    member = str(committee_dir / "member-0")
    with pytest.raises(TypeError, match="element 1 is a dict, not a path"):
        get_calc([member, {"model_dir": member}])
    with pytest.raises(ValueError, match="an empty list"):
        get_calc([])
    with pytest.raises(ValueError, match="is not a model directory"):
        get_calc([member, str(tmp_path)])
    with pytest.raises(ValueError, match="neither to_eV nor properties"):
        get_calc([member, member], to_eV=2.0)
    other_rc = _train(tmp_path / "rc4", alloy_xyz, seed=0, steps=1, rc=4.0)
    with pytest.raises(ValueError, match=r"share the cutoff .*rc4 has rc 4 Å, .*member-0 4.5 Å"):
        get_calc([member, other_rc])


def _devi_rows(path):
    lines = open(path).read().splitlines()
    assert lines[0].split() == ["#", "step", "max_devi_v", "min_devi_v", "avg_devi_v", "max_devi_f", "min_devi_f",
                                "avg_devi_f", "devi_e"]
    return np.array([[float(v) for v in line.split()] for line in lines[1:]])


def test_pinn_devi_writes_deepmds_model_devi_and_the_selected_frames(committee_dir, alloy_xyz, tmp_path):
    from ase.io import write
    from ase.stress import voigt_6_to_full_3x3_stress
    from pinn.cli.commands import main
    frames = read(alloy_xyz, index="0:5")
    traj = tmp_path / "traj.xyz"
    write(traj, frames)
    out, selected = tmp_path / "model_devi.out", tmp_path / "picked.xyz"
    assert main(["devi", str(committee_dir), str(traj), "-o", str(out), "--select", "0:", "--max", "2",
                 "--selected", str(selected)]) == 0
    rows = _devi_rows(out)
    assert rows[:, 0].tolist() == [0, 1, 2, 3, 4]
    calc = get_calc(str(committee_dir))
    for row, atoms in zip(rows, frames):
        atoms.calc = calc
        atoms.get_forces()
        res = calc.results
        virials = np.stack([-voigt_6_to_full_3x3_stress(s) * atoms.get_volume() for s in res["member_stresses"]])
        devi = deviations(res["member_energies"], res["member_forces"], len(atoms), virials)
        expected = [devi[k] for k in ("max_virial_deviation", "min_virial_deviation", "avg_virial_deviation",
                                      "max_forces_deviation", "min_forces_deviation", "avg_forces_deviation",
                                      "energy_deviation_per_atom")]
        np.testing.assert_allclose(row[1:], expected, rtol=1e-5, atol=1e-12)  # the file's 7 significant digits
    picked = read(selected, index=":")
    assert [a.info["step"] for a in picked] == [0, 4]  # 5 candidates, 2 kept: spread evenly
    assert picked[1].info["max_devi_f"] == pytest.approx(rows[4, 4], rel=1e-5)
    # a window no frame falls in writes no frames; a single model is no committee
    assert main(["devi", str(committee_dir), str(traj), "-o", str(out), "--select", "100:200",
                 "--selected", str(tmp_path / "none.xyz")]) == 0
    assert not (tmp_path / "none.xyz").exists()
    assert main(["devi", str(committee_dir / "member-0"), str(traj), "-o", str(out)]) == 1


@pytest.fixture(scope="module")
def water_members(tmp_path_factory):
    """Two tiny H/O potentials (EMT water, 2 steps each from seeds 0 and 1)."""
    from pinn.io import load_ase, sparse_batch
    from pinn.models import potential_model
    from settings import write_emt_molecules
    root = tmp_path_factory.mktemp("water")
    data = write_emt_molecules(root / "water.xyz", "H2O", 8)
    for k in range(2):
        params = training_params(root / f"member-{k}", small_net([1, 8], rc=3.0), {"use_force": True},
                                 log_every_n_steps=1000)
        params["seed"] = k
        potential_model(params).train(lambda: load_ase(data).repeat().apply(sparse_batch(4)), 2)
    return root


def test_pinn_devi_reads_a_mimic_trr_with_its_mpt(water_members, tmp_path):
    """The water molecules (resname SOL) of a GROMACS trr of NaCl in water, elements from its .mpt."""
    from pinn.cli.commands import main
    from pinn.io.mimic import mimic_trajectory
    data = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "gromacs")
    trr, mpt = os.path.join(data, "water_single_xvf.trr"), os.path.join(data, "water.mpt")
    out = tmp_path / "devi.out"
    assert main(["devi", str(water_members), trr, "--mpt", mpt, "--atoms", "resname:SOL", "-o", str(out),
                 "--select", "0:", "--max", "1", "--selected", str(tmp_path / "sel.xyz")]) == 0
    rows = _devi_rows(out)
    frames = list(mimic_trajectory(mpt, trr, select={"resname": "SOL"}))
    assert rows[:, 0].tolist() == [step for step, _, _ in frames]
    assert set(frames[0][2].numbers.tolist()) == {1, 8}
    calc = get_calc(str(water_members))
    atoms = frames[-1][2]
    atoms.calc = calc
    assert rows[-1, 4] == pytest.approx(calc.get_property("max_forces_deviation", atoms), rel=1e-5)
    steps = (tmp_path / "sel.steps").read_text().splitlines()
    assert steps[0].startswith("#") and len(steps) == 2 and int(steps[1].split()[0]) == frames[0][0]
    assert main(["devi", str(water_members), trr, "-o", str(out)]) == 1  # a trr without --mpt: one line
