"""What every parallel world does to its process, whichever library joins the ranks: pin it to its
GPU or its share of the CPU cores, end it at an uncaught exception, and broadcast variables as one
message of bytes through the host exchange (:mod:`pinn.parallel.mpi_host`, :mod:`pinn.parallel.tcp_host`)."""
import logging
import os
import sys

import numpy as np

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
