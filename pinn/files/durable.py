"""Writes that a crash cannot tear: afterwards a file holds its old content or its new one.

A node failure, an OOM kill or the end of a job's walltime can stop a process at any
instruction.  Every file of a model directory that is rewritten (``params.yml``,
``best/``, the ``checkpoint`` state file, ``engine-weights.npz``,
``eval_predictions.npz``) is written whole to a temporary file beside it, flushed to
the disk (fsync), and renamed over the old one; the folder is flushed too, so the
rename itself survives a power cut.  Files that grow (``metrics.jsonl``) get whole
lines in one ``write`` call; a reader skips a torn last line.
"""
import contextlib
import errno
import os
import shutil
import tempfile

#: errno values of a full disk or an exhausted quota
NO_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
#: how TensorFlow's file system and other C++ layers word those errors
NO_SPACE_TEXTS = ("No space left on device", "Disk quota exceeded")


def fsync_dir(path):
    """Flush a folder's entries (new names, renames) to the disk; a no-op where the OS refuses."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fsync_file(path):
    """Flush a written file's content to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def replacing(path, mode="w"):
    """Context manager: the file object of a new version of ``path``, put in place at the end.

    Args:
        path: the file to (re)write.
        mode: ``'w'`` (text) or ``'wb'`` (bytes).

    Yields:
        the open temporary file (in the same folder).  When the block ends normally, the file
        is flushed to the disk and renamed over ``path``; when it raises, the temporary file is
        removed and ``path`` is untouched.
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's file is private; this one is as any other written here
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(folder)


def write_atomic(path, data):
    """Replace ``path`` by ``data`` (``str`` or ``bytes``) atomically (:func:`replacing`)."""
    with replacing(path, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)
    return path


def append_line(path, line):
    """Append one line (``line`` without its newline) to ``path`` in a single write, flushed to the disk.

    When the file's last line was torn by a crash (no final newline), the new line starts on a
    line of its own, so only the torn one is lost.
    """
    data = (line.rstrip("\n") + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        size = os.fstat(fd).st_size
        if size:
            with open(path, "rb") as f:
                f.seek(size - 1)
                if f.read(1) != b"\n":
                    data = b"\n" + data
        written = 0
        while written < len(data):
            written += os.write(fd, data[written:])
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_dir(new, dest):
    """Put the folder ``new`` in the place of ``dest`` (two renames; see :func:`recover_dir`).

    ``dest`` is first renamed to ``dest + '.old'``, then ``new`` to ``dest``, then the old one
    removed.  A crash between the renames leaves ``dest.old``, which :func:`recover_dir` (and
    :func:`existing_dir`) take as ``dest``.
    """
    dest = os.fspath(dest)
    old = dest + ".old"
    if os.path.lexists(old):
        shutil.rmtree(old)
    if os.path.exists(dest):
        os.replace(dest, old)
    os.replace(new, dest)
    fsync_dir(os.path.dirname(os.path.abspath(dest)))
    if os.path.exists(old):
        shutil.rmtree(old, ignore_errors=True)


def existing_dir(dest):
    """``dest``, or ``dest + '.old'`` when a crash inside :func:`replace_dir` left only that one."""
    dest = os.fspath(dest)
    if not os.path.exists(dest) and os.path.isdir(dest + ".old"):
        return dest + ".old"
    return dest


def recover_dir(dest):
    """Finish what a crash inside :func:`replace_dir` left: ``dest.old`` back to ``dest`` when ``dest``
    is missing, else ``dest.old`` removed.  Returns whether anything was done."""
    dest = os.fspath(dest)
    old = dest + ".old"
    if not os.path.isdir(old):
        return False
    if os.path.exists(dest):
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(old, dest)
    return True


def is_no_space(err):
    """Whether ``err`` (an ``OSError`` or a TensorFlow error) says the disk or the quota is full."""
    if isinstance(err, OSError) and err.errno in NO_SPACE_ERRNOS:
        return True
    return any(text in str(err) for text in NO_SPACE_TEXTS)


def format_bytes(n):
    """``n`` bytes for a message: '512 B', '3.4 kB', '12.0 MB', '1.50 GB'."""
    n = float(n)
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.{2 if unit == 'GB' else 1}f} {unit}"
    return f"{int(n)} B"


def free_bytes(path):
    """Bytes free to this user on the file system of ``path`` (or of its nearest existing parent)."""
    path = os.path.abspath(os.fspath(path))
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return shutil.disk_usage(path).free
