"""Load the QM7b polarizability files, as upstream PiNN's ``load_qm7b`` does."""
import os

from pinn import keys as K
from pinn.io.base import DataError, Frame, list_loader
from pinn.io.readers.qm7b_xyz import read_qm7b

#: the key of the polarizability tensor (upstream PiNN's name)
PTENSOR = "ptensor"


def load_qm7b(filename, split=False, shuffle=True, seed=0, splits=None, *, key="b3lyp_pol"):
    """Load QM7b molecules with their polarizability tensors.

    Args:
        filename: an xyz file with the tensor on each frame's comment line (see
            :mod:`pinn.io.readers.qm7b_xyz`), or a list of them.
        split, shuffle, seed, splits: as for :func:`pinn.io.load_ase` (molecules are the items).
        key: the comment-line entry with the tensor (``'b3lyp_pol'``, upstream PiNN's choice).

    Returns:
        A ``tf.data.Dataset`` of structures (or a nested dict of them) with ``elems``,
        ``coord`` (Å), ``cell``/``pbc`` (open) and ``ptensor`` [3, 3] (float32, the tensor as
        written in the file: not converted, pinn declares no unit for polarizabilities).

    Raises:
        DataError: a missing or malformed file (every frame is read at once; the message names
            the file and line).
    """
    files = [os.fspath(filename)] if isinstance(filename, (str, os.PathLike)) else [os.fspath(f) for f in filename]
    if not files:
        raise DataError("load_qm7b: the list of files is empty")
    items = [Frame(f"{path}, frame {k} (line {frame['line']})", frame)
             for path in files for k, frame in enumerate(read_qm7b(path, key))]
    spec = {K.ELEMS: {"dtype": "int32", "shape": [None]}, K.COORD: {"dtype": "float", "shape": [None, 3]},
            PTENSOR: {"dtype": "float", "shape": [3, 3]}}

    @list_loader(ds_spec=spec)
    def read_qm7b_molecule(item):
        return {K.ELEMS: item.payload["elems"], K.COORD: item.payload["coord"], PTENSOR: item.payload["ptensor"]}
    return read_qm7b_molecule(items, split=split, shuffle=shuffle, seed=seed, splits=splits)
