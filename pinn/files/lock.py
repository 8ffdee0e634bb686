"""One writer per model directory: the lock file a run creates before it writes anything there.

The lock is ``model_dir/.pinn.lock`` (:data:`LOCK_NAME`), a small JSON record of its holder: host,
pid, the process's start time (``/proc/PID/stat``), the host's boot id and pid namespace, when the
lock was taken, the command line, a random token and the directory's device and inode numbers.  It
is created with ``O_CREAT | O_EXCL``, which succeeds for one process only, also on NFS (v3 and
later) and the cluster file systems; ``fcntl``/``flock`` locks are not used (NFS clients drop or
fake them).  While it is held, a thread of the holder touches the file every :data:`HEARTBEAT_S`
seconds.

A lock found in place is the live holder's, and refused with :class:`ModelDirLocked` (one line
naming host, pid, start and command), unless it is stale:

- it names this host (this boot of it, this pid namespace), and the process is gone: no such pid,
  a zombie (ended, not yet reaped: the orphaned ranks of a killed job in a container whose first
  process reaps none), or a pid whose start time differs from the one recorded (reused);
- it names another host (or boot, or a container's pid namespace), and was last touched more than
  :data:`STALE_AFTER_S` seconds ago (no heartbeat: the node is lost or was rebooted);
- it names this host and another directory (device and inode): copied along with the directory
  (``cp -r``); other hosts may number a shared directory otherwise, so there only the heartbeat
  counts;
- it is unreadable (a crash between creating and writing it) and older than :data:`TORN_AFTER_S`.

A stale lock is taken over and the taking over said in one line (:attr:`DirLock.note`); a copied
one is replaced without a word.  Two processes taking over one stale lock at once are serialised by
a second file created the same way (``.pinn.lock.takeover``).  The locks of one process are
counted: a second lock of a directory this process holds shares the first, and the file goes when
the last is released.  A directory this process may not write (read-only) is not locked (nothing
can be written there either).
"""
import datetime
import errno
import json
import logging
import os
import socket
import sys
import threading
import time
import uuid

#: the lock file, inside the model directory
LOCK_NAME = ".pinn.lock"
#: seconds between two touches of a held lock file
HEARTBEAT_S = 30.0
#: a lock of another host (or boot) not touched for this many seconds is stale
STALE_AFTER_S = 300.0
#: an unreadable lock file (torn by a crash) older than this many seconds is stale
TORN_AFTER_S = 60.0
#: a takeover file older than this many seconds was left by a crash in the middle of a takeover
_TAKEOVER_STALE_S = 30.0
_READ_ONLY_ERRNOS = (errno.EACCES, errno.EPERM, errno.EROFS)
_COPIED = "which was copied along with its directory"

log = logging.getLogger("pinn")

_held = {}  # real path of a directory -> its _Held, for the locks this process holds
_registry_lock = threading.Lock()


class ModelDirLocked(ValueError):
    """Another live process holds the model directory's lock (the message, one line, names it)."""


def lock_model_dir(model_dir, heartbeat_s=HEARTBEAT_S, stale_after_s=STALE_AFTER_S):
    """Take the lock of ``model_dir`` for this process (see the module's docstring).

    Args:
        model_dir: the directory; created when missing.
        heartbeat_s: seconds between the holder's touches of the lock file.
        stale_after_s: a lock of another host untouched for this long is taken over.

    Returns:
        a :class:`DirLock`: its ``note`` is the line that says a stale lock was taken over (else
        ``None``); ``release()`` gives the lock back.

    Raises:
        ModelDirLocked: a live process holds the lock (one line naming host, pid, start and command).
    """
    os.makedirs(model_dir, exist_ok=True)
    key = os.path.realpath(model_dir)
    path = os.path.join(key, LOCK_NAME)
    with _registry_lock:
        held = _held.get(key)
        if held is not None and held.pid == os.getpid():
            held.count += 1
            return DirLock(held, None)
        record = _record(key)
        try:
            note = _acquire(path, record, stale_after_s)
        except OSError as err:
            if err.errno in _READ_ONLY_ERRNOS:
                return DirLock(None, None)
            raise
        held = _held[key] = _Held(key, path, record["token"], heartbeat_s)
        return DirLock(held, note)


def release_all():
    """Release every lock this process holds (before ``os._exit``, which skips ``atexit``)."""
    with _registry_lock:
        helds = [held for held in _held.values() if held.pid == os.getpid()]
        for held in helds:
            del _held[held.key]
    for held in helds:
        held.remove()


class DirLock:
    """One process's hold on a model directory's lock (:func:`lock_model_dir`).

    Attributes:
        path: the lock file, or ``None`` when the directory could not be locked (read-only).
        note: the line that says a stale lock was taken over, or ``None``.
    """

    def __init__(self, held, note):
        self._held = held
        self.path = held.path if held is not None else None
        self.note = note

    @property
    def held(self):
        """Whether this process holds the lock through this object (not yet released, not read-only)."""
        return self._held is not None

    def release(self):
        """Give the lock back (idempotent); the file goes with the last of this process's holds."""
        held, self._held = self._held, None
        if held is None:
            return
        with _registry_lock:
            held.count -= 1
            last = held.count == 0 and _held.get(held.key) is held
            if last:
                del _held[held.key]
        if last:
            held.remove()


class _Held:
    """A lock file this process created, its count of holders and its heartbeat thread."""

    def __init__(self, key, path, token, heartbeat_s):
        self.key = key
        self.path = path
        self.token = token
        self.pid = os.getpid()
        self.count = 1
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, args=(heartbeat_s,), name="pinn-lock-heartbeat",
                                        daemon=True)
        self._thread.start()

    def _beat(self, interval):
        """Touch the lock file every ``interval`` s while it is ours; stop (with a warning) once it is not."""
        while not self._stop.wait(interval):
            if not self._ours():
                holder = _parse(_read_bytes(self.path))
                log.warning("the lock of %s is no longer this process's (%s): another run may write there",
                            os.path.dirname(self.path), _describe(holder) if holder else "its file was removed")
                return
            try:
                os.utime(self.path)
            except OSError:
                pass

    def _ours(self):
        holder = _parse(_read_bytes(self.path))
        return holder is not None and holder.get("token") == self.token

    def remove(self):
        """Stop the heartbeat and remove the lock file if it is still this process's (once it has left
        the registry)."""
        if self.pid != os.getpid():  # a forked child leaves its parent's lock alone
            return
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()
        if self._ours():
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass


# ---------------------------------------------------------------------------- taking the lock
def _acquire(path, record, stale_after_s):
    """Create the lock file ``path`` holding ``record``, taking over a stale one.

    Returns:
        the takeover line, or ``None``.

    Raises:
        ModelDirLocked: a live process holds it.
    """
    for _ in range(3):
        if _create(path, record):
            return None
        seen, mtime = _read_settled(path)
        if seen is None:
            continue  # released meanwhile
        holder = _parse(seen)
        reason = _stale_reason(holder, mtime, record["dir_id"], stale_after_s)
        if reason is None:
            raise ModelDirLocked(_refusal(path, holder, mtime))
        if _take_over(path, seen, record):
            if reason == _COPIED:
                return None
            who = f"pid {holder.get('pid')} on host {holder.get('host')}" if holder else "an unreadable lock file"
            return f"{os.path.dirname(path)}: taking over the lock of {who}, {reason}"
        time.sleep(0.2)  # another process is taking it over: see what it left
    raise ModelDirLocked(f"{os.path.dirname(path)}: another process is taking its lock ({path}) at this moment; "
                         "try again")


def _create(path, record):
    """Create ``path`` exclusively with ``record`` as JSON, flushed; ``False`` when it exists."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    try:
        os.write(fd, json.dumps(record).encode())
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(path)  # an empty lock (a full disk) would stop the next run for TORN_AFTER_S
        raise
    os.close(fd)
    return True


def _take_over(path, seen, record):
    """Replace the stale lock ``path`` (whose bytes were ``seen``) by ``record``, one process at a time.

    Returns:
        whether this process now holds the lock (``False``: another took it first).
    """
    mutex = path + ".takeover"
    try:
        fd = os.open(mutex, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        try:
            if time.time() - os.stat(mutex).st_mtime > _TAKEOVER_STALE_S:
                os.unlink(mutex)  # left by a crash in a takeover; the next attempt goes on
        except FileNotFoundError:
            pass
        return False
    try:
        if _read_bytes(path) == seen:
            os.unlink(path)
        return _create(path, record)
    finally:
        os.close(fd)
        try:
            os.unlink(mutex)
        except FileNotFoundError:
            pass


# ---------------------------------------------------------------------------- judging a lock
def _stale_reason(holder, mtime, dir_id, stale_after_s):
    """Why the lock of ``holder`` (parsed record, or ``None``: unreadable), touched at ``mtime``, found in the
    directory numbered ``dir_id`` (device, inode), is stale (:data:`_COPIED`: a copy); ``None`` when its holder
    may be alive."""
    age = time.time() - mtime
    if holder is None:
        return f"last touched {age:.0f} s ago" if age > TORN_AFTER_S else None
    if all(holder.get(key) == value for key, value in _here().items()):
        if holder.get("dir_id") != list(dir_id):
            return _COPIED
        if holder.get("pid") == os.getpid() and holder.get("process_start") == _process_start(os.getpid()):
            return "which this process left"
        if _alive(holder.get("pid"), holder.get("process_start")):
            return None
        return "which is no longer running"
    if age > stale_after_s:
        return f"whose heartbeat stopped {age:.0f} s ago (stale after {stale_after_s:.0f} s)"
    return None


def _alive(pid, start):
    """Whether process ``pid`` of this host runs and, where ``start`` is known, started then."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it runs
    state, now = _process_state_and_start(pid)
    if state in (b"Z", b"X"):  # a zombie: it ended, and no one has reaped it (an orphan in a container)
        return False
    return start is None or now is None or now == start


def _refusal(path, holder, mtime):
    """The one line of a refusal: who holds the lock."""
    folder = os.path.dirname(path)
    if holder is None:
        return (f"{folder}: another process is taking its lock ({path}, unreadable, touched "
                f"{time.time() - mtime:.0f} s ago); try again, or delete the file if no run uses the directory")
    return (f"{folder}: in use by another run: {_describe(holder)}; wait for it to end (pinn eval, get_calc and "
            f"load_for_inference read the model meanwhile) or, if that run is gone, delete {path}")


def _describe(holder):
    return (f"pid {holder.get('pid')} on host {holder.get('host')}, started {holder.get('started')}, "
            f"command {holder.get('command')!r}")


# ---------------------------------------------------------------------------- this process
def _record(folder):
    """The lock's JSON record of this process for directory ``folder``."""
    return {**_here(), "pid": os.getpid(), "process_start": _process_start(os.getpid()),
            "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "command": _command(), "token": uuid.uuid4().hex, "dir_id": _dir_id(folder)}


def _here():
    """Where this process's pids mean something: host name, boot id and pid namespace (containers on one
    host may share its name and boot, not their pids)."""
    return {"host": socket.gethostname(), "boot_id": _boot_id(), "pid_ns": _proc_text("/proc/self/ns/pid", link=True)}


def _dir_id(folder):
    """[device, inode] of ``folder`` (a copy has others)."""
    info = os.stat(folder)
    return [info.st_dev, info.st_ino]


def _command():
    """This process's command line, shortened for one line (``pinn train run.yml``)."""
    argv = list(sys.argv) or [""]
    name = os.path.basename(argv[0])
    argv[0] = f"{os.path.basename(sys.executable)} {name}".strip() if name in ("", "-", "-c", "-m") else name
    text = " ".join(argv)
    return text if len(text) <= 200 else text[:197] + "..."


def _process_start(pid):
    """Start time of process ``pid`` (clock ticks after boot, ``/proc/PID/stat``), or ``None`` without /proc."""
    return _process_state_and_start(pid)[1]


def _process_state_and_start(pid):
    """(state letter, start time) of process ``pid`` from ``/proc/PID/stat`` (``b"Z"``: a zombie; clock ticks
    after boot), each ``None`` where /proc does not say."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None, None
    state = fields[0] if fields else None
    return state, (int(fields[19]) if len(fields) > 19 else None)


def _boot_id():
    """This host's boot id (Linux), or ``None``."""
    return _proc_text("/proc/sys/kernel/random/boot_id")


def _proc_text(path, link=False):
    """The text of a /proc file (or the target of a /proc link), or ``None`` where there is none."""
    try:
        if link:
            return os.readlink(path)
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


# ---------------------------------------------------------------------------- reading the file
def _read_bytes(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def _read_settled(path):
    """(bytes, mtime) of the lock file, read again briefly while it is empty or torn (just being written);
    ``(None, None)`` when it is gone."""
    for _ in range(5):
        try:
            mtime = os.stat(path).st_mtime
        except FileNotFoundError:
            return None, None
        seen = _read_bytes(path)
        if seen is None:
            return None, None
        if _parse(seen) is not None:
            break
        time.sleep(0.1)
    return seen, mtime


def _parse(data):
    """The record in lock file bytes ``data``, or ``None`` (missing, empty, torn)."""
    if not data:
        return None
    try:
        record = json.loads(data)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None
