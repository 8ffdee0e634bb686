"""A training run's evaluation and prediction on input functions.

:class:`Evaluation` is what a model's ``evaluate``, ``predict`` and a run's validation call: the
input prepared for the network, the weights the training steps keep on the host given to
TensorFlow first, the loss weights of the current step; the sums are the inference layer's
:class:`~pinn.inference.evaluator.Evaluator`'s, over the run's world.
"""
from pinn.inference.inputs import evaluation_input, prepared_input
from pinn.runtime.py_funcs import held_by


class Evaluation:
    """A model's errors and predictions on input functions (what ``Trainer.evaluate`` and ``predict`` and a
    run's validation call).

    Args:
        evaluator: the :class:`Evaluator` (the weights for inference, sums over ranks).
        network: the network the inputs are prepared for (:func:`pinn.inference.inputs.prepared_input`).
        backend: the gradient backend, whose host copy of the weights TensorFlow gets first.
        step: the global step (int64 variable).
        position: ``step -> position`` in the loss-weight schedule (single-rank steps, float64).
    """

    def __init__(self, evaluator, network, backend, step, position):
        self.evaluator = evaluator
        self.network = network
        self.backend = backend
        self.step = step
        self.position = position

    def with_parity(self, input_fn, parity=True, steps=None):
        """(metrics, parity arrays or ``None``) of the input (see :meth:`Evaluator.evaluate`); at most
        ``steps`` batches of this rank's input (``None``: until it ends, which it must)."""
        with held_by(self):  # TensorFlow's callbacks of the input and the step go with the model
            dataset = evaluation_input(prepared_input(input_fn, self.network), steps)
            self.backend.store()
            weights = self.evaluator.model.loss_weights(self.position(self.step))
            return self.evaluator.evaluate(dataset, weights, int(self.step.numpy()), parity=parity)

    def predict(self, input_fn):
        """One dict per structure of this rank's input (see :meth:`Evaluator.predict`)."""
        self.backend.store()
        return self.evaluator.predict(prepared_input(input_fn, self.network))
