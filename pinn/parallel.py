"""The one module that talks to Horovod.

A single-process run never imports Horovod: :func:`world` only asks Horovod
for the rank and size when a Horovod TensorFlow module has already been
imported and initialised by the program.
"""
import logging
import os
import sys

log = logging.getLogger(__name__)

#: environment variables through which launchers announce the number of processes
_LAUNCHER_SIZE_VARS = ("HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS")


def world():
    """This process's (rank, size): from Horovod if it is initialised, else (0, 1).

    Returns:
        (rank, size) as ints.
    """
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
