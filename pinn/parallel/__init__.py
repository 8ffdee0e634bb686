"""Parallel training with Horovod (:mod:`pinn.parallel.worlds`, the only module that imports it) or MPI
alone (:mod:`pinn.parallel.mpi_world`), and the rank of this process without either
(:mod:`pinn.parallel.ranks`)."""
from pinn.runtime.lazy import lazy_exports

_EXPORTS = {
    "launcher_rank": "pinn.parallel.ranks", "launcher_size": "pinn.parallel.ranks", "lr_scale": "pinn.parallel.ranks",
    "PARAMS": "pinn.parallel.worlds", "SerialWorld": "pinn.parallel.worlds", "HorovodWorld": "pinn.parallel.worlds",
    "MpiWorld": "pinn.parallel.mpi_world", "init": "pinn.parallel.worlds", "parallelize_model": "pinn.parallel.worlds",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
