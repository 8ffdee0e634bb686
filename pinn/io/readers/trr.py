"""A reader for GROMACS ``.trr`` trajectories, written from the format specification.

A ``.trr`` file is a sequence of XDR (big-endian) frames.  Each frame has a
header (magic number 1993, the version string ``GMX_trn_file``, the byte sizes
of the blocks that follow, the atom count, the MD step, and time and lambda as
reals) followed by the blocks present in that frame, in this order: box (3×3),
virial (3×3), pressure (3×3), positions x, velocities v, forces f (natoms×3).
A block of size 0 is absent, and which blocks are present may change from one
frame to the next (e.g. ``nstxout=2, nstfout=3``).  Reals are float32 in files
written by single-precision GROMACS and float64 in files written by double
precision (``gmx_d``, and every MiMiC run); the precision is read per frame from
the block sizes.

Opening a file builds an index of frame offsets in one pass that reads only
the headers, so ``trr[i]`` is random access and files larger than memory are
streamed frame by frame; decoding is vectorised (``numpy.frombuffer``).

Values are returned in GROMACS units, unconverted: x and box in nm, v in
nm/ps, f in kJ mol⁻¹ nm⁻¹, time in ps (in a MiMiC run the time field holds the
step number).  Example::

    from pinn.io.readers.trr import TRRFile
    with TRRFile('traj.trr') as trr:
        print(len(trr), trr.steps[:5])
        frame = trr[-1]            # dict: step, time, lambda, box, x, v, f, natoms, double
        for frame in trr:          # streamed
            ...
"""
import logging
import os
import struct

import numpy as np

from pinn.io.errors import DataError

log = logging.getLogger(__name__)

#: the magic number that opens every trr frame
MAGIC = 1993
#: the version string GROMACS writes after the magic number
VERSION = b"GMX_trn_file"
#: the 13 integers of the header, in file order
HEADER_INTS = ("ir_size", "e_size", "box_size", "vir_size", "pres_size", "top_size", "sym_size",
               "x_size", "v_size", "f_size", "natoms", "step", "nre")
#: the blocks that carry data, in file order, with their shape (None: natoms)
BLOCKS = (("box", (3, 3)), ("vir", (3, 3)), ("pres", (3, 3)), ("x", (None, 3)), ("v", (None, 3)), ("f", (None, 3)))

#: one row per frame: where it is and what its header says
INDEX_DTYPE = np.dtype([
    ("offset", np.int64), ("header_bytes", np.int32), ("frame_bytes", np.int64), ("natoms", np.int64),
    ("step", np.int64), ("time", np.float64), ("lambda", np.float64), ("double", bool),
] + [(f"{name}_size", np.int64) for name, _ in BLOCKS])

_MAX_STRING = 64  # a version string longer than this is a corrupt header (GROMACS writes 12 bytes)
_HEADER_READ = 12 + _MAX_STRING + 4 * len(HEADER_INTS) + 16  # bytes that always hold a whole header


def _real_size(ints, natoms, where):
    """Bytes per real (4 or 8) from the block sizes of one header, or None if no block is present."""
    candidates = []
    for name, shape in BLOCKS:
        size = ints[f"{name}_size"]
        if size:
            count = 9 if shape[0] == 3 else 3 * natoms
            if count == 0 or size % count:
                raise DataError(f"{where}: corrupt header: {name} block of {size} bytes does not hold "
                                f"{count} reals")
            candidates.append(size // count)
    if not candidates:
        return None
    if len(set(candidates)) != 1 or candidates[0] not in (4, 8):
        raise DataError(f"{where}: corrupt header: block sizes imply {sorted(set(candidates))} bytes per real "
                        "(expected 4 for single or 8 for double precision)")
    return candidates[0]


def read_header(buffer, where, previous_real=None):
    """Decode one frame header.

    Args:
        buffer: bytes starting at the frame (at least the whole header: 84
            bytes in single and 92 in double precision).
        where: text naming the file, frame and byte offset, for errors.
        previous_real: bytes per real of the previous frame, used when a frame
            has no block from which to tell the precision.

    Returns:
        (dict of header fields, header length in bytes, bytes per real).

    Raises:
        DataError: wrong magic number, unexpected version string, a corrupt
            or unsupported header, or a buffer that ends inside the header.
    """
    def need(n):
        if len(buffer) < n:
            raise DataError(f"{where}: the file ends inside a frame header (truncated file)")

    need(12)
    magic, = struct.unpack(">i", buffer[:4])
    if magic != MAGIC:
        hint = " (a little-endian file, which GROMACS does not write)" if \
            struct.unpack("<i", buffer[:4])[0] == MAGIC else ""
        raise DataError(f"{where}: not a GROMACS trr frame: magic number {magic}, expected {MAGIC}{hint}")
    _, slen = struct.unpack(">ii", buffer[4:12])
    if not 0 <= slen <= _MAX_STRING:
        raise DataError(f"{where}: corrupt header: version string length {slen}")
    pos = 12 + (slen + 3) // 4 * 4
    need(pos + 4 * len(HEADER_INTS))
    version = bytes(buffer[12:12 + slen])
    if version != VERSION:
        raise DataError(f"{where}: unexpected version string {version!r}, expected {VERSION!r}")
    ints = dict(zip(HEADER_INTS, struct.unpack(">13i", buffer[pos:pos + 52])))
    pos += 52
    natoms = ints["natoms"]
    if natoms < 0 or any(ints[k] < 0 for k in HEADER_INTS if k.endswith("_size")):
        raise DataError(f"{where}: corrupt header: negative sizes {ints}")
    unsupported = [k for k in ("ir_size", "e_size", "top_size", "sym_size") if ints[k]]
    if unsupported:
        raise DataError(f"{where}: unsupported trr blocks {unsupported} (GROMACS does not write them)")
    real = _real_size(ints, natoms, where) or previous_real
    if real is None:
        raise DataError(f"{where}: a frame without any data block; its precision cannot be told")
    need(pos + 2 * real)
    time, lam = struct.unpack(">dd" if real == 8 else ">ff", buffer[pos:pos + 2 * real])
    ints["time"] = time
    ints["lambda"] = lam
    return ints, pos + 2 * real, real


class TRRFile:
    """Random-access reader of a GROMACS ``.trr`` file.

    Args:
        path: the ``.trr`` file.
        allow_truncated: if True, an incomplete last frame (a run that was
            killed while writing) is dropped with a warning; if False (default)
            it is an error.
        index: the ``index`` of an earlier ``TRRFile`` of the same, unchanged
            file, to reopen it without scanning it again.

    The file is indexed when opened (headers only).  ``len(trr)`` is the number
    of frames, ``trr[i]`` (negative ``i`` counts from the end) decodes frame
    ``i`` and iterating streams all frames.  ``trr.index`` is a structured
    array (see :data:`INDEX_DTYPE`) with one row per frame: byte offset, atom
    count, step, time, lambda, precision and block sizes; ``trr.steps`` and
    ``trr.times`` are its columns.  Use as a context manager, or call
    :meth:`close`.

    A frame is a dict in GROMACS units: ``step`` (int), ``time`` (ps, float),
    ``lambda`` (float), ``box`` [3, 3] nm (rows are the box vectors a, b, c),
    ``x`` [natoms, 3] nm, ``v`` [natoms, 3] nm/ps, ``f`` [natoms, 3]
    kJ mol⁻¹ nm⁻¹, ``vir`` [3, 3] kJ/mol and ``pres`` [3, 3] bar (a block
    missing from the frame is ``None``), ``natoms`` (int) and ``double`` (True
    for a double-precision frame).  Arrays are
    float32 for single and float64 for double precision.

    Raises:
        DataError: the file is missing, empty, not a trr file, corrupt or
            truncated; the message names the file, the frame and its byte offset.
    """

    def __init__(self, path, allow_truncated=False, index=None):
        self.path = os.fspath(path)
        if not os.path.isfile(self.path):
            raise DataError(f"{self.path}: no such file")
        self._fh = open(self.path, "rb")
        try:
            self.index = self._build_index(allow_truncated) if index is None else \
                np.asarray(index, dtype=INDEX_DTYPE)
        except BaseException:
            self._fh.close()
            raise

    # -- indexing ---------------------------------------------------------
    def _build_index(self, allow_truncated):
        size = os.fstat(self._fh.fileno()).st_size
        if size == 0:
            raise DataError(f"{self.path}: file is empty")
        rows = []
        offset = 0
        real = None
        while offset < size:
            where = f"{self.path}: frame {len(rows)} (byte offset {offset})"
            head = self._pread(offset, _HEADER_READ)
            try:
                ints, header_bytes, real = read_header(head, where, real)
            except DataError:
                if offset + len(head) >= size and len(head) < _HEADER_READ and _looks_like_header_start(head):
                    if self._truncated(where, allow_truncated, len(rows)):
                        break
                raise
            frame_bytes = header_bytes + sum(ints[f"{name}_size"] for name, _ in BLOCKS)
            if offset + frame_bytes > size:
                if self._truncated(where, allow_truncated, len(rows),
                                   missing=offset + frame_bytes - size):
                    break
            rows.append((offset, header_bytes, frame_bytes, ints["natoms"], ints["step"], ints["time"],
                         ints["lambda"], real == 8) + tuple(ints[f"{name}_size"] for name, _ in BLOCKS))
            offset += frame_bytes
        return np.array(rows, dtype=INDEX_DTYPE)

    def _truncated(self, where, allow, complete, missing=None):
        ends = "inside its header" if missing is None else f"{missing} bytes before its end"
        message = f"{where}: truncated: the file ends {ends}; the {complete} frames before it are complete"
        if not allow:
            raise DataError(message + " (TRRFile(..., allow_truncated=True) drops the incomplete frame)")
        log.warning("%s; dropping the incomplete frame", message)
        return True

    def _pread(self, offset, n):
        if hasattr(os, "pread"):
            return os.pread(self._fh.fileno(), n, offset)
        self._fh.seek(offset)
        return self._fh.read(n)

    # -- access -----------------------------------------------------------
    def __len__(self):
        return len(self.index)

    @property
    def steps(self):
        """MD step of every frame (int64 array)."""
        return self.index["step"]

    @property
    def times(self):
        """Time of every frame (ps; the step number in MiMiC runs)."""
        return self.index["time"]

    def has(self, block):
        """Boolean array: which frames contain ``block`` ('box', 'vir', 'pres', 'x', 'v' or 'f')."""
        return self.index[f"{block}_size"] > 0

    def __getitem__(self, i):
        if not isinstance(i, (int, np.integer)):
            raise TypeError(f"trr frames are indexed by int, not {type(i).__name__}")
        n = len(self.index)
        j = int(i) + n if i < 0 else int(i)
        if not 0 <= j < n:
            raise IndexError(f"{self.path}: frame {i} out of range ({n} frames)")
        return self.read_frame(j)

    def __iter__(self):
        for i in range(len(self.index)):
            yield self.read_frame(i)

    def read_frame(self, i, blocks=None):
        """Decode frame ``i`` (0 ≤ i < len).

        Args:
            i: frame number.
            blocks: the data blocks to decode (e.g. ``('box', 'x', 'f')``);
                default all.  Blocks not asked for are ``None`` and not read.

        Returns:
            The frame dict described in the class docstring.
        """
        if self._fh.closed:
            raise ValueError(f"{self.path}: I/O on a closed TRRFile")
        row = self.index[i]
        wanted = [name for name, _ in BLOCKS] if blocks is None else list(blocks)
        start = int(row["offset"]) + int(row["header_bytes"])
        # read the span from the first to the last wanted block in one call
        spans = {}
        pos = start
        for name, _ in BLOCKS:
            size = int(row[f"{name}_size"])
            spans[name] = (pos, size)
            pos += size
        present = [n for n in wanted if spans[n][1]]
        frame = {"step": int(row["step"]), "time": float(row["time"]), "lambda": float(row["lambda"]),
                 "natoms": int(row["natoms"]), "double": bool(row["double"])}
        frame.update({name: None for name, _ in BLOCKS})
        if present:
            first = min(spans[n][0] for n in present)
            last = max(spans[n][0] + spans[n][1] for n in present)
            data = self._pread(first, last - first)
            if len(data) != last - first:
                raise DataError(f"{self.path}: frame {i} (byte offset {int(row['offset'])}): the file "
                                "is shorter than when it was indexed (changed while open?)")
            big = np.dtype(">f8" if row["double"] else ">f4")
            native = np.float64 if row["double"] else np.float32
            shapes = dict(BLOCKS)
            for name in present:
                at, size = spans[name]
                shape = tuple(int(row["natoms"]) if s is None else s for s in shapes[name])
                values = np.frombuffer(data, dtype=big, count=size // big.itemsize, offset=at - first)
                frame[name] = values.astype(native).reshape(shape)
        return frame

    # -- lifetime ---------------------------------------------------------
    def close(self):
        """Close the file (frames can no longer be read)."""
        self._fh.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        fh = getattr(self, "_fh", None)
        if fh is not None:
            fh.close()

    def __repr__(self):
        return f"TRRFile({self.path!r}, {len(self.index)} frames)"


def _looks_like_header_start(head):
    """True if ``head`` begins like a trr header (so a short read means truncation, not garbage)."""
    return len(head) < 4 or struct.unpack(">i", head[:4])[0] == MAGIC


def write_trr(path, frames, double=False):
    """Write frames to a GROMACS ``.trr`` file (the inverse of :class:`TRRFile`).

    Args:
        path: file to write (replaced).
        frames: iterable of dicts with ``step`` (int) and any of ``box``
            (3×3, nm), ``x`` (natoms×3, nm), ``v`` (nm/ps), ``f`` (kJ mol⁻¹ nm⁻¹);
            optional ``time`` (ps, default: the step) and ``lambda``.
        double: write float64 reals, as double-precision GROMACS and MiMiC do.

    Returns:
        ``path``.
    """
    real = np.dtype(">f8" if double else ">f4")
    with open(path, "wb") as f:
        for i, frame in enumerate(frames):
            arrays = {name: np.asarray(frame[name], dtype=real) for name, _ in BLOCKS if frame.get(name) is not None}
            natoms = next((len(a) for name, a in arrays.items() if name in ("x", "v", "f")), 0)
            for name, shape in BLOCKS:
                want = (3, 3) if shape[0] == 3 else (natoms, 3)
                if name in arrays and arrays[name].shape != want:
                    raise ValueError(f"write_trr: frame {i}: {name} has shape {arrays[name].shape}, expected {want}")
            sizes = {f"{name}_size": arrays[name].nbytes if name in arrays else 0 for name, _ in BLOCKS}
            ints = dict(ir_size=0, e_size=0, top_size=0, sym_size=0, natoms=natoms, step=int(frame["step"]), nre=0,
                        **sizes)
            f.write(struct.pack(">iii", MAGIC, len(VERSION) + 1, len(VERSION)) + VERSION)
            f.write(struct.pack(">13i", *(ints[k] for k in HEADER_INTS)))
            f.write(np.array([frame.get("time", frame["step"]), frame.get("lambda", 0.0)], dtype=real).tobytes())
            for name, _ in BLOCKS:
                if name in arrays:
                    f.write(arrays[name].tobytes())
    return path
