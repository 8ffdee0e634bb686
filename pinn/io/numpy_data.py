"""Load structures from NumPy arrays."""
import numpy as np

from pinn import keys as K
from pinn.io.base import DataError, Frame, list_loader


#: what load_numpy splits into when given neither split= nor splits= (upstream PiNN's default)
DEFAULT_SPLIT = {"train": 8, "test": 2}


def load_numpy(data, split=None, shuffle=True, seed=0, splits=None):
    """Load structures from a dict of arrays with a leading frame axis.

    As upstream PiNN's ``load_numpy``, without ``split``/``splits`` the frames are split 8:2 into
    ``{'train': ..., 'test': ...}``; ``split=False`` (or upstream's ``split=1``) gives one dataset.

    Args:
        data: dict keyed as in :mod:`pinn.keys`; every array has the frames on
            its first axis: ``coord`` [n_frames, n_atoms, 3] (Å), ``elems``
            [n_frames, n_atoms] or [n_atoms] (shared by all frames), optional
            ``cell`` [n_frames, 3, 3] or [3, 3], ``pbc`` [3] or [n_frames, 3],
            ``e_data`` [n_frames] (eV), ``f_data`` [n_frames, n_atoms, 3] (eV/Å),
            ``s_data`` [n_frames, 3, 3] (eV/Å³) …
        split, shuffle, seed, splits: as for :func:`pinn.io.load_ase` (default: :data:`DEFAULT_SPLIT`).
            A structure with a ``cell`` and no ``pbc`` is periodic unless its cell is all zeros
            (upstream's reading).

    Returns:
        A dict ``{'train', 'test'}`` of ``tf.data.Dataset`` (the default), a ``tf.data.Dataset``
        (``split=False``), or the nested dict of ``split``.
    """
    if split is None and splits is None:
        split = DEFAULT_SPLIT
    if K.COORD not in data or K.ELEMS not in data:
        raise DataError(f"load_numpy: data needs {K.COORD!r} and {K.ELEMS!r}, got {sorted(data)}")
    arrays = {k: np.asarray(v) for k, v in data.items()}
    n_frames = len(arrays[K.COORD])
    shared = {K.ELEMS: 1, K.CELL: 2, K.PBC: 1}  # rank of the unbatched form
    for key, value in arrays.items():
        per_frame = not (key in shared and value.ndim == shared[key])
        if per_frame and len(value) != n_frames:
            raise DataError(f"load_numpy: {key!r} has {len(value)} frames, {K.COORD!r} has {n_frames}")

    def frame(i):
        out = {k: (v if k in shared and v.ndim == shared[k] else v[i]) for k, v in arrays.items()}
        if K.CELL in out and K.PBC not in out:
            out[K.PBC] = np.repeat(np.any(np.asarray(out[K.CELL]) != 0), 3)
        return out
    frames = [Frame(f"numpy frame {i}", i) for i in range(n_frames)]

    @list_loader
    def read(item):
        return frame(item.payload)
    return read(frames, split=split, shuffle=shuffle, seed=seed, splits=splits)
