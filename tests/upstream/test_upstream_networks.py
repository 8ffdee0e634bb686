"""Upstream PiNN's network options: BPNN's G3 and G4 against a brute-force NumPy sum, fp_scale with
fp_range, atom_types taken from nn_spec; LJ for any element; PiNet's Gaussian centers and out_pool;
the conversion of pinn < 0.14's BPNN params."""
import itertools
import logging

import numpy as np
import pytest
import tensorflow as tf
from ase import Atoms

from pinn.io.batch import batch_from_atoms
from pinn.networks import get_network
from pinn.params import ParamsError, resolve
from pinn.physics.potential import PotentialModel, pair_geometry

RC = 3.0


def _network(name, params):
    return get_network(resolve({"model_dir": "unused", "precision": "float64",
                                "network": {"name": name, "params": params}}))


def _batch(structures):
    batch = {k: tf.constant(v) for k, v in batch_from_atoms(structures, RC, "float64").items()}
    return pair_geometry(batch)


def _cutoff(r):
    return np.where(r < RC, 0.5 * (np.cos(np.pi * r / RC) + 1.0), 0.0)  # f1


def _brute_force_angular(positions, numbers, kind, eta, lambd, zeta, i=None, j=None, k=None):
    """Σ over ordered neighbor pairs (j, k), j ≠ k, of each centre atom (open boundaries)."""
    out = np.zeros(len(positions))
    for a in range(len(positions)):
        if i is not None and numbers[a] != i:
            continue
        for b, c in itertools.permutations([n for n in range(len(positions)) if n != a], 2):
            if (j is not None and numbers[b] != j) or (k is not None and numbers[c] != k):
                continue
            r_ab, r_ac = positions[b] - positions[a], positions[c] - positions[a]
            d_ab, d_ac, d_bc = np.linalg.norm(r_ab), np.linalg.norm(r_ac), np.linalg.norm(positions[c] - positions[b])
            if d_ab >= RC or d_ac >= RC:
                continue
            cos = r_ab @ r_ac / d_ab / d_ac
            radial = d_ab ** 2 + d_ac ** 2 + (d_bc ** 2 if kind == "G3" else 0.0)
            cut = _cutoff(d_ab) * _cutoff(d_ac) * (_cutoff(d_bc) if kind == "G3" else 1.0)
            out[a] += 2 ** (1 - zeta) * max(1 + lambd * cos, 0.0) ** zeta * np.exp(-eta * radial) * cut
    return out


@pytest.mark.parametrize("kind", ["G3", "G4"])
def test_angular_symmetry_functions_against_a_brute_force_sum(kind):
    rng = np.random.RandomState(3)
    atoms = Atoms("OH2CH", rng.rand(5, 3) * 2.5)
    spec = [{"type": kind, "i": "ALL", "j": 1, "k": "ALL", "eta": [0.1, 0.4], "lambd": [1.0, -1.0],
             "zeta": [1.0, 2.0]}]
    net = _network("BPNN", {"atom_types": [1, 6, 8], "rc": RC, "sf_spec": spec, "nn_spec": [4]})
    fp = net.fingerprints(_batch([atoms])).numpy()
    for col, (eta, lambd, zeta) in enumerate(zip(spec[0]["eta"], spec[0]["lambd"], spec[0]["zeta"])):
        expected = _brute_force_angular(atoms.positions, atoms.numbers, kind, eta, lambd, zeta, j=1)
        np.testing.assert_allclose(fp[:, col], expected, rtol=1e-10, atol=1e-12)
    assert fp[:, 0].any()


def test_fp_scale_maps_fp_range_to_minus_one_one_and_atom_types_come_from_nn_spec():
    atoms = Atoms("OH2", [[0, 0, 0], [0.96, 0, 0], [-0.24, 0.93, 0]])
    spec = [{"type": "G2", "i": "ALL", "j": "ALL", "eta": [0.5], "Rs": [0.0]}]
    plain = _network("BPNN", {"rc": RC, "sf_spec": spec, "nn_spec": {"O": [4], 1: [4]}})
    assert plain.atom_types == [1, 8]
    scaled = _network("BPNN", {"rc": RC, "sf_spec": spec, "nn_spec": {8: [4], 1: [4]}, "fp_scale": True,
                               "fp_range": [[0.5, 2.5]]})
    batch = _batch([atoms])
    raw, mapped = plain.fingerprints(batch).numpy(), scaled.fingerprints(batch).numpy()
    np.testing.assert_allclose(mapped, (raw - 0.5) / 2.0 * 2 - 1, rtol=1e-12)
    with pytest.raises(ParamsError, match="fp_range.*one \\[min, max\\] per sf_spec entry"):
        _network("BPNN", {"rc": RC, "sf_spec": spec, "nn_spec": {8: [4]}, "fp_scale": True})
    with pytest.raises(ParamsError, match="atom_types: needed when nn_spec is a list"):
        _network("BPNN", {"rc": RC, "sf_spec": spec, "nn_spec": [4]})


def test_lj_takes_any_element_without_atom_types():
    net = _network("LJ", {"rc": RC})
    batch = _batch([Atoms("ArXe", [[0, 0, 0], [0, 0, 1.5]])])
    energy = float(tf.reduce_sum(net(batch)))
    s6 = (1.0 / 1.5) ** 6
    shift = 4 * ((1 / RC) ** 12 - (1 / RC) ** 6)
    assert energy == pytest.approx(4 * (s6 * s6 - s6) - shift, rel=1e-10)


def test_pinet_gaussian_centers_and_out_pool():
    base = {"atom_types": [1, 8], "rc": RC, "depth": 1, "pp_nodes": [4], "pi_nodes": [4], "ii_nodes": [4],
            "out_nodes": [4], "basis_type": "gaussian", "n_basis": 3}
    batch = _batch([Atoms("OH2", [[0, 0, 0], [0.96, 0, 0], [-0.24, 0.93, 0]]), Atoms("OH", [[0, 0, 0], [0, 0, 1]])])
    even = _network("PiNet", base)
    same = _network("PiNet", dict(base, center=[0.0, RC / 2, RC]))
    moved = _network("PiNet", dict(base, center=[0.5, 1.0, 2.0]))
    atomic = even.atomic_outputs(batch).numpy()
    np.testing.assert_allclose(same.atomic_outputs(batch).numpy(), atomic, rtol=1e-12)
    assert not np.allclose(moved.atomic_outputs(batch).numpy(), atomic)
    for pool, reduce in (("sum", np.sum), ("max", np.max), ("min", np.min)):
        pooled = _network("PiNet", dict(base, out_pool=pool)).atomic_outputs(batch).numpy()
        np.testing.assert_allclose(pooled[:, 0], [reduce(atomic[:3, 0]), reduce(atomic[3:, 0])], rtol=1e-12)
    with pytest.raises(ParamsError, match="center: 2 centers for n_basis 3"):
        _network("PiNet", dict(base, center=[0.0, 1.0]))
    with pytest.raises(ParamsError, match="out_pool.*models need one output per atom"):
        net = _network("PiNet", dict(base, out_pool="sum"))
        PotentialModel(net, resolve({"model_dir": "m", "network": {"name": "PiNet", "params": base}})
                       ["model"]["params"], [1, 8], tf.float64)


def test_bpnn_params_of_pinn_before_0_14_are_converted(tmp_path, caplog):
    import yaml

    from pinn.params import read_params
    old = resolve({"model_dir": str(tmp_path), "network": {"name": "BPNN", "params": {"atom_types": [1, 8]}}})
    del old["params_format"]
    old["network"]["params"]["fp_scale"] = 0.5
    old["network"]["params"]["sf_spec"][1]["type"] = "G4"
    del old["network"]["params"]["fp_multiplier"], old["network"]["params"]["fp_range"]
    (tmp_path / "params.yml").write_text(yaml.safe_dump(old))
    with caplog.at_level(logging.WARNING, logger="pinn"):
        params = read_params(tmp_path)["network"]["params"]
    assert params["fp_multiplier"] == 0.5 and params["fp_scale"] is False
    assert [sf["type"] for sf in params["sf_spec"]] == ["G2", "G3"]
    assert "twice the old values" in caplog.text


def test_numba_engines_refuse_custom_centers_and_pooling():
    from pinn.engines.lowering import available, refusal
    if not available():
        pytest.skip("numba is not installed")
    base = {"atom_types": [1, 8], "rc": RC, "depth": 1, "pp_nodes": [4], "pi_nodes": [4, 4], "ii_nodes": [4],
            "out_nodes": [4], "basis_type": "gaussian", "n_basis": 3}
    params = resolve({"model_dir": "m", "precision": "float64", "network": {"name": "PiNet", "params": base}})
    model = PotentialModel(get_network(params), params["model"]["params"], [1, 8], tf.float64)
    assert refusal(model, "md") is None
    model.network.params["center"] = [0.0, 1.0, 2.0]
    assert "network.params.center" in refusal(model, "md")
    assert "network.params.center" in refusal(model, "training")


@pytest.mark.parametrize("network, model, message", [
    ("PiNet", "AC_quadrupole_model", "model.name: 'AC_quadrupole_model' is one of upstream PiNN 2.x's dipole "
     "models, not in pinn yet")])
def test_upstream_networks_and_models_not_in_pinn_yet_are_named(network, model, message):
    with pytest.raises(ParamsError, match=message):
        resolve({"model_dir": "m", "network": {"name": network, "params": {}}, "model": {"name": model}})
