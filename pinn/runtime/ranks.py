"""Who this process is in a parallel job, from what its launcher (horovodrun, mpirun, srun) put in
its environment, without importing Horovod or MPI: for code below the training stage
(:func:`pinn.io.distribute_data` before any world is started) and for the learning-rate scaling.
Nothing here reads another module's state: the world of a run is passed on explicitly."""
import math
import os

#: environment variables through which launchers announce the number of processes
_LAUNCHER_SIZE_VARS = ("HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS")
#: (rank, size) variables of the launchers: horovodrun (Gloo), Open MPI's mpirun, MPICH / Intel MPI /
#: srun --mpi=pmi2, srun
_LAUNCHER_RANK_VARS = (("HOROVOD_RANK", "HOROVOD_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                       ("PMI_RANK", "PMI_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS"))


def launcher_rank():
    """This process's (rank, size) as its launcher announced them; (0, 1) for a process started alone.

    The rank of every parallel world pinn starts (Horovod's, or MPI's ``COMM_WORLD``) is the
    launcher's rank, so data can be shared out before the world starts.

    Returns:
        (rank, size) as ints.
    """
    for rank_var, size_var in _LAUNCHER_RANK_VARS:
        rank, size = os.environ.get(rank_var, ""), os.environ.get(size_var, "")
        if rank.isdigit() and size.isdigit() and int(size) > 0:
            return int(rank), int(size)
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
