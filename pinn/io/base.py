"""Building blocks for loaders: splitting, item validation and ``list_loader``.

A loader turns a list of *items* (frame indices, file names, ``Atoms``…) into
``tf.data.Dataset`` objects of structures (dicts keyed as in
:mod:`pinn.keys`).  :func:`list_loader` does the common part: it splits the
items into nested train/validation/test subsets with a seed, reads each item
lazily through a user function, checks it, and declares the output signature.
"""
import functools
import logging

import numpy as np
import tensorflow as tf

from pinn import keys as K
from pinn.io.errors import DataError  # noqa: F401  (re-exported)

log = logging.getLogger(__name__)


def chosen_split(split, splits, who):
    """The split a loader was given as ``split=`` (pinn's name) or ``splits=`` (upstream PiNN's).

    Raises:
        TypeError: both were given, naming ``who`` (the loader).
    """
    if splits is None:
        return split
    if split not in (False, None):
        raise TypeError(f"{who}: split= and splits= are the same argument (splits= is upstream PiNN's name); "
                        "pass one of them")
    return splits


def split_items(items, split, shuffle=True, seed=0):
    """Split ``items`` into a (nested) dict of lists by ratio.

    Args:
        items: a sequence.
        split: ``False``/``None`` (no split: one list, shuffled unless ``shuffle`` is False), or a
            dict mapping names to positive ratios or to nested dicts of the
            same form, e.g. ``{'train': 8, 'vali': 1, 'test': 1}`` or
            ``{'train': 8, 'eval': {'vali': 1, 'test': 1}}``.  A one-key split
            such as ``{'all': 1}`` gives every item.
        shuffle: shuffle the items (before splitting; also without a split, see docs/data.md).
        seed: seed of the shuffle; the same seed gives the same subsets.

    Returns:
        A list (no split) or a nested dict of lists with the same structure as
        ``split``.  Sizes are proportional to the ratios (largest remainder
        rounding), every item lands in exactly one subset.
    """
    items = list(items)
    if shuffle:
        order = np.random.RandomState(seed).permutation(len(items))
        items = [items[i] for i in order]
    if not split:
        return items
    return _split(items, split, path="split")


def _split(items, split, path):
    if not isinstance(split, dict) or not split:
        raise ValueError(f"{path} must be a non-empty dict of ratios, got {split!r}")
    ratios = {name: _total_ratio({name: value}, path) for name, value in split.items()}
    total = sum(ratios.values())
    exact = {name: len(items) * r / total for name, r in ratios.items()}
    sizes = {name: int(np.floor(x)) for name, x in exact.items()}
    left = len(items) - sum(sizes.values())
    for name in sorted(exact, key=lambda n: sizes[n] - exact[n])[:left]:
        sizes[name] += 1
    out, start = {}, 0
    for name, value in split.items():
        chunk = items[start:start + sizes[name]]
        start += sizes[name]
        out[name] = _split(chunk, value, f"{path}.{name}") if isinstance(value, dict) else chunk
    return out


def _total_ratio(split, path):
    total = 0.0
    for name, value in split.items():
        if isinstance(value, dict):
            total += _total_ratio(value, f"{path}.{name}")
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            total += value
        else:
            raise ValueError(f"{path}.{name} must be a positive number or a dict, got {value!r}")
    return total


def check_structure(data, source):
    """Validate and normalise one structure dict in place.

    Args:
        data: dict with at least ``elems`` and ``coord``; values array-like.
        source: text naming where the structure came from (file and frame),
            used in error messages.

    Returns:
        The dict with numpy arrays of the declared dtypes (floats as float32,
        missing ``cell``/``pbc`` filled for an open system).

    Raises:
        DataError: unknown keys, wrong shapes, non-positive atomic numbers or
            non-finite values, with ``source`` in the message.
    """
    out = {}
    for key, value in data.items():
        if key not in K.SHAPES:
            raise DataError(f"{source}: unknown data key {key!r} (known: {sorted(K.SHAPES)})")
        out[key] = np.asarray(value, dtype=K.dtype_of(key))
    if K.ELEMS not in out or K.COORD not in out:
        raise DataError(f"{source}: a structure needs {K.ELEMS!r} and {K.COORD!r}")
    n_atoms = len(out[K.ELEMS])
    if n_atoms == 0:
        raise DataError(f"{source}: structure has no atoms")
    out.setdefault(K.CELL, np.zeros((3, 3), np.float32))
    out.setdefault(K.PBC, np.zeros(3, bool))
    for key, value in out.items():
        shape = tuple(n_atoms if s is None else s for s in K.SHAPES[key])
        if key in K.PAIR_KEYS:
            shape = (value.shape[0],) + shape[1:]
        if value.shape != shape:
            raise DataError(f"{source}: {key!r} has shape {value.shape}, expected {shape}")
        if value.dtype.kind == "f" and not np.all(np.isfinite(value)):
            bad = np.argwhere(~np.isfinite(value.reshape(len(value), -1) if value.ndim else value[None]))
            raise DataError(f"{source}: non-finite values in {key!r} (first at index {bad[0].tolist()})")
    if np.any(out[K.ELEMS] <= 0) or np.any(out[K.ELEMS] > 118):
        raise DataError(f"{source}: atomic numbers must be in 1..118, got {sorted(set(out[K.ELEMS].tolist()))}")
    if out[K.PBC].any() and abs(np.linalg.det(out[K.CELL].astype(np.float64))) < 1e-6:
        raise DataError(f"{source}: periodic structure with a singular cell {out[K.CELL].tolist()}")
    return out


def signature_of(structure):
    """``tf.TensorSpec`` dict describing structures shaped like ``structure``."""
    return {key: tf.TensorSpec(K.SHAPES[key], tf.as_dtype(np.asarray(value).dtype), name=key)
            for key, value in structure.items()}


def list_loader(func=None, *, float_dtype="float32"):
    """Turn ``func(item) -> structure dict`` into a loader of datasets.

    The decorated loader has the signature
    ``loader(items, split=False, shuffle=True, seed=0, splits=None)`` (``splits``: upstream
    PiNN's name of ``split``) and returns a
    ``tf.data.Dataset`` (no split) or a nested dict of datasets (see
    :func:`split_items`).  Items are read lazily when the dataset is iterated.
    The first item is read once up front to fix the keys and dtypes; every
    item must then provide the same keys.

    ``func`` may raise :class:`DataError`; other exceptions are re-raised as
    :class:`DataError` naming the item.

    Example::

        @list_loader
        def load_frames(item):
            return {'elems': ..., 'coord': ..., 'e_data': ...}
        datasets = load_frames(my_items, split={'train': 9, 'test': 1})
    """
    def decorate(read_item):
        @functools.wraps(read_item)
        def loader(items, split=False, shuffle=True, seed=0, splits=None):
            split = chosen_split(split, splits, read_item.__name__)
            items = list(items)
            if not items:
                raise DataError(f"{read_item.__name__}: no structures to load")
            first = _read_checked(read_item, items[0], float_dtype)
            spec = signature_of(first)
            subsets = split_items(items, split, shuffle=shuffle, seed=seed)
            return _map_nested(subsets, lambda subset: _dataset(read_item, subset, spec, float_dtype))
        return loader
    return decorate if func is None else decorate(func)


def _read_checked(read_item, item, float_dtype):
    source = getattr(item, "source", None) or repr(item)
    try:
        structure = read_item(item)
    except DataError:
        raise
    except Exception as err:  # anything a parser raises: say which item
        raise DataError(f"{source}: {type(err).__name__}: {err}") from err
    structure = check_structure(structure, source)
    return {k: v.astype(float_dtype) if v.dtype.kind == "f" else v for k, v in structure.items()}


def _dataset(read_item, items, spec, float_dtype):
    expected = set(spec)

    def generate():
        for item in items:
            structure = _read_checked(read_item, item, float_dtype)
            if set(structure) != expected:
                source = getattr(item, "source", None) or repr(item)
                raise DataError(f"{source}: keys {sorted(structure)} differ from the first "
                                f"structure's {sorted(expected)}")
            yield structure
    return tf.data.Dataset.from_generator(generate, output_signature=spec)


def _map_nested(tree, fn):
    if isinstance(tree, dict):
        return {k: _map_nested(v, fn) for k, v in tree.items()}
    return fn(tree)


class Frame:
    """An item that names its origin: ``Frame(source='file.xyz, frame 3', payload=...)``."""

    __slots__ = ("source", "payload")

    def __init__(self, source, payload):
        self.source = source
        self.payload = payload

    def __repr__(self):
        return self.source
