"""Load structures from NumPy arrays."""
import logging

import numpy as np

from pinn import keys as K
from pinn.io.base import DataError, Frame, ItemReader
from pinn.io.splits import chosen_split, split_items

log = logging.getLogger("pinn")


def load_numpy(data, split=False, shuffle=True, seed=0, splits=None):
    """Load structures from a dict of arrays with a leading frame axis (upstream PiNN's ``load_numpy``).

    Every key of ``data`` is carried into the structures, as upstream's loader does: pinn's keys
    (:mod:`pinn.keys`) with their checked shapes and dtypes, any other key with the shape of one
    frame of its array (integer arrays as int32, the others in the float precision), e.g. the
    ``oxidation`` [n_frames, n_atoms] of upstream's charge models.  Nothing is added: a
    structure without ``cell`` is open, one with a ``cell`` and no ``pbc`` periodic unless its
    cell is all zeros (:func:`pinn.io.with_cell_and_pbc`).

    Args:
        data: dict of arrays, every one with the frames on its first axis: ``coord``
            [n_frames, n_atoms, 3] (Å), ``elems`` [n_frames, n_atoms] or [n_atoms] (shared by
            all frames), optional ``cell`` [n_frames, 3, 3] or [3, 3] (Å), ``pbc`` [3] or
            [n_frames, 3], ``e_data`` [n_frames], ``f_data`` [n_frames, n_atoms, 3] …, and any
            other key.
        split, shuffle, seed, splits: as for :func:`pinn.io.load_ase`: without ``split`` /
            ``splits`` one dataset of every frame in order (upstream's ``splits=None``).

    Returns:
        A ``tf.data.Dataset`` of structures, or the nested dict of ``split``.

    A key of pinn's whose frames have another shape than pinn's (:mod:`pinn.keys`; e.g. ``coord``
    [1, n_atoms, 3]) is carried as given, as upstream's loader does, with a warning:
    :func:`pinn.io.sparse_batch` and the models refuse it.

    Raises:
        DataError: no ``coord`` or ``elems``, an array with another number of frames than
            ``coord``; a bad frame names its index.
    """
    if K.COORD not in data or K.ELEMS not in data:
        raise DataError(f"load_numpy: data needs {K.COORD!r} and {K.ELEMS!r}, got {sorted(data)}")
    arrays = {k: np.asarray(v) for k, v in data.items()}
    n_frames = len(arrays[K.COORD])
    shared = {K.ELEMS: 1, K.CELL: 2, K.PBC: 1}  # rank of the unbatched form
    for key, value in arrays.items():
        if value.ndim == 0:
            raise DataError(f"load_numpy: {key!r} is a single number; every array needs the frames on its first axis")
        per_frame = not (key in shared and value.ndim == shared[key])
        if per_frame and len(value) != n_frames:
            raise DataError(f"load_numpy: {key!r} has {len(value)} frames, {K.COORD!r} has {n_frames}")
    extra = {key: (value.shape[1:], "int32" if value.dtype.kind in "iu" else "float")
             for key, value in arrays.items() if key not in K.SHAPES}
    odd = {}
    for key, value in arrays.items():
        if key in K.SHAPES:
            shape = value.shape if key in shared and value.ndim == shared[key] else value.shape[1:]
            expected = K.SHAPES[key]
            if len(shape) != len(expected) or any(e is not None and e != n for e, n in zip(expected, shape)):
                dtype = K.dtype_of(key)
                odd[key] = (shape, "float" if dtype == "float32" else dtype)
    if odd:  # upstream's load_numpy carries any shape; pinn's batching and models need pinn's (pinn.keys)
        log.warning("load_numpy: %s carried with the shape of one frame as given; sparse_batch and the models "
                    "refuse them (pinn's shapes: %s)", ", ".join(f"{k!r} {list(v[0])}" for k, v in odd.items()),
                    ", ".join(f"{k!r} {list(K.SHAPES[k])}" for k in odd))
        extra.update(odd)

    def read(item):
        i = item.payload
        return {k: (v if k in shared and v.ndim == shared[k] else v[i]) for k, v in arrays.items()}
    frames = [Frame(f"numpy frame {i}", i) for i in range(n_frames)]
    reader = ItemReader(read, "load_numpy", extra=extra)
    return reader.datasets(split_items(frames, chosen_split(split, splits, "load_numpy"), shuffle=shuffle,
                                       seed=seed))
