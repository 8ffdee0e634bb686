"""The weight average of a run (``ema_decay``) as a checkpoint holds it, and put in a model for inference.

A run that keeps an exponential moving average of its trainable weights checkpoints it apart from the
raw weights, as the ``weight_average`` object's ``shadow`` variables (one per trainable variable, in
the model's order).  :class:`AverageSlots` is that object's shape: a checkpoint restores into it, and
:meth:`AverageSlots.put_in` gives the model the averages for good.  The training run's
:class:`~pinn.training.ema.WeightAverage` is the same object with its updates and swaps.
"""
import tensorflow as tf


class AverageSlots(tf.Module):
    """Shadow copies of ``variables``: what a checkpoint's weight average is restored into.

    Args:
        variables: the trainable variables averaged (not tracked here, so a checkpoint of this module
            holds the averages alone).
        name: the module's name.
    """

    def __init__(self, variables, name="weight_average"):
        super().__init__(name=name)
        self.shadow = [tf.Variable(v, trainable=False, name=f"average_{i}") for i, v in enumerate(variables)]

    def put_in(self, variables):
        """Give ``variables`` (the model's trainable ones, in the order the slots were made from) the averages,
        for good."""
        for variable, mean in zip(variables, self.shadow):
            variable.assign(mean)
