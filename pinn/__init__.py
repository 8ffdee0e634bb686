"""pinn: PiNN-style neural-network interatomic potentials (PiNet, Behler–Parrinello) in TensorFlow 2.

Main entry points: :mod:`pinn.io` (data), :func:`pinn.models.potential_model`
(training), :func:`pinn.get_calc` (ASE calculator).
"""
__version__ = "0.29.0"

from pinn import moved
from pinn.runtime import use_pooled_cpu_allocator

# before TensorFlow allocates anything: a pooled CPU allocator (pinn.runtime explains why)
use_pooled_cpu_allocator()
moved.install()  # the modules' names before 0.10 (pinn.trainer, pinn.io.trr, ...) still import


def get_calc(model, **kwargs):
    """ASE calculator for a model directory, params or a model object (see :func:`pinn.calculator.get_calc`)."""
    from pinn.calculator import get_calc as _get_calc
    return _get_calc(model, **kwargs)


def get_model(params, **kwargs):
    """The model of a params dict, a model directory or its ``params.yml`` (upstream PiNN's
    ``pinn.get_model``; see :func:`pinn.models.get_model`)."""
    from pinn.models import get_model as _get_model
    return _get_model(params, **kwargs)


def get_network(spec):
    """Upstream PiNN's ``pinn.get_network``: a network from its spec.

    Args:
        spec: ``{'name': 'PiNet', 'params': {...}}`` (validated, defaults filled in; float32,
            seed 0), a params dict with such a ``network`` section (and its ``precision`` and
            ``seed``), or a network object (returned as it is).

    Returns:
        The network (:class:`pinn.networks.PiNet`, ``BPNN`` or ``LJ``).

    Raises:
        pinn.params.ParamsError: naming the first bad key of the spec.
    """
    from pinn.networks import NETWORKS
    from pinn.networks import get_network as _get_network
    if isinstance(spec, tuple(NETWORKS.values())):
        return spec
    from pinn.params import network_params
    return _get_network(network_params(spec))


def train_and_evaluate(model, train_spec, eval_spec):
    """Upstream PiNN's ``tf.estimator.train_and_evaluate(model, train_spec, eval_spec)`` for a pinn model
    (see :func:`pinn.training.specs.train_and_evaluate`)."""
    from pinn.training.specs import train_and_evaluate as _train_and_evaluate
    return _train_and_evaluate(model, train_spec, eval_spec)


def __getattr__(name):
    if name in ("TrainSpec", "EvalSpec"):  # the specs without tf.estimator (gone from TensorFlow ≥ 2.16)
        from pinn.training import specs
        return getattr(specs, name)
    raise AttributeError(f"module 'pinn' has no attribute {name!r}")


__all__ = ["get_calc", "get_model", "get_network", "train_and_evaluate", "TrainSpec", "EvalSpec", "__version__"]
