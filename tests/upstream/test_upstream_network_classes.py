"""The networks as upstream PiNN's scripts build and call them: keyword and positional arguments with upstream's
defaults, calls on batches without neighbor lists and upstream's output shapes, PiNet2's pair outputs
(i1, i3, i5) and dotted invariants, upstream's public PiNet2 layers, BPNN.preprocess, the NewPiNet2 name."""
import numpy as np
import pytest
import tensorflow as tf
from scipy.spatial.transform import Rotation

import pinn
from pinn.networks.bpnn import BPNN
from pinn.networks.lj import LJ
from pinn.networks.pinet import PiNet
from pinn.networks.pinet2 import DotLayer, PiNet2, PIXLayer, ScaleLayer, p5_to_matrix
from pinn.schema import ParamsError

SPEC = [{"type": "G2", "i": 1, "j": "ALL", "eta": [0.5, 1.0], "Rs": [0.0, 0.5]},
        {"type": "G3", "i": 8, "j": 1, "k": 1, "eta": [0.1], "lambd": [1.0], "zeta": [2.0]}]
ROTATION = Rotation.from_euler("xyz", [0.3, -1.1, 2.0]).as_matrix()


def _batch(n_molecules=3, seed=0, dtype=np.float64, rotation=None):
    """A sparse batch of water-like molecules without neighbor list: elems, coord (Å), ind_1."""
    rng = np.random.RandomState(seed)
    coord = np.concatenate([rng.normal(scale=0.8, size=(3, 3)) for _ in range(n_molecules)])
    if rotation is not None:
        coord = coord @ rotation.T
    return {"elems": tf.constant(np.tile([8, 1, 1], n_molecules), tf.int32),
            "coord": tf.constant(coord.astype(dtype)),
            "ind_1": tf.constant(np.repeat(np.arange(n_molecules), 3)[:, None], tf.int32)}


def test_networks_take_upstreams_arguments_defaults_and_order():
    pinet = PiNet(atom_types=[0, 1])  # upstream's test uses element 0
    assert pinet.params["basis_type"] == "polynomial" and pinet.params["n_basis"] == 4  # upstream's defaults
    assert pinet.params["rc"] == 4.0 and pinet.params["depth"] == 4
    pinet2 = PiNet2(atom_types=[1, 8])
    assert pinet2.params["weighted"] is False and pinet2.params["rank"] == 3
    bpnn = BPNN(SPEC, {1: [8], 8: [8]}, 4.0)  # upstream's positional order: sf_spec, nn_spec, rc
    assert bpnn.params["sf_spec"] == SPEC and bpnn.rc == 4.0 and bpnn.atom_types == [1, 8]
    assert BPNN(SPEC, {1: [8], 8: [8]}, use_jacobian=False).params["use_jacobian"] is False
    assert LJ(2.5).rc == 2.5
    assert PiNet({"atom_types": [1, 8], "rc": 3.0}, dtype=tf.float64).params["n_basis"] == 10  # a params dict
    with pytest.raises(ParamsError, match="depht"):
        PiNet(atom_types=[1], depht=3)
    with pytest.raises(TypeError, match="positional"):
        LJ(3.0, 1.0, 1.0, 1.0)
    with pytest.raises(TypeError, match="atom_types"):
        PiNet([1], atom_types=[1])


def test_calls_on_batches_without_neighbor_lists_give_upstreams_shapes():
    batch = _batch(dtype=np.float32)
    n_atoms = 9
    pinet = PiNet(atom_types=[1, 8], rc=3.0)
    energy = pinet(batch)
    assert energy.shape == (n_atoms,)
    prepared = pinet.preprocess(batch)
    assert {"ind_2", "shift", "diff", "dist"} <= set(prepared) and "ind_2" not in batch
    np.testing.assert_allclose(energy.numpy(), pinet.atomic_outputs(prepared).numpy()[:, 0], rtol=1e-6)
    assert PiNet(atom_types=[1, 8], rc=3.0, out_units=2)(batch).shape == (n_atoms, 2)
    assert PiNet(atom_types=[1, 8], rc=3.0, out_pool="sum")(batch).shape == (3,)
    extra = {"p1": 2, "p3": 1, "i1": 1, "i3": 2, "dotted_p3": 1}
    energy, extras = PiNet2(atom_types=[1, 8], rc=3.0, out_extra=extra)(batch)
    n_pairs = int(tf.shape(prepared["ind_2"])[0])
    assert energy.shape == (n_atoms,)
    assert {k: tuple(v.shape) for k, v in extras.items()} == {
        "p1": (n_atoms, 2), "p3": (n_atoms, 3, 1), "i1": (n_pairs, 1), "i3": (n_pairs, 3, 2), "dotted_p3": (n_atoms, 1)}
    assert LJ(rc=3.0)(batch).shape == (n_atoms,)


@pytest.mark.parametrize("rank,weighted", [(3, False), (3, True), (5, False)])
def test_pinet2_pair_outputs_rotate_with_the_structure(rank, weighted):
    extra = {"p3": 1, "i1": 1, "i3": 1, "dotted_p3": 1}
    if rank == 5:
        extra.update(p5=1, i5=1, dotted_p5=1)
    net = PiNet2(atom_types=[1, 8], rc=3.0, rank=rank, weighted=weighted, out_extra=extra, dtype=tf.float64, seed=3)
    energy, before = net(_batch())
    energy_rotated, after = net(_batch(rotation=ROTATION))  # the same pairs, in the same order
    np.testing.assert_allclose(energy_rotated.numpy(), energy.numpy(), rtol=1e-10, atol=1e-12)
    for key in ("i1", "dotted_p3") + (("dotted_p5",) if rank == 5 else ()):
        np.testing.assert_allclose(after[key].numpy(), before[key].numpy(), rtol=1e-9, atol=1e-12)
    for key in ("p3", "i3"):
        assert np.abs(before[key].numpy()).max() > 1e-3  # not trivially zero
        np.testing.assert_allclose(after[key].numpy(), np.einsum("xy,nyk->nxk", ROTATION, before[key].numpy()),
                                   atol=1e-10)
    if rank == 5:
        for key in ("p5", "i5"):
            m_before, m_after = p5_to_matrix(before[key]).numpy(), p5_to_matrix(after[key]).numpy()
            np.testing.assert_allclose(m_after, np.einsum("xa,nabk,yb->nxyk", ROTATION, m_before, ROTATION),
                                       atol=1e-10)


def test_pair_outputs_vanish_at_the_cutoff():
    """A pair just inside the cutoff gives i1 and i3 of nearly zero: what the bond-charge models read is continuous
    as the pair leaves the list."""
    net = PiNet2(atom_types=[1, 8], rc=3.0, out_extra={"i1": 2, "i3": 2}, dtype=tf.float64, act="tanh")
    pair = {"elems": tf.constant([8, 1]), "ind_1": tf.constant([[0], [0]]),
            "coord": tf.constant([[0.0, 0.0, 0.0], [0.0, 0.0, 3.0 - 1e-5]], tf.float64)}
    inside = {"elems": pair["elems"], "ind_1": pair["ind_1"],
              "coord": tf.constant([[0.0, 0.0, 0.0], [0.0, 0.0, 1.0]], tf.float64)}
    _, at_cutoff = net(pair)
    _, near = net(inside)
    for key in ("i1", "i3"):
        assert np.abs(at_cutoff[key].numpy()).max() < 1e-6
        assert np.abs(near[key].numpy()).max() > 1e-4


def test_upstreams_pinet2_layers_keep_rotations():
    rng = np.random.RandomState(0)
    ind_2 = tf.constant(rng.randint(0, 10, size=(7, 2)), tf.int32)
    rotate1 = lambda x: np.einsum("xy,nyc->nxc", ROTATION, x)  # noqa: E731
    rotate2 = lambda x: np.einsum("xa,nabc,yb->nxyc", ROTATION, x, ROTATION)  # noqa: E731
    for px, rotate in ((rng.normal(size=(10, 3, 5)), rotate1), (rng.normal(size=(10, 3, 3, 5)), rotate2)):
        for weighted in (False, True):
            pix = PIXLayer(weighted, seed=1)
            out = pix([ind_2, tf.constant(px)]).numpy()
            assert out.shape == (7,) + px.shape[1:]
            np.testing.assert_allclose(pix([ind_2, tf.constant(rotate(px))]).numpy(), rotate(out), atol=1e-12)
            dot = DotLayer(weighted, seed=2)
            flat = lambda x: tf.constant(x.reshape(10, -1, 5))  # noqa: E731
            np.testing.assert_allclose(dot(flat(rotate(px))).numpy(), dot(flat(px)).numpy(), atol=1e-12)
        if px.ndim == 3:
            assert np.allclose(PIXLayer(False)([ind_2, tf.constant(px)]).numpy(), px[ind_2.numpy()[:, 1]])
        p1 = rng.normal(size=(10, 5))
        scaled = ScaleLayer()([tf.constant(px), tf.constant(p1) if px.ndim == 3 else tf.constant(p1)[:, None, :]])
        assert scaled.shape == px.shape
        np.testing.assert_allclose(scaled.numpy(), px * (p1[:, None, :] if px.ndim == 3 else p1[:, None, None, :]))


def test_bpnn_preprocess_gives_each_entrys_functions_for_the_atoms_of_its_element():
    bpnn = BPNN(SPEC, {1: [8], 8: [8]}, rc=3.0, dtype=tf.float64)
    batch = bpnn.preprocess(_batch())
    elems = batch["elems"].numpy()
    fingerprints = bpnn.fingerprints(batch).numpy()  # [n_atoms, 3]: 2 functions of entry 0, 1 of entry 1
    assert batch["fp_0"].shape == (int((elems == 1).sum()), 2) and batch["fp_1"].shape == (int((elems == 8).sum()), 1)
    np.testing.assert_allclose(batch["fp_0"].numpy(), fingerprints[elems == 1, :2])
    np.testing.assert_allclose(batch["fp_1"].numpy(), fingerprints[elems == 8, 2:])
    assert np.all(batch["fp_1"].numpy() > 0)


def test_forces_of_a_network_alone_are_a_dense_gradient_and_preprocess_maps_a_dataset():
    """Upstream's test_jacob_bpnn takes -tape.gradient(net(tensors), coord) into NumPy (a dense tensor, not
    IndexedSlices); its test_bpnn_potential_pre_cond maps a dataset with bpnn.preprocess."""
    import numpy as np_
    from pinn.io import load_numpy, sparse_batch
    batch = _batch()
    bpnn = BPNN(SPEC, {1: [8], 8: [8]}, rc=3.0, dtype=tf.float64)
    with tf.GradientTape() as tape:
        tape.watch(batch["coord"])
        energy = tf.reduce_sum(bpnn(batch))
    forces = -tape.gradient(energy, batch["coord"])
    assert isinstance(forces, tf.Tensor) and np_.isfinite(forces.numpy()).all()
    np.testing.assert_allclose(forces.numpy().sum(axis=0), 0.0, atol=1e-10)  # no net force on the molecules
    coord = np.random.RandomState(1).normal(scale=0.8, size=(4, 3, 3))
    data = {"coord": coord, "elems": np.tile([8, 1, 1], (4, 1)), "e_data": np.zeros(4)}
    mapped = load_numpy(data).apply(sparse_batch(2)).map(BPNN(SPEC, {1: [8], 8: [8]}, rc=3.0).preprocess)
    first = next(iter(mapped))
    assert first["fp_0"].shape == (4, 2) and first["fp_1"].shape == (2, 1)


def test_newpinet2_is_upstreams_earlier_name_of_pinet2():
    net = pinn.get_network({"name": "NewPiNet2", "params": {"atom_types": [1, 8], "rank": 3}})
    assert isinstance(net, PiNet2)
