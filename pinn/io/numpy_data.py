"""Load structures from NumPy arrays."""
import numpy as np

from pinn import keys as K
from pinn.io.base import DataError, Frame, list_loader


def load_numpy(data, split=False, shuffle=True, seed=0, splits=None):
    """Load structures from a dict of arrays with a leading frame axis.

    Args:
        data: dict keyed as in :mod:`pinn.keys`; every array has the frames on
            its first axis: ``coord`` [n_frames, n_atoms, 3] (Å), ``elems``
            [n_frames, n_atoms] or [n_atoms] (shared by all frames), optional
            ``cell`` [n_frames, 3, 3] or [3, 3], ``pbc`` [3] or [n_frames, 3],
            ``e_data`` [n_frames] (eV), ``f_data`` [n_frames, n_atoms, 3] (eV/Å),
            ``s_data`` [n_frames, 3, 3] (eV/Å³) …
        split, shuffle, seed, splits: as for :func:`pinn.io.load_ase`.

    Returns:
        A ``tf.data.Dataset`` or a nested dict of them.
    """
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
        return {k: (v if k in shared and v.ndim == shared[k] else v[i]) for k, v in arrays.items()}
    frames = [Frame(f"numpy frame {i}", i) for i in range(n_frames)]

    @list_loader
    def read(item):
        return frame(item.payload)
    return read(frames, split=split, shuffle=shuffle, seed=seed, splits=splits)
