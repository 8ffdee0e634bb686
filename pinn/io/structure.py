"""One structure checked and normalised, and structures laid out as one array per key (NumPy only, no
TensorFlow): what every loader applies to each structure it reads, and what a process that parses frames beside
the training applies (:mod:`pinn.io.parse_process`)."""
import numpy as np

from pinn import keys as K
from pinn.io.errors import DataError
from pinn.io.geometry import coincident_problem, nonfinite_problem, nonfinite_values_problem
from pinn.io.neighbors import coincident_pair


def check_structure(data, source, float_dtype="float32", extra=None):
    """Validate and normalise one structure dict.

    Args:
        data: dict with at least ``elems`` and ``coord``; values array-like.
        source: text naming where the structure came from (file and frame),
            used in error messages.
        float_dtype: dtype of pinn's float keys (and of extra keys declared ``'float'``).
        extra: keys that pinn does not know but the loader declares (see
            :func:`list_loader`'s ``ds_spec``): dict key → ``(shape, dtype)``, the shape a
            tuple with ``None`` for a dimension of any size, the dtype a name or ``'float'``.

    Returns:
        A new dict of numpy arrays of the declared dtypes, with the keys of ``data`` (as upstream
        PiNN's loaders: no ``cell`` or ``pbc`` is added; see :func:`periodic` for what their
        absence means).

    Raises:
        DataError: unknown keys, wrong shapes, non-positive atomic numbers,
            non-finite values (for ``coord``: naming the atom), or two atoms closer than
            :data:`pinn.io.geometry.MIN_DISTANCE` (naming them; periodic images included),
            with ``source`` in the message.
    """
    extra = extra or {}
    out = {}
    for key, value in data.items():
        if key in K.SHAPES:
            dtype = K.dtype_of(key, float_dtype)
        elif key in extra:
            dtype = float_dtype if extra[key][1] == "float" else extra[key][1]
        else:
            raise DataError(f"{source}: unknown data key {key!r} (known: {sorted(K.SHAPES)}; a loader declares "
                            "other keys with list_loader(ds_spec=...))")
        try:
            out[key] = np.asarray(value, dtype=dtype)
        except (TypeError, ValueError) as err:
            raise DataError(f"{source}: {key!r} is not an array of {dtype}: {err}") from err
    if K.ELEMS not in out or K.COORD not in out:
        raise DataError(f"{source}: a structure needs {K.ELEMS!r} and {K.COORD!r}")
    n_atoms = len(out[K.ELEMS])
    if n_atoms == 0:
        raise DataError(f"{source}: structure has no atoms")
    for key, value in out.items():
        if key in extra:
            declared = extra[key][0]
            if value.ndim != len(declared) or any(d is not None and d != s for d, s in zip(declared, value.shape)):
                raise DataError(f"{source}: {key!r} has shape {value.shape}, declared "
                                f"{[d for d in declared]} (None: any size)")
            continue
        shape = tuple(n_atoms if s is None else s for s in K.SHAPES[key])
        if key in K.PAIR_KEYS:
            shape = (value.shape[0],) + shape[1:]
        if value.shape != shape:
            raise DataError(f"{source}: {key!r} has shape {value.shape}, expected {shape}")
        if key == K.COORD:
            problem = nonfinite_problem(value)
            if problem:
                raise DataError(f"{source}: {problem}")
        elif value.dtype.kind == "f" and nonfinite_values_problem(key, value):
            raise DataError(f"{source}: {nonfinite_values_problem(key, value)}")
    if np.any(out[K.ELEMS] <= 0) or np.any(out[K.ELEMS] > 118):
        raise DataError(f"{source}: atomic numbers must be in 1..118, got {sorted(set(out[K.ELEMS].tolist()))}")
    if K.PBC in out and K.CELL not in out and out[K.PBC].any():
        raise DataError(f"{source}: periodic along {out[K.PBC].tolist()} but no {K.CELL!r}")
    if K.CELL in out and periodic(out) and abs(np.linalg.det(out[K.CELL].astype(np.float64))) < 1e-6:
        raise DataError(f"{source}: periodic structure with a singular cell {out[K.CELL].tolist()}")
    pbc = out[K.PBC] if K.PBC in out else np.full(3, periodic(out))
    pair = coincident_pair(out[K.COORD], out.get(K.CELL), pbc)
    if pair:
        raise DataError(f"{source}: {coincident_problem(*pair, out[K.COORD][pair[0]])}")
    return out


def periodic(structure):
    """Whether one structure (a dict of arrays) is periodic along any axis.

    ``pbc`` says so where the structure has it; without it a structure with a ``cell`` that is not
    all zeros is periodic along a, b and c (upstream PiNN's reading), and one without a ``cell``
    is open.  :func:`pinn.io.with_cell_and_pbc` fills both keys in the same way for the models.
    """
    if K.PBC in structure:
        return bool(np.any(structure[K.PBC]))
    return K.CELL in structure and bool(np.any(np.asarray(structure[K.CELL]) != 0))


def keys_problem(structure, expected, source):
    """``None`` if ``structure`` (a dict) has the keys ``expected``, else the :class:`DataError` naming ``source``
    and both sets (every structure of a dataset has the first one's keys)."""
    if set(structure) == set(expected):
        return None
    return DataError(f"{source}: keys {sorted(structure)} differ from the first structure's {sorted(expected)}")


def columns_of(structures, keys, ragged):
    """Structures (dicts of arrays with ``keys``) as one array per key: the rows of each structure's
    per-atom arrays (``ragged``) one after another, the others stacked.

    Args:
        structures: list of checked structure dicts.
        keys: their keys.
        ragged: the keys whose first dimension varies from structure to structure (atoms, pairs).

    Returns:
        (columns, rows): ``columns[key]`` the array; ``rows[key]`` (ragged keys only), int64 [n + 1], the
        first row of each structure and the end, so that structure k's rows are ``rows[key][k]:rows[key][k + 1]``.
    """
    columns = {}
    rows = {}
    for key in keys:
        values = [s[key] for s in structures]
        if key in ragged:
            rows[key] = np.concatenate([[0], np.cumsum([len(v) for v in values])]).astype(np.int64)
            columns[key] = np.concatenate(values)
        else:
            columns[key] = np.stack(values)
    return columns, rows
