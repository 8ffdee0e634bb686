"""Frames of extended XYZ files and ASE databases read one at a time, for data larger than memory.

:func:`pinn.io.load_ase` with ``stream=True`` (or, by default, for inputs larger than
:data:`STREAM_ABOVE_BYTES`) holds an index of the frames instead of the frames: per frame its byte
offset (extended XYZ) or row id (an ASE database: SQLite ``.db``, LMDB ``.aselmdb`` through
the ``ase-db-backends`` package), 8 bytes, and 8 more for the frame numbers a split shuffles; found by
one pass over the files that parses no number but the atom counts.  The datasets read each frame
when they reach it, so their memory does not grow with the number of frames.  The items split and
shuffled are the frame numbers, in the same way as
the frames held in memory are (:func:`pinn.io.split_items`): a seed gives the same splits and the same
order whether the frames are streamed or not.

The index is of the files as they were when it was made: each file's size and modification time
(nanoseconds) are recorded then and compared at every read of a frame (one ``stat``, microseconds),
so that a file rewritten or appended to since (an active-learning loop adding frames while a run
trains) is refused by name instead of read at stale offsets or row ids.
"""
import array
import io
import logging
import os

import numpy as np

from pinn.io import ase_files
from pinn.io.errors import DataError

log = logging.getLogger(__name__)

#: ``load_ase(stream=None)`` streams inputs of these kinds whose files hold more than this many bytes in all
STREAM_ABOVE_BYTES = 256 * 2 ** 20
#: extended XYZ files (read with ASE's ``extxyz`` reader, which also reads plain XYZ)
XYZ_SUFFIXES = (".xyz", ".extxyz")
#: ASE databases (``.aselmdb`` needs the ``ase-db-backends`` package)
DB_SUFFIXES = (".db", ".aselmdb")
#: bytes read at a time by the scan of an XYZ file
_CHUNK = 2 ** 20


def bytes_on_disk(paths):
    """The bytes the existing files of ``paths`` hold in all (what :data:`STREAM_ABOVE_BYTES` is compared with)."""
    return sum(os.path.getsize(p) for p in paths if os.path.isfile(p))


def file_stamp(path):
    """``(size in bytes, modification time in ns)`` of ``path``: what :class:`FrameIndex` records of each file
    and compares at every read."""
    stat = os.stat(path)
    return stat.st_size, stat.st_mtime_ns


def _stamp_change(before, now):
    """What differs between two :func:`file_stamp` s, in words."""
    if before[0] != now[0]:
        return f"{before[0]} bytes then, {now[0]} now"
    return "the same size, modified since"


def streamable(path):
    """Whether ``path`` (a file name) is of a kind :class:`FrameIndex` can index: extended XYZ or a database."""
    return isinstance(path, (str, os.PathLike)) and os.fspath(path).endswith(XYZ_SUFFIXES + DB_SUFFIXES)


def xyz_offsets(path):
    """The byte offset of every frame of an (extended) XYZ file, and the file's end.

    One pass over the file in chunks: the atom count on each frame's first line gives where the
    next frame starts; no other line is parsed.  Blank lines after the last frame end the file,
    as for ASE's reader.

    Returns:
        int64 array [n_frames + 1]: frame k is the bytes ``offsets[k]:offsets[k + 1]``.

    Raises:
        DataError: a frame's first line that is not an atom count, a file that ends inside a frame,
            frames after a blank line (which ASE's reader stops at), naming the file and frame.
    """
    offsets = array.array("q")  # 8 bytes a frame while scanning
    next_header = 0  # the line number of the next frame's first line
    lines_before = 0  # complete lines in the chunks before this one
    base = 0  # byte offset of the buffer's first byte
    rest = b""
    blank = None  # the line number of a blank line where a frame would start
    with open(path, "rb") as handle:
        while True:
            chunk = handle.read(_CHUNK)
            buffer = rest + chunk
            ends = np.flatnonzero(np.frombuffer(buffer, dtype=np.uint8) == 10)
            if not chunk and buffer and (not len(ends) or ends[-1] != len(buffer) - 1):
                ends = np.append(ends, len(buffer))  # a last line without its newline
            while next_header < lines_before + len(ends):
                local = next_header - lines_before
                start = int(ends[local - 1]) + 1 if local else 0
                text = buffer[start:int(ends[local])].strip()
                next_header += 1
                if not text:
                    blank = next_header - 1 if blank is None else blank
                    continue
                if blank is not None:
                    raise DataError(f"{path}: a blank line (line {blank + 1}) where frame {len(offsets)} would start, "
                                    "and more frames after it; ASE's reader stops at a blank line")
                try:
                    count = int(text)
                except ValueError:
                    raise DataError(f"{path}, frame {len(offsets)}: its first line {text[:40]!r} is not an atom "
                                    "count (not an XYZ file?)") from None
                if count < 0:
                    raise DataError(f"{path}, frame {len(offsets)}: atom count {count}")
                offsets.append(base + start)
                next_header += count + 1
            lines_before += len(ends)
            if not chunk:
                break
            cut = int(ends[-1]) + 1 if len(ends) else 0
            base += cut
            rest = buffer[cut:]
    if next_header > lines_before:
        raise DataError(f"{path}, frame {len(offsets) - 1}: the file ends inside this frame (truncated?)")
    offsets.append(base + len(rest))
    return np.frombuffer(offsets, dtype=np.int64).copy()


def db_ids(db):
    """The row ids of an open ASE database (``.db``, ``.aselmdb``), in the order ``select()`` gives them.

    An LMDB database (``ase-db-backends``) holds its ids already (its ``ids``, read from its keys when it
    opened): they are taken as they are, without reading a row; SQLite's are selected without the rows' data.
    """
    known = getattr(db, "ids", None)
    if isinstance(known, list):
        return np.asarray(known, dtype=np.int64)
    if type(db).__name__ == "SQLite3Database" and hasattr(db, "managed_connection"):
        # ASE's SQLite table of rows, in the order its select() (no sort) gives them: ~100x faster than
        # building a row object for each id (0.24 ms a row)
        with db.managed_connection() as connection:
            return np.fromiter((row[0] for row in connection.execute("SELECT id FROM systems")), dtype=np.int64)
    return np.fromiter((row.id for row in db.select(include_data=False, columns=["id"])), dtype=np.int64)


class FrameIndex:
    """Where each frame of some files is, in 8 bytes a frame: the frames of file ``f`` are numbers
    ``first[f]`` to ``first[f + 1] - 1``; frame k of an XYZ file is its bytes
    ``positions[f][k]:positions[f][k + 1]``, of a database its row id ``positions[f][k]``.

    Args:
        paths: file names, each extended XYZ or an ASE database (:func:`streamable`), in order.

    Attributes:
        stamps: per file, its ``(size, mtime_ns)`` when it was indexed (:func:`file_stamp`); a read finds
            the file so or refuses it (:meth:`check`).

    Raises:
        DataError: a missing or empty file, a database that cannot be opened or listed, or what
            :func:`xyz_offsets` finds; naming the file.
    """

    def __init__(self, paths):
        self.files = [os.fspath(p) for p in paths]
        self._databases = {}  # open while the datasets that read them are (pinn.io.ase_files.database)
        self.positions = []
        self.stamps = []
        for path in self.files:
            if not os.path.exists(path):
                raise DataError(f"{path}: no such file")
            if os.path.getsize(path) == 0:
                raise DataError(f"{path}: file is empty")
            if path.endswith(DB_SUFFIXES):
                try:
                    self._databases[path] = ase_files.database(path)
                    self.positions.append(db_ids(self._databases[path]))
                except Exception as err:
                    raise DataError(f"{path}: could not open it as an ASE database: {type(err).__name__}: "
                                    f"{err}") from err
                self.stamps.append(file_stamp(path))  # after opening: what the open may write counts
            else:
                self.stamps.append(file_stamp(path))  # before the scan: a change during it is seen later
                self.positions.append(xyz_offsets(path))
        counts = [len(p) - (0 if f.endswith(DB_SUFFIXES) else 1) for f, p in zip(self.files, self.positions)]
        self.first = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)

    def __len__(self):
        return int(self.first[-1])

    @property
    def holds_databases(self):
        """Whether any of the files is a database (its connection open in this process: such an index is read
        here, not sent to another process)."""
        return bool(self._databases)

    @property
    def nbytes(self):
        """The index's memory, bytes."""
        return sum(p.nbytes for p in self.positions) + self.first.nbytes

    def _locate(self, k):
        """(file number, the frame's number in that file) of frame ``k``."""
        f = int(np.searchsorted(self.first, k, side="right")) - 1
        return f, int(k - self.first[f])

    def source(self, k):
        """Frame ``k`` as the in-memory path names it: ``'file.xyz, frame 3'`` or ``'file.db, row 7'``."""
        f, local = self._locate(k)
        path = self.files[f]
        if path.endswith(DB_SUFFIXES):
            return f"{path}, row {int(self.positions[f][local])}"
        return f"{path}, frame {local}"

    def check(self, f, stamp=None):
        """Refuse file number ``f`` if it is not as it was indexed (size and modification time).

        Args:
            f: the file's number.
            stamp: its ``(size, mtime_ns)`` now, if known (an ``fstat`` of an open handle); else a ``stat``.

        Raises:
            DataError: naming the file, what changed, and what to do.
        """
        path = self.files[f]
        if stamp is None:
            try:
                stamp = file_stamp(path)
            except OSError as err:
                raise DataError(f"{path}: changed since it was indexed (now: {err.strerror.lower()}); load the "
                                "data again") from err
        if stamp != self.stamps[f]:
            raise DataError(f"{path}: changed since it was indexed ({_stamp_change(self.stamps[f], stamp)}); "
                            "its frames would be read at the places they had then: load the data again (a new "
                            "dataset, a new pinn train run), and do not change streamed files while they are read")

    def read(self, k):
        """Frame ``k`` as ``ase.Atoms`` (with its stored energy, forces, … as the calculator's results).

        Raises:
            DataError: ASE cannot read it, or its file changed since it was indexed (:meth:`check`),
                naming the file and frame.
        """
        f, local = self._locate(k)
        path = self.files[f]
        if path.endswith(DB_SUFFIXES):
            self.check(f)
            try:
                row = self._databases[path].get(id=int(self.positions[f][local]))
                return row.toatoms(add_additional_information=False)
            except Exception as err:
                raise DataError(f"{self.source(k)}: could not read it: {type(err).__name__}: {err}") from err
        with open(path, "rb") as handle:
            stat = os.fstat(handle.fileno())
            self.check(f, (stat.st_size, stat.st_mtime_ns))
            start, stop = self.positions[f][local:local + 2]
            handle.seek(int(start))
            text = handle.read(int(stop - start)).decode()
        try:
            return ase_files.read(io.StringIO(text), index=0, format="extxyz")
        except Exception as err:
            raise DataError(f"{self.source(k)}: ASE could not read it: {type(err).__name__}: {err}") from err


def stream_paths(dataset, stream):
    """The files ``load_ase(dataset, stream=stream)`` streams, or ``None`` to hold the frames in memory.

    Args:
        dataset: ``load_ase``'s argument.
        stream: ``True`` (stream: every input must be :func:`streamable`), ``False`` (never), ``None``
            (stream when every input is streamable and they hold more than :data:`STREAM_ABOVE_BYTES`).

    Raises:
        DataError: ``stream=True`` with an input that is not an extended XYZ file or a database.
        ValueError: ``stream`` not True, False or None.
    """
    if stream not in (True, False, None):
        raise ValueError(f"load_ase: stream must be True, False or None (by size), got {stream!r}")
    if stream is False:
        return None
    paths = [dataset] if isinstance(dataset, (str, os.PathLike)) else None
    if paths is None and isinstance(dataset, (list, tuple)) and dataset:
        paths = list(dataset) if all(isinstance(p, (str, os.PathLike)) for p in dataset) else None
    if paths is None or not all(streamable(p) for p in paths):
        if stream:
            odd = dataset if paths is None else next(p for p in paths if not streamable(p))
            raise DataError(f"load_ase(stream=True): {odd!r} is not an extended XYZ file ({', '.join(XYZ_SUFFIXES)}) "
                            f"or an ASE database ({', '.join(DB_SUFFIXES)}); those can be streamed (others: "
                            "stream=False, or pinn convert to TFRecords)")
        return None
    if stream is None:
        size = bytes_on_disk(paths)
        if size <= STREAM_ABOVE_BYTES:
            return None
        log.info("load_ase: streaming the frames of %d file(s), %.0f MiB (> %.0f MiB; stream=False holds them in "
                 "memory)", len(paths), size / 2 ** 20, STREAM_ABOVE_BYTES / 2 ** 20)
    return [os.fspath(p) for p in paths]
