"""Parallel training with Horovod (:mod:`pinn.parallel.worlds`, the only module that imports it), MPI
alone (:mod:`pinn.parallel.mpi_world`) or one process on its devices (:mod:`pinn.parallel.mirrored`),
and the rank of this process without either (:mod:`pinn.runtime.ranks`)."""
from pinn.runtime.lazy import lazy_exports

_EXPORTS = {
    "launcher_rank": "pinn.runtime.ranks", "launcher_size": "pinn.runtime.ranks", "lr_scale": "pinn.runtime.ranks",
    "PARAMS": "pinn.parallel.serial", "SerialWorld": "pinn.parallel.serial", "HorovodWorld": "pinn.parallel.worlds",
    "MpiWorld": "pinn.parallel.mpi_world", "MirroredWorld": "pinn.parallel.mirrored", "init": "pinn.parallel.worlds",
    "parallelize_model": "pinn.parallel.worlds",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
