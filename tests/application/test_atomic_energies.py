"""Per-atom energies: ASE's ``atoms.get_potential_energies()`` with a pinn calculator, on both engines.

Each atom's energy is the network's atomic output / e_scale plus its element's e_dress; they sum to
the energy to rounding, and the Numba engine, TensorFlow, and TensorFlow's padded XLA call give the
same numbers (float64 models).  A committee gives the members' mean per atom and its spread.
"""
import numpy as np
import pytest
from ase.build import molecule

from pinn import get_calc


def _ethanol(periodic):
    atoms = molecule("CH3CH2OH")
    atoms.rattle(0.05, seed=3)
    if periodic:  # a box shorter than two cutoffs: the atoms meet their images
        atoms.cell = [7.0, 7.5, 8.0]
        atoms.pbc = True
        atoms.center()
    return atoms


@pytest.mark.parametrize("fixture", ["ethanol_model", "ethanol_pinet2_model"])
@pytest.mark.parametrize("periodic", [False, True])
def test_per_atom_energies_sum_to_the_energy_on_both_engines(request, fixture, periodic):
    model = request.getfixturevalue(fixture)
    found = {}
    for engine, jit in (("numba", None), ("tensorflow", False), ("tensorflow", True)):
        atoms = _ethanol(periodic)
        atoms.calc = calc = get_calc(model, engine=engine, jit=jit)
        assert calc.engine == engine
        energies = atoms.get_potential_energies()
        assert energies.shape == (len(atoms),) and energies.dtype == np.float64
        assert energies.sum() == pytest.approx(atoms.get_potential_energy(), rel=1e-12, abs=1e-10)
        found[(engine, jit)] = energies
    assert np.ptp(found[("numba", None)]) > 1e-3  # atoms of three elements in different places differ
    for key, energies in found.items():
        np.testing.assert_allclose(energies, found[("numba", None)], rtol=0, atol=1e-9, err_msg=str(key))


def test_a_committee_gives_the_members_mean_per_atom_and_its_spread(ethanol_model, ethanol_pinet2_model):
    """Two members of different networks (they run one after another): the mean of their per-atom energies,
    and the per-atom standard deviation (1/M); drive='first': the first member's."""
    members = [ethanol_model, ethanol_pinet2_model]
    atoms = _ethanol(False)
    alone = []
    for member in members:
        atoms.calc = get_calc(member)
        alone.append(atoms.get_potential_energies())
    alone = np.array(alone)
    atoms.calc = calc = get_calc(members)
    np.testing.assert_allclose(atoms.get_potential_energies(), alone.mean(axis=0), rtol=0, atol=1e-10)
    spread = calc.get_property("energies_deviation", atoms)
    np.testing.assert_allclose(spread, alone.std(axis=0), rtol=0, atol=1e-10)
    assert spread.min() > 1e-6  # two different models
    first = _ethanol(False)
    first.calc = get_calc(members, drive="first")
    np.testing.assert_allclose(first.get_potential_energies(), alone[0], rtol=0, atol=1e-10)
    np.testing.assert_allclose(first.calc.get_property("energies_deviation", first), spread, rtol=0, atol=1e-10)


def test_pinn_eval_writes_the_per_atom_energies(ethanol_model, tmp_path, capsys):
    """`pinn eval MODEL DATA --per-atom OUT.xyz`: every structure of the data, in order, with the model's
    energy, forces and per-atom energies, which ASE reads back; they are what get_calc gives."""
    import json
    import os

    from ase.io import read

    from pinn.cli import main
    data = os.path.join(os.path.dirname(ethanol_model), "ethanol.xyz")
    out = tmp_path / "predicted.xyz"
    assert main(["eval", ethanol_model, data, "--per-atom", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    frames, labelled = read(out, ":"), read(data, ":")
    assert summary["per_atom"] == str(out) and summary["per_atom_structures"] == len(frames) == len(labelled)
    calc = get_calc(ethanol_model)
    for frame, structure in zip(frames, labelled):
        np.testing.assert_allclose(frame.positions, structure.positions, atol=1e-5)  # float32 in the dataset
        energies = frame.get_potential_energies()
        assert energies.sum() == pytest.approx(frame.get_potential_energy(), abs=1e-6)  # the file: 8 decimals
        structure.calc = calc
        np.testing.assert_allclose(energies, structure.get_potential_energies(), atol=1e-4)
        np.testing.assert_allclose(frame.get_forces(), structure.get_forces(), atol=1e-4)
    assert not [p for p in os.listdir(tmp_path) if ".tmp-" in p]
