"""A PiNet or PiNet2 potential's weights as a NumPy file, so that MD runs without TensorFlow.

:func:`pinn.get_calc` on a model directory (Numba engine) reads the weights of the chosen
checkpoint from ``engine-weights.npz`` beside it when that file is there and up to date, and
then never imports TensorFlow: a process running MD then needs about 0.45 GB less memory and
starts in a second instead of several.  When the file is missing or stale, the calculator
loads the checkpoint with TensorFlow as before and writes the file (where the directory is
writable, and only inside the model directory: a checkpoint given by a path elsewhere is read, its
directory never written), so the next run is TensorFlow-free.

The file holds the arrays of :meth:`pinn.engines.spec.PiNetSpec.arrays` (or ``PiNet2Spec``'s) (the averaged
weights for a model trained with ``ema_decay``, as the calculator uses), ``e_unit``, and what it was made
from: the checkpoint's name, its index file's size and modification time, and a SHA-256 of ``params.yml``
(without its ``model_dir`` entry, the path the directory was opened by). It counts as stale, and is ignored,
when any of those differ from what is on disk now, when its format version is another, or when it cannot be
read.

All of this runs without TensorFlow (the checkpoint state file is read by
:mod:`pinn.files.checkpoint_dir`).  A damaged file is ignored with a warning and written
again from the checkpoint.
"""
import hashlib
import json
import logging
import os

import numpy as np
import yaml

from pinn.physics.embedding_kinds import MECHANICAL, embedding_of
from pinn.files import checkpoint_dir
from pinn.files.durable import existing_dir, replacing

log = logging.getLogger(__name__)

#: the file's name, in the directory of the checkpoint it was made from
FILE_NAME = "engine-weights.npz"
#: bumped when the arrays' layout changes; files of another version are remade (2: ``codes`` names the
#: network, PiNet or PiNet2)
FORMAT_VERSION = 2
_SOURCE_KEYS = ("format_version", "checkpoint", "index_size", "index_mtime_ns", "params_sha256")


def checkpoint_path(model_dir, checkpoint=None):
    """The checkpoint of ``model_dir`` that ``checkpoint`` selects, without TensorFlow.

    Args:
        model_dir: a model directory.
        checkpoint: ``None``/``'last'`` (the latest in ``model_dir``), ``'best'`` (the latest in
            ``model_dir/best``) or a checkpoint path (the prefix of its ``.index`` file).

    Returns:
        the checkpoint's path prefix (e.g. ``model_dir/ckpt-12``): the one the state file names
        when its index exists, else the newest on disk; ``None`` when there is none
        (:func:`pinn.files.checkpoint_dir.latest`).
    """
    if checkpoint not in (None, "last", "best"):
        return os.fspath(checkpoint)
    directory = os.path.join(os.fspath(model_dir), "best") if checkpoint == "best" else os.fspath(model_dir)
    return checkpoint_dir.latest(existing_dir(directory))


def _source(model_dir, ckpt):
    """What identifies the weights of checkpoint ``ckpt``: the values of :data:`_SOURCE_KEYS`."""
    index = os.stat(ckpt + ".index")
    return {"format_version": FORMAT_VERSION, "checkpoint": os.path.basename(ckpt), "index_size": index.st_size,
            "index_mtime_ns": index.st_mtime_ns, "params_sha256": _params_sha(model_dir)}


def _params_sha(model_dir):
    """SHA-256 of ``model_dir/params.yml``'s content without ``model_dir`` (which records the path the
    directory had when the file was written: a moved or copied directory keeps the old one)."""
    with open(os.path.join(os.fspath(model_dir), "params.yml")) as f:
        params = yaml.safe_load(f)
    if isinstance(params, dict):
        params.pop("model_dir", None)
    return hashlib.sha256(json.dumps(params, sort_keys=True, default=str).encode()).hexdigest()


def weights_file(ckpt):
    """Where the engine weights of checkpoint ``ckpt`` are kept: :data:`FILE_NAME` in its directory."""
    return os.path.join(os.path.dirname(os.path.abspath(ckpt)), FILE_NAME)


def load_engine_weights(model_dir, checkpoint=None):
    """The engine weights of a model directory's checkpoint, if written and up to date.

    Args:
        model_dir: a model directory.
        checkpoint: as for :func:`checkpoint_path`.

    Returns:
        dict of NumPy arrays (:data:`pinn.engines.spec.ARRAY_KEYS`, plus ``e_unit`` (eV per energy
        unit of the data), ``embedding`` and ``embedding_damping`` where stored, and ``source``, the file's
        path), or ``None`` when there is no
        checkpoint, no file, or the file is stale or unreadable (the reason is logged).
    """
    from pinn.engines.spec import ARRAY_KEYS
    ckpt = checkpoint_path(model_dir, checkpoint)
    if ckpt is None:
        return None
    path = weights_file(ckpt)
    try:
        source = _source(model_dir, ckpt)
        with np.load(path, allow_pickle=False) as data:
            stored = {key: data[key].item() for key in _SOURCE_KEYS if key in data.files}
            if stored != source:
                changed = sorted(key for key in _SOURCE_KEYS if stored.get(key) != source[key])
                log.info("%s: made from another checkpoint or params (%s differ); reading %s with TensorFlow",
                         path, ", ".join(changed), ckpt)
                return None
            arrays = {key: data[key] for key in ARRAY_KEYS + ("e_unit",)}
            if "embedding" in data.files:  # written before 0.30: mechanical
                arrays.update(embedding=str(data["embedding"]), embedding_damping=float(data["embedding_damping"]))
    except FileNotFoundError:
        return None
    except Exception as err:  # noqa: BLE001 - a damaged zip raises BadZipFile, EOFError, ValueError, …
        log.warning("%s is damaged (%s: %s); reading %s with TensorFlow and writing it again", path,
                    type(err).__name__, str(err).splitlines()[0] if str(err) else "", ckpt)
        return None
    arrays["source"] = path
    return arrays


def save_engine_weights(arrays, e_unit, model_dir, ckpt, embedding=MECHANICAL, damping=0.0):
    """Write the engine weights of checkpoint ``ckpt`` of ``model_dir`` (atomically).

    Args:
        arrays: the dict of :meth:`pinn.engines.spec.PiNetSpec.arrays` for that checkpoint's weights
            (the averaged ones where the model keeps an average).
        e_unit: the model's ``e_unit`` (eV per energy unit of the data).
        model_dir: the model directory (its ``params.yml`` is part of the file's identity).
        ckpt: the checkpoint's path prefix.
        embedding: the model's embedding (:class:`pinn.physics.embedding_kinds.Embedding` or its name; its
            name is stored beside the arrays).
        damping: its ``embedding_damping`` (Å).

    Returns:
        the file's path, or ``None`` when it was not written (logged; the calculator then keeps
        using TensorFlow to load the weights): a read-only directory, or a checkpoint outside
        ``model_dir`` (a path given as ``checkpoint=``): nothing is written outside the model
        directory.
    """
    path = weights_file(ckpt)
    inside = os.path.realpath(os.fspath(model_dir))
    if os.path.commonpath([inside, os.path.realpath(os.path.dirname(path))]) != inside:
        log.info("%s: not written (outside the model directory %s); the next run loads the weights with "
                 "TensorFlow again", path, model_dir)
        return None
    try:
        source = _source(model_dir, ckpt)
        with replacing(path, "wb") as f:
            np.savez(f, **arrays, e_unit=np.float64(e_unit), embedding=np.str_(embedding_of(embedding).name),
                     embedding_damping=np.float64(damping), **source)
    except OSError as err:
        log.info("%s: not written (%s); the next run loads the weights with TensorFlow again", path, err)
        return None
    log.info("wrote %s (the weights of %s, for MD without TensorFlow)", path, ckpt)
    return path
