"""A committee on the Numba engine: members of one layout in one kernel call, each member's numbers its own.

Each member's own :class:`FastPiNet` call is the reference: the committee must give every member's
energy, per-atom energies, forces, virial and stress (float64, to rounding), whichever way it runs
them (a member per thread in one call, or one member after another on all threads), for any subset
of members in any order, and follow a member's reloaded weights.
"""
import numpy as np
import pytest
from ase.build import bulk, molecule

from pinn.engines.committee import FastCommittee
from pinn.engines.md import FastPiNet
from pinn.engines.numba import pinet2_kernels
from pinn.engines.numba.md_kernels import PARALLEL_MIN_PAIRS
from pinn.io.neighbors import neighbor_list

from physics import perturbed_model

RC = 4.0
NETS = {"PiNet": {"atom_types": [1, 6, 8, 29], "rc": RC, "depth": 2, "pp_nodes": [5, 6], "pi_nodes": [6, 6],
                  "ii_nodes": [7, 6], "out_nodes": [6], "n_basis": 3},
        "PiNet2": {"atom_types": [1, 6, 8, 29], "rc": RC, "depth": 2, "pp_nodes": [5, 6], "pi_nodes": [6, 6],
                   "ii_nodes": [7, 6], "out_nodes": [6], "n_basis": 3, "rank": 5, "weighted": True}}


@pytest.fixture(scope="module", params=list(NETS))
def network(request):
    """(network name, its model, the arrays of three members: the model's weights scaled three ways)."""
    model = perturbed_model(request.param, NETS[request.param])
    base = FastPiNet(model).arrays
    rng = np.random.RandomState(1)
    members = []
    for k in range(3):
        arrays = dict(base)
        arrays["flat"] = base["flat"] * (1.0 + 0.2 * k * rng.randn(*base["flat"].shape))
        arrays["e_dress"] = base["e_dress"] + 0.1 * k
        members.append(arrays)
    return request.param, model, members


def _structures():
    ethanol = molecule("CH3CH2OH")
    ethanol.rattle(0.1, seed=1)
    copper = bulk("Cu", "fcc", a=3.61, cubic=True) * (3, 3, 2)
    copper.numbers[::5] = 8
    copper.rattle(0.1, seed=2)
    return {"ethanol": ethanol, "Cu 72": copper}


def _candidates(atoms):
    ind, shift = neighbor_list(atoms.positions, atoms.cell[:], atoms.pbc, RC + 0.5)
    return (atoms.numbers, atoms.positions, ind[:, 0].copy(), ind[:, 1].copy(), shift @ atoms.cell[:],
            atoms.cell[:], atoms.pbc)


def _check(out, refs, members, atoms):
    for row, k in enumerate(members):
        ref = refs[k]
        assert out["energy"][row] == pytest.approx(ref["energy"], rel=1e-12, abs=1e-12)
        np.testing.assert_allclose(out["energies"][row], ref["energies"], rtol=0, atol=1e-12)
        assert out["energies"][row].sum() == pytest.approx(out["energy"][row], rel=1e-12)
        np.testing.assert_allclose(out["forces"][row], ref["forces"], rtol=0, atol=1e-11)
        np.testing.assert_allclose(out["virial"][row], ref["virial"], rtol=0, atol=1e-11)
        if atoms.pbc.any():
            np.testing.assert_allclose(out["stress"][row], ref["stress"], rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", list(_structures()))
@pytest.mark.parametrize("count", [2, 3])
def test_every_member_is_its_own_engine(network, name, count):
    """2 members (each thread one) and 3 (one thread two): the stacked call below the single model's thread
    threshold, and above it whichever the committee picks; equal to each member alone either way."""
    net, _, arrays = network
    atoms = _structures()[name]
    args = _candidates(atoms)
    members = [FastPiNet(a) for a in arrays[:count]]
    refs = [FastPiNet(a)(*args) for a in arrays[:count]]
    assert len({round(r["energy"], 6) for r in refs}) == count, "the members should differ"
    committee = FastCommittee(members)
    assert committee.stacked
    out = committee(*args)
    _check(out, refs, range(count), atoms)
    n_pairs = members[0].last_pairs
    threshold = pinet2_kernels.PARALLEL_MIN_PAIRS if net == "PiNet2" else PARALLEL_MIN_PAIRS
    stacked = committee.in_one_call(count, n_pairs)
    assert stacked == (n_pairs < threshold or count % committee.threads == 0 or committee.threads == 1)
    if not stacked:  # the other way too: a member per thread on the same pairs
        _check(committee._stack(atoms.numbers, members[0].pairs(), atoms.cell[:], atoms.pbc, list(range(count))),
               refs, range(count), atoms)


def test_members_asked_for_in_any_order_reuse_the_pairs(network):
    """drive='first's pattern: member 0 alone, then the others on its pairs, in the order asked for."""
    _, _, arrays = network
    atoms = _structures()["ethanol"]
    args = _candidates(atoms)
    refs = [FastPiNet(a)(*args) for a in arrays]
    committee = FastCommittee([FastPiNet(a) for a in arrays])
    _check(committee(*args, members=[0]), refs, [0], atoms)
    searches = committee.members[0].calls
    _check(committee(*args, members=[2, 1]), refs, [2, 1], atoms)
    assert committee.members[0].calls == searches  # no second neighbor search
    moved = atoms.copy()
    moved.positions[0, 0] += 0.05
    moved_args = _candidates(moved)
    _check(committee(*moved_args, members=[1]), [None, FastPiNet(arrays[1])(*moved_args)], [1], moved)
    assert committee.members[0].calls == searches + 1  # another structure: member 0 searches again


def test_a_members_reloaded_weights_are_used(network):
    """A member made from a model follows the model after load_weights: the stacked copy is renewed."""
    _, model, arrays = network
    atoms = _structures()["ethanol"]
    args = _candidates(atoms)
    first = FastPiNet(model)
    committee = FastCommittee([first] + [FastPiNet(a) for a in arrays[1:]])
    before = committee(*args)
    saved = [v.numpy() for v in model.trainable_variables]
    try:
        for v in model.trainable_variables:
            v.assign(v.numpy() * 1.1)
        first.load_weights()
        after = committee(*args)
        _check(after, [FastPiNet(model)(*args)], [0], atoms)
        assert after["energy"][0] != pytest.approx(before["energy"][0], rel=1e-6)
        np.testing.assert_array_equal(after["forces"][1:], before["forces"][1:])
    finally:
        for v, value in zip(model.trainable_variables, saved):
            v.assign(value)


def test_members_of_other_layouts_run_one_after_another(network):
    net, _, arrays = network
    other = perturbed_model(net, {**NETS[net], "pi_nodes": [5, 6]})
    atoms = _structures()["Cu 72"]
    args = _candidates(atoms)
    committee = FastCommittee([FastPiNet(arrays[0]), FastPiNet(other)])
    assert not committee.stacked
    _check(committee(*args), [FastPiNet(arrays[0])(*args), FastPiNet(other)(*args)], [0, 1], atoms)
