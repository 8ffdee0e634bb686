"""Upstream PiNN's ``tf.estimator.train_and_evaluate(model, train_spec, eval_spec)``, for pinn's models.

Upstream PiNN 2.x models are ``tf.estimator.Estimator`` objects that scripts train with::

    train_spec = tf.estimator.TrainSpec(input_fn=train, max_steps=1000)
    eval_spec = tf.estimator.EvalSpec(input_fn=test, steps=10)
    tf.estimator.train_and_evaluate(model, train_spec, eval_spec)

A pinn model is a :class:`pinn.training.trainer.Trainer`, which TensorFlow's function refuses
(its error names this module's function).  :func:`train_and_evaluate` takes the same two specs —
TensorFlow's (TF ≤ 2.15 still ship ``tf.estimator``) or this module's :class:`TrainSpec` and
:class:`EvalSpec` — and runs :meth:`Trainer.train` with the evaluation input validating at each
checkpoint, as the estimator evaluated after each checkpoint.  What pinn does not follow (hooks,
exporters, an evaluation throttle other than the estimator's default) is refused, never dropped.
"""
from collections import namedtuple

from pinn.inference.errors import with_upstream_names
from pinn.inference.inputs import evaluation_input


#: the training half of the specs: an input function, the last global step (None: until the input ends)
TrainSpec = namedtuple("TrainSpec", ["input_fn", "max_steps", "hooks", "saving_listeners"],
                       defaults=(None, (), ()))
#: the evaluation half: an input function and the batches per evaluation (None: the whole input)
EvalSpec = namedtuple("EvalSpec", ["input_fn", "steps", "name", "hooks", "exporters", "start_delay_secs",
                                   "throttle_secs"], defaults=(100, None, (), (), 120, 600))

#: the estimator's evaluation timing: pinn evaluates at each checkpoint instead (see save_checkpoint_steps)
_ESTIMATOR_TIMING = {"start_delay_secs": 120, "throttle_secs": 600}


def train_and_evaluate(model, train_spec, eval_spec):
    """Train ``model`` as ``tf.estimator.train_and_evaluate`` trained an upstream PiNN estimator.

    Args:
        model: a pinn model (:func:`pinn.get_model`).
        train_spec: ``tf.estimator.TrainSpec`` or :class:`TrainSpec`: ``input_fn`` (sparse
            batches, usually ``repeat()``-ed) and ``max_steps``.
        eval_spec: ``tf.estimator.EvalSpec`` or :class:`EvalSpec`: ``input_fn`` and ``steps``
            (batches per evaluation; ``None``: the whole input, which must then end).

    Returns:
        ``(metrics, [])`` as upstream's call returns (the last evaluation's metrics, no exports).

    Raises:
        TypeError: ``model`` is not a pinn model, or a spec sets hooks, listeners or exporters.
        ValueError: a spec option pinn cannot follow, named.
    """
    from pinn.training.trainer import Trainer
    if not isinstance(model, Trainer) and callable(getattr(type(model), "as_trainer", None)):
        model = model.as_trainer()  # a model restored from its directory (pinn.get_model(model_dir))
    if not isinstance(model, Trainer):
        raise TypeError(f"train_and_evaluate: model must be a pinn model (pinn.get_model), got {type(model).__name__}")
    for spec, key in ((train_spec, "hooks"), (train_spec, "saving_listeners"), (eval_spec, "hooks"),
                      (eval_spec, "exporters")):
        if getattr(spec, key, None):
            raise TypeError(f"train_and_evaluate: {type(spec).__name__}.{key} are estimator hooks, which pinn "
                            "does not run; use the params' early_stopping_* keys and the model directory's logs")
    for key, default in _ESTIMATOR_TIMING.items():
        value = getattr(eval_spec, key, default)
        if value != default:
            raise ValueError(f"train_and_evaluate: EvalSpec.{key}={value!r}; pinn evaluates at every checkpoint "
                             "(model.params.save_checkpoint_steps, or eval_every_n_steps) instead")
    steps = eval_spec.steps
    evaluation_input(eval_spec.input_fn(), steps)  # bad steps, or an endless input without steps: refused now

    def eval_fn():
        return evaluation_input(eval_spec.input_fn(), steps)

    model.train(train_spec.input_fn, max_steps=train_spec.max_steps, eval_fn=eval_fn)
    last = model.last_validation
    if last and last["global_step"] == int(model.step.numpy()):
        return with_upstream_names(dict(last), model.model.upstream_metric_scales()), []
    return model.evaluate(eval_fn), []
