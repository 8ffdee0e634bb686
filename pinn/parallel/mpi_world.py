"""Parallel training on MPI alone, through mpi4py: the world of ``parallel_params.backend: mpi``, and of
``auto`` where Horovod is not installed (Python 3.12+, TensorFlow 2.16+, which Horovod 0.28.1 does not
build against) or its controller does not see the launcher's ranks.

:class:`MpiWorld` does what :class:`pinn.parallel.worlds.HorovodWorld` does, with the collectives of
:class:`pinn.parallel.mpi_host.MpiHost` (sums on rank 0 in rank order, so every rank gets the same
bytes): the per-step exchange, summed statistics, broadcasts of variables and optimizer state,
rank-0-only writes, GPU pinning by the local rank (from MPI's shared-memory communicator).  Launch
with ``mpirun -np N`` or ``srun --mpi=pmix -n N``.
"""
import importlib
import logging
import socket

import numpy as np

from pinn.parallel.mpi_host import MpiHost
from pinn.parallel.process import HostWorld, broadcast_through_host, exit_after_uncaught_exceptions, pin_devices
from pinn.runtime.ranks import launcher_size

log = logging.getLogger("pinn")


class MpiWorld(HostWorld):
    """Many processes joined by MPI (mpi4py); made by :func:`open_mpi_world`.

    Args:
        host: this process's :class:`~pinn.parallel.mpi_host.MpiHost` (standalone).
        options: the validated ``parallel_params``.
    """

    LAUNCH_HINT = "srun --mpi=pmix or mpirun"

    def __init__(self, host, options):
        from mpi4py import MPI
        import mpi4py
        self.host = host
        self.options = dict(options)
        self.rank, self.size = host.rank, host.size
        node = host.comm.Split_type(MPI.COMM_TYPE_SHARED, key=self.rank)
        self.local_rank, self.local_size = node.Get_rank(), node.Get_size()
        node.Free()
        self.is_chief = self.rank == 0
        self._half = options["compression"] == "fp16"
        self.build = f"MPI through mpi4py {mpi4py.__version__} ({host.library}), no Horovod"
        self.device = None
        self.rank_map = []

    def allreduce_sum(self, tensors, compress=False):
        """Sum over ranks of a list of tensors (eagerly or inside ``tf.function``): one message of their
        values; with ``compress`` and ``compression: fp16`` the values travel and are summed as float16."""
        import tensorflow as tf
        tensors = [tf.convert_to_tensor(t) for t in tensors]
        half = compress and self._half
        wire = np.float16 if half else np.float64

        def reduce(*arrays):
            flat = np.concatenate([np.asarray(a, wire).ravel() for a in arrays])
            total = self.host.allreduce_sum(flat, dtype=wire)
            out = []
            start = 0
            for a in arrays:
                out.append(total[start:start + a.size].reshape(a.shape).astype(a.dtype))
                start += a.size
            return out

        summed = tf.numpy_function(reduce, tensors, [t.dtype for t in tensors], stateful=True)
        for s, t in zip(summed, tensors):
            s.set_shape(t.shape)
        return list(summed)

    def broadcast_variables(self, variables):
        """Assign rank 0's values to ``variables`` on every rank (their bytes in one message).

        Raises:
            RuntimeError: the ranks' variables differ in size (they do not build the same model).
        """
        broadcast_through_host(self.host, self.rank, variables)


def open_mpi_world(options):
    """Initialise MPI through mpi4py and make this process's :class:`MpiWorld`: device pinning, the
    exit at an uncaught exception, the rank map.

    Raises:
        RuntimeError: ``host_exchange`` names Horovod's or TCP's, mpi4py is not installed, or the launcher
            started N processes but MPI sees one (a launcher of another MPI than mpi4py's, or ``srun``
            without ``--mpi=pmix``).
    """
    if options["host_exchange"] not in ("auto", "mpi"):
        raise RuntimeError(f"parallel_params.host_exchange is {options['host_exchange']!r}, which needs Horovod; "
                           "on MPI alone (backend: mpi) the exchange is MPI's: set host_exchange: auto or mpi")
    try:
        import mpi4py
    except ImportError:
        raise RuntimeError("parallel training without Horovod needs mpi4py (pip install mpi4py) and an MPI "
                           "library (e.g. apt-get install openmpi-bin libopenmpi-dev)") from None
    mpi4py.rc.thread_level = "multiple"  # the main thread calls MPI; the watchdog and input threads do not
    importlib.import_module("mpi4py.MPI")  # initialises MPI; mpi4py finalises it at exit
    host = MpiHost(standalone=True)
    if host.size == 1 and launcher_size() > 1:
        raise RuntimeError(
            f"the launcher started {launcher_size()} processes but MPI sees 1 ({host.library}): launch with "
            "the mpirun of the MPI that mpi4py was built with, or srun --mpi=pmix (see docs/parallel.md)")
    world = MpiWorld(host, options)
    tuned = [key for key in ("fusion_threshold_mb", "cycle_time_ms") if options.get(key) is not None]
    if tuned and world.is_chief:
        log.warning("parallel_params %s tune Horovod, which this run does not use (MPI alone): no effect",
                    ", ".join(tuned))
    world.device = pin_devices(world.rank, world.local_rank, world.local_size, options)
    exit_after_uncaught_exceptions()
    world.rank_map = host.comm.allgather((world.rank, socket.gethostname(), world.local_rank, world.device))
    return world
