"""The worlds of parallel training, and the one module that talks to Horovod.

A single-process run never imports Horovod or MPI.  The trainer talks to a *world*
object with one interface and four implementations:

- :class:`pinn.parallel.serial.SerialWorld` (one process): every reduction is the identity
  (it lives in :mod:`pinn.parallel.serial` with ``PARAMS``, the options; both are importable from here).
- :class:`HorovodWorld` (``params['parallel'] = True``, made by
  :func:`parallelize_model`): sums over ranks with Horovod's collectives
  (Gloo or MPI controller, NCCL on GPUs when Horovod was built with it),
  broadcasts from rank 0, and says who may write files.
- :class:`pinn.parallel.mpi_world.MpiWorld`: the same on MPI alone through mpi4py
  (``parallel_params.backend: mpi``, or ``auto`` where Horovod does not import or does
  not see the launcher's ranks: Python 3.12+ and TensorFlow 2.16+, which Horovod does not
  build against).
- :class:`pinn.parallel.mirrored.MirroredWorld` (``backend: mirrored``): one process, one replica per
  local device, through TensorFlow's ``MirroredStrategy``.

:func:`init` makes the world once per process and returns it (``world = pinn.parallel.init(params)``);
callers pass it on.  :func:`pinn.runtime.ranks.launcher_rank` reports the (rank, size) that the
launcher announced, without importing either, for :func:`pinn.io.distribute_data` before a world.
"""
import importlib.util
import logging
import os
import socket
import sys

from pinn.parallel import mpi_host, tcp_host
from pinn.parallel.horovod_host import HorovodHost
from pinn.parallel.process import (HostWorld, broadcast_through_host, exit_after_uncaught_exceptions,
                                   make_ase_io_per_rank, pin_devices)
from pinn.parallel.serial import PARAMS, SerialWorld  # noqa: F401 (imported from here by scripts)
from pinn.runtime.logs import setup_logging
from pinn.runtime.ranks import launcher_size

log = logging.getLogger("pinn")

class HorovodWorld(HostWorld, SerialWorld):
    """Many processes joined by Horovod; made by :func:`parallelize_model`."""

    LAUNCH_HINT = "srun, mpirun or horovodrun"

    def __init__(self, hvd, options):
        import tensorflow as tf
        self._hvd = hvd
        self._tf = tf
        self.options = dict(options)
        self.rank, self.size = hvd.rank(), hvd.size()
        self.local_rank, self.local_size = hvd.local_rank(), hvd.local_size()
        self.is_chief = self.rank == 0
        self._compression = hvd.Compression.fp16 if options["compression"] == "fp16" else hvd.Compression.none
        #: what carries the host arrays: HorovodHost, or MpiHost / TcpHost (:func:`init`)
        self.host = HorovodHost(hvd, tf)

    def allreduce_sum(self, tensors, compress=False):
        """Sum over ranks of a list of tensors, in one fused Horovod collective.

        Works eagerly and inside ``tf.function``.  With ``compress`` (used for
        gradients), floating tensors travel with the configured compression
        (fp16 halves the bytes; the sum comes back in the original dtype).
        """
        tf = self._tf
        hvd = self._hvd
        tensors = [tf.convert_to_tensor(t) for t in tensors]
        compression = self._compression if compress else hvd.Compression.none
        return hvd.grouped_allreduce(tensors, op=hvd.Sum, compression=compression)

    def broadcast_variables(self, variables):
        """Assign rank 0's values to ``variables`` on every rank (bool variables travel as int8).

        Through the host exchange (their bytes in one message) where MPI or TCP carries it, so
        that Horovod's background thread has nothing to do during training; else through Horovod.

        Raises:
            RuntimeError: the ranks' variables differ in size (they do not build the same model).
        """
        tf = self._tf
        hvd = self._hvd
        if hasattr(self.host, "broadcast_bytes"):
            broadcast_through_host(self.host, self.rank, variables)
            return
        plain = [v for v in variables if v.dtype != tf.bool]
        if plain:
            hvd.broadcast_variables(plain, root_rank=0)
        for v in variables:
            if v.dtype == tf.bool:
                v.assign(tf.cast(hvd.broadcast(tf.cast(v, tf.int8), root_rank=0), tf.bool))


#: Horovod's cycle time (ms) while MPI or TCP carries the host arrays and the broadcasts: Horovod then
#: carries nothing after the start (``allgather_object`` of the set-up), but its background thread
#: still meets the other ranks' every cycle, and under MPI waits for them at full speed.  Measured
#: (2 ranks on 2 cores, ethanol): at 1 ms it took 7 ms of a 10 ms step; at 20 ms 7-14 % of one
#: rank's core; at 100 ms and 500 ms under 2 %.  The start pays at most a cycle per set-up collective.
QUIET_CYCLE_TIME_MS = 100.0


def _host_exchange_plan(options):
    """What will carry this rank's host arrays: ``'mpi'`` (:mod:`pinn.parallel.mpi_host`), ``'tcp'``
    (:mod:`pinn.parallel.tcp_host`) or ``'horovod'``, from ``parallel_params.host_exchange`` and the launcher.

    Raises:
        RuntimeError: ``host_exchange`` names one that this job cannot use.
    """
    choice = options["host_exchange"]
    if choice == "horovod":
        return "horovod"
    if choice in ("auto", "mpi") and mpi_host.available():
        return "mpi"
    if choice in ("auto", "tcp") and tcp_host.launched_by_gloo():
        return "tcp"
    if choice == "mpi":
        why = "mpi4py is not installed (pip install mpi4py)" if mpi_host.launched_by_mpi() else \
            "the job was not started by an MPI launcher (mpirun, srun --mpi=pmix)"
        raise RuntimeError(f"parallel_params.host_exchange is 'mpi' but {why}")
    if choice == "tcp":
        raise RuntimeError("parallel_params.host_exchange is 'tcp' but the job was not started by horovodrun --gloo")
    return "horovod"


def _warn_slow_exchange(options, plan):
    """A WARNING where an MPI-launched job's per-step exchange falls back to Horovod's collectives because
    mpi4py is missing (HPC module stacks often ship Horovod without it): each step then waits for
    Horovod's background cycle (0.12.0's notes in CHANGELOG.md: 1.3-5 ms for one 40 kB allreduce on
    2 cores, against 0.02 ms through MPI)."""
    if plan == "horovod" and options["host_exchange"] == "auto" and mpi_host.launched_by_mpi() and \
            importlib.util.find_spec("mpi4py") is None:
        log.warning("mpi4py is not installed, so every step's exchange goes through Horovod's collectives and "
                    "waits for its background cycle: several times slower on small steps. Install mpi4py against "
                    "this MPI (pip install mpi4py, or pip install 'pinn[mpi]') so that MPI carries it")


def _configure_horovod_env(options, plan):
    """Horovod reads its tuning knobs from the environment at ``hvd.init()``; the cycle time is
    long where MPI or TCP carries the per-step exchange (unless the user set it, or fp16
    gradients still travel through Horovod every step)."""
    if options.get("fusion_threshold_mb") is not None:
        os.environ["HOROVOD_FUSION_THRESHOLD"] = str(int(options["fusion_threshold_mb"] * 1024 * 1024))
    if options.get("cycle_time_ms") is not None:
        os.environ["HOROVOD_CYCLE_TIME"] = str(options["cycle_time_ms"])
    elif plan != "horovod" and options["compression"] != "fp16" and "HOROVOD_CYCLE_TIME" not in os.environ:
        os.environ["HOROVOD_CYCLE_TIME"] = str(QUIET_CYCLE_TIME_MS)
    if plan == "mpi":
        mpi_host.yield_when_idle()


def _build_info(hvd, host):
    parts = [name for name, built in (("MPI", hvd.mpi_built()), ("Gloo", hvd.gloo_built()),
                                      ("NCCL", hvd.nccl_built())) if built]
    controller = "MPI" if hvd.mpi_enabled() else "Gloo" if hvd.gloo_enabled() else "?"
    exchange = f"host arrays over {host.library}" if host is not None else "host arrays over Horovod"
    return f"Horovod {getattr(sys.modules.get('horovod'), '__version__', '?')} built with " \
           f"{'+'.join(parts) or 'nothing'}, controller {controller}, " \
           f"cycle {os.environ.get('HOROVOD_CYCLE_TIME', 'default')} ms; {exchange}"


def _open_host_exchange(hvd, options, plan):
    """This rank's :class:`~pinn.parallel.mpi_host.MpiHost` or :class:`~pinn.parallel.tcp_host.TcpHost`,
    or None where Horovod carries the host arrays.  The ranks agree: where any rank could not open
    the planned one, every rank falls back to Horovod, with a warning naming the ranks and why.

    Raises:
        RuntimeError: the ``host_exchange`` the user named cannot be opened.
    """
    if plan == "horovod":
        return None
    from horovod.tensorflow.functions import allgather_object
    host = error = None
    try:
        if plan == "mpi":
            if not hvd.mpi_enabled():
                raise RuntimeError("Horovod's controller is not MPI")
            host = mpi_host.MpiHost()
        else:
            host = tcp_host.TcpHost(hvd.rank(), hvd.size(), hvd.local_size() == hvd.size(), allgather_object)
    except (RuntimeError, ImportError, ConnectionError) as err:
        error = f"rank {hvd.rank()}: {err}"
    failures = [e for e in allgather_object(error) if e]
    if not failures:
        return host
    if host is not None:
        host.close()
    if options["host_exchange"] != "auto":
        raise RuntimeError(f"parallel_params.host_exchange is '{plan}' but {'; '.join(failures)}")
    if hvd.rank() == 0:
        log.warning("the host arrays travel through Horovod (%s); a step waits for Horovod's cycle, now %s ms: "
                    "set parallel_params.cycle_time_ms (e.g. 0.1) or host_exchange: horovod",
                    "; ".join(failures), os.environ.get("HOROVOD_CYCLE_TIME", "default"))
    return None


_WORLD = None


def init(params=None):
    """Start the parallel world of this process (once): Horovod (tuning knobs, ``hvd.init()``) or MPI
    alone (``parallel_params.backend``), then device pinning, and ASE's file I/O made this rank's own
    (:func:`pinn.parallel.process.make_ase_io_per_rank`).

    Call it at the top of a script, ``world = pinn.parallel.init(params)``, and pass the world on
    (``distribute_data(..., world=world)``, ``potential_model(params, world=world)``); otherwise
    :func:`parallelize_model` calls it when the model is built.

    Args:
        params: params (resolved or not; ``parallel`` and ``parallel_params`` are read), or ``None``
            for the default parallel options.

    Returns:
        The :class:`HorovodWorld` or :class:`~pinn.parallel.mpi_world.MpiWorld` of this process, the
        :class:`~pinn.parallel.mirrored.MirroredWorld` of ``backend: mirrored``; a :class:`SerialWorld`
        for params whose ``parallel`` is false (nothing is started).

    Raises:
        RuntimeError: the launcher started several processes but Horovod (or MPI)
            sees only one (e.g. ``srun`` with a Horovod built without MPI), which
            would make every process train alone on the same ``model_dir``; or the
            backend asked for is not installed.
    """
    global _WORLD
    if params is not None and not params.get("parallel", True):
        return SerialWorld()
    if _WORLD is not None:
        return _WORLD
    from pinn.schema import validate_section
    options = validate_section((params or {}).get("parallel_params"), PARAMS, "parallel_params")
    if options["backend"] == "mirrored":
        from pinn.parallel.mirrored import open_mirrored_world
        _WORLD = open_mirrored_world(options)
        return _WORLD
    hvd = None
    if options["backend"] != "mpi":
        hvd = _start_horovod(options)
    if hvd is None and options["backend"] == "auto" and launcher_size() == 1 and \
            importlib.util.find_spec("mpi4py") is None:
        log.warning("params['parallel'] is True, but this is the only process and neither Horovod nor mpi4py is "
                    "installed: training as one process. For several ranks install mpi4py (pip install mpi4py, "
                    "with an MPI library) or Horovod, and launch with mpirun, srun or horovodrun (docs/parallel.md)")
        _WORLD = SerialWorld()
        return _WORLD
    if hvd is None:
        from pinn.parallel.mpi_world import open_mpi_world
        world_ = open_mpi_world(options)
    else:  # rank 0's lines from here (the host exchange's, below), as for the whole run
        setup_logging(None, level=logging.INFO if hvd.rank() == 0 else logging.WARNING, rank=hvd.rank())
        device = pin_devices(hvd.rank(), hvd.local_rank(), hvd.local_size(), options)
        exit_after_uncaught_exceptions()
        world_ = HorovodWorld(hvd, options)
        world_.host = _open_host_exchange(hvd, options, _host_exchange_plan(options)) or world_.host
        world_.device = device
        world_.build = _build_info(hvd, world_.host)
        world_.rank_map = _gather_rank_map(world_)
    make_ase_io_per_rank(world_.rank)
    # log lines tagged with the rank from here on (rank 0's information, every rank's warnings), as the
    # Trainer logs them: a script may read and share out its data before it builds the model
    setup_logging(None, level=logging.INFO if world_.is_chief else logging.WARNING, rank=world_.rank)
    _WORLD = world_
    return world_


def world_started():
    """Whether :func:`init` has made this process's parallel world already."""
    return _WORLD is not None


def _start_horovod(options):
    """``hvd.init()`` with the tuning knobs; ``None`` where ``backend: auto`` goes on with MPI instead:
    Horovod does not import (not installed, or built against another TensorFlow), or its controller
    sees one process where the launcher started several (e.g. ``srun`` and a Horovod without MPI).

    Raises:
        RuntimeError: ``backend: horovod`` and Horovod does not import, or sees one of N processes.
    """
    auto = options["backend"] == "auto"
    try:
        import horovod.tensorflow as hvd
    except Exception as err:  # ImportError, or TensorFlow's NotFoundError of a Horovod built for another TF
        if auto:
            if importlib.util.find_spec("horovod") is None:
                log.debug("Horovod is not installed: parallel training on MPI alone")
            else:  # a broken build: say so, rather than send the user after mpi4py
                log.warning("Horovod is installed but does not import (%s: %s): parallel training goes on without "
                            "it (MPI alone where mpi4py is installed). Rebuild Horovod against this TensorFlow "
                            "(docs/install.md), or set parallel_params.backend: mpi to use MPI alone on purpose",
                            type(err).__name__, str(err).splitlines()[0] if str(err) else "")
            return None
        raise RuntimeError(f"parallel_params.backend is 'horovod' but Horovod does not import: {err}; "
                           "install it (docs/install.md) or use backend: mpi") from err
    plan = _host_exchange_plan(options)
    _configure_horovod_env(options, plan)
    hvd.init()
    if hvd.rank() == 0 and hvd.size() > 1:
        _warn_slow_exchange(options, plan)
    if hvd.size() == 1 and launcher_size() > 1:
        if auto and importlib.util.find_spec("mpi4py") is not None and not hvd.mpi_enabled():
            log.info("Horovod's controller sees 1 of the %d processes the launcher started (%s): parallel "
                     "training on MPI", launcher_size(), _build_info(hvd, None))
            hvd.shutdown()
            return None
        raise RuntimeError(
            f"the launcher started {launcher_size()} processes but Horovod sees 1 ({_build_info(hvd, None)}): "
            "launch with horovodrun or mpirun, build Horovod with MPI for srun, or install mpi4py for "
            "parallel_params.backend: mpi (see docs/parallel.md)")
    return hvd


def _gather_rank_map(world_):
    """Every rank's (rank, host, local rank, device), gathered on all ranks."""
    from horovod.tensorflow.functions import allgather_object
    return allgather_object((world_.rank, socket.gethostname(), world_.local_rank, world_.device))


def parallelize_model(params):
    """Make a model train on all ranks of a Horovod or MPI job.

    Called by the model functions (:func:`pinn.models.potential_model`) when
    ``params['parallel']`` is true, before the model is built.  It starts
    Horovod or MPI alone (:func:`init`: pins each process to the GPU of its
    local rank, or gives it its share of the CPU cores) and returns the
    world through which the trainer then

    - writes checkpoints, ``params.yml`` and logs on rank 0 only;
    - scales the learning rate (``parallel_params.lr_scaling``, with warmup);
    - broadcasts variables and optimizer state from rank 0 after building,
      after restoring a checkpoint and after a rollback;
    - sums gradients over ranks every (accumulated) step (one exchange of
      host arrays, or Horovod's grouped allreduce), losses normalised by global counts, so the N-rank
      update equals the 1-rank update on the union of the N batches;
    - sums validation errors, agrees on skipping non-finite steps and on
      stopping after a signal.

    Args:
        params: resolved params (:func:`pinn.params.resolve`).

    Returns:
        :class:`HorovodWorld`, :class:`~pinn.parallel.mpi_world.MpiWorld` on MPI alone, or
        :class:`~pinn.parallel.mirrored.MirroredWorld` (``backend: mirrored``, one process on its devices).
    """
    return init(params)
