"""Every choice of PiNet's schema: the Numba engines match TensorFlow to 1e-12 in float64, or refuse it.

The cases are generated from ``PiNet.PARAMS``: each option with a list of choices
(activation, radial basis, cutoff), each value.  For each, the MD engine's energy, forces
and stress, and the training engine's loss gradients, equal TensorFlow's to rounding, or
:func:`pinn.engines.lowering.capability` refuses the model with a reason naming the option.
A choice added to the schema without kernels for it is therefore refused (and the model runs
in TensorFlow), never computed wrongly; a new option the lowering does not read is refused too.
"""
import numpy as np
import pytest
import tensorflow as tf

from pinn import keys as K
from pinn.engines.lowering import LOWERED_PINET_PARAMS, capability
from pinn.engines.md import FastPiNet
from pinn.engines.gradients import TrainingEngine
from pinn.io.batch import batch_from_atoms
from pinn.io.neighbors import neighbor_list
from pinn.networks.pinet import PARAMS as PINET_PARAMS

from physics import evaluate, parity_structures, perturbed_model, refused_for_training

RC = 4.0
BASE = {"atom_types": [1, 6, 8, 29], "rc": RC, "depth": 2, "pp_nodes": [6], "pi_nodes": [6, 6], "ii_nodes": [6],
        "out_nodes": [6], "n_basis": 3}
CHOICES = [(key, value) for key, option in PINET_PARAMS.items() if option.choices for value in option.choices]


def _model(key, value):
    return perturbed_model("PiNet", {**BASE, key: value})


_structures = parity_structures


def test_the_cases_cover_the_schema():
    """A new option with choices must be added to the lowering (and so to these cases) knowingly."""
    assert {key for key, _ in CHOICES} == {"act", "basis_type", "cutoff_type"}


def test_every_option_is_lowered_or_refused():
    """An option of PiNet's schema that the lowering does not read makes both engines refuse."""
    assert set(PINET_PARAMS) <= LOWERED_PINET_PARAMS, "a PiNet option the lowering ignores: lower it or refuse it"
    model = _model("act", "tanh")
    model.network.params["new_option"] = 1.0
    for purpose in ("md", "training"):
        answer = capability(model, purpose)
        assert not answer and "network.params.new_option" in answer.reason


@pytest.mark.parametrize("key, value", CHOICES)
def test_md_engine_matches_tensorflow_or_refuses(key, value):
    model = _model(key, value)
    answer = capability(model, "md")
    if not answer:
        assert f"network.params.{key}" in answer.reason
        return
    engine = FastPiNet(model)
    for atoms in _structures():
        ref = evaluate(model, atoms, RC)
        ind, shift = neighbor_list(atoms.positions, atoms.cell[:], atoms.pbc, RC + 0.5)
        out = engine(atoms.numbers, atoms.positions, ind[:, 0].copy(), ind[:, 1].copy(), shift @ atoms.cell[:],
                     atoms.cell[:], atoms.pbc)
        assert out["energy"] == pytest.approx(float(ref["energy"][0]), rel=1e-12, abs=1e-12)
        scale = np.abs(ref["forces"]).max()
        assert scale > 1e-4  # not a trivially zero comparison
        np.testing.assert_allclose(out["forces"], ref["forces"], rtol=0, atol=1e-12 * max(1.0, scale))
        if atoms.pbc.any():
            np.testing.assert_allclose(out["stress"], ref["stress"][0], rtol=0, atol=1e-12)


@pytest.mark.parametrize("key, value", CHOICES)
def test_training_engine_matches_tensorflow_or_refuses(key, value):
    model = _model(key, value)
    model.params.update(use_force=True)
    if refused_for_training(model, key):
        return
    batch = batch_from_atoms(_structures(), RC, "float64")
    rng = np.random.RandomState(1)
    batch[K.E_DATA] = rng.randn(len(batch[K.CELL])) * 0.3 - 20
    batch[K.F_DATA] = rng.randn(len(batch[K.ELEMS]), 3) * 0.5
    weights = {"energy": 1.0, "forces": 10.0}
    counts = {"energy": float(len(batch[K.CELL])), "forces": 3.0 * len(batch[K.ELEMS])}
    tensors = {k: tf.constant(v) for k, v in batch.items()}
    with tf.GradientTape() as tape:
        pred = model.predict(tensors, forces=True, stress=False)
        sums = model.loss_sums(tensors, pred)
        loss = tf.add_n([weights[t] * sums[t] / counts[t] for t in sums])
    reference = tape.gradient(loss, model.trainable_variables)
    engine = TrainingEngine(model)
    engine.set_weights([v.numpy() for v in model.trainable_variables])
    out = engine(batch, weights, counts)
    assert out["loss"] == pytest.approx(float(loss), rel=1e-12)
    for variable, mine, ref in zip(model.trainable_variables, engine.gradients(), reference):
        scale = np.abs(ref.numpy()).max()
        assert scale > 0, variable.name
        np.testing.assert_allclose(mine, ref.numpy(), rtol=0, atol=1e-11 * scale, err_msg=variable.name)
