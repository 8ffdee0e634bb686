"""Writes the model directory ``model/`` beside this file: a small PiNet potential trained 3 steps on
EMT Cu/Au cells by pinn 0.15 (its optimizer then: ``tf.keras.optimizers.Adam`` of TensorFlow 2.15.1,
Keras 2.15), and ``expected.npz``: the values of its variables after training (model, Adam's state,
weight average), read from the trainer, for tests/training/test_adam.py.

Run with pinn 0.15.0 on TensorFlow 2.15.1 (the commit that added this file):
    python tests/data/tf215/make_checkpoint.py
"""
import os
import shutil

import numpy as np
import tensorflow as tf
from ase.build import bulk
from ase.calculators.emt import EMT

from pinn import keys as K
from pinn.io.batch import batch_from_atoms
from pinn.models import potential_model

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL_DIR = os.path.join(HERE, "model")
RC = 4.0
PARAMS = {
    "model_dir": MODEL_DIR,
    "network": {"name": "PiNet", "params": {"atom_types": [29, 79], "rc": RC, "depth": 2, "pp_nodes": [4],
                                            "pi_nodes": [4, 4], "ii_nodes": [4], "out_nodes": [4], "n_basis": 4}},
    "model": {"name": "potential_model",
              "params": {"use_force": True, "fit_e_dress": False, "learning_rate": 1e-3, "lr_warmup_steps": 0,
                         "engine": "tensorflow", "jit": False, "save_checkpoint_steps": 3, "keep_checkpoint_max": 1,
                         "tensorboard": False, "log_every_n_steps": 1}},
}


def cells():
    """Three EMT-labelled 4-atom Cu/Au cells (batches of one)."""
    batches = []
    for seed in range(3):
        atoms = bulk("Cu", "fcc", a=3.7, cubic=True)
        atoms.numbers[seed] = 79
        atoms.rattle(0.1, seed=seed)
        atoms.calc = EMT()
        batch = batch_from_atoms([atoms], RC)
        batch[K.E_DATA] = np.array([atoms.get_potential_energy()], np.float32)
        batch[K.F_DATA] = atoms.get_forces().astype(np.float32)
        batches.append(batch)
    return batches


def main():
    shutil.rmtree(MODEL_DIR, ignore_errors=True)
    batches = cells()
    spec = {k: tf.TensorSpec((None,) + v.shape[1:], tf.as_dtype(v.dtype)) for k, v in batches[0].items()}
    model = potential_model(PARAMS)
    model.train(lambda: tf.data.Dataset.from_generator(lambda: iter(batches), output_signature=spec), max_steps=3)
    for name in os.listdir(MODEL_DIR):  # what a restore needs: params, the checkpoint and its index
        if not (name.startswith("ckpt-3") or name in ("checkpoint", "params.yml")):
            path = os.path.join(MODEL_DIR, name)
            shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    np.savez(os.path.join(HERE, "expected.npz"),
             model=np.array([v.numpy() for v in model.model.variables], dtype=object),
             optimizer=np.array([v.numpy() for v in model.optimizer.variables], dtype=object),
             average=np.array([v.numpy() for v in model.ema.shadow], dtype=object),
             tensorflow=tf.__version__, optimizer_class=type(model.optimizer).__module__)


if __name__ == "__main__":
    main()
