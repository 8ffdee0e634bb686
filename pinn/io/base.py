"""Building blocks for loaders: item validation and ``list_loader`` (splitting: :mod:`pinn.io.splits`).

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
from pinn.io.splits import chosen_split, split_items
from pinn.io.structure import check_structure, columns_of, periodic, keys_problem  # noqa: F401  (re-exported)
from pinn.runtime.py_funcs import dataset_holding_callbacks

log = logging.getLogger(__name__)


#: keys that batching and the models make; a loader may not declare them
_RESERVED = (K.IND_1, K.DIFF, K.DIST, K.REAL)


def signature_of(structure, extra=None):
    """``tf.TensorSpec`` dict describing structures shaped like ``structure``; keys in ``extra``
    (as for :func:`check_structure`) get their declared shape."""
    extra = extra or {}
    return {key: tf.TensorSpec(extra[key][0] if key in extra else K.SHAPES[key],
                               tf.as_dtype(np.asarray(value).dtype), name=key)
            for key, value in structure.items()}


def declared_spec(pbc=None, force=None, stress=None, ds_spec=None):
    """The keys that :func:`list_loader`'s arguments declare, or ``None`` when they declare none.

    Args:
        pbc, force, stress: upstream PiNN's flags: ``elems``, ``coord`` and ``e_data``, and
            ``cell`` (``pbc``), ``f_data`` (``force``), ``s_data`` (``stress``) when true.
        ds_spec: upstream PiNN's full spec instead: dict key → ``{'dtype': ..., 'shape': [...]}``
            (or a ``tf.TensorSpec``); dtype a name (``'float'`` is the loader's precision), a
            ``tf.DType`` or NumPy dtype, ``None`` in a shape for a dimension of any size.

    Returns:
        dict key → ``(shape tuple, dtype name or 'float')``, or ``None`` (all arguments None).

    Raises:
        ValueError, TypeError: a spec without ``elems``/``coord``, one of pinn's keys with
            another shape, a key that batching makes (``ind_1``...), a flag whose key the
            ``ds_spec`` lacks.
    """
    flags = {"pbc": (pbc, K.CELL), "force": (force, K.F_DATA), "stress": (stress, K.S_DATA)}
    if ds_spec is None:
        if all(flag is None for flag, _ in flags.values()):
            return None
        keys = [K.ELEMS, K.COORD, K.E_DATA] + [key for flag, key in flags.values() if flag]
        return {key: (K.SHAPES[key], "float" if K.dtype_of(key) == "float32" else K.dtype_of(key)) for key in keys}
    if not isinstance(ds_spec, dict):
        raise TypeError(f"list_loader: ds_spec must be a dict key -> {{'dtype': ..., 'shape': [...]}}, got {ds_spec!r}")
    spec = {}
    for key, entry in ds_spec.items():
        if key in _RESERVED:
            raise ValueError(f"list_loader: ds_spec[{key!r}]: {key!r} is made by batching or by the model, "
                             "not by a loader")
        shape, dtype = _spec_entry(key, entry)
        if key in K.SHAPES:
            if shape != K.SHAPES[key]:
                raise ValueError(f"list_loader: ds_spec[{key!r}] has shape {list(shape)}; pinn's {key!r} has "
                                 f"{list(K.SHAPES[key])} (see pinn.keys)")
            dtype = "float" if K.dtype_of(key) == "float32" else K.dtype_of(key)
        spec[key] = (shape, dtype)
    for key in (K.ELEMS, K.COORD):
        if key not in spec:
            raise ValueError(f"list_loader: ds_spec must declare {key!r} (it is the full spec of a structure)")
    for name, (flag, key) in flags.items():
        if flag and key not in spec:
            raise ValueError(f"list_loader: {name}=True, but {key!r} is not in ds_spec (ds_spec is the full spec; "
                             f"declare {key!r} in it)")
    return spec


def _spec_entry(key, entry):
    """(shape tuple, dtype name or 'float') of one ``ds_spec`` entry."""
    if isinstance(entry, tf.TensorSpec):
        shape = entry.shape.as_list()
        dtype = entry.dtype
    elif isinstance(entry, dict) and "dtype" in entry and "shape" in entry:
        shape = entry["shape"]
        dtype = entry["dtype"]
    else:
        raise TypeError(f"list_loader: ds_spec[{key!r}] must be {{'dtype': ..., 'shape': [...]}} or a "
                        f"tf.TensorSpec, got {entry!r}")
    try:
        shape = tuple(None if d is None else int(d) for d in shape)
    except (TypeError, ValueError):
        raise TypeError(f"list_loader: ds_spec[{key!r}]['shape'] must be a list of sizes or None, got {shape!r}") \
            from None
    if isinstance(dtype, str) and dtype == "float":
        return shape, "float"
    try:
        return shape, tf.as_dtype(dtype).name
    except TypeError:
        raise TypeError(f"list_loader: ds_spec[{key!r}]['dtype'] = {dtype!r} is not a dtype") from None


class ItemReader:
    """Reads items through a function of one item, checks them, and builds the datasets.

    The common part of :func:`list_loader` and of loaders that split their items
    themselves (:func:`pinn.io.load_ani` splits by molecule).

    Args:
        read_item: function item → structure dict (values array-like).
        name: the loader's name, for messages.
        float_dtype: dtype of the float arrays.
        spec: declared keys (see :func:`declared_spec`), or ``None`` to take them from the
            first item.
        extra: with ``spec=None``, keys pinn does not know that items may give, as for
            :func:`check_structure` (the declared keys of ``spec`` otherwise).
        source_of: function item → the text naming it in messages (default: its ``source``
            attribute, as a :class:`Frame`'s, or its ``repr``).
    """

    def __init__(self, read_item, name, float_dtype="float32", spec=None, extra=None, source_of=None):
        self.read_item = read_item
        self.source_of = source_of or (lambda item: getattr(item, "source", None) or repr(item))
        self.name = name
        self.float_dtype = float_dtype
        self.spec = spec
        self.extra = {k: v for k, v in spec.items() if k not in K.SHAPES} if spec is not None else dict(extra or {})

    def read(self, item):
        """The checked structure of one item (numpy arrays).

        Raises:
            DataError: naming the item (its ``source`` attribute or its ``repr``).
        """
        source = self.source_of(item)
        try:
            raw = self.read_item(item)
        except DataError:
            raise
        except Exception as err:  # anything a parser raises: say which item
            raise DataError(f"{source}: {type(err).__name__}: {err}") from err
        if not isinstance(raw, dict):
            raise DataError(f"{source}: {self.name} returned a {type(raw).__name__}, not a dict of arrays")
        if self.spec is not None:
            raw = self._as_declared(raw, source)
        return check_structure(raw, source, self.float_dtype, self.extra)

    def _as_declared(self, raw, source):
        allowed = set(self.spec) | ({K.PBC} if K.CELL in self.spec else set())
        missing = sorted(set(self.spec) - set(raw))
        unexpected = sorted(set(raw) - allowed)
        if missing:
            raise DataError(f"{source}: {self.name} declares {missing} (list_loader's pbc/force/stress/ds_spec), "
                            f"but the item gives only {sorted(raw)}")
        if unexpected:
            raise DataError(f"{source}: {self.name} gives {unexpected}, which it does not declare (list_loader's "
                            "pbc=True declares 'cell', force=True 'f_data', stress=True 's_data', ds_spec any key)")
        return raw

    def datasets(self, subsets):
        """``tf.data.Dataset`` for each list of items in ``subsets`` (a list, or a nested dict of
        lists as :func:`split_items` gives), in the same structure.

        The first item is read once now to fix the keys, dtypes and shapes; the others are
        read when the datasets are iterated and must give the same keys.
        """
        first = next((items[0] for items in _leaves(subsets) if len(items)), None)
        if first is None:
            raise DataError(f"{self.name}: no structures to load")
        spec = signature_of(self.read(first), self.extra)
        return map_nested(subsets, lambda items: self._dataset(items, spec))

    def _dataset(self, items, spec):
        expected = set(spec)

        def generate():
            for item in items:
                structure = self.read(item)
                problem = keys_problem(structure, expected, self.source_of(item))
                if problem is not None:
                    raise problem
                yield structure
        # the generator (and the frames it reads) held by the dataset, not by the process (pinn.runtime.py_funcs);
        # its length declared, so that an epoch's batches are counted without a pass (pinn.training.epochs)
        return dataset_holding_callbacks(lambda: tf.data.Dataset.from_generator(generate, output_signature=spec)
                                         .apply(tf.data.experimental.assert_cardinality(len(items))))


def held_dataset(structures, spec):
    """A ``tf.data.Dataset`` of ``structures`` held in memory (checked dicts of arrays, as
    :func:`check_structure` gives them, all with the keys of ``spec``), built from their arrays in TensorFlow:
    each structure is sliced out of one array per key in TensorFlow's threads, without a Python call per
    structure (as a ``from_generator`` makes), so that the first epoch's Python (Python's lock) is left to the
    training step.

    Args:
        structures: list of structure dicts (``elems`` [n_atoms], ``coord`` [n_atoms, 3], ...).
        spec: ``tf.TensorSpec`` dict of one structure (:func:`signature_of`).

    Returns:
        the dataset, of ``len(structures)`` elements in their order, of element spec ``spec``.
    """
    keys = list(spec)
    ragged = ragged_keys(spec)
    if structures:
        columns, rows = columns_of([{key: np.asarray(s[key], spec[key].dtype.as_numpy_dtype) for key in keys}
                                    for s in structures], keys, ragged)
    else:
        columns = {key: np.zeros([0] + [0 if d is None else d for d in spec[key].shape[int(key in ragged):]],
                                 spec[key].dtype.as_numpy_dtype) for key in keys}
        rows = {key: np.zeros(1, np.int64) for key in ragged}
    return sliced_structures({key: tf.constant(value) for key, value in columns.items()},
                             {key: tf.constant(value) for key, value in rows.items()})


def ragged_keys(spec):
    """The keys of a structure's ``spec`` whose first dimension varies between structures (atoms, pairs)."""
    return [key for key in spec if spec[key].shape.rank and spec[key].shape[0] is None]


def sliced_structures(columns, rows):
    """The structures of one array per key (tensors, as :func:`pinn.io.structure.columns_of` gives them:
    ``rows`` for the keys with one row per atom, the others stacked), a dataset of them in order, sliced in
    TensorFlow (also inside a ``flat_map``, over chunks)."""
    keys = list(columns)
    if rows:
        count = tf.shape(next(iter(rows.values())), out_type=tf.int64)[0] - 1
    else:
        count = tf.shape(columns[keys[0]], out_type=tf.int64)[0]

    def structure(k):
        return {key: (columns[key][rows[key][k]:rows[key][k + 1]] if key in rows else columns[key][k])
                for key in keys}
    return tf.data.Dataset.range(count).map(structure)


def list_loader(pbc=None, force=None, stress=None, ds_spec=None, *, float_dtype="float32"):
    """Turn ``func(item) -> structure dict`` into a loader of datasets.

    Used bare (``@list_loader``) or called (``@list_loader(pbc=True, force=True)``, upstream
    PiNN's form).  The decorated loader has the signature
    ``loader(items, split=False, shuffle=True, seed=0, splits=None)`` (``splits``: upstream
    PiNN's name of ``split``) and returns a ``tf.data.Dataset`` (no split) or a nested dict of
    datasets (see :func:`split_items`).  Items are read lazily when the dataset is iterated.

    Args:
        pbc: upstream PiNN's flag: the items give ``cell`` (Å).  A structure whose item gives no
            ``pbc`` is periodic along a, b and c when its cell is not all zeros, open otherwise.
        force: the items give ``f_data`` (eV/Å).
        stress: the items give ``s_data`` (eV/Å³).
        ds_spec: the full spec instead of the flags (upstream PiNN's form): dict key →
            ``{'dtype': ..., 'shape': [...]}`` or ``tf.TensorSpec``, with ``None`` for a dimension
            of any size and ``'float'`` for the loader's float dtype.  It must declare
            ``elems`` and ``coord``; keys that pinn does not know (``'mw_data'``...) are
            carried with the declared shape and dtype; pinn's keys take pinn's shapes and
            dtypes (:mod:`pinn.keys`).
        float_dtype: dtype of the float arrays (keyword only).

    With any of ``pbc``, ``force``, ``stress`` given (even False), every item must give
    ``elems``, ``coord``, ``e_data`` and the keys the true flags add, and nothing else
    (``pbc`` besides ``cell``); with ``ds_spec``, exactly its keys.  With none of the four
    (``@list_loader`` or ``@list_loader()``) the keys, dtypes and shapes are those of the
    first item, which is read once up front, and only pinn's keys are taken.  Either way
    every item must give the same keys as the first.

    ``func`` may raise :class:`DataError`; other exceptions are re-raised as
    :class:`DataError` naming the item (its ``source`` attribute, as with
    :class:`Frame`, or its ``repr``).

    Returns:
        the decorator (or, used bare, the loader).

    Raises:
        ValueError, TypeError: a ``ds_spec`` that is not a spec (see :func:`declared_spec`).

    Example::

        @list_loader(pbc=True, force=True)
        def load_frames(item):
            return {'elems': ..., 'coord': ..., 'cell': ..., 'e_data': ..., 'f_data': ...}
        datasets = load_frames(my_items, splits={'train': 9, 'test': 1})
    """
    if callable(pbc) and not isinstance(pbc, (bool, np.bool_)):  # used bare: @list_loader
        return list_loader(float_dtype=float_dtype)(pbc)
    spec = declared_spec(pbc, force, stress, ds_spec)

    def decorate(read_item):
        reader = ItemReader(read_item, read_item.__name__, float_dtype, spec)

        @functools.wraps(read_item)
        def loader(items, split=False, shuffle=True, seed=0, splits=None):
            split = chosen_split(split, splits, read_item.__name__)
            items = list(items)
            if not items:
                raise DataError(f"{read_item.__name__}: no structures to load")
            return reader.datasets(split_items(items, split, shuffle=shuffle, seed=seed))
        return loader
    return decorate


def _leaves(tree):
    if isinstance(tree, dict):
        return [leaf for value in tree.values() for leaf in _leaves(value)]
    return [tree]


def map_nested(tree, fn):
    """``fn`` of each leaf of ``tree`` (a nested dict, as :func:`pinn.io.split_items` gives, or a leaf), in the
    same structure."""
    if isinstance(tree, dict):
        return {k: map_nested(v, fn) for k, v in tree.items()}
    return fn(tree)


class Frame:
    """An item that names its origin: ``Frame(source='file.xyz, frame 3', payload=...)``."""

    __slots__ = ("source", "payload")

    def __init__(self, source, payload):
        self.source = source
        self.payload = payload

    def __repr__(self):
        return self.source
