"""Parallel training with Horovod (:mod:`pinn.parallel.worlds`, the only module that imports it) and
the rank of this process without Horovod (:mod:`pinn.parallel.ranks`)."""
from pinn.lazy import lazy_exports

_EXPORTS = {
    "world": "pinn.parallel.ranks", "launcher_size": "pinn.parallel.ranks", "lr_scale": "pinn.parallel.ranks",
    "PARAMS": "pinn.parallel.worlds", "SerialWorld": "pinn.parallel.worlds", "HorovodWorld": "pinn.parallel.worlds",
    "init": "pinn.parallel.worlds", "parallelize_model": "pinn.parallel.worlds",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
