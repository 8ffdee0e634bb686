"""Load the QM9 data set (one ``.xyz`` file per molecule), as upstream PiNN's ``load_qm9`` does, in pinn's units."""
import glob
import os

from pinn import keys as K
from pinn.io.base import DataError, Frame, list_loader
from pinn.io.readers.qm9_xyz import PROPERTIES, read_qm9

#: the per-atom quantity a ``label_map`` may name besides the molecular properties
MULLIKEN = "mulliken"


def load_qm9(flist, label_map=None, split=False, shuffle=True, seed=0, splits=None, *, units="file"):
    """Load QM9 molecules, with the properties of ``label_map`` as labels (upstream PiNN's ``load_qm9``).

    As upstream's, every property is given in the file's unit (``U0`` in Hartree) unless
    ``units='pinn'``, which converts to pinn's: the energies (``U0``, ``U``, ``H``, ``G``,
    ``zpve``, ``homo``, ``lumo``, ``gap``) from Hartree to eV, ``mu`` from debye to e·Å,
    ``alpha`` from bohr³ to Å³, ``r2`` from bohr² to Å² (``A``, ``B``, ``C`` stay in GHz,
    ``Cv`` in cal/(mol·K)).  The structures have no ``cell`` (open molecules).

    Args:
        flist: a QM9 ``.xyz`` file, a list of them, or a directory (its ``*.xyz`` files).
        label_map: dict output key → QM9 property (default ``{'e_data': 'U0'}``).  The
            properties: ``index``, ``A``, ``B``, ``C``, ``mu``, ``alpha``, ``homo``, ``lumo``,
            ``gap``, ``r2``, ``zpve``, ``U0``, ``U``, ``H``, ``G``, ``Cv`` (one number per
            molecule: the key ``e_data`` or a key pinn does not know, such as ``'gap'``), and
            ``'mulliken'``, the Mulliken charges (e, per atom: the key ``q_data``).
        split, shuffle, seed, splits: as for :func:`pinn.io.load_ase` (molecules are the items).
        units: ``'file'`` (upstream's: as the file gives them) or ``'pinn'`` (eV, e·Å, Å³, Å²).

    Returns:
        A ``tf.data.Dataset`` of structures (or a nested dict of them) with ``elems``,
        ``coord`` (Å) and the keys of ``label_map``, as float32.

    Raises:
        DataError: no files, a property or key ``label_map`` cannot give; a bad file names
            the file and line (when the dataset is iterated, the first file at once).
    """
    if units not in ("file", "pinn"):
        raise DataError(f"load_qm9: units={units!r}; known: 'file' (upstream PiNN's: the file's units) or 'pinn' "
                        "(eV, e·Å, Å³, Å²)")
    label_map = {K.E_DATA: "U0"} if label_map is None else dict(label_map)
    spec = {K.ELEMS: {"dtype": "int32", "shape": [None]}, K.COORD: {"dtype": "float", "shape": [None, 3]}}
    for key, name in label_map.items():
        if name == MULLIKEN:
            if key != K.Q_DATA and key in K.SHAPES:
                raise DataError(f"load_qm9: label_map[{key!r}] = 'mulliken' is per atom: map it to 'q_data' or to a "
                                "key pinn does not know")
            spec[key] = {"dtype": "float", "shape": [None]}
            continue
        if name not in PROPERTIES:
            raise DataError(f"load_qm9: label_map[{key!r}] = {name!r} is not a QM9 property; known: "
                            f"{list(PROPERTIES) + [MULLIKEN]} (the tag 'gdb' is not a number)")
        if key in K.SHAPES and K.SHAPES[key] != ():
            raise DataError(f"load_qm9: label_map[{key!r}] = {name!r}: a property is one number per molecule, "
                            f"but {key!r} has shape {list(K.SHAPES[key])}")
        spec[key] = {"dtype": "float", "shape": []}
    files = _files(flist)

    @list_loader(ds_spec=spec)
    def read_qm9_molecule(item):
        molecule = read_qm9(item.payload)
        out = {K.ELEMS: molecule["elems"], K.COORD: molecule["coord"]}
        for key, name in label_map.items():
            if name == MULLIKEN:
                out[key] = molecule["charges"]
            else:
                out[key] = molecule["properties"][name] * (PROPERTIES[name][2] if units == "pinn" else 1.0)
        return out
    return read_qm9_molecule([Frame(path, path) for path in files], split=split, shuffle=shuffle, seed=seed,
                             splits=splits)


def _files(flist):
    if isinstance(flist, (str, os.PathLike)):
        flist = os.fspath(flist)
        if os.path.isdir(flist):
            files = sorted(glob.glob(os.path.join(flist, "*.xyz")))
            if not files:
                raise DataError(f"{flist}: no .xyz files in the directory")
            return files
        return [flist]
    files = [os.fspath(f) for f in flist]
    if not files:
        raise DataError("load_qm9: the list of files is empty")
    return files
