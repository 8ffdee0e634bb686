"""Warm start (model.params.init_model): a fresh run begins from another model directory's weights,
weight average and e_dress, with a fresh optimizer and schedule; a mismatched network is refused."""
import logging

import numpy as np
import pytest

from pinn.io import load_ase, sparse_batch
from pinn.models import potential_model

from settings import small_net, training_params

NET = small_net([29, 79], pi_nodes=[8, 8])  # two PI layers: the numba training engine can run it
#: e_dress fitted on one pass over the 40 frames (tests/conftest.py's trained_alloy_model says why)
DEFAULTS = {"use_force": True, "fit_e_dress": True, "fit_e_dress_batches": 5, "learning_rate": 3e-3,
            "log_every_n_steps": 1000, "progress_bar": "off"}


def _train_input(path, batch=8):
    return lambda: load_ase(path).take(40).cache().repeat().shuffle(40, seed=1).apply(sparse_batch(batch))


def _values(variables):
    return [np.array(v.numpy()) for v in variables]


@pytest.fixture(scope="module")
def source(alloy_xyz, tmp_path_factory):
    """A model directory trained 8 steps with a weight average (ema_decay 0.5: it differs from the weights)."""
    model_dir = tmp_path_factory.mktemp("source")
    model = potential_model(training_params(model_dir, NET, DEFAULTS, ema_decay=0.5))
    model.train(_train_input(alloy_xyz), 8)
    return model, str(model_dir)


def test_a_fresh_run_starts_from_the_weights_average_and_e_dress(source, tmp_path):
    trained, source_dir = source
    model = potential_model(training_params(tmp_path / "new", NET, DEFAULTS, ema_decay=0.5, init_model=source_dir))
    for mine, theirs in zip(_values(model.model.variables), _values(trained.model.variables)):
        np.testing.assert_array_equal(mine, theirs)  # weights, e_dress, dress_fitted
    for mine, theirs in zip(_values(model.state.ema.shadow), _values(trained.state.ema.shadow)):
        np.testing.assert_array_equal(mine, theirs)
    assert int(model.state.ema.updates) == int(trained.state.ema.updates) > 0
    assert int(model.step) == 0 and model.restored is None
    assert int(model.state.optimizer.iterations) == 0, "the optimizer starts afresh"
    assert bool(model.model.dress_fitted), "e_dress is not fitted again"


def test_without_an_average_of_its_own_the_run_starts_from_the_sources_average(source, tmp_path):
    trained, source_dir = source
    model = potential_model(training_params(tmp_path / "new", NET, DEFAULTS, ema_decay=None, init_model=source_dir))
    for mine, theirs in zip(_values(model.model.trainable_variables), _values(trained.state.ema.shadow)):
        np.testing.assert_array_equal(mine, theirs)
    assert not np.array_equal(_values(trained.state.ema.shadow)[0], _values(trained.model.trainable_variables)[0])


def test_training_goes_on_and_a_resume_uses_its_own_checkpoint(source, alloy_xyz, tmp_path, caplog):
    _, source_dir = source
    params = training_params(tmp_path / "new", NET, DEFAULTS, ema_decay=0.5, init_model=source_dir)
    model = potential_model(params)
    model.train(_train_input(alloy_xyz), 3)
    assert int(model.step) == 3
    after = _values(model.model.trainable_variables)
    with caplog.at_level(logging.INFO, logger="pinn"):
        resumed = potential_model(params)
    assert resumed.restored and int(resumed.step) == 3
    for mine, theirs in zip(_values(resumed.model.trainable_variables), after):
        np.testing.assert_array_equal(mine, theirs)
    assert "not used: the run goes on from its own checkpoint" in caplog.text


@pytest.mark.parametrize("change, message", [
    ({"net": {"depth": 3}}, "its network differs from this run's: depth 2 there, 3 here"),
    ({"net": {"atom_types": [29, 79, 1]}}, r"atom_types \[29, 79\] there, \[29, 79, 1\] here"),
    ({"precision": "float64"}, "precision float32 there, float64 here"),
])
def test_a_network_that_does_not_match_is_refused_with_the_difference(source, tmp_path, change, message):
    _, source_dir = source
    params = training_params(tmp_path / "new", {**NET, **change.get("net", {})}, DEFAULTS, init_model=source_dir)
    params.update({k: v for k, v in change.items() if k != "net"})
    with pytest.raises(ValueError, match=message):
        potential_model(params)


def test_a_source_without_a_checkpoint_is_refused(source, tmp_path):
    _, source_dir = source
    empty = tmp_path / "empty"
    potential_model(training_params(empty, NET, DEFAULTS))  # params.yml, no checkpoint
    with pytest.raises(ValueError, match="holds no checkpoint"):
        potential_model(training_params(tmp_path / "new", NET, DEFAULTS, init_model=str(empty)))


@pytest.mark.parametrize("optimizer, engine", [("adam", "tensorflow"), ("adam", "numba"), ("ekf", "tensorflow")])
def test_frozen_blocks_stay_as_the_source_predicted_and_the_rest_trains(source, alloy_xyz, tmp_path, optimizer,
                                                                       engine):
    """freeze ['gc_*']: the interaction blocks keep the source's averaged weights exactly; the output nets train."""
    from pinn.training.freeze import variable_paths
    trained, source_dir = source
    extra = {"ekf_max_memory_gb": 1.0} if optimizer == "ekf" else {}
    params = training_params(tmp_path / "new", NET, DEFAULTS, ema_decay=0.5, init_model=source_dir,
                             freeze=["gc_*"], optimizer=optimizer, engine=engine, max_grad_norm=0.01, **extra)
    model = potential_model(params)
    paths = variable_paths(model.model)
    frozen = [p.startswith("gc_") for p in paths]
    assert any(frozen) and not all(frozen) and "gc_0/pp/dense_0/kernel" in paths
    start = _values(model.model.trainable_variables)
    for value, mean, is_frozen in zip(start, _values(trained.state.ema.shadow), frozen):
        if is_frozen:  # the source's averaged weights, not its raw ones
            np.testing.assert_array_equal(value, mean)
    # the EKF's Jacobian of a batch of 8 takes 8 GB (TensorFlow vectorises all its rows at once): 2 structures
    model.train(_train_input(alloy_xyz, 2 if optimizer == "ekf" else 8), 3)
    assert int(model.step) == 3
    after = _values(model.model.trainable_variables)
    averaged = _values(model.state.ema.shadow)
    for path, before, now, mean, is_frozen in zip(paths, start, after, averaged, frozen):
        if is_frozen:
            np.testing.assert_array_equal(now, before, err_msg=path)
            np.testing.assert_allclose(mean, before, rtol=1e-6, atol=1e-7, err_msg=path)
    assert any(not np.array_equal(b, a) for b, a, f in zip(start, after, frozen) if not f), "nothing trained"


def test_a_freeze_pattern_that_matches_nothing_is_refused_naming_the_parts(tmp_path):
    from pinn.params import ParamsError
    with pytest.raises(ParamsError, match=r"freeze: 'interaction\*' matches none .* parts are gc_0, gc_1, "):
        potential_model(training_params(tmp_path / "m", NET, DEFAULTS, freeze=["interaction*"]))
    with pytest.raises(ParamsError, match="freezes every variable"):
        potential_model(training_params(tmp_path / "n", NET, DEFAULTS, freeze=["*"]))


@pytest.mark.parametrize("engine", ["tensorflow", "numba"])
def test_a_resumed_run_that_freezes_anew_leaves_the_blocks_despite_adams_momentum(alloy_xyz, tmp_path, engine):
    from pinn.training.freeze import variable_paths
    params = training_params(tmp_path / "run", NET, DEFAULTS, engine=engine)
    potential_model(params).train(_train_input(alloy_xyz), 2)  # Adam's moments of every weight nonzero
    params["model"]["params"]["freeze"] = ["gc_1"]
    model = potential_model(params)
    assert model.restored
    frozen = [p.startswith("gc_1/") for p in variable_paths(model.model)]
    start = _values(model.model.trainable_variables)
    model.train(_train_input(alloy_xyz), 4)  # to step 4
    assert int(model.step) == 4
    for before, now, is_frozen in zip(start, _values(model.model.trainable_variables), frozen):
        assert np.array_equal(before, now) == is_frozen
