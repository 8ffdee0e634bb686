"""A Trainer is handed its parts and builds nothing: a test builds them by hand (a tiny PiNet, a fake gradient
backend) and the Trainer trains, evaluates and saves with exactly those."""
import collections

import numpy as np
import pytest
import tensorflow as tf

from pinn.inference.evaluator import Evaluator
from pinn.io import load_ase, sparse_batch
from pinn.networks import get_network
from pinn.parallel.serial import SerialWorld
from pinn.params import resolve
from pinn.physics.potential import PotentialModel
from pinn.training.backends import TensorFlowBackend
from pinn.training.claim import claim_model_dir
from pinn.training.evaluation import Evaluation
from pinn.training.parts import TrainerParts
from pinn.training.schedule import learning_rate_of
from pinn.training.state import TrainingState
from pinn.training.trainer import Trainer

from settings import small_net, training_params


class CountingBackend(TensorFlowBackend):
    """A fake gradient backend: TensorFlow's tapes (no XLA, whole batches), and a count of every call the run
    makes of it."""

    name = "counting"

    def __init__(self):
        super().__init__(jit=False, parts=1)
        self.calls = collections.Counter()

    def describe(self):
        return "the counting test backend"

    def part_gradients(self, loss):
        self.calls["part_gradients"] += 1
        return super().part_gradients(loss)

    def store(self):
        self.calls["store"] += 1

    def reload(self, diverged=False):
        self.calls["reload"] += 1


def built_parts(model_dir):
    """A Trainer's parts, each built here as an entry point would, with the fake backend."""
    params = resolve(training_params(model_dir, small_net([29, 79], depth=1, width=4), {"use_force": True}))
    mp = params["model"]["params"]
    world = SerialWorld()
    claim = claim_model_dir(params, world)
    network = get_network(params)
    model = PotentialModel(network, mp, network.atom_types, tf.float32)
    backend = CountingBackend()
    learning_rate = learning_rate_of(mp, world, mp["lr_cosine_steps"])
    state = TrainingState(model, mp, world, backend, params["model_dir"], learning_rate)
    restored = state.restore_on_chief(None, params)
    evaluation = Evaluation(Evaluator(model, world, state.averaged_weights), network, backend, state.step,
                            learning_rate.single_rank_steps)
    return TrainerParts(params, world, claim, network, model, backend, learning_rate, state, restored, evaluation)


def test_a_trainer_trains_two_steps_with_the_parts_it_is_given(alloy_xyz, tmp_path):
    parts = built_parts(tmp_path / "model")
    before = [v.numpy().copy() for v in parts.model.trainable_variables]
    trainer = Trainer(parts)
    assert trainer.model is parts.model and trainer.backend is parts.backend and trainer.state is parts.state
    trainer.train(lambda: load_ase(alloy_xyz).take(16).repeat().apply(sparse_batch(4)), max_steps=2)
    assert int(trainer.step.numpy()) == 2
    assert parts.backend.calls["part_gradients"] >= 1  # the step's gradients came from the backend given
    assert parts.backend.calls["reload"] >= 1 and parts.backend.calls["store"] >= 1
    assert trainer.step_functions.arrays is not None  # the backend's answer (no host steps): the traced steps
    moved = max(np.abs(a - v.numpy()).max() for a, v in zip(before, parts.model.trainable_variables))
    assert moved > 0
    with open(tmp_path / "model" / "train.log") as f:
        assert "gradients by the counting test backend" in f.read()
    assert trainer.save().endswith("ckpt-2")
    errors = trainer.evaluate(lambda: load_ase(alloy_xyz).take(8).apply(sparse_batch(4)))
    assert errors["global_step"] == 2 and np.isfinite(errors["F_RMSE"])
    trainer.close()


def test_a_trainer_takes_parts_only(tmp_path):
    params = resolve(training_params(tmp_path / "m", small_net([29, 79], depth=1, width=4), {}))
    with pytest.raises(TypeError, match="assemble"):
        Trainer(params)


def test_a_restored_model_knows_every_name_of_the_trainer():
    """Every public name of the Trainer's class is a RestoredModel's own or one it hands to the Trainer (its
    TRAINING_ATTRIBUTES), so that a name added to the Trainer is not an AttributeError on get_model(model_dir)."""
    from pinn.models.restored import RestoredModel
    trainer = {name for name in dir(Trainer) if not name.startswith("_")} - {"from_model_dir"}
    own = {name for name in dir(RestoredModel) if not name.startswith("_")} | {"params", "model_dir", "restored"}
    assert trainer - own - RestoredModel.TRAINING_ATTRIBUTES == set()
