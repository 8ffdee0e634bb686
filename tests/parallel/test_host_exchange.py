"""The host exchanges of parallel training (pinn.parallel.tcp_host, pinn.parallel.mpi_host) on real
processes: sums equal on every rank to the byte, rows gathered in rank order, and a rank that dies
named in the others' error instead of a hang.  Their use in training is tested in test_parallel.py."""
import multiprocessing
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from launching import ENV

from pinn.parallel.tcp_host import TcpHost, interface_address

HERE = os.path.dirname(os.path.abspath(__file__))


def _share_through(queue, size):
    """The collective TcpHost uses once (Horovod's allgather_object in a job): rank 0's address to all."""
    def share(address):
        if address is not None:
            for _ in range(size - 1):
                queue.put(address)
            return [address]
        return [queue.get(timeout=60)]
    return share


def _tcp_rank(rank, size, queue, results, die_at=None):
    share = _share_through(queue, size)
    try:
        host = TcpHost(rank, size, all_local=True, share=lambda a: share(a if rank == 0 else None))
        array = np.array([1e16, 1.0, -1e16, rank + 0.1]) * (rank + 1) + np.pi * rank
        total = host.allreduce_sum(array)
        joined = host.concat_rows(np.full((rank + 1, 2), float(rank)))
        gathered = host.allgather(np.array([rank, 2.0 * rank]))
        # rank 0's bytes (any length, not a multiple of 8) to every rank
        broadcast = host.broadcast_bytes(b"rank 0 says \x00\xff hi" if rank == 0 else None)
        if die_at == rank:
            os._exit(3)  # dies without closing its sockets
        host.barrier()
        results.put((rank, total.tobytes(), joined.tolist(), gathered.tolist(), None, broadcast))
    except Exception as err:  # noqa: BLE001 - the test reads it
        results.put((rank, None, None, None, f"{type(err).__name__}: {err}", None))


def _run_tcp(size, die_at=None):
    context = multiprocessing.get_context("fork")
    queue, results = context.Queue(), context.Queue()
    ranks = [context.Process(target=_tcp_rank, args=(r, size, queue, results, die_at)) for r in range(size)]
    for process in ranks:
        process.start()
    expected = size - (die_at is not None)
    out = sorted(results.get(timeout=60) for _ in range(expected))
    for process in ranks:
        process.join(timeout=30)
    return out


def test_tcp_sums_are_the_same_bytes_on_every_rank_and_rows_keep_rank_order():
    size = 3
    out = _run_tcp(size)
    assert [r[4] for r in out] == [None] * size, out
    assert len({r[1] for r in out}) == 1  # the same bytes on every rank
    total = np.frombuffer(out[0][1])
    expected = sum(np.array([1e16, 1.0, -1e16, r + 0.1]) * (r + 1) + np.pi * r for r in range(size))
    np.testing.assert_allclose(total, expected, rtol=1e-12, atol=8)
    assert out[0][2] == [[0.0, 0.0], [1.0, 1.0], [1.0, 1.0], [2.0, 2.0], [2.0, 2.0], [2.0, 2.0]]
    assert all(r[3] == [[0.0, 0.0], [1.0, 2.0], [2.0, 4.0]] for r in out)
    assert [r[5] for r in out] == [b"rank 0 says \x00\xff hi"] * size


def test_tcp_a_rank_that_dies_is_named_not_waited_for():
    """Rank 2 exits in the middle: rank 0, waiting for its array, and rank 1, waiting for rank 0, both
    end with an error (rank 0's names rank 2) within the test's timeout."""
    out = _run_tcp(3, die_at=2)
    errors = {r[0]: r[4] for r in out}
    assert set(errors) == {0, 1}
    assert "rank 0: the connection closed while waiting for rank 2's array" in errors[0], errors
    assert "rank 1: the connection closed while waiting for the sum from rank 0" in errors[1], errors


def _silent_rank(queue):
    queue.get(timeout=60)  # learns rank 0's address, then never connects


def _waiting_root(size, queue, results):
    import pinn.parallel.tcp_host as tcp_host
    tcp_host.ACCEPT_TIMEOUT_S = 2.0
    try:
        TcpHost(0, size, all_local=True, share=_share_through(queue, size))
        results.put(None)
    except ConnectionError as err:
        results.put(str(err))


def test_tcp_rank_0_does_not_wait_forever_for_a_rank_that_never_connects():
    """Rank 1 never connects (a node that cannot reach rank 0): rank 0 gives up after its timeout with
    an error saying how many connected (the ranks then agree to use Horovod: pinn.parallel.worlds)."""
    context = multiprocessing.get_context("fork")
    queue, results = context.Queue(), context.Queue()
    silent = context.Process(target=_silent_rank, args=(queue,))
    root = context.Process(target=_waiting_root, args=(2, queue, results))
    silent.start()
    root.start()
    error = results.get(timeout=60)
    root.join(timeout=30)
    silent.join(timeout=30)
    assert error == "rank 0: 0 of the 1 other ranks connected within 2 s"


def _stranger(offer, behaviour, seen):
    """A process that is not one of the job's ranks connects to rank 0's port before the real rank 1:
    ``'greeting'`` claims rank 1 without the secret, ``'huge'`` announces a 4 EiB message, ``'silent'``
    sends nothing.  Puts what it got back: ``'closed'`` when rank 0 hung up on it."""
    import socket
    import struct
    with socket.create_connection(offer[:2], timeout=30) as connection:
        challenge = connection.recv(32)
        if behaviour == "greeting":
            connection.sendall(struct.pack("<q", 72) + struct.pack("<q32s32s", 1, b"\0" * 32, b"\1" * 32))
        elif behaviour == "huge":
            connection.sendall(struct.pack("<q", 1 << 62))
        reply = connection.recv(64)
        seen.put((behaviour, len(challenge), "closed" if reply == b"" else reply))


def _rank_after_strangers(rank, size, offers, to_rank1, results):
    import pinn.parallel.tcp_host as tcp_host
    tcp_host.HANDSHAKE_TIMEOUT_S = 1.0  # the silent stranger is refused after 1 s

    def share(offer):
        if rank == 0:
            offers.put(offer)  # to the test, which sends the strangers first
            return [offer]
        return [to_rank1.get(timeout=60)]
    try:
        host = tcp_host.TcpHost(rank, size, all_local=True, share=share)
        total = host.allreduce_sum(np.array([1.0 + rank, 10.0 * rank]))
        results.put((rank, total.tolist(), host.refused, None))
    except Exception as err:  # noqa: BLE001 - the test reads it
        results.put((rank, None, None, f"{type(err).__name__}: {err}"))


def test_tcp_strangers_that_connect_first_are_refused_and_the_job_forms():
    """The host exchange lets no one in (issue 48): three processes that are not ranks reach rank 0's port
    before rank 1 — one greets as rank 1 without the job's secret, one announces a 4 EiB message, one
    says nothing — and each is refused (the connection closed, the reason logged and kept), while rank
    0 goes on waiting; then rank 1, which got the secret through the launcher's channel, joins and the
    sum is right on both ranks."""
    context = multiprocessing.get_context("fork")
    offers, to_rank1, results, seen = (context.Queue() for _ in range(4))
    ranks = [context.Process(target=_rank_after_strangers, args=(r, 2, offers, to_rank1, results)) for r in (0, 1)]
    for process in ranks:
        process.start()
    offer = offers.get(timeout=60)
    assert offer[0] == "127.0.0.1" and len(offer[2]) == 32  # loopback on one node; a 32-byte secret
    for behaviour in ("greeting", "huge", "silent"):
        stranger = context.Process(target=_stranger, args=(offer, behaviour, seen))
        stranger.start()
        stranger.join(timeout=30)
        assert seen.get(timeout=30) == (behaviour, 32, "closed")
    to_rank1.put(offer)
    out = sorted(results.get(timeout=60) for _ in ranks)
    for process in ranks:
        process.join(timeout=30)
    assert [r[3] for r in out] == [None, None], out
    assert out[0][1] == out[1][1] == [3.0, 10.0]
    reasons = [reason for _, reason in out[0][2]]
    assert reasons[0] == "no proof of the job's secret (greeted as rank 1)", reasons
    assert reasons[1] == f"a greeting announcing {1 << 62} bytes, not 72", reasons
    assert reasons[2].startswith("TimeoutError") or reasons[2].startswith("timeout"), reasons


def test_loopback_interface_has_its_address():
    assert interface_address("lo") == "127.0.0.1"
    assert interface_address("no-such-interface0") is None


def test_mpi_sums_are_the_same_bytes_on_every_rank():
    pytest.importorskip("mpi4py")
    if not shutil.which("mpirun"):
        pytest.skip("mpirun not installed")
    run = subprocess.run(["mpirun", "-np", "3", "--oversubscribe", "--bind-to", "none", sys.executable,
                          os.path.join(HERE, "host_exchange_ranks.py")], env=ENV, capture_output=True, text=True,
                         timeout=180)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-3000:]
    # mpirun may join the ranks' lines into one
    assert sorted(re.findall(r"rank (\d): ok", output)) == ["0", "1", "2"], output[-3000:]
