"""What inference needs of a trained model, and nothing of its training.

The ASE calculator (:mod:`pinn.calculator`) takes an :class:`InferenceHandle`: the model
(network, physics, energy offsets), its settings, and its weights, averaged when the run
kept a weight average (``ema_decay``), from a :class:`~pinn.training.trainer.Trainer` in
memory (:meth:`~pinn.training.trainer.Trainer.inference`) or loaded from a model directory
(:meth:`~pinn.training.trainer.Trainer.load_for_inference`).
"""


class InferenceHandle:
    """A trained model for inference.

    Args:
        trainer: the :class:`~pinn.training.trainer.Trainer` that holds the model.

    Attributes:
        model: the model (:class:`~pinn.models.potential.PotentialModel` or
            :class:`~pinn.models.dipole.DipoleModel`).
        params: the resolved params.
        rc: the network's cutoff, Å.
        e_unit: eV per energy unit of the model's data (1 for eV).
        dtype: the model's ``tf.DType``.
        atom_types: the atomic numbers the model knows.
        checkpoint: the checkpoint the weights came from (``None`` for weights in memory that
            were never restored).
    """

    def __init__(self, trainer):
        self._trainer = trainer
        self.model = trainer.model
        self.params = trainer.params
        self.rc = float(trainer.rc)
        self.e_unit = float(trainer.mp.get("e_unit", 1.0))
        self.dtype = trainer.dtype
        self.atom_types = list(trainer.network.atom_types)
        self.checkpoint = trainer.restored

    @property
    def step(self):
        """The training step of the current weights (int)."""
        return int(self._trainer.step.numpy())

    @property
    def frozen(self):
        """Whether the weights can no longer change (a model loaded for inference)."""
        return self._trainer.frozen

    def averaged_weights(self):
        """A context in which the model holds the weights for inference (the average, when kept)."""
        return self._trainer.averaged_weights()
