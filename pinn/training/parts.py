"""A Trainer's parts, built where the program starts and handed in.

:func:`assemble` builds what a :class:`~pinn.training.trainer.Trainer` works with, in the order a run needs
them: the claim on the model directory (its lock and the params check, before anything is written there),
the network and the model, the gradient backend, the learning-rate schedule, the training state (restored
from a checkpoint on rank 0 and broadcast) and the evaluation.  The Trainer takes the :class:`TrainerParts`
as they are and builds nothing itself; a test (or another entry point) may hand it parts of its own.
"""
import dataclasses
import logging
from typing import Any, Optional

from pinn.inference.evaluator import Evaluator
from pinn.networks import get_network
from pinn.networks.layers import precision_dtypes
from pinn.parallel.serial import SerialWorld
from pinn.params import ResolvedParams
from pinn.params.training_options import notes
from pinn.training.backends import choose_backend
from pinn.training.claim import claim_model_dir
from pinn.training.evaluation import Evaluation
from pinn.training.schedule import learning_rate_of
from pinn.training.state import TrainingState

log = logging.getLogger("pinn")


@dataclasses.dataclass
class TrainerParts:
    """What a Trainer is given.

    Attributes:
        params: the resolved params (:func:`pinn.params.resolve`).
        world: the run's world (:class:`~pinn.parallel.serial.SerialWorld` for one process).
        claim: the :class:`~pinn.training.claim.Claim` on the model directory.
        network: the network (``tf.Module``).
        model: the model (:class:`~pinn.physics.potential.PotentialModel`, …) over the network.
        backend: the gradient backend (:mod:`pinn.training.backends`).
        learning_rate: the learning-rate schedule, ``step -> rate`` (:mod:`pinn.training.schedule`).
        state: the :class:`~pinn.training.state.TrainingState` (step, optimizer, average, checkpoints).
        restored: the path of the checkpoint the state was restored from, or ``None`` (a fresh run).
        evaluation: the :class:`~pinn.training.evaluation.Evaluation` (evaluate, predict, validation).
    """
    params: ResolvedParams
    world: Any
    claim: Any
    network: Any
    model: Any
    backend: Any
    learning_rate: Any
    state: TrainingState
    restored: Optional[str]
    evaluation: Evaluation


def assemble(params, model_cls, world=None, checkpoint=None, defer_params=False):
    """Build a Trainer's parts for ``params``.

    Args:
        params: resolved params (:func:`pinn.params.resolve`, which checks them once).
        model_cls: the model class (e.g. :class:`pinn.physics.potential.PotentialModel`;
            :func:`pinn.physics.registry.model_class` chooses it from the params).
        world: the run's world (:func:`pinn.parallel.init`); ``None``: one process.
        checkpoint: which checkpoint to restore: ``None`` or ``'last'`` (the latest in ``model_dir``),
            ``'best'`` or a checkpoint path.
        defer_params: write ``model_dir/params.yml`` when training starts its steps (or at the first save)
            instead of now, so that a run refused before then leaves the stored params as they were.

    Returns:
        :class:`TrainerParts`; its claim holds the model directory as long as the parts (a Trainer given them
        takes the hold over, :meth:`~pinn.training.claim.Claim.follow`).

    Raises:
        TypeError: params that are not resolved.
        ModelDirLocked, ValueError: the model directory is another run's, or holds another model (the claim);
            a checkpoint that cannot be restored.
    """
    if not isinstance(params, ResolvedParams):
        raise TypeError("assemble: takes resolved params (pinn.params.resolve); build models with "
                        "pinn.models.potential_model(params) or get_model(params)")
    world = world or SerialWorld()
    mp = params["model"]["params"]
    claim = claim_model_dir(params, world)  # lock, params check: before any write there
    with claim.released_on_error():
        world.log_summary()
        with world.variable_scope():  # a mirrored world's: each variable copied onto every device
            network = get_network(params)
            model = model_cls(network, mp, network.atom_types, precision_dtypes(params["precision"])[0])
            backend = choose_backend(params, model, world)
            learning_rate = learning_rate_of(mp, world, mp["lr_cosine_steps"])
            if world.is_chief:
                for level, message in notes(params):
                    log.log(level, message)
            state = TrainingState(model, mp, world, backend, params["model_dir"], learning_rate)
        restored = state.restore_on_chief(checkpoint, params, defer_params=defer_params)
        evaluation = Evaluation(Evaluator(model, world, state.averaged_weights), network, backend, state.step,
                                learning_rate.single_rank_steps)
    parts = TrainerParts(params, world, claim, network, model, backend, learning_rate, state, restored, evaluation)
    claim.follow(parts)
    return parts
