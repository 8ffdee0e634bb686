"""Helpers for the physics checks: build a float64 model and evaluate Atoms."""
import numpy as np
import tensorflow as tf

from pinn.io.batch import batch_from_atoms
from pinn.models.potential import PotentialModel
from pinn.networks import get_network
from pinn.params import resolve


def make_model(network, net_params, precision="float64", seed=1):
    params = resolve({"model_dir": "unused", "precision": precision, "seed": seed,
                      "network": {"name": network, "params": net_params}})
    net = get_network(params)
    return PotentialModel(net, params["model"]["params"], net_params["atom_types"], tf.as_dtype(precision))


def evaluate(model, atoms, rc):
    batch = batch_from_atoms(atoms, rc, "float64")
    out = model.predict({k: tf.constant(v) for k, v in batch.items()})
    return {k: v.numpy() for k, v in out.items()}


def energy(model, atoms, rc):
    return float(evaluate(model, atoms, rc)["energy"][0])
