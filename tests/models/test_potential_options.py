"""Upstream PiNN's potential-model options: e_scale's meaning, the loss options (max_energy,
use_e_weight, use_e_per_sqrt, max_force_comp, no_force_comp, use_f_weight, use_l2) computed
against NumPy, their upstream aliases, and old pinn params converted on load."""
import logging

import numpy as np
import pytest
import tensorflow as tf
import yaml
from ase import Atoms

from pinn import keys as K
from pinn.io.batch import batch_from_atoms
from pinn.params import ParamsError, read_params, resolve

from settings import model_of

NET = {"atom_types": [1, 8], "rc": 3.0, "depth": 1, "pp_nodes": [4], "pi_nodes": [4], "ii_nodes": [4],
       "out_nodes": [4], "n_basis": 4}


def _model(**options):
    return model_of("potential_model", NET, **options)


def _batch(seed=0):
    """Three water-like molecules (3, 4 and 5 atoms) with labels and weights."""
    rng = np.random.RandomState(seed)
    structures = [Atoms("OH2", rng.rand(3, 3) * 2), Atoms("OH3", rng.rand(4, 3) * 2),
                  Atoms("O2H3", rng.rand(5, 3) * 2)]
    batch = {k: tf.constant(v) for k, v in batch_from_atoms(structures, NET["rc"], "float64").items()}
    batch[K.E_DATA] = tf.constant([0.3, -2.0, 0.1], tf.float64)
    batch[K.F_DATA] = tf.constant(rng.randn(12, 3), tf.float64)
    batch[K.E_WEIGHT] = tf.constant([1.0, 0.5, 2.0], tf.float64)
    batch[K.F_WEIGHT] = tf.constant(rng.rand(12), tf.float64)
    return batch


def _loss_parts(model, batch):
    pred = model.predict(batch)
    sums = {t: float(v) for t, v in model.loss_sums(batch, pred).items()}
    counts = {t: float(v) for t, v in model.loss_counts(batch).items()}
    return pred, sums, counts


def test_e_scale_divides_the_network_energy_and_scales_the_loss():
    batch = _batch()
    plain, scaled = _model(use_force=True), _model(use_force=True, e_scale=4.0)
    scaled.network = plain.network  # the same weights
    e1, e4 = plain.predict(batch)["energy"].numpy(), scaled.predict(batch)["energy"].numpy()
    np.testing.assert_allclose(e4, e1 / 4.0, rtol=1e-12)
    pred, sums, _ = _loss_parts(scaled, batch)
    e_err = (pred["energy"].numpy() - batch[K.E_DATA].numpy()) * 4.0
    f_err = (pred["forces"].numpy() - batch[K.F_DATA].numpy()) * 4.0
    assert sums["energy"] == pytest.approx(np.sum(e_err ** 2), rel=1e-12)
    assert sums["forces"] == pytest.approx(np.sum(f_err ** 2), rel=1e-12)


def test_energy_options_against_numpy():
    batch = _batch()
    model = _model(use_e_per_atom=True, use_e_per_sqrt=True, use_e_weight=True, max_energy=1.5, e_scale=1.0)
    pred, sums, counts = _loss_parts(model, batch)
    n_atoms = np.array([3.0, 4.0, 5.0])
    err = (pred["energy"].numpy() - batch[K.E_DATA].numpy()) / n_atoms * np.sqrt(n_atoms)
    keep = np.abs(batch[K.E_DATA].numpy()) <= 1.5  # e_dress is zero: |E| is the dressed energy
    assert list(keep) == [True, False, True]
    assert counts["energy"] == 2.0
    assert sums["energy"] == pytest.approx(np.sum(keep * batch[K.E_WEIGHT].numpy() * err ** 2), rel=1e-12)


def test_force_options_against_numpy():
    batch = _batch()
    model = _model(use_force=True, max_force_comp=1.0, use_f_weight=True, e_loss_multiplier=1.0)
    pred, sums, counts = _loss_parts(model, batch)
    f_data = batch[K.F_DATA].numpy()
    keep = np.abs(f_data) <= 1.0
    assert 0 < keep.sum() < keep.size
    err = pred["forces"].numpy() - f_data
    assert counts["forces"] == keep.sum()
    assert sums["forces"] == pytest.approx(np.sum(keep * batch[K.F_WEIGHT].numpy()[:, None] * err ** 2), rel=1e-12)


def test_no_force_comp_draws_that_many_components_the_same_in_counts_and_sums():
    batch = _batch()
    model = _model(use_force=True, no_force_comp=5)
    pred, sums, counts = _loss_parts(model, batch)
    assert counts["forces"] == 5.0
    mask = model.loss_masks(batch, tf.float64)["forces"].numpy().reshape(-1, 3)
    err = pred["forces"].numpy() - batch[K.F_DATA].numpy()
    assert sums["forces"] == pytest.approx(np.sum(mask * err ** 2), rel=1e-12)
    np.testing.assert_array_equal(mask, model.loss_masks(batch, tf.float64)["forces"].numpy().reshape(-1, 3))
    other = _batch(seed=1)
    assert not np.array_equal(mask, model.loss_masks(other, tf.float64)["forces"].numpy().reshape(-1, 3))
    assert float(_model(use_force=True, no_force_comp=100).loss_counts(batch)["forces"]) == 36.0


def test_l2_regularises_the_hidden_weight_matrices():
    batch = _batch()
    model = _model(use_l2=True, l2_loss_multiplier=0.1)
    _, sums, counts = _loss_parts(model, batch)
    weights = model.network.regularized_weights()
    assert weights and all(v.name.startswith("kernel") for v in weights)
    assert len(weights) < len([v for v in model.network.trainable_variables if v.name.startswith("kernel")])
    assert sums["l2"] == pytest.approx(sum(float(tf.reduce_sum(v ** 2)) / 2 for v in weights), rel=1e-12)
    assert counts["l2"] == 1.0
    assert model.loss_weights(0.0)["l2"] == 0.1


def test_upstream_aliases_and_their_conflicts():
    mp = resolve({"model_dir": "m", "network": {"name": "PiNet", "params": NET},
                  "model": {"name": "potential_model", "params": {"max_force": 2.0, "use_f_weights": True}}})
    assert mp["model"]["params"]["max_force_comp"] == 2.0 and mp["model"]["params"]["use_f_weight"] is True
    with pytest.raises(ParamsError, match="max_force.*max_force_comp"):
        resolve({"model_dir": "m", "network": {"name": "PiNet", "params": NET},
                 "model": {"params": {"max_force": 2.0, "max_force_comp": 1.0}}})
    with pytest.raises(ParamsError, match="no_force_comp"):
        resolve({"model_dir": "m", "network": {"name": "PiNet", "params": NET},
                 "model": {"params": {"no_force_comp": True}}})


def test_missing_weight_data_is_named():
    batch = _batch()
    del batch[K.E_WEIGHT]
    model = _model(use_e_weight=True)
    with pytest.raises(ValueError, match="use_e_weight.*e_weight"):
        model.loss_sums(batch, model.predict(batch))


def test_old_pinn_params_file_converts_e_scale(tmp_path, caplog):
    """A params.yml written by pinn < 0.14 (always with parallel_params, never params_format) meant
    energy = e_scale · Σ net: it is read as e_scale → 1 / e_scale, with a logged line."""
    old = resolve({"model_dir": str(tmp_path), "network": {"name": "PiNet", "params": NET},
                   "model": {"name": "potential_model", "params": {"e_scale": 2.0}}})
    del old["params_format"]
    (tmp_path / "params.yml").write_text(yaml.safe_dump(old))
    with caplog.at_level(logging.INFO, logger="pinn"):
        params = read_params(tmp_path)
    assert params["model"]["params"]["e_scale"] == 0.5 and params["params_format"] == 2
    assert "e_scale 2.0 of pinn < 0.14" in caplog.text
    new = resolve({"model_dir": str(tmp_path), "network": {"name": "PiNet", "params": NET},
                   "model": {"params": {"e_scale": 2.0}}})
    (tmp_path / "params.yml").write_text(yaml.safe_dump(new))
    assert read_params(tmp_path)["model"]["params"]["e_scale"] == 2.0
