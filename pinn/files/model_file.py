"""One model file: a trained model (or a committee) as a single versioned file.

``pinn export MODEL_DIR -o model.pinn`` (:mod:`pinn.cli.export`) writes what inference needs of a
model directory's checkpoint into one file that :func:`pinn.get_calc` loads.  This module is the
format alone (NumPy and JSON):

- a header (JSON): the file format and its version, the pinn version that wrote it, the time,
  and per member its params (``model_dir`` left out), the model and network, elements,
  cutoff (Å), ``e_unit`` (eV per energy unit of the data), the checkpoint and training step the
  weights came from and whether they are the run's weight average, and a SHA-256 over every
  array of the file;
- per member, the values of the model's variables (the weights it predicts with: the average
  where the run kept one; the energy offsets), under their paths in the model
  (``network/blocks/0/pp/layers/0/kernel``), and for a PiNet potential the arrays of the Numba
  engine (:meth:`pinn.engines.spec.PiNetSpec.arrays`).

A PiNet potential loads and runs from the file on the Numba engine without importing
TensorFlow; other models (BPNN, PiNet2, LJ, dipole models) are rebuilt with TensorFlow from the
params and take the variables' values (:func:`pinn.training.inference.handle_of_values`).  A committee (a list of model directories, or a
directory of ``member-K/``) exports to one file of several members.

The container is a NumPy ``.npz`` (a zip archive, no pickles).  A file of a newer format
version is refused with both versions named; a damaged one (not a zip, a member missing, the
hash not matching) with one line naming the file and what is wrong.
"""
import datetime
import hashlib
import json
import os
import zipfile

import numpy as np

from pinn.files.durable import replacing

#: what the header's ``format`` says
FORMAT = "pinn-model"
#: the version this pinn writes, and the newest it reads
FORMAT_VERSION = 1
#: the suggested suffix
SUFFIX = ".pinn"
_HEADER = "header"


class ModelFileError(ValueError):
    """A file that is not a pinn model file, is damaged, or is of a newer format (one line)."""


def _digest(arrays):
    """SHA-256 over the arrays' names, dtypes, shapes and bytes, in name order."""
    h = hashlib.sha256()
    for key in sorted(arrays):
        value = np.ascontiguousarray(arrays[key])
        h.update(f"{key}|{value.dtype.str}|{value.shape}|".encode())
        h.update(value.tobytes())
    return h.hexdigest()


def write_model_file(path, kind, members, arrays, pinn_version):
    """Write a model file (atomically).

    Args:
        path: the file.
        kind: ``'model'`` or ``'committee'``.
        members: one header entry (dict, JSON-able) per member.
        arrays: ``{'m{K}/var/PATH': array, 'm{K}/engine/KEY': array}``.
        pinn_version: the version of pinn writing it.

    Returns:
        dict: the header written.
    """
    header = {"format": FORMAT, "format_version": FORMAT_VERSION, "pinn_version": pinn_version,
              "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "kind": kind, "members": members, "sha256": _digest(arrays)}
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
        self.path, self.header, self._arrays = path, header, arrays

    @property
    def members(self):
        """The members' header entries (one for a single model)."""
        return self.header["members"]

    @property
    def is_committee(self):
        return self.header["kind"] == "committee"

    def engine_weights(self, k):
        """Member ``k``'s Numba-engine arrays with its ``e_unit`` and ``source`` (what
        :class:`pinn.calculator.PiNNCalc` takes), or ``None`` where it has none (not a PiNet potential)."""
        prefix = f"m{k}/engine/"
        weights = {key[len(prefix):]: value for key, value in self._arrays.items() if key.startswith(prefix)}
        if not weights:
            return None
        return {**weights, "e_unit": self.members[k]["e_unit"], "source": f"{self.path} ({self.members[k]['name']})"}

    def variables(self, k):
        """Member ``k``'s variable values by their path in the model (dict of arrays)."""
        prefix = f"m{k}/var/"
        return {key[len(prefix):]: value for key, value in self._arrays.items() if key.startswith(prefix)}


def read_model_file(path):
    """Read and check a model file (no TensorFlow).

    Args:
        path: the file.

    Returns:
        :class:`ModelFile`.

    Raises:
        FileNotFoundError: no such file.
        ModelFileError: not a pinn model file, a newer format (both versions named), or damaged
            (unreadable, an array missing, the hash not matching).
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such model file")
    try:
        with np.load(path, allow_pickle=False) as data:
            if _HEADER not in data.files:
                raise ModelFileError(f"{path}: not a pinn model file (no header; write one with pinn export)")
            header = json.loads(str(data[_HEADER]))
            if not isinstance(header, dict) or header.get("format") != FORMAT:
                raise ModelFileError(f"{path}: not a pinn model file (format {header.get('format')!r})")
            version = header.get("format_version")
            if not isinstance(version, int) or version > FORMAT_VERSION:
                raise ModelFileError(f"{path}: a pinn model file of format version {version} (written by pinn "
                                     f"{header.get('pinn_version')}); this pinn reads versions up to "
                                     f"{FORMAT_VERSION}: upgrade pinn")
            arrays = {key: data[key] for key in data.files if key != _HEADER}
    except ModelFileError:
        raise
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, KeyError) as err:
        first = str(err).splitlines()[0] if str(err) else ""
        raise ModelFileError(f"{path}: damaged pinn model file ({type(err).__name__}: {first})") from None
    if _digest(arrays) != header.get("sha256"):
        raise ModelFileError(f"{path}: damaged pinn model file (its arrays do not match the SHA-256 of its header)")
    return ModelFile(path, header, arrays)


def is_model_file(path):
    """Whether ``path`` is a file rather than a model directory (what :func:`pinn.get_calc` reads as a
    model file)."""
    try:
        return os.path.isfile(os.fspath(path))
    except TypeError:
        return False
