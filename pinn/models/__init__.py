"""Models: a network plus the physics and loss of what it predicts.

``potential_model(params)`` and ``dipole_model(params)`` return a trainable
model object with the estimator-like API ``train(input_fn, max_steps)``,
``evaluate(input_fn)``, ``predict(input_fn)``; ``get_model(params)`` builds the
model that ``params['model']['name']`` names, upstream PiNN 2.x's dipole models
(``AC_dipole_model``, ``BC_R_dipole_model``, ``AD_dipole_model``, …; see
:mod:`pinn.physics.dipole_variants`) included; ``load_for_inference(model_dir)`` restores a
trained model for evaluation, prediction and MD without building a Trainer.

The params are resolved once, here (:func:`pinn.params.resolve`, cross-field checks
included), and the world of the run is made once (:func:`pinn.parallel.init`, or the
``world`` given); the Trainer takes both as they are.  Importing this package imports
neither TensorFlow nor the Trainer (:mod:`pinn.runtime.lazy`).
"""
import logging
import os

from pinn.runtime.lazy import lazy_exports

log = logging.getLogger("pinn")

_EXPORTS = {"PotentialModel": "pinn.physics.potential", "DipoleModel": "pinn.physics.dipole",
            "MODELS": "pinn.physics.registry", "build_model": "pinn.physics.registry",
            "load_for_inference": "pinn.inference.handle", "RestoredModel": "pinn.models.restored"}


def potential_model(params, world=None):
    """Build (or restore from ``params['model_dir']``) a potential model.

    With ``params['parallel'] = True`` the model trains on all ranks of the job, in the world
    given, which :func:`pinn.parallel.init` made where the program starts; without one, this
    function makes the same call (upstream's idiom; Horovod or MPI alone).  A model rebuilt from a
    model directory runs in one process, whatever its stored ``parallel`` says (for evaluation and MD).

    Args:
        params: params dict (see the params reference) or a model directory.
        world: the world of the run (:func:`pinn.parallel.init`); ``None``: the one that
            ``params['parallel']`` asks for.

    Returns:
        :class:`pinn.training.trainer.Trainer` wrapping a :class:`PotentialModel`.
    """
    return _build(params, "potential_model", world=world)


def dipole_model(params, world=None):
    """Build (or restore from ``params['model_dir']``) a dipole model: atomic charges and the dipole.

    Same use as :func:`potential_model` (``parallel``, ``world``, a model directory);
    ``params['model']['name']`` is ``'dipole_model'``.

    Returns:
        :class:`pinn.training.trainer.Trainer` wrapping a :class:`DipoleModel`.
    """
    return _build(params, "dipole_model", world=world)


def get_model(params, checkpoint=None, world=None):
    """The model named in the params (or in ``model_dir/params.yml``), e.g. for evaluation or MD.

    Args:
        params: params dict, model directory, or the path of a params YAML file (as upstream PiNN's
            ``get_model`` takes; its ``model_dir`` is where the model lives).
        checkpoint: ``None``/``'last'``, ``'best'`` or a checkpoint path (see :class:`pinn.training.trainer.Trainer`).
        world: as for :func:`potential_model`.

    Returns:
        one kind of object per kind of input: for params (a dict or a params file), a
        :class:`pinn.training.trainer.Trainer`; for a model directory, a
        :class:`~pinn.models.restored.RestoredModel`: restored for inference (:func:`load_for_inference`: no
        optimizer, no Kalman state, no lock), which becomes the whole Trainer the first time something of
        training is asked of it (at once where the directory holds no checkpoint yet).

    Raises:
        ParamsError: bad params, naming the key (or the file that is not a params mapping).
        ValueError: a parallel ``world`` for a model directory (a model rebuilt from it runs in one process).
    """
    if isinstance(params, (str, os.PathLike)) and os.path.isfile(params):
        from pinn.params import read_params_file
        return _build(read_params_file(params), None, checkpoint, world)
    if isinstance(params, (str, os.PathLike)):
        return _restored(params, checkpoint, world)
    return _build(params, None, checkpoint, world)


def _restored(model_dir, checkpoint, world):
    """``get_model(model_dir)``: the :class:`~pinn.models.restored.RestoredModel` of the directory, in this one
    process."""
    from pinn.params import read_params
    if world is not None and world.is_parallel:
        raise ValueError("get_model: a model rebuilt from its directory runs in one process; build it from "
                         "its params (a dict) to train it on the ranks of a world")
    read_params(model_dir)  # a directory without params.yml: said before anything is built
    from pinn.models.restored import RestoredModel
    return RestoredModel(model_dir, checkpoint)


def _build(params, expected, checkpoint=None, world=None):
    """The Trainer of ``params`` (a dict or a model directory), whose model must be ``expected`` (a
    ``model.name``; ``None``: any): the params resolved once, the world made once."""
    from pinn.params import read_params, resolve
    from pinn.training.parts import assemble
    from pinn.training.trainer import Trainer
    from_model_dir = isinstance(params, (str, os.PathLike))
    if from_model_dir:
        params = read_params(params)
        if expected is not None and params["model"]["name"] != expected:
            raise ValueError(f"{params['model_dir']}: holds a {params['model']['name']}, not a {expected}")
    else:
        if expected is not None:
            params = _with_model_name(params, expected)
        params = resolve(params)
    if params["parallel"] and not from_model_dir:
        world = _world_of(params, world)
    return Trainer(assemble(params, _model_class(params), world, checkpoint))


def _world_of(params, world):
    """The world of a parallel run: the one given (made by :func:`pinn.parallel.init` where the program
    starts), checked to be this process's; without one, upstream's idiom (``parallel: True`` alone): the same
    call made here, said once in the log."""
    from pinn.parallel import init
    from pinn.parallel.worlds import world_started
    first = not world_started()
    started = init(params)
    if world is None:
        if first:
            log.info("parallel: true: the model function started the parallel world (pinn.parallel.init(params) "
                     "at the top of a script makes it where the program starts, before the data)")
        return started
    if world is not started:
        raise ValueError("world: not the world of this process (pass the one pinn.parallel.init(params) "
                         "returned, or none)")
    return world


def _with_model_name(params, expected):
    """``params`` naming model ``expected`` (upstream's flat ``model_params`` included); a ParamsError where
    they name another."""
    from pinn.params import ParamsError, legacy
    if not isinstance(params, dict):
        return params
    if "model_params" in params and "model" not in params:
        params = {**params, "model": expected}
    params = legacy(params)
    model = params.get("model", {})
    if isinstance(model, dict):
        if model.get("name", expected) != expected:
            raise ParamsError(f"model.name: {model['name']!r}, but {expected}() was called")
        params = {**params, "model": {**model, "name": expected}}
    return params


def _model_class(params):
    from pinn.physics.registry import model_class
    return model_class(params)


__all__ = ["potential_model", "dipole_model", "get_model", "load_for_inference", "build_model",
           "PotentialModel", "DipoleModel", "MODELS", "RestoredModel"]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
