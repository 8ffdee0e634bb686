"""Training on padded batches (XLA, ``model.params.jit``): the padding changes no loss, count, metric or gradient."""
import numpy as np
import pytest
import tensorflow as tf
from ase.build import bulk, molecule

from pinn import keys as K
from pinn.io import load_ase, sparse_batch
from pinn.io.batch import batch_from_atoms
from pinn.io.padding import bucket_size, pad_batch, pad_tensors
from pinn.models import potential_model
from pinn.networks import get_network
from pinn.params import ParamsError, resolve
from pinn.physics.base import cast_floats
from pinn.physics.dipole import DipoleModel

from physics import make_model
from settings import PLAIN_SCHEDULE

RC = 4.0
TYPES = [1, 6, 8, 29, 79]
NET = {"atom_types": TYPES, "rc": RC, "depth": 2, "pp_nodes": [8], "pi_nodes": [8, 8], "ii_nodes": [8],
       "out_nodes": [8]}


def _structures(rng):
    cell = bulk("Cu", "fcc", a=3.7, cubic=True)
    cell.numbers[1] = 79
    cell.positions += rng.normal(0, 0.1, cell.positions.shape)
    ethanol = molecule("CH3CH2OH")
    ethanol.positions += rng.normal(0, 0.05, ethanol.positions.shape)
    return [cell, ethanol]


def _labelled_batch(rng):
    """A float64 sparse batch of a periodic cell and a molecule, with random labels of every kind."""
    structures = _structures(rng)
    batch = batch_from_atoms(structures, RC, "float64")
    n_struct, n_atoms = len(structures), len(batch[K.ELEMS])
    batch[K.E_DATA] = rng.normal(size=n_struct)
    batch[K.F_DATA] = rng.normal(size=(n_atoms, 3))
    batch[K.S_DATA] = rng.normal(size=(n_struct, 3, 3)) * 0.01
    batch[K.D_DATA] = rng.normal(size=(n_struct, 3))
    batch[K.Q_DATA] = rng.normal(size=n_atoms) * 0.1
    return {k: tf.constant(v) for k, v in batch.items()}


def _figures(model, batch, predict_args):
    """Loss counts, loss sums, error sums and the gradient of the summed loss of one batch."""
    with tf.GradientTape() as tape:
        pred = model.predict(batch, **predict_args)
        sums = model.loss_sums(batch, pred)
        total = tf.add_n(list(sums.values()))
    grads = tape.gradient(total, model.trainable_variables)
    figures = {f"count_{t}": c for t, c in model.loss_counts(batch).items()}
    figures.update({f"sum_{t}": s for t, s in sums.items()})
    for key, values in model.error_sums(batch, pred).items():
        figures.update({f"{key}_{i}": v for i, v in enumerate(values)})
    return {k: float(v) for k, v in figures.items()}, [g.numpy() for g in grads]


def _assert_padding_changes_nothing(model, batch, predict_args):
    padded = pad_tensors(batch, RC, element=TYPES[0])
    assert padded[K.REAL].numpy().tolist() == [True, True, False]
    assert padded[K.ELEMS].shape[0] == bucket_size(batch[K.ELEMS].shape[0] + 1)
    assert padded[K.IND_2].shape[0] == bucket_size(batch[K.IND_2].shape[0]) > batch[K.IND_2].shape[0]
    plain, plain_grads = _figures(model, batch, predict_args)
    pad, pad_grads = _figures(model, padded, predict_args)
    assert pad.keys() == plain.keys()
    for key in plain:
        assert pad[key] == pytest.approx(plain[key], rel=1e-12, abs=1e-12), key
    for g_pad, g_plain in zip(pad_grads, plain_grads):
        np.testing.assert_allclose(g_pad, g_plain, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("per_atom", [False, True])
def test_padding_changes_no_potential_loss_metric_or_gradient(rng, per_atom):
    model = make_model("PiNet", NET)
    model.params.update(use_force=True, use_stress=True, use_e_per_atom=per_atom)
    _assert_padding_changes_nothing(model, _labelled_batch(rng), {"forces": True, "stress": True})


def test_padding_changes_no_dipole_loss_metric_or_gradient(rng):
    params = resolve({"model_dir": "unused", "precision": "float64", "seed": 3,
                      "network": {"name": "PiNet", "params": NET},
                      "model": {"name": "dipole_model", "params": {"use_charge": True}}})
    model = DipoleModel(get_network(params), params["model"]["params"], TYPES, tf.float64)
    _assert_padding_changes_nothing(model, _labelled_batch(rng), {})


def test_compiled_float32_gradients_equal_uncompiled_ones(rng):
    """The float32 loss gradient that training compiles with XLA (in this process, which imported pinn
    first, under its TensorFlow settings) equals TensorFlow's uncompiled one to float32 rounding."""
    model = make_model("PiNet", NET, precision="float32")
    model.params.update(use_force=True)
    batch = cast_floats(_labelled_batch(rng), tf.float32)

    def gradients(b):
        with tf.GradientTape() as tape:
            sums = model.loss_sums(b, model.predict(b, forces=True, stress=False))
            loss = sums["energy"] + 10.0 * sums["forces"]
        return tape.gradient(loss, model.trainable_variables)

    plain = tf.function(gradients)(batch)
    compiled = tf.function(gradients, jit_compile=True)(batch)
    scale = max(float(tf.reduce_max(tf.abs(g))) for g in plain)
    assert scale > 1e-3  # a gradient worth comparing
    for g_plain, g_xla in zip(plain, compiled):
        np.testing.assert_allclose(g_xla.numpy(), g_plain.numpy(), rtol=0, atol=2e-5 * scale)


def test_pipeline_padding_equals_the_calculator_padding(rng):
    """pad_tensors (training pipeline) and pad_batch (calculator) pad alike, labels aside."""
    batch = batch_from_atoms(_structures(rng), RC, "float64")
    numpy_padded, _ = pad_batch(batch, RC, element=29)
    tf_padded = pad_tensors({k: tf.constant(v) for k, v in batch.items()}, RC, element=29)
    assert set(tf_padded) == set(numpy_padded) | {K.REAL}
    for key, value in numpy_padded.items():
        np.testing.assert_array_equal(tf_padded[key].numpy(), value, err_msg=key)
    with pytest.raises(ValueError, match="padded already"):
        pad_tensors(tf_padded, RC, element=29)


def _train(tmp_path, alloy_xyz, jit, steps=4, parts=None):
    net = {"atom_types": [29, 79], "rc": 4.5, "depth": 2, "pp_nodes": [8], "pi_nodes": [8], "ii_nodes": [8],
           "out_nodes": [8]}
    mp = {"use_force": True, "use_stress": True, "learning_rate": 1e-2, "jit": jit, "log_every_n_steps": 2,
          "progress_bar": "off", "tensorboard": False, "batch_parts": parts, **PLAIN_SCHEDULE}
    model = potential_model({"model_dir": str(tmp_path / f"jit-{jit}-{parts}"), "precision": "float64",
                             "network": {"name": "PiNet", "params": net},
                             "model": {"name": "potential_model", "params": mp}})
    train = lambda: load_ase(alloy_xyz).take(20).apply(sparse_batch(5))  # noqa: E731
    model.train(train, max_steps=steps)
    return model


@pytest.mark.parametrize("parts", [1, 3])
def test_compiled_training_takes_the_same_steps(tmp_path, alloy_xyz, parts):
    """jit=True (XLA on padded batches), in one part or in 3 uneven parts of a batch of 5
    (batch_parts), trains to the same weights and figures as jit=False in one part."""
    from pinn.training.metrics import read_metrics
    plain = _train(tmp_path, alloy_xyz, jit=False, parts=1)
    compiled = _train(tmp_path, alloy_xyz, jit=True, parts=parts)
    assert compiled.jit and not plain.jit and compiled.parts == parts and plain.parts == 1
    for a, b in zip(compiled.model.trainable_variables, plain.model.trainable_variables):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-8, atol=1e-10)
    figures = [read_metrics(m.model_dir, "train") for m in (compiled, plain)]
    for compiled_row, plain_row in zip(*figures):
        for key in ("loss", "E_MAE", "F_RMSE", "S_MAE"):
            assert compiled_row[key] == pytest.approx(plain_row[key], rel=1e-8), key
    assert compiled.evaluate(lambda: load_ase(alloy_xyz).take(10).apply(sparse_batch(5)))["F_MAE"] == \
        pytest.approx(plain.evaluate(lambda: load_ase(alloy_xyz).take(10).apply(sparse_batch(5)))["F_MAE"], rel=1e-8)


def test_batch_parts_default(tmp_path, monkeypatch):
    """None: one part per core (at most 4) for the compiled step of one process on a CPU, else 1."""
    import os
    params = lambda jit: {"model_dir": str(tmp_path / f"d{jit}"), "network": {"name": "PiNet", "params": {  # noqa
        "atom_types": [29]}}, "model": {"name": "potential_model", "params": {"jit": jit}}}
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    assert potential_model(params(True)).parts == 3
    assert potential_model(params(False)).parts == 1
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    tensorflow_step = potential_model({**params(None), "model": {"name": "potential_model", "params": {
        "engine": "tensorflow"}}})
    assert tensorflow_step.parts == 4 and tensorflow_step.jit
    numba_step = potential_model(params(None))  # engine auto: the numba engine, which splits nothing
    assert numba_step.engine is not None and numba_step.parts == 1 and not numba_step.jit
    with pytest.raises(ParamsError, match="batch_parts"):
        potential_model({**params(True), "model": {"name": "potential_model", "params": {"batch_parts": 0}}})


def test_split_batch_parts_make_up_the_batch(alloy_xyz):
    from pinn.io import add_neighbors, split_batch
    batch = next(iter(load_ase(alloy_xyz).take(5).apply(add_neighbors(4.5)).apply(sparse_batch(5))))
    for n_parts in (1, 2, 3, 7):
        parts = split_batch(batch, n_parts)
        assert len(parts) == n_parts
        sizes = [int(p[K.CELL].shape[0]) for p in parts]
        assert sum(sizes) == 5 and max(sizes) - min(sizes) <= 1
        for key in batch:
            if key in (K.IND_1, K.IND_2):
                continue
            np.testing.assert_array_equal(np.concatenate([p[key].numpy() for p in parts]), batch[key].numpy())
        # indices renumbered into each part: shifting them back gives the batch's
        atoms = np.cumsum([0] + [int(p[K.COORD].shape[0]) for p in parts])
        structs = np.cumsum([0] + sizes)
        np.testing.assert_array_equal(np.concatenate([p[K.IND_1].numpy() + s for p, s in zip(parts, structs)]),
                                      batch[K.IND_1].numpy())
        np.testing.assert_array_equal(np.concatenate([p[K.IND_2].numpy() + a for p, a in zip(parts, atoms)]),
                                      batch[K.IND_2].numpy())
        for p in parts:
            if p[K.COORD].shape[0]:
                assert p[K.IND_2].numpy().min() >= 0 and p[K.IND_2].numpy().max() < p[K.COORD].shape[0]
    shuffled = dict(batch)
    shuffled[K.IND_1] = tf.reverse(batch[K.IND_1], [0])
    with pytest.raises(tf.errors.InvalidArgumentError, match="not ordered by structure"):
        split_batch(shuffled, 2)
    from pinn.io.padding import pad_tensors
    with pytest.raises(ValueError, match="before padding"):
        split_batch(pad_tensors(batch, 4.5, 29), 2)


def test_jit_refused_for_networks_with_data_dependent_shapes(tmp_path):
    params = {"model_dir": str(tmp_path / "bp"), "network": {"name": "BPNN", "params": {"atom_types": [1, 8]}},
              "model": {"name": "potential_model", "params": {"jit": True}}}
    with pytest.raises(ParamsError, match="model.params.jit: the BPNN network cannot be compiled"):
        potential_model(params)
    params["model"]["params"]["jit"] = None
    assert not potential_model(params).jit
