"""Models: a network plus the physics and loss of what it predicts.

``potential_model(params)`` returns a trainable model object with the
estimator-like API ``train(input_fn, max_steps)``, ``evaluate(input_fn)``,
``predict(input_fn)``.
"""
from pinn.models.potential import PotentialModel

MODELS = {"potential_model": PotentialModel}


def potential_model(params):
    """Build (or restore from ``params['model_dir']``) a potential model.

    Args:
        params: params dict (see the params reference) or a model directory.

    Returns:
        :class:`pinn.trainer.Trainer` wrapping a :class:`PotentialModel`.
    """
    from pinn.trainer import Trainer
    return Trainer(params, PotentialModel)


__all__ = ["potential_model", "PotentialModel", "MODELS"]
