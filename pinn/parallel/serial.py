"""The options of parallel training (``params['parallel_params']``) and the world of one process.

:class:`SerialWorld` is the world of a run that is not parallel: every reduction over ranks is the
identity and this process writes everything.  The other worlds (:mod:`pinn.parallel.worlds`,
:mod:`pinn.parallel.mpi_world`, :mod:`pinn.parallel.mirrored`) take its interface.
"""
import numpy as np

from pinn.parallel.process import World
from pinn.schema import Option, non_negative, positive

#: options of ``params['parallel_params']`` (used when ``params['parallel']`` is true)
PARAMS = {
    "backend": Option(str, "auto", "what joins the ranks: 'horovod', 'mpi' (mpi4py alone, no Horovod), or 'auto' "
                      "(Horovod when it imports and its controller sees every rank the launcher started, else "
                      "MPI); or 'mirrored': no ranks, one process on all its machine's GPUs (TensorFlow's "
                      "MirroredStrategy; the settings below that tune ranks are refused)",
                      choices=("auto", "horovod", "mpi", "mirrored")),
    "lr_scaling": Option(str, "linear", "how the learning rate grows with the number of ranks N: 'linear' (×N), "
                         "'sqrt' (×√N) or 'none'. When it scales, decay_step and warmup_steps count single-rank "
                         "steps, so the schedule follows the amount of data seen",
                         choices=("linear", "sqrt", "none")),
    "warmup_steps": Option(int, 0, "ramp the learning rate linearly from the single-rank rate to the scaled rate "
                           "over this many (single-rank) steps", check=non_negative),
    "compression": Option(str, "none", "compress gradients for the allreduce: 'fp16' halves the bytes sent",
                          choices=("none", "fp16")),
    "fusion_threshold_mb": Option((float, None), None, "Horovod's tensor fusion buffer in MB "
                                  "(HOROVOD_FUSION_THRESHOLD; None: Horovod's default, 128 MB)", check=non_negative),
    "cycle_time_ms": Option((float, None), None, "Horovod's cycle time in ms (HOROVOD_CYCLE_TIME; None: "
                            "100 ms when the host exchange is mpi or tcp, since Horovod then carries nothing "
                            "after the start; else Horovod's default)", check=positive),
    "host_exchange": Option(str, "auto", "what carries the one exchange of a training step (gradients, "
                            "loss counts, statistics, flags) and the metrics: 'mpi' (mpi4py, for jobs started "
                            "by mpirun or srun), 'tcp' (sockets to rank 0, for horovodrun --gloo), 'horovod' "
                            "(Horovod's collectives, which wait for its cycle), or 'auto' (mpi where the job "
                            "was started by an MPI launcher and mpi4py is installed, tcp under horovodrun "
                            "--gloo, else horovod)", choices=("auto", "mpi", "tcp", "horovod")),
    "intra_op_threads": Option((int, None), None, "TensorFlow threads per rank on CPU (None: the cores this "
                               "process may use, shared among the ranks on its node)", check=positive),
    "single_rank_throughput": Option((float, None), None, "structures/s of a 1-rank run on the same data; when "
                                     "given, the progress line reports the scaling efficiency", check=positive),
    "stall_timeout_s": Option(float, 600.0, "end the job with an error when one training step takes longer than "
                              "this (a rank died or hangs)", check=positive),
}


class SerialWorld(World):
    """One process: reductions are the identity, and this process writes everything."""

    rank = 0
    size = 1
    local_rank = 0
    local_size = 1
    is_chief = True
    is_parallel = False
    options = {key: option.default for key, option in PARAMS.items()}

    def allreduce_sum(self, tensors, compress=False):
        """Sum over ranks of a list of tensors (here: the list itself)."""
        return list(tensors)

    def allreduce_sum_numpy(self, array):
        return array

    def allgather_numpy(self, array):
        """Rows of every rank stacked (here: one row)."""
        return np.asarray(array)[None]

    def concat_rows_numpy(self, array):
        """Every rank's rows of ``array`` concatenated in rank order (float64; here: the array itself)."""
        return np.asarray(array, dtype=np.float64)

    def broadcast_variables(self, variables):
        """Make every rank's variables equal rank 0's (here: nothing to do)."""

    def log_summary(self):
        """Log the world once (rank 0): size, Horovod build, rank → host/device map (here: nothing)."""

    def barrier(self):
        """Wait until every rank has come here (e.g. until rank 0 has written files)."""
        self.allreduce_sum_numpy(np.zeros(1))
