"""Helpers for the physics checks: build a float64 model and evaluate Atoms."""
import numpy as np
import tensorflow as tf
from ase.build import bulk, molecule

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
