"""Models: a network plus the physics and loss of what it predicts.

``potential_model(params)`` returns a trainable model object with the
estimator-like API ``train(input_fn, max_steps)``, ``evaluate(input_fn)``,
``predict(input_fn)``.
"""
from pinn.models.potential import PotentialModel

MODELS = {"potential_model": PotentialModel}


def potential_model(params):
    """Build (or restore from ``params['model_dir']``) a potential model.

    With ``params['parallel'] = True`` it first calls
    :func:`pinn.parallel.parallelize_model` (Horovod), so the model trains on
    all ranks of the job.  A model rebuilt from a model directory runs in one
    process, whatever its stored ``parallel`` says (for evaluation and MD).

    Args:
        params: params dict (see the params reference) or a model directory.

    Returns:
        :class:`pinn.trainer.Trainer` wrapping a :class:`PotentialModel`.
    """
    return _build(params, PotentialModel)


def _build(params, model_cls):
    from pinn.params import read_params, resolve
    from pinn.trainer import Trainer
    import os
    from_model_dir = isinstance(params, (str, os.PathLike))
    params = read_params(params) if from_model_dir else resolve(params)
    world = None
    if params["parallel"] and not from_model_dir:
        from pinn.parallel import parallelize_model
        world = parallelize_model(params)
    return Trainer(params, model_cls, world)


__all__ = ["potential_model", "PotentialModel", "MODELS"]
