"""Models: a network plus the physics and loss of what it predicts.

``potential_model(params)`` and ``dipole_model(params)`` return a trainable
model object with the estimator-like API ``train(input_fn, max_steps)``,
``evaluate(input_fn)``, ``predict(input_fn)``; ``get_model(params)`` builds the
model that ``params['model']['name']`` names, upstream PiNN 2.x's dipole models
(``AC_dipole_model``, ``BC_R_dipole_model``, ``AD_dipole_model``, …; see
:mod:`pinn.models.dipole_variants`) included.
"""
from pinn.models.dipole import DipoleModel
from pinn.models.potential import PotentialModel
from pinn.models.registry import MODELS


def potential_model(params):
    """Build (or restore from ``params['model_dir']``) a potential model.

    With ``params['parallel'] = True`` it first calls
    :func:`pinn.parallel.parallelize_model` (Horovod), so the model trains on
    all ranks of the job.  A model rebuilt from a model directory runs in one
    process, whatever its stored ``parallel`` says (for evaluation and MD).

    Args:
        params: params dict (see the params reference) or a model directory.

    Returns:
        :class:`pinn.training.trainer.Trainer` wrapping a :class:`PotentialModel`.
    """
    return _build(params, PotentialModel)


def dipole_model(params):
    """Build (or restore from ``params['model_dir']``) a dipole model: atomic charges and the dipole.

    Same use as :func:`potential_model` (``parallel``, a model directory);
    ``params['model']['name']`` is ``'dipole_model'``.

    Returns:
        :class:`pinn.training.trainer.Trainer` wrapping a :class:`DipoleModel`.
    """
    return _build(params, DipoleModel)


def get_model(params, checkpoint=None):
    """The model named in the params (or in ``model_dir/params.yml``), e.g. for evaluation or MD.

    Args:
        params: params dict, model directory, or the path of a params YAML file (as upstream PiNN's
            ``get_model`` takes; its ``model_dir`` is where the model lives).
        checkpoint: ``None``/``'last'``, ``'best'`` or a checkpoint path (see :class:`pinn.training.trainer.Trainer`).

    Returns:
        :class:`pinn.training.trainer.Trainer`.

    Raises:
        ParamsError: bad params, naming the key (or the file that is not a params mapping).
    """
    from pinn.params import read_params, read_params_file, resolve
    import os
    if isinstance(params, (str, os.PathLike)) and os.path.isfile(params):
        params = read_params_file(params)
    name = (read_params(params) if isinstance(params, (str, os.PathLike)) else resolve(params))["model"]["name"]
    return _build(params, MODELS[name], checkpoint)


def _build(params, model_cls, checkpoint=None):
    from pinn.params import ParamsError, legacy, read_params, resolve
    from pinn.training.trainer import Trainer
    import os
    expected = {cls: name for name, cls in MODELS.items()}[model_cls]
    from_model_dir = isinstance(params, (str, os.PathLike))
    if from_model_dir:
        params = read_params(params)
        if params["model"]["name"] != expected:
            raise ValueError(f"{params['model_dir']}: holds a {params['model']['name']}, not a {expected}")
    else:
        if isinstance(params, dict) and "model_params" in params and "model" not in params:
            params = {**params, "model": expected}
        params = legacy(params) if isinstance(params, dict) else params
        model = params.get("model", {}) if isinstance(params, dict) else None
        if isinstance(model, dict):
            if model.get("name", expected) != expected:
                raise ParamsError(f"model.name: {model['name']!r}, but {expected}() was called")
            params = {**params, "model": {**model, "name": expected}}
        params = resolve(params)
    world = None
    if params["parallel"] and not from_model_dir:
        from pinn.parallel.worlds import parallelize_model
        world = parallelize_model(params)
    return Trainer(params, model_cls, world, checkpoint)


__all__ = ["potential_model", "dipole_model", "get_model", "PotentialModel", "DipoleModel", "MODELS"]
