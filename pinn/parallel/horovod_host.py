"""Sums and gathers of host (NumPy) arrays through Horovod's own collectives: the host exchange of
``parallel_params.host_exchange: horovod``, and of jobs where neither :mod:`pinn.parallel.mpi_host`
nor :mod:`pinn.parallel.tcp_host` can open.  Horovod is handed in by :mod:`pinn.parallel.worlds`,
the one module that imports it."""
import numpy as np


class HorovodHost:
    """Host collectives through Horovod's own (``host_exchange: horovod``, and where the others cannot
    open): each waits for Horovod's cycle."""

    library = "Horovod"

    def __init__(self, hvd, tf):
        self._hvd = hvd
        self._tf = tf

    def allreduce_sum(self, array):
        """Sum over ranks of ``array`` (float64)."""
        return self._hvd.allreduce(self._tf.constant(np.asarray(array, dtype=np.float64)), op=self._hvd.Sum).numpy()

    def allgather(self, array):
        """[size, ...] float64 array of every rank's ``array`` (same shape on all ranks)."""
        array = np.asarray(array, dtype=np.float64)
        gathered = self._hvd.allgather(self._tf.constant(array[None])).numpy()
        return gathered.reshape((-1,) + array.shape)

    def concat_rows(self, array):
        """Every rank's rows of ``array`` (first dimensions may differ) concatenated in rank order (float64)."""
        return self._hvd.allgather(self._tf.constant(np.asarray(array, dtype=np.float64))).numpy()

    def barrier(self):
        """Wait until every rank has come here."""
        self.allreduce_sum(np.zeros(1))

    def close(self):
        """Nothing to close."""
