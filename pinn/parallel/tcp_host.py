"""Sums and gathers of host (NumPy) arrays over TCP, for jobs whose Horovod runs on Gloo.

``horovodrun --gloo`` starts no MPI, and a Horovod collective costs a wait for Horovod's
background cycle and a negotiation: 1.3 to 5 ms for one 40 kB buffer on a 2-core node,
against steps of 7 ms (ethanol).  :class:`TcpHost` joins the ranks with plain sockets
instead: every rank connects to rank 0, which sums the ranks' arrays in rank order and
sends the sum back, so every rank holds the same bytes.  A waiting rank sleeps in the
kernel, leaving its core to its own ``tf.data`` threads.

Rank 0 receives one message per rank per exchange, which suits the small buffers of
these networks (kilobytes to a few MB) on tens of ranks; for larger networks on many
nodes, ``parallel_params.host_exchange: horovod`` uses Horovod's ring allreduce.

Every message is an 8-byte length and the payload, so a rank that sends the wrong
thing, or dies, is named in the error instead of leaving the others waiting.

Who may join.  Rank 0 listens on the address it gives the others (loopback on one node, else the
interface of ``HOROVOD_GLOO_IFACE`` or the host name's), not on every interface, and only for
the job's start.  It makes a per-job secret (32 random bytes) and hands it to the ranks with its
address through the launcher's own channel (Horovod's ``allgather_object``, the ``share``
argument), never over the socket.  Each connection must then prove that it holds the secret
(HMAC-SHA256 of a fresh challenge from rank 0 and the rank it claims) before it is taken as that
rank, and rank 0 proves the same to it.  A connection that does not — a stranger that reached the
port first, a bogus greeting, a huge header, silence past :data:`HANDSHAKE_TIMEOUT_S` — is
refused and logged, and rank 0 goes on waiting for the real ranks.  The handshake's messages have
fixed sizes, and no message after it may announce more than :data:`MAX_MESSAGE_BYTES` or (where
the size is known) another size than the step exchanges.
"""
import fcntl
import hashlib
import hmac
import logging
import os
import secrets
import socket
import struct
import time

import numpy as np

log = logging.getLogger("pinn")

_HEADER = struct.Struct("<q")
#: seconds rank 0 waits for the other ranks to connect (they try for half of it)
ACCEPT_TIMEOUT_S = 240.0
#: seconds a new connection has to prove it belongs to the job
HANDSHAKE_TIMEOUT_S = 10.0
#: the largest message a rank accepts (gradients of the largest networks are tens of MB)
MAX_MESSAGE_BYTES = 1 << 31
_CHALLENGE_BYTES = 32
_GREETING = struct.Struct("<q32s32s")  # rank, the peer's challenge to rank 0, its proof
_PROOF_BYTES = 32
#: test hook: seconds a rank other than 0 waits before it connects (a stranger then reaches rank 0 first)
_JOIN_DELAY = "PINN_TEST_TCP_JOIN_DELAY"
_SIOCGIFADDR = 0x8915  # Linux ioctl: an interface's IPv4 address


def launched_by_gloo():
    """Whether ``horovodrun --gloo`` (or Horovod's Gloo controller by request) started this process."""
    return bool(os.environ.get("HOROVOD_GLOO_RENDEZVOUS_ADDR")) or \
        os.environ.get("HOROVOD_CONTROLLER", "").lower() == "gloo"


def interface_address(interface):
    """IPv4 address (text) of a network interface, e.g. ``'lo'`` → ``'127.0.0.1'``; None if it has none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            packed = fcntl.ioctl(probe.fileno(), _SIOCGIFADDR, struct.pack("256s", interface[:15].encode()))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def root_address(all_local):
    """The address the other ranks use to reach rank 0: loopback when every rank is on rank 0's node,
    else the address of the interface Horovod's Gloo uses (``HOROVOD_GLOO_IFACE``), else the host name's."""
    if all_local:
        return "127.0.0.1"
    interface = os.environ.get("HOROVOD_GLOO_IFACE")
    address = interface_address(interface) if interface else None
    return address or socket.gethostbyname(socket.gethostname())


class TcpHost:
    """Host collectives over TCP, rank 0 at the centre.

    Args:
        rank, size: this process's rank and the number of ranks.
        all_local: every rank runs on one node (then the sockets use loopback).
        share: a collective that gives every rank the list of one object per rank (Horovod's
            ``allgather_object``); used once, to tell the ranks rank 0's address.

    Raises:
        ConnectionError: a rank could not connect to rank 0, or sent a wrong greeting.
    """

    library = "TCP sockets to rank 0"

    def __init__(self, rank, size, all_local, share):
        self.rank, self.size = rank, size
        self.peers = {}  # rank 0: rank -> socket; others: 0 -> the socket to rank 0
        #: connections rank 0 refused while the job formed: ``(address, reason)``
        self.refused = []
        listener = offer = failure = None
        if rank == 0:
            try:
                host = root_address(all_local)
                listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                listener.bind((host, 0))  # the address the ranks are given, not every interface
                listener.listen(size + 16)  # room for the real ranks while a stranger is being refused
                offer = (host, listener.getsockname()[1], secrets.token_bytes(32))
            except OSError as err:  # every rank still takes part in the share, and learns of it
                failure = err
                if listener is not None:
                    listener.close()
        root = share(offer)[0]
        if root is None:
            raise ConnectionError(f"rank {rank}: rank 0 could not open a socket for the host exchange"
                                  + (f" ({failure})" if failure is not None else ""))
        address = tuple(root[:2])
        secret = bytes(root[2])
        try:
            if rank == 0:
                self._accept_ranks(listener, secret)
            else:
                time.sleep(float(os.environ.get(_JOIN_DELAY, 0)))  # tests only: let a stranger come first
                connection = socket.create_connection(address, timeout=ACCEPT_TIMEOUT_S / 2)
                connection.settimeout(HANDSHAKE_TIMEOUT_S * 3)  # rank 0 may be refusing a stranger first
                self._tune(connection)
                self.peers[0] = connection
                self._join(connection, secret)
                connection.settimeout(None)
        except ConnectionError:
            self.close()
            raise
        except OSError as err:
            self.close()
            raise ConnectionError(f"rank {rank}: the host exchange could not connect to rank 0 at "
                                  f"{address[0]}:{address[1]} ({err}); set parallel_params.host_exchange: horovod "
                                  "where the nodes cannot open TCP connections to each other") from err
        finally:
            if listener is not None:
                listener.close()

    def _accept_ranks(self, listener, secret):
        """Rank 0: take connections until every other rank has joined with the job's secret, refusing
        (and logging) the others, for at most :data:`ACCEPT_TIMEOUT_S`."""
        deadline = time.monotonic() + ACCEPT_TIMEOUT_S
        host, port = listener.getsockname()[:2]
        log.info("host exchange: rank 0 waits at %s:%d for %d rank(s), each to prove the job's secret", host, port,
                 self.size - 1)
        while len(self.peers) < self.size - 1:
            listener.settimeout(max(deadline - time.monotonic(), 1e-3))
            try:
                connection, peer_address = listener.accept()
            except socket.timeout as err:
                refused = f"; refused {len(self.refused)} other connection(s)" if self.refused else ""
                raise ConnectionError(f"rank 0: {len(self.peers)} of the {self.size - 1} other ranks connected "
                                      f"within {ACCEPT_TIMEOUT_S:g} s{refused}") from err
            where = f"{peer_address[0]}:{peer_address[1]}"
            try:
                connection.settimeout(HANDSHAKE_TIMEOUT_S)
                self._tune(connection)
                peer = self._admit(connection, secret)
            except (ConnectionError, OSError) as err:
                reason = str(err) if isinstance(err, ConnectionError) else f"{type(err).__name__}: {err}"
                self.refused.append((where, reason))
                log.warning("host exchange: rank 0 refused a connection from %s (%s)", where, reason)
                connection.close()
                continue
            connection.settimeout(None)
            self.peers[peer] = connection

    def _admit(self, connection, secret):
        """Rank 0's side of the handshake: a challenge, the peer's greeting (its rank, its challenge, the
        proof), rank 0's proof back.  Returns the peer's rank.

        Raises:
            ConnectionError: a greeting of the wrong size, a rank out of range or taken, a wrong proof.
        """
        challenge = secrets.token_bytes(_CHALLENGE_BYTES)
        connection.sendall(challenge)
        nbytes = _HEADER.unpack(self._exactly(connection, bytearray(_HEADER.size), "a greeting"))[0]
        if nbytes != _GREETING.size:
            raise ConnectionError(f"a greeting announcing {nbytes} bytes, not {_GREETING.size}")
        peer, theirs, proof = _GREETING.unpack(self._exactly(connection, bytearray(_GREETING.size), "a greeting"))
        if not hmac.compare_digest(proof, _proof(secret, b"rank", challenge, peer)):
            raise ConnectionError(f"no proof of the job's secret (greeted as rank {peer})")
        if not 0 < peer < self.size or peer in self.peers:
            raise ConnectionError(f"greeted as rank {peer}, which is not one of the ranks still expected")
        connection.sendall(_proof(secret, b"root", theirs, peer))
        return peer

    def _join(self, connection, secret):
        """A rank's side of the handshake (see :meth:`_admit`).

        Raises:
            ConnectionError: rank 0's proof is wrong (the address does not lead to this job's rank 0).
        """
        challenge = self._exactly(connection, bytearray(_CHALLENGE_BYTES), "rank 0's challenge")
        theirs = secrets.token_bytes(_CHALLENGE_BYTES)
        connection.sendall(_HEADER.pack(_GREETING.size) + _GREETING.pack(
            self.rank, theirs, _proof(secret, b"rank", bytes(challenge), self.rank)))
        proof = self._exactly(connection, bytearray(_PROOF_BYTES), "rank 0's proof")
        if not hmac.compare_digest(bytes(proof), _proof(secret, b"root", theirs, self.rank)):
            raise ConnectionError(f"rank {self.rank}: the process at rank 0's address did not prove the job's secret")

    @staticmethod
    def _tune(connection):
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _send(self, connection, array):
        """One message: the bytes of ``array`` (a NumPy array, float64 but for broadcasts), after their count."""
        payload = memoryview(np.ascontiguousarray(array)).cast("B")
        connection.sendall(_HEADER.pack(payload.nbytes))
        connection.sendall(payload)

    def _receive(self, connection, what, into=None, dtype=np.float64):
        """One message from ``connection`` (of ``dtype``), into ``into`` if given (its size must match)."""
        header = self._exactly(connection, bytearray(_HEADER.size), what)
        nbytes = _HEADER.unpack(header)[0]
        if not 0 <= nbytes <= MAX_MESSAGE_BYTES or nbytes % np.dtype(dtype).itemsize:
            raise ConnectionError(f"rank {self.rank}: {what} announces {nbytes} bytes (at most {MAX_MESSAGE_BYTES} "
                                  f"in whole {np.dtype(dtype).name} values)")
        if into is not None and into.nbytes != nbytes:
            raise ConnectionError(f"rank {self.rank}: {what} has {nbytes} bytes, {into.nbytes} expected "
                                  "(the ranks disagree on what they exchange)")
        target = into if into is not None else np.empty(nbytes // np.dtype(dtype).itemsize, dtype)
        self._exactly(connection, memoryview(target).cast("B"), what)
        return target

    def _exactly(self, connection, buffer, what):
        view = memoryview(buffer)
        got = 0
        while got < len(view):
            n = connection.recv_into(view[got:])
            if n == 0:
                raise ConnectionError(f"rank {self.rank}: the connection closed while waiting for {what} "
                                      "(that rank has ended or died)")
            got += n
        return buffer

    def allreduce_sum(self, array):
        """Sum over ranks of ``array`` (float64, the same shape on every rank), the same bytes on every rank.

        Returns:
            A new float64 array of that shape.
        """
        array = np.ascontiguousarray(array, dtype=np.float64)
        if self.rank != 0:
            self._send(self.peers[0], array)
            return self._receive(self.peers[0], "the sum from rank 0", np.empty_like(array))
        total = array.copy()
        part = np.empty_like(array)
        for peer in range(1, self.size):
            total += self._receive(self.peers[peer], f"rank {peer}'s array", part)
        for peer in range(1, self.size):
            self._send(self.peers[peer], total)
        return total

    def concat_rows(self, array):
        """Every rank's rows of ``array`` (first dimensions may differ) concatenated in rank order (float64)."""
        array = np.ascontiguousarray(array, dtype=np.float64)
        if array.ndim == 0:
            array = array[None]
        tail = array.shape[1:]
        if self.rank != 0:
            self._send(self.peers[0], array)
            flat = self._receive(self.peers[0], "the rows from rank 0")
        else:
            parts = [array.reshape(-1)] + [self._receive(self.peers[peer], f"rank {peer}'s rows")
                                           for peer in range(1, self.size)]
            flat = np.concatenate(parts)
            for peer in range(1, self.size):
                self._send(self.peers[peer], flat)
        return flat.reshape((-1,) + tail)

    def broadcast_bytes(self, data):
        """Rank 0's ``data`` (bytes; ``None`` on the other ranks) on every rank."""
        if self.rank != 0:
            return self._receive(self.peers[0], "rank 0's broadcast", dtype=np.uint8).tobytes()
        for peer in range(1, self.size):
            self._send(self.peers[peer], np.frombuffer(data, np.uint8))
        return data

    def allgather(self, array):
        """[size, ...] float64 array of every rank's ``array`` (same shape on all ranks)."""
        array = np.asarray(array, dtype=np.float64)
        return self.concat_rows(array[None]).reshape((self.size,) + array.shape)

    def barrier(self):
        """Wait until every rank has come here."""
        self.allreduce_sum(np.zeros(1))

    def close(self):
        """Close the sockets."""
        for connection in self.peers.values():
            connection.close()
        self.peers = {}


def _proof(secret, role, challenge, rank):
    """HMAC-SHA256 (32 bytes) of ``role``, ``challenge`` and ``rank`` with the job's ``secret``."""
    return hmac.new(secret, role + bytes(challenge) + struct.pack("<q", rank), hashlib.sha256).digest()
