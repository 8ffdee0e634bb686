"""Who this process is in a parallel job, without importing Horovod or MPI: for code below the
training stage (:func:`pinn.io.distribute_data`) and for the learning-rate scaling."""
import math
import os
import sys

#: environment variables through which launchers announce the number of processes
_LAUNCHER_SIZE_VARS = ("HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS")

def world():
    """This process's (rank, size): from the parallel world if one was started
    (:func:`pinn.parallel.worlds.init`), else from an initialised Horovod, else (0, 1).

    Returns:
        (rank, size) as ints.
    """
    started = getattr(sys.modules.get("pinn.parallel.worlds"), "_WORLD", None)
    if started is not None:
        return int(started.rank), int(started.size)
    hvd = sys.modules.get("horovod.tensorflow")
    if hvd is not None:
        try:
            if hvd.is_initialized():
                return int(hvd.rank()), int(hvd.size())
        except (AttributeError, ValueError):
            pass
    return 0, 1


def launcher_size():
    """Number of processes the launcher (horovodrun, mpirun, srun) started, from the environment; 1 if none."""
    for var in _LAUNCHER_SIZE_VARS:
        value = os.environ.get(var, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return 1


def lr_scale(size, scaling):
    """Factor of the learning rate for ``size`` ranks: ``size`` (linear), ``√size`` (sqrt) or 1 (none)."""
    return {"linear": float(size), "sqrt": math.sqrt(size), "none": 1.0}[scaling]
