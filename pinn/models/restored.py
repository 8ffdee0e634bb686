"""What upstream-shaped model objects give for inference: a trained model's directory as
``pinn.get_model`` gives it (:class:`RestoredModel`: inference first, the Trainer when training is asked
for), and the inference handle of a Trainer's live weights (:func:`handle_of`).

The inference itself (a model loaded without its training, its handle) is the layer below training,
:mod:`pinn.inference.handle`; this module sits above both.
"""
import tensorflow as tf

from pinn.files import checkpoint_dir
from pinn.inference.handle import InferenceHandle, load_for_inference


def handle_of(trainer):
    """An :class:`InferenceHandle` over a :class:`~pinn.training.trainer.Trainer`'s live weights (what the
    calculator takes of a model in memory): the averaged ones inside its ``averaged_weights()``, or the ones
    it holds for good after ``freeze_averaged_weights()``.

    Args:
        trainer: a Trainer (or another model object with the same ``model``, ``params``, ``restored``,
            ``step``, ``frozen``, ``holds_average``, ``ema`` and ``averaged_weights``), or a
            :class:`RestoredModel` (its own handle).

    Returns:
        :class:`~pinn.inference.handle.InferenceHandle`.
    """
    if isinstance(trainer, RestoredModel):
        return trainer.inference()
    if trainer.frozen:
        return InferenceHandle(trainer.model, trainer.params, trainer.restored, int(trainer.step.numpy()),
                               averaged=trainer.holds_average)
    return InferenceHandle(trainer.model, trainer.params, trainer.restored, trainer.step, trainer.averaged_weights,
                           averaged=trainer.ema is not None)


class RestoredModel:
    """The trained model of a model directory, as ``pinn.get_model(model_dir)`` gives it.

    Inference (``evaluate``, ``predict``, ``get_calc``, the step, the params) goes through
    :func:`load_for_inference`: the network, its weights (the average, when kept) and the step, no
    optimizer, no Kalman state (an EKF's P is neither allocated nor read) and no lock on the directory.
    The first time anything else is asked for (``train``, ``save``, the checkpoint store, the optimizer,
    ``model`` and its raw weights, ``freeze_averaged_weights``, ...), the whole
    :class:`~pinn.training.trainer.Trainer` is built in this one process, restored from the same
    checkpoint, and every call goes to it from then on (upstream's ``get_model`` gave an estimator that
    could go on training).  A directory that holds no checkpoint yet (``params.yml`` alone) has nothing
    to restore for inference: the Trainer is built at once, and a ``train`` starts the run there.

    Args:
        model_dir: the model directory.
        checkpoint: ``None``/``'last'``, ``'best'`` or a checkpoint path.

    Attributes:
        params, rc, model_dir: the model's; ``restored``: the checkpoint's path.
    """

    def __init__(self, model_dir, checkpoint=None):
        self._path = model_dir
        self._trainer = None
        if checkpoint in (None, "last") and checkpoint_dir.latest(model_dir) is None:
            self._handle = None
            self.restored = None
            self.params = self.as_trainer().params
        else:
            self._handle = load_for_inference(model_dir, checkpoint)
            self.params = self._handle.params
            self.restored = self._handle.checkpoint
        self.model_dir = self.params["model_dir"]

    @property
    def rc(self):
        """The network's cutoff, Å."""
        return float(self.params["network"]["params"]["rc"])

    @property
    def step(self):
        """The training step of the weights (the Trainer's step variable once it is built)."""
        return self._trainer.step if self._trainer is not None else tf.constant(self._handle.step, tf.int64)

    def inference(self):
        """The :class:`InferenceHandle` of the model (the Trainer's live weights once it is built)."""
        return handle_of(self._trainer) if self._trainer is not None else self._handle

    def evaluate(self, input_fn, steps=None):
        """Errors on an input (see :meth:`pinn.training.trainer.Trainer.evaluate`), in this one process."""
        owner = self._trainer if self._trainer is not None else self._handle
        return owner.evaluate(input_fn, steps=steps)

    def predict(self, input_fn):
        """One dict per structure of the input (see :meth:`pinn.training.trainer.Trainer.predict`)."""
        owner = self._trainer if self._trainer is not None else self._handle
        return owner.predict(input_fn)

    def as_trainer(self):
        """The :class:`~pinn.training.trainer.Trainer` of the model directory, restored from the checkpoint
        the weights came from (built on first use; it locks the directory, as training does)."""
        if self._trainer is None:
            from pinn.training.trainer import Trainer  # training only when asked for (inference loads no training)
            self._trainer = Trainer.from_model_dir(self._path, self.restored)
        return self._trainer

    #: what the Trainer alone has: asking for one of these builds it (and locks the directory); any other name
    #: that the class does not have raises AttributeError at once (a typo builds nothing)
    TRAINING_ATTRIBUTES = frozenset({
        "train", "save", "close", "store", "optimizer", "kalman", "ema", "early_stopping", "lr_factor",
        "current_learning_rate", "learning_rate", "averaged_weights", "freeze_averaged_weights", "frozen",
        "holds_average", "best_dir", "last_validation", "evaluate_with_parity", "engine", "jit", "parts",
        "model", "network", "world", "backend", "state", "claim", "is_chief", "mp", "dtype", "evaluation",
        "evaluator", "step_functions", "bar"})

    def __getattr__(self, name):
        if name not in RestoredModel.TRAINING_ATTRIBUTES:
            raise AttributeError(f"{type(self).__name__} of {self.__dict__.get('_path')!r} has no attribute "
                                 f"{name!r} (a Trainer's attributes: {sorted(RestoredModel.TRAINING_ATTRIBUTES)})")
        return getattr(self.as_trainer(), name)

    def __repr__(self):
        state = "a Trainer" if self._trainer is not None else "for inference"
        return f"<pinn model of {self.model_dir} at step {int(self.step)} ({state})>"
