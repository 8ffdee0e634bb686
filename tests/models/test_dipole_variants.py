"""Upstream PiNN 2.x's dipole models (AC, BC_R, AC_BC_R, AD, AD_OS, AC_AD, AD_BC_R): physics checked numerically,
their loss options, training, checkpoints and the ASE calculator."""
import numpy as np
import pytest
import tensorflow as tf
from scipy.spatial.transform import Rotation

from pinn.demo import make_dipole_dataset, water_dipole_frames
from pinn.io import load_ase, sparse_batch
from pinn.io.batch import batch_from_atoms
from pinn.io.batch import pair_geometry
from pinn.models import get_model
from pinn.networks import get_network
from pinn.params import ParamsError, resolve
from pinn.physics.registry import MODELS, NOT_YET

RC = 4.0
#: small networks; basis and weighted style named, so that the bounds below stay those measured with them
PINET = {"atom_types": [1, 8], "rc": RC, "depth": 2, "pp_nodes": [8], "pi_nodes": [8], "ii_nodes": [8],
         "out_nodes": [8], "basis_type": "polynomial", "n_basis": 4}
PINET2 = dict(PINET, out_extra={"p3": 1}, out_units=2, weighted=False)
#: PiNet2 for the bond-charge models: its pair outputs i1 and i3 (upstream's out_extra for them)
PINET2_BC = dict(PINET2, out_extra={"p3": 1, "i1": 1, "i3": 1})


def _network_params(name, network):
    if network == "PiNet":
        return PINET
    return PINET2_BC if "BC" in name else PINET2
#: (model, network) of every variant; the AD models need PiNet2's p3, the others are tried with both networks
CASES = [("AC_dipole_model", "PiNet"), ("BC_R_dipole_model", "PiNet"), ("AC_BC_R_dipole_model", "PiNet"),
         ("BC_R_dipole_model", "PiNet2"), ("AC_BC_R_dipole_model", "PiNet2"), ("AD_dipole_model", "PiNet2"),
         ("AD_OS_dipole_model", "PiNet2"), ("AC_AD_dipole_model", "PiNet2"), ("AD_BC_R_dipole_model", "PiNet2")]
VARIANTS = sorted({name for name, _ in CASES})


def _params(name, network="PiNet", options=None, model_dir="unused", precision="float64"):
    return resolve({"model_dir": model_dir, "precision": precision, "seed": 3,
                    "network": {"name": network, "params": _network_params(name, network)},
                    "model": {"name": name, "params": dict(options or {})}})


def _model(name, network="PiNet", **options):
    params = _params(name, network, options)
    return MODELS[name](get_network(params), params["model"]["params"], [1, 8], tf.float64)


def _oxidation(atoms):
    """Oxidation states of water (e): O −2, H +1 (each molecule neutral)."""
    return np.where(atoms.numbers == 8, -2.0, 1.0)


def _batch(atoms):
    batch = batch_from_atoms(atoms, RC, "float64")
    batch["oxidation"] = _oxidation(atoms)
    return {k: tf.constant(v) for k, v in batch.items()}


def _predict(model, atoms):
    return {k: v.numpy() for k, v in model.predict(_batch(atoms)).items()}


@pytest.fixture(scope="module")
def cluster():
    return water_dipole_frames(1, seed=5, max_molecules=3)[0]


@pytest.fixture(scope="module")
def models():
    return {case: _model(*case) for case in CASES}


def _moved(atoms, rotation, shift):
    out = atoms.copy()
    out.positions = atoms.positions @ rotation.T + shift
    return out


@pytest.mark.parametrize("case", CASES, ids=["-".join(c) for c in CASES])
def test_dipole_rotates_with_the_structure_and_ignores_the_origin(models, cluster, case):
    model = models[case]
    rotation = Rotation.random(random_state=11).as_matrix()
    shift = np.array([3.0, -7.0, 11.0])
    pred = _predict(model, cluster)
    moved = _predict(model, _moved(cluster, rotation, shift))
    assert np.linalg.norm(pred["dipole"][0]) > 1e-3  # not trivially zero
    # every variant here is neutral (AC neutralised, bond charges, the oxidation states of water)
    np.testing.assert_allclose(moved["dipole"][0], rotation @ pred["dipole"][0], rtol=0, atol=1e-10)
    if "charges" in pred:
        np.testing.assert_allclose(moved["charges"], pred["charges"], rtol=0, atol=1e-10)
        assert abs(pred["charges"].sum()) < 1e-12


@pytest.mark.parametrize("case", CASES, ids=["-".join(c) for c in CASES])
def test_dipole_is_the_moment_of_its_parts(models, cluster, case):
    """For a molecule, D = Σ q_i r_i (AC and bond charges) + Σ μ_i (AD) + Σ q_ox_i r_i (OS)."""
    model = models[case]
    pred = _predict(model, cluster)
    expected = pred["charges"] @ cluster.positions if "charges" in pred else np.zeros(3)
    if model.OXIDATION:
        expected = expected + _oxidation(cluster) @ cluster.positions
    if model.ATOMIC_DIPOLES:
        tensors = pair_geometry(_batch(cluster))
        atomic = model.parts(tensors)["dipoles"].numpy() / model.params["d_scale"]
        assert np.abs(atomic).max() > 1e-4
        expected = expected + atomic.sum(axis=0)
    else:
        assert "charges" in pred
    np.testing.assert_allclose(pred["dipole"][0], expected, rtol=0, atol=1e-12)
    assert ("charges" in pred) == model.has_charges


@pytest.mark.parametrize("case", [("AC_BC_R_dipole_model", "PiNet"), ("AD_BC_R_dipole_model", "PiNet2"),
                                  ("AD_OS_dipole_model", "PiNet2"), ("AC_AD_dipole_model", "PiNet2")],
                         ids=lambda c: "-".join(c))
def test_dipole_derivative_matches_finite_differences(models, cluster, case):
    """∂D/∂r from automatic differentiation equals central differences (smooth models, the bond heads included)."""
    model = models[case]
    batch = _batch(cluster)
    with tf.GradientTape() as tape:
        tape.watch(batch["coord"])
        dipole = model.predict(batch)["dipole"][0]
    jacobian = tape.jacobian(dipole, batch["coord"]).numpy()  # [3, n_atoms, 3]
    assert np.abs(jacobian).max() > 1e-3
    h = 1e-5
    for atom, axis in ((0, 0), (1, 2), (4, 1)):
        plus, minus = cluster.copy(), cluster.copy()
        plus.positions[atom, axis] += h
        minus.positions[atom, axis] -= h
        numeric = (_predict(model, plus)["dipole"][0] - _predict(model, minus)["dipole"][0]) / (2 * h)
        np.testing.assert_allclose(jacobian[:, atom, axis], numeric, rtol=1e-6, atol=1e-8)


def test_neutral_per_water_molecule_and_per_system(cluster):
    per_water = _predict(_model("AC_dipole_model", neutral_unit="water_molecule"), cluster)["charges"]
    np.testing.assert_allclose(per_water.reshape(-1, 3).sum(axis=1), 0.0, atol=1e-12)
    system = _predict(_model("AC_dipole_model"), cluster)["charges"]
    assert abs(system.sum()) < 1e-12
    assert np.abs(system.reshape(-1, 3).sum(axis=1)).max() > 1e-6  # per system only: molecules may be charged
    # AC + AD with water-molecule neutrality: molecules neutral, so D does not depend on the origin
    model = _model("AC_AD_dipole_model", "PiNet2", neutral_unit="water_molecule")
    pred = _predict(model, cluster)
    np.testing.assert_allclose(pred["charges"].reshape(-1, 3).sum(axis=1), 0.0, atol=1e-12)
    shifted = _predict(model, _moved(cluster, np.eye(3), np.array([5.0, 1.0, -2.0])))
    np.testing.assert_allclose(shifted["dipole"], pred["dipole"], atol=1e-10)
    # without neutrality the total charge Q moves D by Q·t
    free = _model("AC_dipole_model", charge_neutrality=False)
    q, d = _predict(free, cluster)["charges"], _predict(free, cluster)["dipole"][0]
    d_moved = _predict(free, _moved(cluster, np.eye(3), np.array([5.0, 1.0, -2.0])))["dipole"][0]
    assert abs(q.sum()) > 1e-3
    np.testing.assert_allclose(d_moved - d, q.sum() * np.array([5.0, 1.0, -2.0]), atol=1e-10)


def test_water_molecule_neutrality_in_a_padded_batch(cluster):
    """Groups of three atoms start afresh in every structure: two structures of a batch, padding added."""
    from pinn.io.padding import pad_batch
    model = _model("AC_dipole_model", neutral_unit="water_molecule")
    batch = batch_from_atoms([cluster, cluster[:6]], RC, "float64")
    padded, (n_struct, n_atoms) = pad_batch(batch, RC, 1)
    charges = model.predict({k: tf.constant(v) for k, v in padded.items()})["charges"].numpy()[:n_atoms]
    np.testing.assert_allclose(charges.reshape(-1, 3).sum(axis=1), 0.0, atol=1e-12)
    np.testing.assert_allclose(charges[:len(cluster)], _predict(model, cluster)["charges"], atol=1e-12)


def test_pinet_gives_its_interactions(cluster):
    """The bond charges read PiNet's interactions from its own forward pass (call_with_interactions): the
    outputs of atomic_outputs, one [n_pairs, ii_nodes[-1]] interaction per block."""
    network = _model("BC_R_dipole_model").network
    tensors = pair_geometry(_batch(cluster))
    outputs, interactions = network.call_with_interactions(tensors)
    np.testing.assert_array_equal(outputs.numpy(), network.atomic_outputs(tensors).numpy())
    assert len(interactions) == PINET["depth"] and interactions[0].shape[1] == PINET["ii_nodes"][-1]


def test_loss_options_of_upstream(cluster):
    """vector_dipole, d_scale, max_dipole, use_d_per_atom and the bond-charge regularisation, on one batch."""
    batch = _batch(cluster)
    label = np.array([[0.3, -1.2, 0.5]])
    batch["d_data"] = tf.constant(label)
    n_atoms = len(cluster)

    def dipole_residual(**options):
        model = _model("AC_BC_R_dipole_model", **options)
        pred = model.predict(batch, bond_charges=True)
        return model, pred, {t: (e.numpy(), w.numpy()) for t, (e, w) in model.residuals(batch, pred).items()}

    model, pred, res = dipole_residual()  # upstream's default: the magnitude
    d = pred["dipole"].numpy()[0]
    np.testing.assert_allclose(res["dipole"][0], [np.linalg.norm(d) - np.linalg.norm(label)], atol=1e-9)
    bonds = pred["bond_charges"].numpy()
    np.testing.assert_allclose(res["bond_charges"][0], bonds)
    assert len(bonds) == len(batch["ind_2"]) and model.loss_counts(batch)["bond_charges"] == len(bonds)
    _, pred2, res = dipole_residual(vector_dipole=True, d_scale=2.0, use_d_per_atom=True)
    np.testing.assert_allclose(res["dipole"][0], 2.0 * (pred2["dipole"].numpy()[0] - label[0]) / n_atoms, atol=1e-12)
    np.testing.assert_allclose(pred2["dipole"].numpy()[0], d / 2.0, atol=1e-12)  # the network's units / d_scale
    model, _, res = dipole_residual(vector_dipole=True, max_dipole=1.0)  # |−1.2| > 1: that component left out
    np.testing.assert_array_equal(res["dipole"][1], [1.0, 0.0, 1.0])
    assert model.loss_counts(batch)["dipole"] == 2.0
    model, _, res = dipole_residual(regularization=False)
    assert "bond_charges" not in res and model.loss_term_names() == ["dipole"]
    batch["d_weight"] = tf.constant([0.25])
    _, _, res = dipole_residual(vector_dipole=True, use_d_weight=True)
    np.testing.assert_array_equal(res["dipole"][1], [0.25] * 3)
    model = _model("AC_BC_R_dipole_model", use_l2=True)
    sums = model.loss_sums(batch, model.predict(batch, bond_charges=True))
    kernels = model.network.regularized_weights() + model.bond_head.regularized_weights()
    assert len(model.bond_head.regularized_weights()) == PINET["depth"] * len(PINET["out_nodes"])
    np.testing.assert_allclose(sums["l2"], sum(np.sum(k.numpy() ** 2) / 2 for k in kernels), rtol=1e-12)


def test_upstream_params_are_accepted_and_ad_refuses_pinet(tmp_path):
    upstream = {"d_scale": 1.0, "d_unit": 1.0, "vector_dipole": False, "max_dipole": False, "use_d_per_atom": False,
                "log_d_per_atom": False, "use_d_weight": False, "use_l2": False, "d_loss_multiplier": 1.0,
                "q_loss_multiplier": 1.0}
    extra = {"AC_dipole_model": ("charge_neutrality", "neutral_unit"), "AC_AD_dipole_model": ("charge_neutrality",
             "neutral_unit"), "AC_BC_R_dipole_model": ("charge_neutrality", "neutral_unit", "regularization"),
             "BC_R_dipole_model": ("regularization",), "AD_BC_R_dipole_model": ("regularization",)}
    defaults = {"charge_neutrality": True, "neutral_unit": "system", "regularization": True}
    for name in VARIANTS:
        assert name not in NOT_YET
        options = dict(upstream, **{k: defaults[k] for k in extra.get(name, ())})
        resolved = _params(name, "PiNet2", options)["model"]["params"]
        assert {k: resolved[k] for k in options} == options
        # upstream's default of vector_dipole: true for AD_OS only
        assert _params(name, "PiNet2")["model"]["params"]["vector_dipole"] == (name == "AD_OS_dipole_model")
    assert _params("dipole_model")["model"]["params"]["vector_dipole"] is True  # pinn's own model: as before
    with pytest.raises(ParamsError, match="log_d_per_atom.*no per-atom dipole metric"):
        _params("AC_dipole_model", options={"log_d_per_atom": True})
    with pytest.raises(ParamsError, match="neutral_unit"):
        _params("AC_dipole_model", options={"neutral_unit": "molecule"})
    for name in ("AD_dipole_model", "AD_OS_dipole_model", "AC_AD_dipole_model", "AD_BC_R_dipole_model"):
        with pytest.raises(ParamsError, match=f"{name} needs atomic dipoles .*p3.*PiNet has atomic scalars only"):
            _model(name, "PiNet")
    params = {"model_dir": str(tmp_path / "m"), "network": {"name": "PiNet2", "params": dict(PINET2, out_extra={})},
              "model": {"name": "AD_dipole_model"}}
    with pytest.raises(ParamsError, match="out_extra: the AD_dipole_model reads .*p3"):
        get_model(params)
    bpnn = {"model_dir": str(tmp_path / "b"), "network": {"name": "BPNN", "params": {"atom_types": [1, 8], "rc": RC}},
            "model": {"name": "BC_R_dipole_model"}}
    with pytest.raises(ParamsError, match="BC_R_dipole_model needs pair features"):
        get_model(bpnn)


@pytest.fixture(scope="module")
def qeq_water(tmp_path_factory):
    """pinn.demo's water-cluster set (1 to 3 molecules, QEq charges and dipole), written and read back once:
    96 frames to train on, 24 to validate on."""
    import ase.io
    path = make_dipole_dataset(str(tmp_path_factory.mktemp("water") / "water.xyz"), n_frames=120, seed=0)
    frames = ase.io.read(path, ":")
    return frames[:96], frames[96:]


#: every variant, on the network it is trained with below
TRAINED_CASES = [("AC_dipole_model", "PiNet"), ("BC_R_dipole_model", "PiNet"), ("AC_BC_R_dipole_model", "PiNet"),
                 ("AD_dipole_model", "PiNet2"), ("AD_OS_dipole_model", "PiNet2"), ("AC_AD_dipole_model", "PiNet2"),
                 ("AD_BC_R_dipole_model", "PiNet2")]
#: also restored from the model directory and run by the calculator: PiNet's bond head, PiNet2's pair outputs and p3,
#: oxidation states in the data pipeline
RESTORED = [("AC_BC_R_dipole_model", "PiNet"), ("AD_BC_R_dipole_model", "PiNet2"), ("AD_OS_dipole_model", "PiNet2")]
#: each variant's bound on its validation dipole RMSE after 120 steps, as a fraction of the RMSE of predicting
#: a zero dipole (0.192 e·Å per component): about twice the worst of seeds 1, 2, 3 (docs/dipole.md lists them)
QEQ_BOUNDS = {"AC_dipole_model": 0.5, "BC_R_dipole_model": 0.6, "AC_BC_R_dipole_model": 0.8,
              "AD_dipole_model": 0.3, "AD_OS_dipole_model": 0.8, "AC_AD_dipole_model": 0.3,
              "AD_BC_R_dipole_model": 0.35}


@pytest.mark.parametrize("case", TRAINED_CASES, ids=["-".join(c) for c in TRAINED_CASES])
def test_each_variant_trains_to_its_bound_on_qeq_water(qeq_water, tmp_path, case):
    """120 trainer steps (Adam 1e-2, batches of 8, the vector loss, float32, no XLA) on the QEq water clusters
    take each variant's validation dipole RMSE (per component, e·Å) below QEQ_BOUNDS[variant] × the RMSE of
    predicting zero, and below half its untrained RMSE; more than half of the variables, and every variable of
    a bond head, have moved.  For the RESTORED cases the model directory holds every weight (the bond heads'
    included) and the calculator gives the dipole (and charges).

    Measured (seeds 1, 2, 3; the test runs seed 1), as fractions of zero's RMSE: AC 0.11, 0.25, 0.13;
    BC_R 0.18, 0.17, 0.31; AC_BC_R 0.22, 0.19, 0.39; AD 0.13, 0.13, 0.11; AD_OS 0.39, 0.37, 0.39 (its atomic
    dipoles must cancel most of the oxidation states' large Σ q_ox r); AC_AD 0.11, 0.15, 0.10; AD_BC_R 0.14,
    0.16, 0.14; after / untrained at most 0.19.  Untrained, the models are at 0.59–7.3 × zero's RMSE, so a
    model that does not learn fails one bound or the other."""
    name, network = case
    train_frames, vali_frames = qeq_water

    def data(frames):
        return load_ase(frames, shuffle=False).map(lambda s: {**s, "oxidation": tf.where(s["elems"] == 8, -2.0, 1.0)})
    train = lambda: data(train_frames).cache().repeat().shuffle(96, seed=1).apply(sparse_batch(8))
    vali = lambda: data(vali_frames).apply(sparse_batch(24))
    params = {"model_dir": str(tmp_path / "m"), "seed": 1,
              "network": {"name": network, "params": _network_params(name, network)},
              "model": {"name": name, "params": {"learning_rate": 1e-2, "vector_dipole": True,
                                                 "log_every_n_steps": 1000, "jit": False}}}
    model = get_model(params)
    zero = np.sqrt(np.mean([a.calc.results["dipole"] ** 2 for a in vali_frames]))
    initial = [v.numpy().copy() for v in model.model.trainable_variables]
    before = model.evaluate(vali)["D_RMSE"]
    model.train(train, max_steps=120)
    after = model.evaluate(vali)["D_RMSE"]
    assert after < QEQ_BOUNDS[name] * zero and after < 0.5 * before, (name, zero, before, after)
    moved = [not np.array_equal(v.numpy(), v0) for v, v0 in zip(model.model.trainable_variables, initial)]
    assert sum(moved) > 0.5 * len(moved)
    if model.model.BONDS and network == "PiNet":  # the bond head is trained (and checkpointed) with the rest
        head = {id(v) for v in model.model.bond_head.trainable_variables}
        assert head and head <= {id(v) for v in model.model.trainable_variables}
        assert all(m for v, m in zip(model.model.trainable_variables, moved) if id(v) in head)
    if case not in RESTORED:
        return
    restored = get_model(str(tmp_path / "m"))
    assert int(restored.step) == 120
    for mine, theirs in zip(model.model.trainable_variables, restored.model.trainable_variables):
        np.testing.assert_array_equal(theirs.numpy(), mine.numpy())
    if name == "AD_BC_R_dipole_model":
        return
    mine = next(model.predict(vali))
    # the calculator (XLA on padded batches, float32): the dipole, charges where the model has them,
    # oxidation states from the atoms' initial charges
    from pinn.calculator import get_calc
    atoms = vali_frames[0].copy()
    atoms.set_initial_charges(_oxidation(atoms))
    atoms.calc = get_calc(str(tmp_path / "m"))
    np.testing.assert_allclose(atoms.get_dipole_moment(), mine["dipole"], rtol=1e-5, atol=1e-5)
    if "charges" in mine:
        np.testing.assert_allclose(atoms.get_charges(), mine["charges"], rtol=1e-5, atol=1e-5)
    else:
        from ase.calculators.calculator import PropertyNotImplementedError
        with pytest.raises(PropertyNotImplementedError, match="charges"):
            atoms.get_charges()


@pytest.mark.parametrize("network", ["PiNet", "PiNet2"])
def test_bond_charges_vanish_at_the_cutoff(models, network):
    """An O–H pair just inside the cutoff carries almost no bond charge: the dipole is continuous as the pair
    leaves the neighbor list (beyond it there is no pair and no dipole)."""
    from ase import Atoms
    model = models[("BC_R_dipole_model", network)]
    for gap, bound in ((1e-3, 1e-6), (0.5, 1e-4)):
        pair = Atoms("OH", positions=[[0.0, 0.0, 0.0], [RC - gap, 0.0, 0.0]])
        size = np.linalg.norm(_predict(model, pair)["dipole"][0])
        assert (size < bound) if gap < 0.1 else (size > bound), (gap, size)
