"""Upstream PiNN 2.x's Python names work here as they do there: pinn.get_model / get_network,
loaders' splits=, evaluate(steps=), get_calc's params form and its to_eV / properties /
checkpoint_path keywords (any other keyword refused), metric keys under METRICS/."""
import numpy as np
import pytest
import yaml
from ase.build import bulk
from ase.calculators.calculator import PropertyNotImplementedError

import pinn
from pinn.io import list_loader, load_ase, load_numpy, sparse_batch
from pinn.params import ParamsError

NETWORK = {"name": "PiNet", "params": {"atom_types": [29, 79], "rc": 4.0, "depth": 1, "pp_nodes": [4],
                                       "pi_nodes": [4], "ii_nodes": [4], "out_nodes": [4]}}


def params_in(model_dir):
    return {"model_dir": str(model_dir), "network": NETWORK,
            "model": {"name": "potential_model", "params": {"use_force": True, "log_every_n_steps": 1000}}}


@pytest.fixture(scope="module")
def small_model(alloy_xyz, tmp_path_factory):
    """A model directory with a checkpoint after 3 steps, and its params."""
    params = params_in(tmp_path_factory.mktemp("upstream") / "model")
    model = pinn.get_model(params)
    model.train(lambda: load_ase(alloy_xyz).repeat().apply(sparse_batch(4)), max_steps=3)
    return params


def test_get_model_takes_params_a_model_directory_or_a_params_file(small_model, alloy_xyz, tmp_path):
    from pinn.models import RestoredModel
    from pinn.training.trainer import Trainer
    by_dir = pinn.get_model(small_model["model_dir"])
    # a trained model's directory: restored for inference (no optimizer, no lock on the directory) ...
    assert isinstance(by_dir, RestoredModel) and "for inference" in repr(by_dir)
    path = tmp_path / "params.yml"
    path.write_text(yaml.safe_dump(small_model))
    by_file = pinn.get_model(str(path))  # a Trainer of the same directory: it takes the lock, which is free
    assert isinstance(by_file, Trainer)
    assert int(by_dir.step) == int(by_file.step) == 3  # both restored the model directory's checkpoint
    batches = lambda: load_ase(alloy_xyz).take(8).apply(sparse_batch(4))  # noqa: E731
    assert by_dir.evaluate(batches) == pytest.approx(by_file.evaluate(batches), rel=1e-6)
    by_file.close()
    # a misspelt name builds nothing and takes no lock: an AttributeError naming what a Trainer has
    with pytest.raises(AttributeError, match="has no attribute 'trian'"):
        by_dir.trian
    assert "for inference" in repr(by_dir)  # no Trainer was built, so no lock was taken
    # ... until something of training is asked for: then the whole Trainer, at the same checkpoint
    assert by_dir.store.latest.endswith("ckpt-3") and "a Trainer" in repr(by_dir)
    assert isinstance(by_dir.as_trainer(), Trainer) and int(by_dir.step) == 3
    by_dir.close()
    path.write_text("- not a mapping\n")
    with pytest.raises(ParamsError, match="not a params mapping"):
        pinn.get_model(str(path))


def test_get_network_takes_upstream_spec_and_names_a_bad_key():
    network = pinn.get_network(NETWORK)
    assert type(network).__name__ == "PiNet" and network.rc == 4.0
    assert pinn.get_network(network) is network
    assert {v.dtype.name for v in pinn.get_network({"network": NETWORK, "precision": "float64"}).variables} == {"float64"}
    with pytest.raises(ParamsError, match=r"network\.params\.depht: unknown key; did you mean `depth`"):
        pinn.get_network({"name": "PiNet", "params": {"atom_types": [1], "depht": 2}})
    with pytest.raises(ParamsError, match="precision"):
        pinn.get_network({"network": NETWORK, "precision": "float16"})


def _sizes(split):
    return {name: sum(1 for _ in dataset) for name, dataset in split.items()}


def test_every_loader_takes_splits_as_upstream_names_split(alloy_xyz):
    ratios = {"train": 8, "test": 2}
    assert _sizes(load_ase(alloy_xyz, splits=ratios)) == _sizes(load_ase(alloy_xyz, split=ratios)) \
        == {"train": 96, "test": 24}
    with pytest.raises(TypeError, match="split= and splits= are the same argument"):
        load_ase(alloy_xyz, split=ratios, splits=ratios)
    arrays = {"coord": np.random.RandomState(0).rand(10, 2, 3) * 3, "elems": np.array([1, 8]), "e_data": np.zeros(10)}
    assert _sizes(load_numpy(arrays, splits=ratios)) == {"train": 8, "test": 2}

    @list_loader
    def load_pairs(item):
        return {"elems": [1, 1], "coord": [[0, 0, 0], [0, 0, 0.7 + 0.01 * item]]}
    assert _sizes(load_pairs(range(20), splits={"a": 1, "b": 1})) == {"a": 10, "b": 10}


def test_load_mimic_takes_splits(tmp_path):
    from pinn.demo import make_mimic_demo
    from pinn.io import load_mimic
    make_mimic_demo(str(tmp_path), n_runs=1, n_frames=10)
    files = (str(tmp_path / "argon.mpt"), str(tmp_path / "run0.trr"), str(tmp_path / "run0.ENERGIES"))
    assert _sizes(load_mimic(*files, splits={"train": 4, "test": 1}, forces="trr")) \
        == _sizes(load_mimic(*files, split={"train": 4, "test": 1}, forces="trr")) == {"train": 8, "test": 2}
    with pytest.raises(TypeError, match="split= and splits= are the same argument"):
        load_mimic(*files, split={"a": 1}, splits={"a": 1})


def test_upstream_metric_names_are_in_upstreams_training_units(tmp_path):
    """METRICS/E_*, F_* are × e_scale as upstream reports them (its test_potential divides them by e_scale);
    pinn's own names stay in eV."""
    from ase.build import bulk
    from ase.calculators.lj import LennardJones
    frames = []
    for i in range(4):
        atoms = bulk("Cu", cubic=True)
        atoms.rattle(0.05, seed=i)
        atoms.calc = LennardJones(sigma=2.3, epsilon=0.4, rc=3.0)
        atoms.get_forces()
        frames.append(atoms)
    model = pinn.get_model({"model_dir": str(tmp_path / "lj"), "network": {"name": "LJ", "params": {"rc": 3.0}},
                            "model": {"name": "potential_model", "params": {"e_scale": 5.0, "use_force": True}}})
    result = model.evaluate(lambda: load_ase(frames).apply(sparse_batch(2)))
    assert result["F_RMSE"] > 0.01
    for key in ("E_MAE", "E_RMSE", "F_MAE", "F_RMSE"):
        assert result[f"METRICS/{key}"] == pytest.approx(5.0 * result[key], rel=1e-12)


def test_evaluate_takes_steps_refuses_an_endless_input_and_gives_upstream_metric_names(small_model, alloy_xyz):
    model = pinn.get_model(small_model["model_dir"])
    endless = lambda: load_ase(alloy_xyz).repeat().apply(sparse_batch(4))  # noqa: E731
    first_two = lambda: load_ase(alloy_xyz).take(8).apply(sparse_batch(4))  # noqa: E731
    result = model.evaluate(endless, steps=2)
    assert result == pytest.approx(model.evaluate(first_two))
    assert result["METRICS/E_RMSE"] == result["E_RMSE"] and result["METRICS/F_MAE"] == result["F_MAE"]
    with pytest.raises(ValueError, match=r"never ends .* pass steps="):
        model.evaluate(endless)
    with pytest.raises(ValueError, match="steps must be a positive number"):
        model.evaluate(endless, steps=0)


def _cell():
    atoms = bulk("Cu", "fcc", a=3.6, cubic=True)
    atoms.numbers[0] = 79
    atoms.rattle(0.05, seed=1)
    return atoms


def test_get_calc_upstream_keywords(small_model):
    model_dir = small_model["model_dir"]
    atoms = _cell()
    atoms.calc = pinn.get_calc(model_dir)
    energy, forces = atoms.get_potential_energy(), atoms.get_forces()
    atoms.calc = pinn.get_calc(model_dir, to_eV=2.0)  # upstream's factor, on top of the model's unit
    assert atoms.get_potential_energy() == pytest.approx(2 * energy, rel=1e-6)
    np.testing.assert_allclose(atoms.get_forces(), 2 * forces, rtol=1e-6, atol=1e-9)
    atoms.calc = pinn.get_calc(small_model)  # upstream's get_calc(params)
    assert atoms.get_potential_energy() == pytest.approx(energy, rel=1e-6)
    checkpoint = pinn.get_model(model_dir).store.latest
    atoms.calc = pinn.get_calc(model_dir, checkpoint_path=checkpoint)
    assert atoms.get_potential_energy() == pytest.approx(energy, rel=1e-6)
    atoms.calc = pinn.calculator.PiNN_calc(pinn.get_model(model_dir), properties=["energy"])
    assert atoms.get_potential_energy() == pytest.approx(energy, rel=1e-5)
    with pytest.raises(PropertyNotImplementedError):
        atoms.get_forces()


def test_get_calc_refuses_what_it_would_ignore(small_model):
    model_dir = small_model["model_dir"]
    with pytest.raises(TypeError, match="unexpected keyword argument 'unit'"):
        pinn.get_calc(model_dir, unit=2.0)
    with pytest.raises(ValueError, match="checkpoint= and checkpoint_path= are the same argument"):
        pinn.get_calc(model_dir, checkpoint="last", checkpoint_path="last")
    with pytest.raises(ValueError, match=r"properties=\['dipole'\]; this potential model gives"):
        pinn.get_calc(model_dir, properties=["dipole"])
    with pytest.raises(ValueError, match="to_eV must be a positive number"):
        pinn.get_calc(model_dir, to_eV=0)
    other = dict(small_model, network={"name": "PiNet", "params": dict(NETWORK["params"], depth=2)})
    with pytest.raises(ValueError, match="the params' network differs from"):
        pinn.get_calc(other)


# ------------------------------------------------------------------------- the optimizer section
def upstream_params(model_dir, optimizer):
    """Params in upstream PiNN 2.x's form (as its inputs/*.yml): model, network and an optimizer section."""
    return {"model_dir": str(model_dir), "network": NETWORK, "optimizer": optimizer,
            "model": {"name": "potential_model", "params": {"use_force": True, "e_loss_multiplier": 1.0,
                                                            "f_loss_multiplier": 10.0, "e_scale": 1.0}}}


def _keras_schedule(section):
    import tensorflow as tf
    return tf.keras.optimizers.schedules.deserialize(section)


@pytest.mark.parametrize("schedule", [
    {"class_name": "ExponentialDecay", "config": {"initial_learning_rate": 1e-4, "decay_steps": 10000,
                                                  "decay_rate": 0.994}},
    {"class_name": "ExponentialDecay", "config": {"initial_learning_rate": 3e-4, "decay_steps": 300,
                                                  "decay_rate": 0.5, "staircase": True}},
    {"class_name": "CosineDecay", "config": {"initial_learning_rate": 1e-3, "decay_steps": 2000, "alpha": 0.1}},
])
def test_optimizer_section_gives_keras_learning_rates(schedule, tmp_path, caplog, monkeypatch):
    import logging

    from pinn import upstream_params as conversion
    monkeypatch.setattr(conversion, "_LOGGED", set())  # another test of this process may have logged this mapping
    optimizer = {"class_name": "Adam", "config": {"global_clipnorm": 0.01, "learning_rate": schedule}}
    with caplog.at_level(logging.INFO, logger="pinn"):
        model = pinn.get_model(upstream_params(tmp_path / "model", optimizer))
    assert "upstream PiNN's optimizer section taken as model.params" in caplog.text
    mp = model.params["model"]["params"]
    assert mp["max_grad_norm"] == 0.01 and mp["lr_warmup_steps"] == 0 and mp["ema_decay"] is None
    keras = _keras_schedule(schedule)  # Keras' own schedule is the reference
    for step in (0, 1, 150, 299, 300, 1999, 2500, 10000, 25000):
        assert float(model.learning_rate(np.int64(step))) == pytest.approx(float(keras(step)), rel=2e-6), step


def test_optimizer_section_plain_rate_and_weight_average(tmp_path):
    optimizer = {"class_name": "Adam", "config": {"learning_rate": 5e-4, "use_ema": True, "ema_momentum": 0.995,
                                                  "beta_1": 0.9, "name": "Adam", "jit_compile": True,
                                                  "clipnorm": None}}
    mp = pinn.get_model(upstream_params(tmp_path / "model", optimizer)).params["model"]["params"]
    assert (mp["learning_rate"], mp["lr_schedule"], mp["ema_decay"], mp["max_grad_norm"]) == \
        (5e-4, "constant", 0.995, None)


@pytest.mark.parametrize("optimizer, message", [
    ({"class_name": "EKF", "config": {"learning_rate": 0.03, "q_taus": 10}}, r"optimizer\.config\.q_taus: unknown EKF"),
    ({"class_name": "Adam", "config": {"clipnorm": 0.01}}, r"optimizer\.config\.clipnorm: 0\.01.*global_clipnorm"),
    ({"class_name": "Adam", "config": {"beta_1": 0.8}}, r"optimizer\.config\.beta_1: 0\.8"),
    ({"class_name": "Adam", "config": {"learning_rate": {"class_name": "PolynomialDecay", "config": {}}}},
     r"learning_rate\.class_name: 'PolynomialDecay'"),
    ({"class_name": "Adam", "config": {"learning_rat": 0.1}}, r"optimizer\.config\.learning_rat: unknown"),
    ({"class_name": "SGD"}, "pinn trains with Adam"),
])
def test_optimizer_section_refuses_what_it_cannot_follow(optimizer, message, tmp_path):
    from pinn.params import resolve
    with pytest.raises(ParamsError, match=message):
        resolve(upstream_params(tmp_path, optimizer))


def test_optimizer_section_and_model_params_may_not_both_set_the_rate(tmp_path):
    from pinn.params import resolve
    params = upstream_params(tmp_path, {"class_name": "Adam", "config": {"learning_rate": 1e-3}})
    params["model"]["params"]["learning_rate"] = 1e-2
    with pytest.raises(ParamsError, match=r"model\.params\.learning_rate: also set by the optimizer section"):
        resolve(params)


def test_log_e_per_atom_adds_the_energy_error_per_atom(alloy_xyz, tmp_path):
    params = params_in(tmp_path / "model")
    params["model"]["params"]["log_e_per_atom"] = True
    model = pinn.get_model(params)
    model.train(lambda: load_ase(alloy_xyz).repeat().apply(sparse_batch(4)), max_steps=2)
    first = lambda: load_ase(alloy_xyz).take(12).apply(sparse_batch(5))  # noqa: E731
    result = model.evaluate(first)
    labels = [(float(s["e_data"]), len(s["elems"])) for s in load_ase(alloy_xyz).take(12)]
    predicted = np.array([s["energy"] for s in model.predict(first)])
    per_atom = (predicted - np.array([e for e, _ in labels])) / [n for _, n in labels]
    assert result["E_PER_ATOM_MAE"] == pytest.approx(np.abs(per_atom).mean(), rel=1e-4)
    assert result["E_PER_ATOM_RMSE"] == pytest.approx(np.sqrt((per_atom ** 2).mean()), rel=1e-4)
    assert result["METRICS/E_PER_ATOM_MAE"] == result["E_PER_ATOM_MAE"]
    assert "E_PER_ATOM_MAE" not in pinn.get_model(params_in(tmp_path / "plain")).evaluate(first)


def test_train_and_evaluate_takes_upstream_specs_and_tensorflow_names_it(alloy_xyz, tmp_path):
    import tensorflow as tf
    params = params_in(tmp_path / "model")
    params["model"]["params"].update(save_checkpoint_steps=2, jit=False)  # no XLA compilation: a faster test
    model = pinn.get_model(params)
    train = lambda: load_ase(alloy_xyz).repeat().apply(sparse_batch(4))  # noqa: E731
    test = lambda: load_ase(alloy_xyz).repeat().apply(sparse_batch(4))  # noqa: E731
    if hasattr(tf, "estimator"):  # TensorFlow ≤ 2.15: upstream's own line names pinn's function
        with pytest.raises(TypeError, match=r"pinn\.train_and_evaluate\(model, train_spec, eval_spec\)"):
            tf.estimator.train_and_evaluate(model, tf.estimator.TrainSpec(train, max_steps=2),
                                            tf.estimator.EvalSpec(test, steps=2))
        specs = tf.estimator.TrainSpec(input_fn=train, max_steps=3), tf.estimator.EvalSpec(input_fn=test, steps=2)
    else:
        specs = pinn.TrainSpec(input_fn=train, max_steps=3), pinn.EvalSpec(input_fn=test, steps=2)
    metrics, exports = pinn.train_and_evaluate(model, *specs)
    assert int(model.step) == 3 and exports == []
    assert metrics["global_step"] == 3 and metrics["METRICS/E_RMSE"] == pytest.approx(
        model.evaluate(test, steps=2)["E_RMSE"])
    from pinn.training.metrics import read_metrics
    assert [r["step"] for r in read_metrics(params["model_dir"], "eval")] == [2, 3]
    with pytest.raises(ValueError, match="never ends"):
        pinn.train_and_evaluate(model, pinn.TrainSpec(train, 4), pinn.EvalSpec(test, steps=None))
    with pytest.raises(ValueError, match="EvalSpec.throttle_secs=10"):
        pinn.train_and_evaluate(model, pinn.TrainSpec(train, 4), pinn.EvalSpec(test, throttle_secs=10))
    with pytest.raises(TypeError, match="hooks"):
        pinn.train_and_evaluate(model, pinn.TrainSpec(train, 4, hooks=[object()]), pinn.EvalSpec(test))


def test_a_params_file_in_upstreams_form_gets_upstreams_force_weight(tmp_path):
    from pinn.params import resolve
    section = {"class_name": "Adam", "config": {"learning_rate": 1e-3}}
    plain = upstream_params(tmp_path / "a", section)
    del plain["model"]["params"]["f_loss_multiplier"]
    assert resolve(plain)["model"]["params"]["f_loss_multiplier"] == 1.0
    chosen = upstream_params(tmp_path / "b", section)
    chosen["model"]["params"]["f_loss_multiplier"] = 5.0
    assert resolve(chosen)["model"]["params"]["f_loss_multiplier"] == 5.0
    assert resolve(params_in(tmp_path / "c"))["model"]["params"]["f_loss_multiplier"] == 10.0  # pinn's own form


def test_a_params_file_in_upstreams_form_gets_upstreams_radial_basis(tmp_path):
    """PiNet's and PiNet2's basis defaults to 10 Gaussians in pinn and to 4 polynomials upstream: a file
    in upstream's form (an optimizer section) builds the network it builds upstream, unless it names one."""
    from pinn.params import resolve
    section = {"class_name": "Adam", "config": {"learning_rate": 1e-3}}

    def basis(params):
        net = resolve(params)["network"]["params"]
        return net["basis_type"], net["n_basis"]

    for name in ("PiNet", "PiNet2"):
        plain = dict(upstream_params(tmp_path / name, section), network={"name": name, "params": {"rc": 4.0}})
        assert basis(plain) == ("polynomial", 4)
        named = dict(plain, network={"name": name, "params": {"basis_type": "gaussian"}})
        assert basis(named) == ("gaussian", 4)  # upstream's n_basis still: the file is in upstream's form
        own = {"model_dir": str(tmp_path / name), "network": {"name": name, "params": {"rc": 4.0}},
               "model": {"name": "potential_model", "params": {"use_force": True}}}
        assert basis(own) == ("gaussian", 10)  # pinn's own form: pinn's defaults


@pytest.mark.parametrize("optimizer, weight_decay", [
    ({"class_name": "Adam", "config": {"learning_rate": 1e-3, "weight_decay": 0.01}}, 0.01),
    ({"class_name": "AdamW", "config": {"learning_rate": 1e-3}}, 0.004),  # Keras 2.15 AdamW's default
    ({"class_name": "Adam", "config": {"learning_rate": 1e-3, "weight_decay": None}}, 0.0),
])
def test_optimizer_section_weight_decay_is_keras_decay_of_every_variable(optimizer, weight_decay, tmp_path):
    """Keras' (decoupled) weight decay shrinks every trainable variable: weight_decay_on all."""
    model = pinn.get_model(upstream_params(tmp_path / "model", optimizer))
    mp = model.params["model"]["params"]
    assert (mp["weight_decay"], mp["weight_decay_on"]) == (weight_decay, "all")
    assert model.optimizer.decayed == (bool(weight_decay),) * len(model.model.trainable_variables)


def test_weight_decay_with_a_kalman_filter_is_refused(tmp_path):
    from pinn.params import resolve
    params = params_in(tmp_path / "model")
    params["model"]["params"].update(optimizer="ekf", weight_decay=0.01)
    with pytest.raises(ParamsError, match=r"model\.params\.weight_decay: decoupled weight decay is a step of Adam"):
        resolve(params)
