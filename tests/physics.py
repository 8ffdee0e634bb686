"""Helpers for the physics checks: build a float64 model and evaluate Atoms."""
import numpy as np
import pytest
import tensorflow as tf
from ase.build import bulk, molecule

from pinn import keys as K
from pinn.io.batch import batch_from_atoms
from pinn.networks import get_network
from pinn.params import resolve
from pinn.physics.potential import PotentialModel


def make_model(network, net_params, precision="float64", seed=1):
    params = resolve({"model_dir": "unused", "precision": precision, "seed": seed,
                      "network": {"name": network, "params": net_params}})
    net = get_network(params)
    return PotentialModel(net, params["model"]["params"], net_params["atom_types"], tf.as_dtype(precision))


def perturbed_model(network, net_params, precision="float64"):
    """:func:`make_model` of four elements' network (e_dress −0.5, −1, −2, −3 eV) with every weight moved by
    0.1 × a normal draw (seed 0), away from the initial weights' zero biases: what the engines' parity tests
    compare."""
    model = make_model(network, net_params, precision)
    model.e_dress.assign(np.array([-0.5, -1.0, -2.0, -3.0]))
    rng = np.random.RandomState(0)
    for v in model.trainable_variables:
        v.assign(v.numpy() + 0.1 * rng.randn(*v.shape))
    return model


def parity_structures():
    """Rattled ethanol and a rattled cubic Cu cell of 4 atoms (the engines' parity cases)."""
    ethanol = molecule("CH3CH2OH")
    ethanol.rattle(0.1, seed=1)
    copper = bulk("Cu", "fcc", a=3.61, cubic=True)
    copper.rattle(0.1, seed=2)
    return [ethanol, copper]


def evaluate(model, atoms, rc):
    batch = batch_from_atoms(atoms, rc, "float64")
    out = model.predict({k: tf.constant(v) for k, v in batch.items()})
    return {k: v.numpy() for k, v in out.items()}


def energy(model, atoms, rc):
    return float(evaluate(model, atoms, rc)["energy"][0])


def alloy_cell(rng):
    """A sheared, rattled CuAu cell of 8 atoms, shorter than 2 rc (4 Å) along b and c."""
    atoms = bulk("Cu", "fcc", a=3.7, cubic=True) * (2, 1, 1)
    atoms.numbers[[1, 4]] = 79
    atoms.set_cell(atoms.cell[:] @ np.array([[1.0, 0.08, 0.0], [0.0, 1.0, -0.06], [0.05, 0.0, 1.0]]),
                   scale_atoms=True)
    atoms.positions += rng.normal(0, 0.15, atoms.positions.shape)
    return atoms


def ethanol(rng):
    """Ethanol with its atoms displaced by 0.05 Å (normal)."""
    atoms = molecule("CH3CH2OH")
    atoms.positions += rng.normal(0, 0.05, atoms.positions.shape)
    return atoms


def check_forces_against_finite_differences(model, atoms, rc, h=1e-5, stride=3):
    """Assert that the model's forces on every ``stride``-th atom equal −∂E/∂r by central differences
    (step ``h`` Å; to 1e-6 eV/Å absolute or 1e-5 relative, float64)."""
    import pytest
    forces = evaluate(model, atoms, rc)["forces"]
    for atom in range(0, len(atoms), stride):
        for axis in range(3):
            plus, minus = atoms.copy(), atoms.copy()
            plus.positions[atom, axis] += h
            minus.positions[atom, axis] -= h
            fd = -(energy(model, plus, rc) - energy(model, minus, rc)) / (2 * h)
            assert forces[atom, axis] == pytest.approx(fd, abs=1e-6, rel=1e-5)
    return forces


def check_stress_against_strain_derivative(model, atoms, rc, h=1e-5):
    """Assert that V·σ (symmetrised) equals ∂E/∂ε by central differences of a symmetric strain
    (step ``h``; 1e-6 eV absolute or 1e-5 relative) and that σ is symmetric; returns σ (eV/Å³)."""
    import pytest
    stress = evaluate(model, atoms, rc)["stress"][0]
    volume = atoms.get_volume()
    for a in range(3):
        for b in range(a, 3):
            eps = np.zeros((3, 3))
            eps[a, b] = eps[b, a] = h / 2 if a != b else h
            plus, minus = atoms.copy(), atoms.copy()
            plus.set_cell(atoms.cell[:] @ (np.eye(3) + eps), scale_atoms=True)
            minus.set_cell(atoms.cell[:] @ (np.eye(3) - eps), scale_atoms=True)
            de = (energy(model, plus, rc) - energy(model, minus, rc)) / (2 * h)
            assert 0.5 * (stress[a, b] + stress[b, a]) * volume == pytest.approx(de, abs=1e-6, rel=1e-5)
    np.testing.assert_allclose(stress, stress.T, atol=1e-10)
    return stress


def training_structures():
    """Rattled ethanol (twice), a Cu cell of 32 atoms and a Cu slab periodic in two directions: the training
    engines' parity batch."""
    ethanol = molecule("CH3CH2OH")
    ethanol.rattle(0.1, seed=1)
    hot_ethanol = molecule("CH3CH2OH")
    hot_ethanol.rattle(0.2, seed=5)
    copper = bulk("Cu", "fcc", a=3.61, cubic=True) * (2, 2, 2)
    copper.rattle(0.1, seed=2)
    slab = bulk("Cu", "fcc", a=3.61, cubic=True) * (2, 2, 1)
    slab.pbc = [True, True, False]
    slab.rattle(0.1, seed=3)
    return [ethanol, copper, hot_ethanol, slab]


def training_batch(precision, padding=False, structures=None, rc=4.5):
    """A batch of ``structures`` (default :func:`training_structures`) with random labels; with ``padding`` the
    second structure counts as padding."""
    batch = batch_from_atoms(structures or training_structures(), rc, precision)
    rng = np.random.RandomState(1)
    n_struct, n_atoms = len(batch[K.CELL]), len(batch[K.ELEMS])
    batch[K.E_DATA] = (rng.randn(n_struct) * 0.3 - 20).astype(precision)
    batch[K.F_DATA] = (rng.randn(n_atoms, 3) * 0.5).astype(precision)
    if padding:  # the second structure counts as padding (as in a padded batch)
        batch[K.REAL] = np.array([True, False, True, True])
    return batch


def tensorflow_loss_gradients(model, batch, weights, counts):
    """TensorFlow's loss, gradients (nested tapes) and predictions of one batch."""
    tensors = {k: tf.constant(v) for k, v in batch.items()}
    with tf.GradientTape() as tape:
        pred = model.predict(tensors, forces=model.params["use_force"], stress=False)
        sums = model.loss_sums(tensors, pred)
        loss = tf.add_n([weights[t] * sums[t] / counts[t] for t in sums])
    grads = tape.gradient(loss, model.trainable_variables)
    return float(loss), [g.numpy() for g in grads], {k: v.numpy() for k, v in pred.items()}


def compare_training_gradients(model, batch, rtol, weights=None):
    """The training engine's loss, energies, forces and gradients of ``batch`` equal TensorFlow's to ``rtol``
    (relative to each array's largest value); returns the engine's output."""
    weights = weights or {"energy": 1.0, "forces": 10.0}
    n_real = int(np.sum(batch.get(K.REAL, np.ones(len(batch[K.CELL])))))
    counts = {"energy": float(n_real)}
    if model.params["use_force"]:
        counts["forces"] = 3.0 * len(batch[K.ELEMS])
    loss, grads, pred = tensorflow_loss_gradients(model, batch, weights, counts)
    from pinn.engines.gradients import TrainingEngine
    engine = TrainingEngine(model)
    engine.set_weights([v.numpy() for v in model.trainable_variables])
    out = engine(batch, weights, counts)
    assert out["finite"]
    assert out["loss"] == pytest.approx(loss, rel=rtol)
    np.testing.assert_allclose(out["energy"], pred["energy"], rtol=rtol)
    if "forces" in pred:
        np.testing.assert_allclose(out["forces"], pred["forces"], rtol=0, atol=rtol * np.abs(pred["forces"]).max())
    mine_all = engine.gradients()
    assert len(mine_all) == len(grads)
    np.testing.assert_array_equal(engine.flat_gradient(), np.concatenate([g.ravel() for g in mine_all]))
    for v, mine, ref in zip(model.trainable_variables, mine_all, grads):
        assert mine.shape == ref.shape and mine.dtype == ref.dtype, v.name
        scale = np.abs(ref).max()
        assert scale > 0, v.name  # not a trivially zero comparison
        np.testing.assert_allclose(mine, ref, rtol=0, atol=rtol * scale, err_msg=v.name)
    return out


def refused_for_training(model, key):
    """Whether the training engine refuses ``model``; when it does, that its reason and :class:`TrainingEngine`'s
    error name ``network.params.<key>``."""
    from pinn.engines.gradients import TrainingEngine
    from pinn.engines.lowering import capability
    answer = capability(model, "training")
    if answer:
        return False
    assert f"network.params.{key}" in answer.reason
    with pytest.raises(ValueError, match=f"network.params.{key}"):
        TrainingEngine(model)
    return True
