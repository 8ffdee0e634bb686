"""What every parallel world does, whichever library joins the ranks: pin its process to its GPU or
its share of the CPU cores, make ASE's file I/O this rank's own, end it at an uncaught exception,
broadcast variables as one message of bytes through the host exchange (:mod:`pinn.parallel.mpi_host`,
:mod:`pinn.parallel.tcp_host`), and the host collectives and the log summary (:class:`HostWorld`)."""
import contextlib
import logging
import os
import sys

import numpy as np

from pinn.files.lock import release_all

log = logging.getLogger("pinn")


def pin_devices(rank, local_rank, local_size, options):
    """One GPU per process (by local rank); on CPU, this rank's share of the cores.

    Args:
        rank, local_rank, local_size: this process in the job and on its node.
        options: the validated ``parallel_params`` (``intra_op_threads``).

    Returns:
        A short text for the rank map: ``'GPU:1'`` or ``'CPU, 4 intra-op thread(s)'``.

    Raises:
        RuntimeError: TensorFlow had initialised its GPUs already (every rank would use all of them).
    """
    import tensorflow as tf
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        gpu = gpus[local_rank % len(gpus)]
        try:
            tf.config.set_visible_devices([gpu], "GPU")
            tf.config.experimental.set_memory_growth(gpu, True)
        except RuntimeError as err:
            raise RuntimeError(
                "parallelize_model: TensorFlow was already running when the model was built, so each rank "
                "would use every GPU of its node; build the model (potential_model(params)) before any "
                "TensorFlow work, or call pinn.parallel.init(params) at the top of the script") from err
        if len(gpus) < local_size:
            log.warning("rank %d: %d ranks on this node share %d GPU(s)", rank, local_size, len(gpus))
        return gpu.name.replace("/physical_device:", "")
    threads = options.get("intra_op_threads")
    if threads is None:
        available = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        # a launcher that bound this rank to fewer cores than the node has already gave it its share
        if available >= (os.cpu_count() or available):
            available //= max(local_size, 1)
        threads = max(available, 1)
    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(max(1, min(2, threads)))
    except RuntimeError:
        log.warning("rank %d: TensorFlow was already running, so its thread count could not be set to %d; "
                    "build the model before any TensorFlow work", rank, threads)
        threads = tf.config.threading.get_intra_op_parallelism_threads() or "default"
    return f"CPU, {threads} intra-op thread(s)"


#: what the log says of ASE's I/O in a parallel job (docs/parallel.md, "Reading files with ASE")
ASE_IO_NOTE = ("ASE's file I/O is per rank: ase.io.read on each rank reads that rank's files, and ase.io.write "
               "writes on every rank that calls it (write shared files from rank 0 only)")


def make_ase_io_per_rank(rank):
    """Make ASE's world this process alone for the rest of the job (:mod:`pinn.io.ase_files`): once
    mpi4py is imported, ASE would otherwise give every rank rank 0's frames from ``ase.io.read`` and
    drop the writes of the other ranks.  Warns where ASE had been using MPI's world already, since
    reads of a script before the parallel world started were then rank 0's on every rank.

    Args:
        rank: this process's rank (for the warning).
    """
    from pinn.io.ase_files import make_ase_world_per_process
    before = make_ase_world_per_process()
    if before > 1:
        log.warning("rank %d: ASE was already using MPI's world of %d ranks before the parallel world started "
                    "(mpi4py was imported earlier): any ase.io.read before this point gave every rank the frames "
                    "of rank 0's file. Build the model (params['parallel'] = True) before reading files, or read "
                    "with pinn.io.load_ase or pinn.io.ase_files.read (docs/parallel.md)", rank, before)


def exit_after_uncaught_exceptions():
    """An uncaught exception of a rank (``TrainingDiverged`` on every rank, say) prints its traceback
    and ends the process with status 1 at once.  Left to the interpreter, the traceback kept the
    step's frames (a ``tf.data`` iterator among them) alive into the shutdown of Horovod's background
    thread, and both ranks of a 2-rank run hung there until the launcher's timeout; a rank that
    leaves at once also lets an MPI launcher end the others."""
    previous = sys.excepthook

    def excepthook(kind, value, traceback):
        try:
            previous(kind, value, traceback)
            release_all()  # the model directory's lock: os._exit skips atexit
            logging.shutdown()  # train.log and the stderr handler flushed
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(1)

    sys.excepthook = excepthook


def broadcast_through_host(host, rank, variables):
    """Assign rank 0's values to ``variables`` on every rank: their bytes in one message of ``host``
    (an object with ``broadcast_bytes``).

    Raises:
        RuntimeError: the ranks' variables differ in size (they do not build the same model).
    """
    arrays = [v.numpy() for v in variables]
    payload = host.broadcast_bytes(b"".join(a.tobytes() for a in arrays) if rank == 0 else None)
    if len(payload) != sum(a.nbytes for a in arrays):
        raise RuntimeError(f"rank {rank}: rank 0 broadcast {len(payload)} bytes of variables, this rank "
                           f"has {sum(a.nbytes for a in arrays)} (the ranks do not build the same model)")
    if rank != 0:
        start = 0
        for v, a in zip(variables, arrays):
            v.assign(np.frombuffer(payload, a.dtype, a.size, start).reshape(a.shape))
            start += a.nbytes


class World:
    """What every world has: its replicas (batches trained side by side in a step) and the scope in
    which the run's variables are made.  One replica per rank, and no scope, except in
    :class:`pinn.parallel.mirrored.MirroredWorld` (one replica per local device)."""

    #: batches this process trains on side by side in one step
    local_replicas = 1
    #: the ``tf.distribute`` strategy whose scope holds the run's variables (a mirrored world's), else ``None``
    strategy = None

    @property
    def replicas(self):
        """Batches trained on side by side in one step, over the whole job (the learning rate scales with it)."""
        return self.size * self.local_replicas

    def variable_scope(self):
        """The context in which the run's variables are made (here: none)."""
        return contextlib.nullcontext()


class HostWorld(World):
    """What a parallel world does through its host exchange ``self.host`` (sums, gathers, barrier) and
    its log summary; :class:`pinn.parallel.worlds.HorovodWorld` and
    :class:`pinn.parallel.mpi_world.MpiWorld` set ``host``, ``rank``, ``size``, ``is_chief``, ``build``,
    ``rank_map`` and :attr:`LAUNCH_HINT`."""

    is_parallel = True
    #: what the warning of a 1-process parallel run suggests
    LAUNCH_HINT = ""

    def log_summary(self):
        """Log the world once (rank 0): size, library, rank → host/device map."""
        if not self.is_chief or getattr(self, "_logged", False):
            return
        self._logged = True
        log.info("parallel training on %d rank(s): %s", self.size, self.build)
        for rank, host, local_rank, device in self.rank_map:
            log.info("  rank %d: host %s, local rank %d, %s", rank, host, local_rank, device)
        log.info("  %s", ASE_IO_NOTE)
        if self.size == 1:
            log.warning("*" * 72)
            log.warning("params['parallel'] is True but this is the only process: nothing runs in parallel. "
                        "Launch one process per GPU with %s (docs/parallel.md).", self.LAUNCH_HINT)
            log.warning("*" * 72)

    def allreduce_sum_numpy(self, array):
        """Sum over ranks of a float64 NumPy array, uncompressed (exact metrics), the same bytes on every rank."""
        return self.host.allreduce_sum(array)

    def allgather_numpy(self, array):
        """[size, ...] array of every rank's ``array`` (same shape on all ranks)."""
        return self.host.allgather(array)

    def concat_rows_numpy(self, array):
        """Every rank's rows of ``array`` (first dimensions may differ) concatenated in rank order (float64)."""
        return self.host.concat_rows(array)

    def barrier(self):
        """Wait until every rank has come here."""
        self.host.barrier()
