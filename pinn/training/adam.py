"""Adam on plain ``tf.Variable``s: no Keras, the same arithmetic and checkpoints on every TensorFlow.

The update is Keras 2.15's ``tf.keras.optimizers.Adam`` (what pinn ≤ 0.15 trained with), step
for step::

    t = iterations + 1
    α = lr · √(1 − β₂ᵗ) / (1 − β₁ᵗ)        (β's powers of float32(β) cast to the variable's dtype)
    m += (g − m)(1 − β₁)
    v += (g² − v)(1 − β₂)
    w −= α m / (√v + ε)

With ``weight_decay`` > 0, each decayed variable first shrinks by the rate, decoupled from the
gradient (AdamW; Keras 2.15's ``Adam(weight_decay=...)`` and ``AdamW``)::

    w −= w · weight_decay · lr

and the checkpoint layout is Keras's too (``_iterations``, ``_learning_rate`` and the list
``_variables`` = [iterations, m₀, v₀, m₁, v₁, …]), so a checkpoint of either restores into the
other: model directories trained with TensorFlow 2.15's Keras resume on TensorFlow 2.2x, where
Keras 3 has another optimizer and layout.  Tested against Keras' Adam where it is installed
(tests/training/test_adam.py).
"""
import tensorflow as tf


class Adam(tf.Module):
    """Adam for a fixed list of variables.

    Args:
        variables: the variables it updates (their order is the order of :meth:`apply_gradients`'
            pairs and of the moments in a checkpoint).
        learning_rate: the first learning rate (the trainer assigns each step's to :attr:`learning_rate`).
        beta_1, beta_2, epsilon: Adam's constants (Keras' defaults).
        weight_decay: decoupled weight decay per unit of learning rate (0: none).
        decayed: per variable, whether ``weight_decay`` shrinks it (default: all of them, as Keras).

    Raises:
        ValueError: a negative ``weight_decay``, or ``decayed`` of another length than ``variables``.
    """

    def __init__(self, variables, learning_rate=1e-3, beta_1=0.9, beta_2=0.999, epsilon=1e-7, weight_decay=0.0,
                 decayed=None, name="Adam"):
        super().__init__(name=name)
        self.beta_1 = float(beta_1)
        self.beta_2 = float(beta_2)
        self.epsilon = float(epsilon)
        variables = list(variables)
        if weight_decay < 0:
            raise ValueError(f"Adam: weight_decay {weight_decay} must be ≥ 0")
        decayed = [True] * len(variables) if decayed is None else [bool(d) for d in decayed]
        if len(decayed) != len(variables):
            raise ValueError(f"Adam: {len(decayed)} decayed flags for {len(variables)} variables")
        self.weight_decay = float(weight_decay)
        #: per variable (the order of ``variables``), whether weight decay shrinks it
        self.decayed = tuple(decayed) if self.weight_decay else (False,) * len(variables)
        self._iterations = tf.Variable(0, dtype=tf.int64, trainable=False, name="iteration")
        self._learning_rate = tf.Variable(learning_rate, dtype=tf.float32, trainable=False, name="learning_rate")
        state = [self._iterations]
        for variable in variables:
            zeros = tf.zeros(variable.shape, variable.dtype)
            state.append(tf.Variable(zeros, trainable=False, name=f"{_base_name(variable)}/m"))
            state.append(tf.Variable(zeros, trainable=False, name=f"{_base_name(variable)}/v"))
        self._variables = state
        # not tracked (the checkpoint holds the variables through _variables alone)
        object.__setattr__(self, "_index", {v.ref(): i for i, v in enumerate(variables)})

    @property
    def iterations(self):
        """Applied updates (int64 variable)."""
        return self._iterations

    @property
    def learning_rate(self):
        """The learning rate of the next update (float32 variable)."""
        return self._learning_rate

    @property
    def variables(self):
        """[iterations, m₀, v₀, m₁, v₁, …]: the state a checkpoint, a broadcast or a rollback carries."""
        return list(self._variables)

    def slots(self, variable):
        """``(m, v)``: the first and second moment variables of ``variable``.

        Raises:
            KeyError: ``variable`` is not one this optimizer was built for.
        """
        try:
            i = self._index[variable.ref()]
        except KeyError:
            raise KeyError(f"Adam was not built for {variable.name}") from None
        return self._variables[1 + 2 * i], self._variables[2 + 2 * i]

    def decays(self, variable):
        """Whether weight decay shrinks ``variable`` (one this optimizer was built for)."""
        self.slots(variable)  # KeyError for another variable
        return self.decayed[self._index[variable.ref()]]

    def apply_gradients(self, grads_and_vars):
        """One update of each variable with its gradient (a tensor of the variable's dtype), then
        ``iterations`` + 1.  The step's scalars (the rate, β's powers, α) are computed once per dtype, from
        the same operations in the same order as per variable: the same bits, fewer operations to trace."""
        scalars = {}
        for gradient, variable in grads_and_vars:
            m, v = self.slots(variable)
            dtype = variable.dtype
            if dtype not in scalars:
                scalars[dtype] = self._step_scalars(dtype)
            rate, alpha, keep_1, keep_2, epsilon = scalars[dtype]
            if self.decays(variable):
                variable.assign_sub(variable * tf.cast(self.weight_decay, dtype) * rate)
            m.assign_add((gradient - m) * keep_1)
            v.assign_add((tf.square(gradient) - v) * keep_2)
            variable.assign_sub((m * alpha) / (tf.sqrt(v) + epsilon))
        self._iterations.assign_add(1)

    def _step_scalars(self, dtype):
        """(learning rate, α = lr · √(1 − β₂ᵗ) / (1 − β₁ᵗ), 1 − β₁, 1 − β₂, ε) of this update in ``dtype``
        (the constants as a Python float becomes in an operation with a tensor of ``dtype``)."""
        rate = tf.cast(self._learning_rate, dtype)
        t = tf.cast(self._iterations + 1, dtype)
        beta_1_power = tf.pow(tf.cast(self.beta_1, dtype), t)
        beta_2_power = tf.pow(tf.cast(self.beta_2, dtype), t)
        alpha = rate * tf.sqrt(1 - beta_2_power) / (1 - beta_1_power)
        constants = [tf.constant(c, dtype) for c in (1 - self.beta_1, 1 - self.beta_2, self.epsilon)]
        return (rate, alpha, *constants)


def decayed_flags(variables, on):
    """Which ``variables`` weight decay shrinks (``model.params.weight_decay_on``).

    Args:
        variables: the trainable variables.
        on: ``'kernels'`` (variables named ``kernel``: the layers' weight matrices) or ``'all'``.

    Returns:
        list of bool, one per variable.
    """
    if on == "all":
        return [True] * len(variables)
    if on != "kernels":
        raise ValueError(f"weight_decay_on: {on!r}; 'kernels' or 'all'")
    return [_base_name(v).rsplit("/", 1)[-1] == "kernel" for v in variables]


def _base_name(variable):
    """A variable's name without the ``:0`` suffix."""
    return variable.name.split(":")[0]
