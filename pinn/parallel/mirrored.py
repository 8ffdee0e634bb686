"""One process on all the devices of its machine: the world of ``parallel_params.backend: mirrored``,
through TensorFlow's ``tf.distribute.MirroredStrategy``.

What a workstation user without MPI reaches for: ``params['parallel'] = True`` and
``parallel_params: {backend: mirrored}``, started as a plain ``python train.py``.  Every variable of
the run (the model's, Adam's moments, the weight average, the step, the loss scale) is made inside the
strategy's scope, so each device holds a copy (a ``MirroredVariable``).  A step takes one batch per
device (times ``accumulate_batches``), computes each batch's gradients on its device (XLA-compiled
where the run is), sums them across the devices (NCCL on GPUs, a reduction through one device on
CPUs), and applies the update once to every copy: the update of one device on the union of the
batches, as with N ranks (:mod:`pinn.training.strategies`, ``MirroredSteps``).  Checkpoints, the
non-finite skip, the loss scale and the out-of-memory skip are those of one process.

The learning rate scales with the number of devices as with ranks (``lr_scaling``); one process reads
all the data (no ``distribute_data``) and evaluates on the first device.  Settings that only mean
something for ranks are refused (:func:`check`), as are the Numba engine and the Kalman filters.
"""
import logging

from pinn.parallel.serial import SerialWorld
from pinn.schema import ParamsError

log = logging.getLogger("pinn")

#: ``parallel_params`` keys that tune a job of several processes, with what they would do
RANK_ONLY = {
    "compression": "compresses the gradients ranks send each other",
    "host_exchange": "chooses what carries the ranks' exchange",
    "fusion_threshold_mb": "tunes Horovod",
    "cycle_time_ms": "tunes Horovod",
    "intra_op_threads": "shares a node's cores among its ranks (one process uses them all)",
    "stall_timeout_s": "ends a job whose other ranks died or hang",
    "single_rank_throughput": "reports the scaling efficiency of ranks",
}


def check(params):
    """Refuse settings a mirrored run cannot follow (resolved ``params``; called when the params are
    resolved).

    Raises:
        ParamsError: naming the key: a ``parallel_params`` key of :data:`RANK_ONLY` set away from its
            default, ``model.params.engine: numba`` or ``optimizer: ekf | gekf`` with ``backend: mirrored``.
    """
    options = params["parallel_params"]
    if not params["parallel"] or options["backend"] != "mirrored":
        return
    from pinn.parallel.serial import PARAMS
    for key, what in RANK_ONLY.items():
        if options[key] != PARAMS[key].default:
            raise ParamsError(f"parallel_params.{key}: {options[key]!r}, but backend 'mirrored' is one process; "
                              f"the key {what}: leave it unset, or launch ranks (backend auto, horovod or mpi)")
    mp = params["model"]["params"]
    if mp["engine"] == "numba":
        raise ParamsError("model.params.engine: 'numba' computes on the CPU cores of one process; backend "
                          "'mirrored' spreads TensorFlow's step over devices: set engine to tensorflow or auto")
    if mp["optimizer"] != "adam":
        raise ParamsError(f"model.params.optimizer: {mp['optimizer']!r} with parallel_params.backend 'mirrored': "
                          "the Kalman filters' update runs on ranks (backend auto or mpi), not on one process's "
                          "devices; use optimizer adam, or launch ranks")


class MirroredWorld(SerialWorld):
    """One process; its replicas are the local devices of a ``MirroredStrategy``.

    Reductions over ranks are the identity (one rank, as :class:`~pinn.parallel.serial.SerialWorld`);
    :attr:`local_replicas` batches make a step.

    Args:
        devices: TensorFlow device names, one replica each.
        options: the validated ``parallel_params``.
    """

    def __init__(self, devices, options):
        import tensorflow as tf
        self.options = dict(options)
        self.devices = list(devices)
        self.strategy = tf.distribute.MirroredStrategy(self.devices)
        self.local_replicas = self.strategy.num_replicas_in_sync

    def variable_scope(self):
        """The context in which the run's variables are made: the strategy's scope (mirrored copies)."""
        return self.strategy.scope()

    def broadcast_variables(self, variables):
        """Nothing to do: every copy of a mirrored variable is written by each assignment."""

    def log_summary(self):
        """Log the devices once."""
        if getattr(self, "_logged", False):
            return
        self._logged = True
        log.info("parallel training in one process on %d device(s) (MirroredStrategy; gradients summed by NCCL "
                 "across GPUs where TensorFlow has it, else through one device): %s", self.local_replicas,
                 ", ".join(self.devices))
        if self.local_replicas == 1:
            log.warning("parallel_params.backend is 'mirrored' but TensorFlow sees one device (%s): nothing runs in "
                        "parallel. On CPUs use ranks (mpirun, docs/parallel.md); on GPUs check CUDA_VISIBLE_DEVICES",
                        self.devices[0])


def local_devices():
    """The devices a mirrored run uses: every logical GPU, or (without GPUs) every logical CPU device
    (one, unless a script split the CPU with ``tf.config.set_logical_device_configuration``)."""
    import tensorflow as tf
    gpus = tf.config.list_logical_devices("GPU")
    return [d.name for d in (gpus or tf.config.list_logical_devices("CPU"))]


def open_mirrored_world(options):
    """The :class:`MirroredWorld` of this process.

    Raises:
        RuntimeError: the launcher started several processes (backend 'mirrored' is one process).
    """
    from pinn.runtime.ranks import launcher_size
    if launcher_size() > 1:
        raise RuntimeError(f"parallel_params.backend is 'mirrored' (one process on all local devices) but the launcher "
                           f"started {launcher_size()} processes: start one (python script.py), or use backend auto, "
                           "horovod or mpi for ranks")
    return MirroredWorld(local_devices(), options)
