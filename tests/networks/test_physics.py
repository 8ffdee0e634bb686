"""Physics every network must satisfy: forces = -dE/dx, stress = dE/dε / V, invariances, smooth cutoff."""
import numpy as np
import pytest
from ase import Atoms
from ase.build import bulk
from ase.calculators.lj import LennardJones

from physics import (alloy_cell, check_forces_against_finite_differences, check_stress_against_strain_derivative,
                     energy, ethanol, evaluate, make_model)

RC = 4.0
TYPES = [1, 6, 8, 29, 79]
#: every network, small: the physics below holds for each (name: network name, a variant after "-")
NETWORKS = {
    "PiNet": {"atom_types": TYPES, "rc": RC, "depth": 3, "basis_type": "gaussian", "n_basis": 5},
    "PiNet-poly": {"atom_types": TYPES, "rc": RC, "depth": 2, "cutoff_type": "polynomial"},
    "BPNN": {"atom_types": TYPES, "rc": RC, "nn_spec": [12, 12]},
    **{f"PiNet2-r{rank}": {"atom_types": TYPES, "rc": RC, "depth": 2, "rank": rank, "pp_nodes": [8],
                           "pi_nodes": [8], "ii_nodes": [8], "out_nodes": [8]} for rank in (1, 3, 5)},
    "LJ": {"atom_types": TYPES, "rc": RC, "epsilon": 0.01, "sigma": 2.5},
}


def model_for(name):
    return make_model(name.split("-")[0], NETWORKS[name])


@pytest.fixture(params=list(NETWORKS))
def name(request):
    return request.param


@pytest.mark.parametrize("system", [alloy_cell, ethanol])
def test_forces_are_minus_energy_gradient(name, system, rng):
    model, atoms = model_for(name), system(rng)
    check_forces_against_finite_differences(model, atoms, RC)


def test_stress_is_strain_derivative(name, rng):
    model, atoms = model_for(name), alloy_cell(rng)
    check_stress_against_strain_derivative(model, atoms, RC)


@pytest.mark.parametrize("system", [alloy_cell, ethanol])
def test_invariances(name, system, rng):
    model, atoms = model_for(name), system(rng)
    e0 = energy(model, atoms, RC)
    f0 = evaluate(model, atoms, RC)["forces"]
    # rotation (cell rotates with the atoms)
    rot = atoms.copy()
    rot.rotate(37, (1, 2, 3), rotate_cell=True)
    assert energy(model, rot, RC) == pytest.approx(e0, abs=1e-9)
    # translation
    moved = atoms.copy()
    moved.translate((0.3, -1.1, 2.5))
    assert energy(model, moved, RC) == pytest.approx(e0, abs=1e-9)
    # permutation of like atoms (and of the whole list)
    perm = rng.permutation(len(atoms))
    permuted = atoms[perm]
    assert energy(model, permuted, RC) == pytest.approx(e0, abs=1e-9)
    np.testing.assert_allclose(evaluate(model, permuted, RC)["forces"], f0[perm], atol=1e-9)
    if atoms.pbc.any():
        # choice of periodic image: move atoms by lattice vectors, unwrapped
        imaged = atoms.copy()
        imaged.positions[0] += atoms.cell[0] - 2 * atoms.cell[2]
        imaged.positions[3] -= atoms.cell[1]
        assert energy(model, imaged, RC) == pytest.approx(e0, abs=1e-9)
        # a supercell has twice the energy
        assert energy(model, atoms * (2, 1, 1), RC) == pytest.approx(2 * e0, rel=1e-9)


def test_smooth_at_cutoff(name):
    if name == "LJ":
        pytest.skip("LJ is shifted to zero energy at rc, its force is not (ASE's LennardJones(smooth=False))")
    model = model_for(name)
    far = energy(model, Atoms("CO", positions=[(0, 0, 0), (0, 0, 10.0)]), RC)
    for delta in (1e-2, 1e-3):
        dimer = Atoms("CO", positions=[(0, 0, 0), (0, 0, RC - delta)])
        out = evaluate(model, dimer, RC)
        assert abs(out["energy"][0] - far) < 50 * delta ** 2
        assert np.abs(out["forces"]).max() < 50 * delta
    # beyond the cutoff nothing changes
    outside = energy(model, Atoms("CO", positions=[(0, 0, 0), (0, 0, RC + 1e-6)]), RC)
    assert outside == pytest.approx(far, abs=1e-12)


def test_lj_network_matches_ase(rng):
    """Energy, forces and stress (sign, Voigt order) against ASE's own LJ on a triclinic cell."""
    params = {"atom_types": [18], "rc": 7.0, "epsilon": 0.0104, "sigma": 3.4}
    model = make_model("LJ", params)
    atoms = bulk("Ar", "fcc", a=5.3, cubic=True) * (2, 2, 2)
    atoms.set_cell(atoms.cell[:] @ np.array([[1, 0.05, 0], [0, 1, 0.1], [0, 0, 1.02]]), scale_atoms=True)
    atoms.rattle(0.2, seed=1)
    atoms.calc = LennardJones(sigma=3.4, epsilon=0.0104, rc=7.0, smooth=False)
    out = evaluate(model, atoms, 7.0)
    assert out["energy"][0] == pytest.approx(atoms.get_potential_energy(), rel=1e-12)
    np.testing.assert_allclose(out["forces"], atoms.get_forces(), atol=1e-12)
    from ase.stress import full_3x3_to_voigt_6_stress
    np.testing.assert_allclose(full_3x3_to_voigt_6_stress(out["stress"][0]), atoms.get_stress(), atol=1e-12)


@pytest.mark.parametrize("pi_nodes", [[16, 12], [10, 16, 12], [12]])
def test_pinet_pair_interactions_equal_the_plain_form(rng, pi_nodes):
    """PiNet's PI step is evaluated in a cheaper order (first layer per atom, contraction per
    basis function): it must equal the net on the concatenated pair properties [P_i, P_j]
    followed by the basis sum, as in the paper."""
    import tensorflow as tf
    model = make_model("PiNet", dict(NETWORKS["PiNet"], pi_nodes=pi_nodes))
    block = model.network.blocks[0]
    prop = tf.constant(rng.normal(size=(7, block.pp.n_out)))
    ind_2 = tf.constant(np.array([[0, 1], [1, 0], [2, 6], [6, 2], [3, 3], [5, 4]], np.int32))
    basis = tf.constant(rng.uniform(size=(6, block.n_basis)))
    fast = block.pair_interactions(prop, ind_2, basis).numpy()
    pair = tf.concat([tf.gather(prop, ind_2[:, 0]), tf.gather(prop, ind_2[:, 1])], axis=1)
    weights = tf.reshape(block.pi_out(block.pi_hidden(pair)), [-1, block.n_pi, block.n_basis])
    plain = tf.reduce_sum(weights * basis[:, None, :], axis=2).numpy()
    assert np.abs(plain).max() > 0.1
    np.testing.assert_allclose(fast, plain, rtol=1e-12, atol=1e-12)


def test_scatter_sum_gradients_match_tensorflow(rng):
    """scatter_sum has its own gradient (a plain gather): first and second derivatives must
    equal those through tf.math.unsorted_segment_sum (forces in a loss need the second)."""
    import tensorflow as tf
    from pinn.networks.layers import scatter_sum
    values = tf.constant(rng.normal(size=(9, 3)))
    ids = tf.constant(np.array([0, 2, 2, 4, 1, 0, 4, 4, 3], np.int32))
    weights = tf.constant(rng.normal(size=(5, 3)))

    def derivatives(op):
        with tf.GradientTape() as outer:
            outer.watch(values)
            with tf.GradientTape() as inner:
                inner.watch(values)
                y = tf.reduce_sum(weights * tf.sin(op(values ** 3, ids, 5)))
            g = inner.gradient(y, values)
            z = tf.reduce_sum(g ** 2)
        return y.numpy(), g.numpy(), outer.gradient(z, values).numpy()

    for ours, theirs in zip(derivatives(scatter_sum), derivatives(tf.math.unsorted_segment_sum)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["PiNet", "PiNet-poly", "PiNet2-r3", "LJ"])
def test_padding_contributes_exactly_zero(rng, name):
    """A batch padded to bucket sizes (pinn.io.padding, for XLA) gives the same energies, forces and
    stresses for its real structures as the unpadded batch."""
    import tensorflow as tf
    from pinn.io.batch import batch_from_atoms
    from pinn.io.padding import bucket_size, pad_batch, unpad
    model = model_for(name)
    batch = batch_from_atoms([alloy_cell(rng), ethanol(rng)], RC, "float64")
    padded, sizes = pad_batch(batch, RC, element=29)
    assert len(padded["elems"]) == bucket_size(len(batch["elems"]) + 1)
    assert len(padded["ind_2"]) == bucket_size(len(batch["ind_2"])) > len(batch["ind_2"])
    plain = model.predict({k: tf.constant(v) for k, v in batch.items()})
    pad = unpad(model.predict({k: tf.constant(v) for k, v in padded.items()}), sizes)
    for key in ("energy", "forces", "stress"):
        np.testing.assert_allclose(pad[key].numpy(), plain[key].numpy(), rtol=0, atol=1e-12)


def test_bucket_sizes():
    from pinn.io.padding import bucket_size
    sizes = [bucket_size(n) for n in range(1, 20000)]
    assert all(s >= n for n, s in zip(range(1, 20000), sizes))
    assert all(s <= max(16, 1.091 * n + 8) for n, s in zip(range(1, 20000), sizes))
    assert len(set(sizes)) < 80  # few shapes to compile
