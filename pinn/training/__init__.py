"""Training: :class:`~pinn.training.trainer.Trainer` runs the loop behind
``model.train / evaluate / predict`` and orchestrates its parts, each in a module of this
package (options, learning-rate schedule, weight average, stop signals, progress, recorded
metrics)."""
