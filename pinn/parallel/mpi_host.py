"""Sums and gathers of host (NumPy) arrays over the ranks of an MPI job, through mpi4py.

A Horovod collective goes through Horovod's background thread: it waits for the
thread's next cycle, negotiates with the other ranks, runs, and calls back.  For the
one small buffer a data-parallel step exchanges (:mod:`pinn.training.exchange`) that
costs 1 to 5 ms on a 2-core node, measured against 0.02 ms for ``MPI_Allreduce`` of the
same 40 kB; and the background thread's polling, every cycle, takes CPU time from the
ranks' own work.  When a job runs under MPI (``mpirun``, ``srun --mpi=pmix``), Horovod's
controller is MPI and ``mpi4py`` is installed, :class:`MpiHost` carries the host arrays
on a duplicate of ``MPI_COMM_WORLD`` instead, and Horovod's cycle is made long
(:data:`pinn.parallel.worlds.QUIET_CYCLE_TIME_MS`), since it then carries nothing after the set-up (the
broadcasts of the weights travel here too, :meth:`MpiHost.broadcast_bytes`).

The sum is computed on rank 0 (from point-to-point messages, or by a reduce for large
sums) and rank 0's bytes are sent to every rank, so every rank holds bitwise the same
result whatever algorithm the MPI library picks (the ranks' weights must stay bitwise equal).
"""
import importlib.util
import os
import time

import numpy as np

#: seconds a waiting rank tests a collective without pause before it starts to sleep between tests: when
#: the other ranks are there, the collective ends in 0.03-0.06 ms this way, against 0.25-0.35 ms asleep
SPIN_S = 2e-4

#: seconds a waiting rank sleeps between tests of a collective (Python's sleep adds ~50 µs of slack)
POLL_S = 5e-5

#: bytes rank 0 may receive in one sum (array size × other ranks) through point-to-point messages;
#: larger sums go through the MPI library's reduce and broadcast trees
HUB_BYTES = 8 * 2 ** 20

# message tags of the point-to-point sum
_TO_ROOT = 71
_FROM_ROOT = 72

#: environment variables that MPI launchers set in every process they start
_MPI_LAUNCHER_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS", "MV2_COMM_WORLD_SIZE")


def yield_when_idle():
    """Make Open MPI yield the core while it waits (``OMPI_MCA_mpi_yield_when_idle=1``, unless set).

    The step's exchange waits asleep (:meth:`MpiHost._wait`), but Horovod's background thread meets
    the other ranks' in MPI every cycle, and a blocking MPI call otherwise polls at full speed,
    taking the core from the rank's own work (ranks blocked in MPI spent 16 ms of CPU per 9 ms
    ethanol step, 2 ranks on 2 cores).  Call before MPI is initialised (``hvd.init()``); other MPI
    libraries ignore the variable.
    """
    if os.environ.get("OMPI_COMM_WORLD_SIZE"):
        os.environ.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")


def launched_by_mpi():
    """Whether an MPI launcher started this process (and not ``horovodrun --gloo``)."""
    if os.environ.get("HOROVOD_GLOO_RENDEZVOUS_ADDR") or os.environ.get("HOROVOD_CONTROLLER", "").lower() == "gloo":
        return False
    return any(os.environ.get(var) for var in _MPI_LAUNCHER_VARS)


def available():
    """Whether this process can use :class:`MpiHost`: launched by MPI, and mpi4py is installed
    (checked without importing it, which would initialise MPI)."""
    return launched_by_mpi() and importlib.util.find_spec("mpi4py") is not None


class MpiHost:
    """Host collectives on a duplicate of ``MPI_COMM_WORLD``.

    Beside Horovod, make it after ``hvd.init()`` (Horovod initialises MPI with ``MPI_THREAD_MULTIPLE``,
    which lets this thread call MPI while Horovod's background thread does, and finalises it).
    Without Horovod (:class:`pinn.parallel.mpi_world.MpiWorld`), ``standalone``: mpi4py has
    initialised MPI and finalises it at exit, and only this thread calls MPI.

    Raises:
        RuntimeError: MPI is not initialised, or (beside Horovod) not with ``MPI_THREAD_MULTIPLE``.
    """

    def __init__(self, standalone=False):
        import mpi4py
        if not standalone:
            mpi4py.rc.initialize = False  # Horovod has initialised MPI (and finalises it)
            mpi4py.rc.finalize = False
        from mpi4py import MPI
        if not MPI.Is_initialized():
            raise RuntimeError("MPI is not initialised (Horovod's controller is not MPI)")
        if not standalone and MPI.Query_thread() < MPI.THREAD_MULTIPLE:
            raise RuntimeError("MPI was initialised without MPI_THREAD_MULTIPLE")
        self._mpi = MPI
        self.comm = MPI.COMM_WORLD.Dup()
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.library = f"MPI ({MPI.Get_library_version().splitlines()[0].strip()})"

    def allreduce_sum(self, array, dtype=np.float64):
        """Sum over ranks of ``array`` (in ``dtype``: float64, or float16 for compressed gradients), the
        same bytes on every rank.

        Up to :data:`HUB_BYTES` received by rank 0 in all, the ranks send their arrays to rank 0,
        which sums them in rank order and sends the sum back (point to point: one rendezvous and
        one copy per message); above, a nonblocking reduce and broadcast (the MPI library's trees).
        Measured for the 100 kB of a small PiNet, 2 ranks on 2 cores, one of them 0.5-2 ms late:
        the late rank's exchange took 0.09-0.16 ms point to point against 1.6 ms through
        ``MPI_Ireduce`` + ``MPI_Ibcast``, whose segments each wait for a test of both ranks.

        Args:
            array: this rank's array (any shape, the same on every rank).
            dtype: the type the arrays travel and are summed in.

        Returns:
            A new array of that shape and ``dtype``.
        """
        array = np.ascontiguousarray(array, dtype=dtype)
        total = np.empty_like(array)
        half = array.dtype == np.float16  # MPI has no half type: its bytes travel, rank 0 sums
        if array.nbytes * (self.size - 1) > HUB_BYTES and not half:
            self._wait(self.comm.Ireduce(array, total, op=self._mpi.SUM, root=0))
            self._wait(self.comm.Ibcast(total, root=0))
            return total
        wire = (lambda a: a.view(np.uint16)) if half else (lambda a: a)  # noqa: E731
        if self.rank != 0:
            for request in (self.comm.Isend(wire(array), 0, tag=_TO_ROOT),
                            self.comm.Irecv(wire(total), 0, tag=_FROM_ROOT)):
                self._wait(request)
            return total
        parts = np.empty((self.size - 1,) + array.shape, array.dtype)
        for request in [self.comm.Irecv(wire(parts[peer - 1]), peer, tag=_TO_ROOT) for peer in range(1, self.size)]:
            self._wait(request)
        total[...] = array
        for part in parts:  # in rank order: the same rounding whatever order the messages came in
            total += part
        for request in [self.comm.Isend(wire(total), peer, tag=_FROM_ROOT) for peer in range(1, self.size)]:
            self._wait(request)
        return total

    @staticmethod
    def _wait(request):
        """Wait for a nonblocking collective: tested without pause for :data:`SPIN_S`, then asleep between
        tests, so that a rank that arrives early leaves its core to its own input threads (a blocking
        call polls at full speed: 16 ms of CPU per 9 ms step per rank on ethanol, against 10-13 ms
        through sleeping TCP sockets)."""
        until = time.perf_counter() + SPIN_S
        while time.perf_counter() < until:
            if request.Test():
                return
        while not request.Test():
            time.sleep(POLL_S)

    def broadcast_bytes(self, data):
        """Rank 0's ``data`` (bytes; ``None`` on the other ranks) on every rank."""
        size = self.comm.bcast(len(data) if self.rank == 0 else None, root=0)
        buffer = bytearray(data) if self.rank == 0 else bytearray(size)
        self.comm.Bcast([buffer, self._mpi.BYTE], root=0)
        return bytes(buffer)

    def allgather(self, array):
        """[size, ...] float64 array of every rank's ``array`` (same shape on all ranks)."""
        array = np.ascontiguousarray(array, dtype=np.float64)
        gathered = np.empty((self.size,) + array.shape)
        self.comm.Allgather(array, gathered)
        return gathered

    def concat_rows(self, array):
        """Every rank's rows of ``array`` (first dimensions may differ) concatenated in rank order (float64)."""
        array = np.ascontiguousarray(array, dtype=np.float64)
        if array.ndim == 0:
            array = array[None]
        rows = np.array(self.comm.allgather(array.shape[0]))
        per_row = int(np.prod(array.shape[1:], dtype=np.int64))
        gathered = np.empty((int(rows.sum()),) + array.shape[1:])
        counts = rows * per_row
        self.comm.Allgatherv(array, [gathered, (counts, np.concatenate([[0], np.cumsum(counts)[:-1]]))])
        return gathered

    def barrier(self):
        """Wait until every rank has come here."""
        self.comm.Barrier()

    def close(self):
        """Free the communicator (collective: every rank calls it)."""
        self.comm.Free()
