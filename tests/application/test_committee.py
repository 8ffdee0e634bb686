"""Committees: get_calc of several model directories gives their mean and how much they disagree.

The members are small PiNets trained a few steps from different seeds on the alloy data, so they
differ; each member's own calculator is the reference for the committee's numbers.
"""
import numpy as np
import pytest
from ase.io import read

from pinn import get_calc
from pinn.committee import CommitteeCalc, deviations

from settings import small_net, training_params

RC = 4.5


def _train(model_dir, alloy_xyz, seed, steps=6, **net_changes):
    from pinn.io import load_ase, sparse_batch
    from pinn.models import potential_model
    params = training_params(model_dir, small_net([29, 79], **{"rc": RC, **net_changes}),
                             {"use_force": True, "learning_rate": 1e-2, "fit_e_dress": True},
                             log_every_n_steps=1000)
    params.update(seed=seed, precision="float64")
    potential_model(params).train(lambda: load_ase(alloy_xyz).repeat().shuffle(50, seed=seed).apply(sparse_batch(8)),
                                  steps)
    return str(model_dir)


@pytest.fixture(scope="module")
def committee_dir(alloy_xyz, tmp_path_factory):
    """A directory of three members (member-0 … member-2), seeds 0, 1, 2."""
    root = tmp_path_factory.mktemp("committee")
    for k in range(3):
        _train(root / f"member-{k}", alloy_xyz, seed=k)
    return root


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
