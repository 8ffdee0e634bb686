"""Inference: a trained model restored and evaluated without its training.

:mod:`pinn.inference.handle` (``load_for_inference``, the ``InferenceHandle``), the checkpoint reader the
training store extends (:mod:`pinn.inference.checkpoint_reader`), the weight average's slots
(:mod:`pinn.inference.weight_average`), the evaluator and its input (:mod:`pinn.inference.evaluator`,
:mod:`pinn.inference.inputs`) and the errors it reports (:mod:`pinn.inference.errors`).  This layer sits
below :mod:`pinn.training` and imports nothing of it (docs/architecture.md).
"""
