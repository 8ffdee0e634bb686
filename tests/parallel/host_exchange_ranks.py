"""Run by tests/parallel/test_host_exchange.py under ``mpirun -np 3``: MpiHost's collectives on real MPI ranks.

Each rank checks the results itself and prints ``rank R: ok`` (or raises).  MPI is initialised by
mpi4py here (with MPI_THREAD_MULTIPLE, as Horovod does in a training job).
"""
import numpy as np
from mpi4py import MPI  # noqa: F401  (initialises MPI)

from pinn.parallel import mpi_host
from pinn.parallel.mpi_host import MpiHost

host = MpiHost()
rank, size = host.rank, host.size
# a sum whose float64 rounding depends on the order of the terms: every rank must get the same bytes
array = np.array([1e16, 1.0, -1e16, rank + 0.1]) * (rank + 1) + np.pi * rank
total = host.allreduce_sum(array)
expected = sum(np.array([1e16, 1.0, -1e16, r + 0.1]) * (r + 1) + np.pi * r for r in range(size))
np.testing.assert_allclose(total, expected, rtol=1e-12, atol=8)
everyone = host.allgather(total)
assert everyone.shape == (size, 4) and all(row.tobytes() == total.tobytes() for row in everyone), everyone
# rank 0 summed in rank order (point to point): exactly that sum's rounding
in_order = np.array([1e16, 1.0, -1e16, 0.1])
for r in range(1, size):
    in_order = in_order + (np.array([1e16, 1.0, -1e16, r + 0.1]) * (r + 1) + np.pi * r)
assert total.tobytes() == in_order.tobytes(), (total, in_order)
# above mpi_host.HUB_BYTES the sum goes through MPI's reduce and broadcast: still the same bytes everywhere
mpi_host.HUB_BYTES = 0
through_trees = host.allreduce_sum(array)
np.testing.assert_allclose(through_trees, expected, rtol=1e-12, atol=8)
assert all(row.tobytes() == through_trees.tobytes() for row in host.allgather(through_trees))
# rows of different counts per rank (rank r has r + 1 rows of shape (2, 3)), concatenated in rank order
rows = np.full((rank + 1, 2, 3), float(rank))
joined = host.concat_rows(rows)
assert joined.shape == (sum(r + 1 for r in range(size)), 2, 3), joined.shape
assert joined[:, 0, 0].tolist() == [float(r) for r in range(size) for _ in range(r + 1)]
# rank 0's bytes (a length that is not a multiple of 8) on every rank
assert host.broadcast_bytes(b"rank 0 says \x00\xff hi" if rank == 0 else None) == b"rank 0 says \x00\xff hi"
host.barrier()
print(f"rank {rank}: ok", flush=True)
