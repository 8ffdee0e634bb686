"""One model file: a trained model (or a committee) as a single versioned file.

``pinn export MODEL_DIR -o model.pinn`` (:mod:`pinn.models.export`) writes what inference needs of a
model directory's checkpoint into one file that :func:`pinn.get_calc` loads.  This module is the
format alone (NumPy and JSON):

- a header (JSON): the file format and its version, the pinn version that wrote it, the time,
  and per member its params (``model_dir`` left out), the model and network, elements,
  cutoff (Å), ``e_unit`` (eV per energy unit of the data), the checkpoint and training step the
  weights came from and whether they are the run's weight average, each array's name, dtype and
  shape (``arrays``; format version 2), and a SHA-256 over the header and every array of the file;
- per member, the values of the model's variables (the weights it predicts with: the average
  where the run kept one; the energy offsets), under their paths in the model
  (``network/blocks/0/pp/layers/0/kernel``), and for a PiNet or PiNet2 potential the arrays of the Numba
  engine (:meth:`pinn.engines.spec.PiNetSpec.arrays`).

A PiNet or PiNet2 potential loads and runs from the file on the Numba engine without importing
TensorFlow; other models (BPNN, PiNet2, LJ, dipole models) are rebuilt with TensorFlow from the
params and take the variables' values (:func:`pinn.inference.handle.handle_of_values`).  A committee
(a list of model directories, or a directory of ``member-K/``) exports to one file of several members.

The container is a NumPy ``.npz`` (a zip archive, no pickles, arrays stored uncompressed).  A
file of a newer format version is refused with both versions named; a damaged one (not a zip, a
header of the wrong shape, an array missing, compressed, not listed or not as listed, the hash not
matching) with one line naming the file and what is wrong, before any array it does not list is
read.  Format version 1 (pinn 0.29.0: no ``arrays`` in the header, the hash over the arrays
alone) is still read, its arrays checked by name and by their own ``.npy`` headers.
"""
import datetime
import hashlib
import json
import math
import os
import re
import zipfile

import numpy as np

from pinn.files.durable import replacing
from pinn.files.model_header import FORMAT, FORMAT_VERSION, ModelFileError, check_header  # noqa: F401 (re-exported)

#: the suggested suffix
SUFFIX = ".pinn"
_HEADER = "header"
#: the largest header member read (bytes of its .npy): a header is a few kB of JSON
MAX_HEADER_BYTES = 16 * 2 ** 20
#: the dtype kinds an array of a model file may have (bool, integers, floats)
_ARRAY_KINDS = "biuf"
#: a version-1 file's array names (its header does not list them)
_V1_NAME = re.compile(r"m(\d+)/(var|engine)/.+")


def _digest(arrays):
    """SHA-256 over the arrays' names, dtypes, shapes and bytes, in name order (format version 1)."""
    h = hashlib.sha256()
    _update(h, arrays)
    return h.hexdigest()


def _digest_with_header(header, arrays):
    """SHA-256 over the header (its canonical JSON without ``sha256``) and then the arrays as
    :func:`_digest` (format version 2): a header edited after writing no longer matches."""
    h = hashlib.sha256()
    h.update(_canonical({key: value for key, value in header.items() if key != "sha256"}))
    h.update(b"\n")
    _update(h, arrays)
    return h.hexdigest()


def _canonical(value):
    """The bytes of a JSON value as the hash reads it (sorted keys, no spaces, ASCII)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def _update(h, arrays):
    for key in sorted(arrays):
        value = np.ascontiguousarray(arrays[key])
        h.update(f"{key}|{value.dtype.str}|{value.shape}|".encode())
        h.update(value.tobytes())


def write_model_file(path, kind, members, arrays, pinn_version):
    """Write a model file (atomically), of format :data:`FORMAT_VERSION`.

    Args:
        path: the file.
        kind: ``'model'`` or ``'committee'``.
        members: one header entry (dict, JSON-able) per member.
        arrays: ``{'m{K}/var/PATH': array, 'm{K}/engine/KEY': array}`` (booleans, integers or floats).
        pinn_version: the version of pinn writing it.

    Returns:
        dict: the header written (``arrays``: each array's dtype and shape; ``sha256`` over the header
        and the arrays).
    """
    arrays = {key: np.asarray(value) for key, value in arrays.items()}
    header = {"format": FORMAT, "format_version": FORMAT_VERSION, "pinn_version": pinn_version,
              "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "kind": kind, "members": members,
              "arrays": {key: {"dtype": value.dtype.str, "shape": list(value.shape)} for key, value in arrays.items()}}
    header = json.loads(json.dumps(header))  # as a reader parses it (tuples become lists), for the hash
    header["sha256"] = _digest_with_header(header, arrays)
    with replacing(os.fspath(path), "wb") as f:
        np.savez(f, **{_HEADER: np.array(json.dumps(header))}, **arrays)
    return header


class ModelFile:
    """A model file, read and checked (:func:`read_model_file`); no TensorFlow.

    Attributes:
        path: the file.
        header: its header (dict): ``members`` holds one entry per member (params, atom_types, rc
            in Å, e_unit, network, checkpoint, step, averaged, numba_engine).
    """

    def __init__(self, path, header, arrays):
        self.path = path
        self.header = header
        self._arrays = arrays

    @property
    def members(self):
        """The members' header entries (one for a single model)."""
        return self.header["members"]

    @property
    def is_committee(self):
        return self.header["kind"] == "committee"

    def engine_weights(self, k):
        """Member ``k``'s Numba-engine arrays with its ``e_unit`` and ``source`` (what
        :class:`pinn.calculator.PiNNCalc` takes), or ``None`` where it has none (neither a PiNet nor a PiNet2
        potential)."""
        prefix = f"m{k}/engine/"
        weights = {key[len(prefix):]: value for key, value in self._arrays.items() if key.startswith(prefix)}
        if not weights:
            return None
        options = self.members[k]["params"].get("model", {}).get("params", {})
        return {**weights, "e_unit": self.members[k]["e_unit"], "source": f"{self.path} ({self.members[k]['name']})",
                # a name for pinn.physics.embedding_kinds.embedding_of (None: mechanical)
                "embedding": options.get("embedding"),
                "embedding_damping": float(options.get("embedding_damping", 0.0))}

    def variables(self, k):
        """Member ``k``'s variable values by their path in the model (dict of arrays)."""
        prefix = f"m{k}/var/"
        return {key[len(prefix):]: value for key, value in self._arrays.items() if key.startswith(prefix)}


def read_model_file(path):
    """Read and check a model file (no TensorFlow), reading no array before its size is known.

    Before any array's data is read: the header (at most :data:`MAX_HEADER_BYTES`) is parsed and its
    shape checked (:func:`pinn.files.model_header.check_header`); every member of the zip must be stored
    uncompressed (as pinn writes it, so reading costs no more than the file's size: no zip bomb), and
    its ``.npy`` header must give the dtype and shape the file's header lists for it (format 2; in
    format 1, a name of a member's variables or engine arrays) and as many bytes as the zip says.
    Then the arrays are read and the SHA-256 checked (format 2: over the header too).

    Args:
        path: the file.

    Returns:
        :class:`ModelFile`.

    Raises:
        FileNotFoundError: no such file.
        ModelFileError: naming the file and the array or header key: not a pinn model file, a newer
            format (both versions named), a header of the wrong shape, an array not listed or not
            as listed, a compressed member, or damaged (unreadable, the hash not matching).
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such model file")
    try:
        with zipfile.ZipFile(path) as archive:
            infos = {info.filename: info for info in archive.infolist()}
            if _HEADER + ".npy" not in infos:
                raise ModelFileError(f"{path}: not a pinn model file (no header; write one with pinn export)")
            header = _read_header(path, archive, infos[_HEADER + ".npy"])
            check_header(path, header)
            listed = header.get("arrays") if header["format_version"] >= 2 else None
            members = {name[:-len(".npy")]: info for name, info in infos.items() if name != _HEADER + ".npy"}
            for key, info in sorted(members.items()):
                _check_member(path, archive, key, info, listed, len(header["members"]))
            if listed is not None and set(listed) - set(members):
                raise ModelFileError(f"{path}: damaged pinn model file (its header lists the array "
                                     f"{sorted(set(listed) - set(members))[0]}, which it lacks)")
            arrays = {key: _read_array(archive, info) for key, info in members.items()}
    except ModelFileError:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, ValueError, KeyError) as err:
        first = str(err).splitlines()[0] if str(err) else ""
        raise ModelFileError(f"{path}: damaged pinn model file ({type(err).__name__}: {first})") from None
    digest = _digest(arrays) if listed is None else _digest_with_header(header, arrays)
    if digest != header["sha256"]:
        covered = "arrays" if listed is None else "header and arrays"
        raise ModelFileError(f"{path}: damaged pinn model file (its {covered} do not match the SHA-256 of its "
                             "header)")
    return ModelFile(path, header, arrays)


def _read_header(path, archive, info):
    """The header (parsed JSON) of a model file, of at most :data:`MAX_HEADER_BYTES`, stored uncompressed."""
    _check_stored(path, _HEADER, info)
    if info.file_size > MAX_HEADER_BYTES:
        raise ModelFileError(f"{path}: not a pinn model file (a header of {info.file_size} bytes; pinn writes a few "
                             f"kB)")
    with archive.open(info) as f:
        value = np.lib.format.read_array(f, allow_pickle=False)
    if value.shape != () or value.dtype.kind != "U":
        raise ModelFileError(f"{path}: not a pinn model file (its header is a {value.dtype} array of shape "
                             f"{value.shape}, not JSON text)")
    try:
        return json.loads(str(value))
    except ValueError as err:
        raise ModelFileError(f"{path}: not a pinn model file (its header is not JSON: {err})") from None


def _check_stored(path, key, info):
    """Refuse a zip member that is compressed (pinn stores them as they are) or whose sizes disagree."""
    if info.compress_type != zipfile.ZIP_STORED or info.compress_size != info.file_size:
        raise ModelFileError(f"{path}: damaged pinn model file (the array {key} is compressed, "
                             f"{info.compress_size} bytes for {info.file_size}; pinn stores arrays uncompressed)")


def _check_member(path, archive, key, info, listed, n_members):
    """Check one array's zip member from its ``.npy`` header alone (its data is not read).

    Args:
        path: the file (for messages); archive: its ``zipfile.ZipFile``; key: the array's name; info: its
            ``ZipInfo``; listed: the header's ``arrays`` (format 2) or ``None`` (format 1);
            n_members: the header's number of members.

    Raises:
        ModelFileError: naming the file and the array.
    """
    if not info.filename.endswith(".npy"):
        raise ModelFileError(f"{path}: damaged pinn model file (a member {info.filename!r} that is no array)")
    if listed is not None and key not in listed:
        raise ModelFileError(f"{path}: damaged pinn model file (the array {key} is not in its header's list)")
    match = _V1_NAME.fullmatch(key)
    if listed is None and (match is None or int(match.group(1)) >= n_members):
        raise ModelFileError(f"{path}: damaged pinn model file (the array {key} is no member's variables or "
                             f"engine arrays)")
    _check_stored(path, key, info)
    with archive.open(info) as f:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran_order, dtype = np.lib.format.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, fortran_order, dtype = np.lib.format.read_array_header_2_0(f)
        else:
            raise ModelFileError(f"{path}: damaged pinn model file (the array {key} is of .npy version {version})")
        start = f.tell()
    if dtype.kind not in _ARRAY_KINDS or dtype.hasobject:
        raise ModelFileError(f"{path}: damaged pinn model file (the array {key} is of dtype {dtype}; a model file "
                             "holds booleans, integers and floats)")
    if listed is not None and (listed[key]["dtype"] != dtype.str or tuple(listed[key]["shape"]) != shape):
        raise ModelFileError(f"{path}: damaged pinn model file (the array {key} is {dtype.str} {list(shape)}, its "
                             f"header lists {listed[key]['dtype']} {listed[key]['shape']})")
    size = math.prod(shape) * dtype.itemsize  # Python's integers: a huge shape cannot overflow
    if start + size != info.file_size:
        raise ModelFileError(f"{path}: damaged pinn model file (the array {key} of {dtype.str} {list(shape)} needs "
                             f"{size} bytes; the zip holds {info.file_size - start})")


def _read_array(archive, info):
    """The array of a checked zip member."""
    with archive.open(info) as f:
        return np.lib.format.read_array(f, allow_pickle=False)


def is_model_file(path):
    """Whether ``path`` is a file rather than a model directory (what :func:`pinn.get_calc` reads as a
    model file)."""
    try:
        return os.path.isfile(os.fspath(path))
    except TypeError:
        return False
