"""pinn: PiNN-style neural-network interatomic potentials (PiNet, Behler–Parrinello) in TensorFlow 2.

Main entry points: :mod:`pinn.io` (data), :func:`pinn.models.potential_model`
(training), :func:`pinn.get_calc` (ASE calculator).
"""
__version__ = "0.12.0"

from pinn import moved
from pinn.runtime import use_pooled_cpu_allocator

# before TensorFlow allocates anything: a pooled CPU allocator (pinn.runtime explains why)
use_pooled_cpu_allocator()
moved.install()  # the modules' names before 0.10 (pinn.trainer, pinn.io.trr, ...) still import


def get_calc(model, **kwargs):
    """ASE calculator for a model directory or a model object (see :func:`pinn.calculator.get_calc`)."""
    from pinn.calculator import get_calc as _get_calc
    return _get_calc(model, **kwargs)


__all__ = ["get_calc", "__version__"]
