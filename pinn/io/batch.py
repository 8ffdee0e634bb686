"""Sparse batching and neighbor lists in the ``tf.data`` pipeline."""
import numpy as np
import tensorflow as tf

from pinn import keys as K
from pinn.io.neighbors import batch_neighbor_list, neighbor_list
from pinn.runtime.py_funcs import dataset_holding_callbacks

#: upstream PiNN's per-atom keys besides pinn's own (``pinn.keys.ATOMIC_KEYS``): its ``sparse_batch``
#: concatenates these by default (RuNNer's force weights, the oxidation states of its charge models)
UPSTREAM_ATOMIC_PROPS = ("f_weights", "oxidation")


def atomic_keys(atomic_props=None):
    """The keys with one row per atom: pinn's (``pinn.keys.ATOMIC_KEYS``) and ``atomic_props``
    (default :data:`UPSTREAM_ATOMIC_PROPS`; any sequence of key names)."""
    props = UPSTREAM_ATOMIC_PROPS if atomic_props is None else tuple(atomic_props)
    return tuple(K.ATOMIC_KEYS) + tuple(p for p in props if p not in K.ATOMIC_KEYS)


def sparse_batch(batch_size, drop_remainder=False, num_parallel_calls=tf.data.AUTOTUNE, atomic_props=None):
    """Dataset transform: batch structures of different sizes without padding.

    Per-atom arrays (``elems``, ``coord``, ``f_data``, ``q_data`` and the keys of
    ``atomic_props``) are concatenated and ``ind_1`` [n_atoms, 1] gives each atom's
    structure index; per-structure values (``cell``, ``pbc``, ``e_data``, ``s_data``,
    ``d_data`` and keys of fixed shape that pinn does not know, such as ``mw_data`` []) are
    stacked; precomputed pairs (``ind_2``, ``shift``) are concatenated with their atom
    indices offset into the batch.

    Args:
        batch_size: structures per batch.
        drop_remainder: drop a last batch smaller than ``batch_size``.
        num_parallel_calls: parallel calls of the map that flattens each batch.
        atomic_props: names of keys besides pinn's with one row per atom, to concatenate like
            ``f_data`` (upstream PiNN's argument); default :data:`UPSTREAM_ATOMIC_PROPS`
            (``f_weights``, ``oxidation``).  Only keys the dataset has matter; each must have
            as many rows as the structure has atoms (checked).

    The structures are batched with ``padded_batch`` (``elems`` and ``ind_2`` padded with
    -1, which marks the padding) and the padding is then dropped in one map: a third to a
    half of the CPU time of ``ragged_batch``, which converts every tensor of every structure to a
    variant first.  Datasets with other keys of variable shape are batched with
    ``ragged_batch`` and keep them ragged.

    Use as ``dataset.apply(sparse_batch(32))``.
    """
    atomic = atomic_keys(atomic_props)

    def transform(dataset):
        spec = dataset.element_spec
        _check_known_shapes(spec)
        extra_atomic = [key for key in atomic if isinstance(spec, dict) and key in spec and key not in K.ATOMIC_KEYS]
        if extra_atomic and K.ELEMS in spec:
            check = tf.autograph.experimental.do_not_convert(_rows_per_atom_checked(extra_atomic))
            dataset = dataset.map(check, num_parallel_calls=num_parallel_calls, deterministic=True)
        if _paddable(spec, atomic):
            padding = {key: tf.constant(-1 if key in (K.ELEMS, K.IND_2) else 0, value.dtype)
                       if value.dtype != tf.bool else tf.constant(False) for key, value in spec.items()}
            batched = dataset.padded_batch(batch_size, padding_values=padding, drop_remainder=drop_remainder)
            flatten = lambda batch: _flatten_padded(batch, atomic)  # noqa: E731
        else:
            batched = dataset.ragged_batch(batch_size, drop_remainder=drop_remainder)
            flatten = lambda batch: _flatten_ragged(batch, atomic)  # noqa: E731
        # pinn's maps branch on Python values only: AutoGraph's conversion (~1 s a process) is not needed
        flatten = tf.autograph.experimental.do_not_convert(flatten)
        return batched.map(flatten, num_parallel_calls=num_parallel_calls, deterministic=True)
    return transform


def _check_known_shapes(spec):
    """Refuse single structures whose keys of pinn's have another rank than pinn's (:mod:`pinn.keys`)."""
    if not isinstance(spec, dict) or K.IND_1 in spec:
        return
    for key, value in spec.items():
        if key in K.SHAPES and isinstance(value, tf.TensorSpec) and value.shape.rank != len(K.SHAPES[key]):
            raise ValueError(f"sparse_batch: {key!r} has the shape {value.shape.as_list()} per structure; pinn's "
                             f"{key!r} is {list(K.SHAPES[key])} (None: the atoms; see pinn.keys)")


def _rows_per_atom_checked(keys):
    """A map that asserts that each key in ``keys`` has one row per atom of its structure."""
    def check(structure):
        n_atoms = tf.shape(structure[K.ELEMS])[0]
        checks = [tf.debugging.assert_equal(tf.shape(structure[key])[0], n_atoms,
                                            message=f"sparse_batch: per-atom key {key} (atomic_props) does not "
                                                    "have one row per atom")
                  for key in keys]
        with tf.control_dependencies(checks):
            return {key: tf.identity(value) for key, value in structure.items()}
    return check


def _paddable(spec, atomic=K.ATOMIC_KEYS):
    """Whether a dataset of single structures can be batched by padding: a dict with ``elems``
    whose keys are pinn's, per-atom keys of ``atomic`` or keys of fixed shape, and pairs only
    with ``ind_2``."""
    if not isinstance(spec, dict) or K.ELEMS not in spec or K.IND_1 in spec:
        return False
    if any(key in K.PAIR_KEYS for key in spec) and K.IND_2 not in spec:
        return False
    return all(isinstance(value, tf.TensorSpec) and
               (key in K.SHAPES or value.shape.is_fully_defined() or
                (key in atomic and value.shape.rank and value.shape[1:].is_fully_defined()))
               for key, value in spec.items())


def _flatten_padded(batch, atomic=K.ATOMIC_KEYS):
    """A sparse batch from a padded batch of structures (see :func:`sparse_batch`)."""
    real_atoms = batch[K.ELEMS] >= 0
    atoms = tf.where(real_atoms)  # [n_atoms, 2]: (structure, atom) in order
    out = {K.IND_1: tf.cast(atoms[:, :1], tf.int32)}
    if K.IND_2 in batch:  # _paddable: no pair keys without ind_2
        n_atoms = tf.reduce_sum(tf.cast(real_atoms, tf.int32), axis=1)
        pairs = tf.where(batch[K.IND_2][:, :, 0] >= 0)
        atom_offsets = tf.cumsum(n_atoms, exclusive=True)
        pair_offsets = tf.gather(atom_offsets, pairs[:, 0])
    for key, value in batch.items():
        if key in atomic:
            out[key] = tf.gather_nd(value, atoms)
        elif key == K.IND_2:
            out[key] = tf.gather_nd(value, pairs) + pair_offsets[:, None]
        elif key in K.PAIR_KEYS:
            out[key] = tf.gather_nd(value, pairs)
        else:
            out[key] = value
    return out


def _flatten_ragged(batch, atomic=K.ATOMIC_KEYS):
    elems = batch[K.ELEMS]
    out = {K.IND_1: tf.cast(elems.value_rowids(), tf.int32)[:, None]}
    atom_offsets = tf.cast(elems.row_starts(), tf.int32)
    for key, value in batch.items():
        if key in atomic:
            out[key] = value.flat_values if isinstance(value, tf.RaggedTensor) else \
                tf.reshape(value, tf.concat([[-1], tf.shape(value)[2:]], 0))
        elif key == K.IND_2:
            offset = tf.gather(atom_offsets, value.value_rowids())
            out[key] = value.flat_values + offset[:, None]
        elif key in K.PAIR_KEYS:
            out[key] = value.flat_values
        else:
            out[key] = value
    return out


def split_batch(batch, n_parts, atomic_props=None):
    """Split a sparse batch of tensors into ``n_parts`` sparse batches of consecutive structures.

    Part ``p`` holds structures ``[p·n // n_parts, (p+1)·n // n_parts)`` of the ``n`` in the
    batch (sizes differ by at most one; a part is empty when ``n < n_parts``), with their atoms,
    their pairs (``ind_2`` renumbered into the part) and every per-structure key.  The parts
    together are the batch: sums over them equal sums over it.

    Args:
        batch: dict of tensors of a sparse batch (see :func:`sparse_batch`), neighbor list
            optional; atoms must be ordered by structure (``ind_1`` non-decreasing) and pairs
            grouped by the structure of their first atom, as :func:`sparse_batch` makes them.
        n_parts: number of parts (int ≥ 1).
        atomic_props: keys besides pinn's with one row per atom, as for :func:`sparse_batch`
            (default :data:`UPSTREAM_ATOMIC_PROPS`); other keys pinn does not know are per
            structure.

    Returns:
        tuple of ``n_parts`` dicts with the keys of ``batch``.

    Raises:
        tf.errors.InvalidArgumentError: atoms or pairs are not ordered by structure, or a key
            taken as per structure does not have one row per structure.
    """
    if K.REAL in batch:
        raise ValueError("split_batch: split a batch before padding it (it has the padding key 'real')")
    ind_1 = batch[K.IND_1][:, 0]
    n_struct = structure_count(batch)
    struct_bounds = tf.range(n_parts + 1, dtype=tf.int32) * n_struct // n_parts
    checks = [tf.debugging.assert_non_negative(ind_1[1:] - ind_1[:-1],
                                               message="split_batch: atoms are not ordered by structure (ind_1)")]
    atomic = atomic_keys(atomic_props)
    checks += per_structure_checks(batch, n_struct, atomic, "split_batch")
    atom_bounds = tf.searchsorted(ind_1, tf.cast(struct_bounds, ind_1.dtype), side="left", out_type=tf.int32)
    pair_bounds = None
    if K.IND_2 in batch:
        pair_struct = tf.gather(ind_1, batch[K.IND_2][:, 0])
        checks.append(tf.debugging.assert_non_negative(
            pair_struct[1:] - pair_struct[:-1], message="split_batch: pairs are not grouped by structure (ind_2)"))
        pair_bounds = tf.searchsorted(pair_struct, tf.cast(struct_bounds, pair_struct.dtype), side="left",
                                      out_type=tf.int32)
    with tf.control_dependencies(checks):
        atom_bounds = tf.identity(atom_bounds)
    parts = []
    for p in range(n_parts):
        s0, s1 = struct_bounds[p], struct_bounds[p + 1]
        a0, a1 = atom_bounds[p], atom_bounds[p + 1]
        part = {}
        for key, value in batch.items():
            if key == K.IND_1:
                part[key] = value[a0:a1] - tf.cast(s0, value.dtype)
            elif key == K.IND_2:
                part[key] = value[pair_bounds[p]:pair_bounds[p + 1]] - tf.cast(a0, value.dtype)
            elif key in atomic:
                part[key] = value[a0:a1]
            elif key in K.PAIR_KEYS:
                part[key] = value[pair_bounds[p]:pair_bounds[p + 1]]
            else:  # per structure (stacked by sparse_batch)
                part[key] = value[s0:s1]
        parts.append(part)
    return tuple(parts)


def per_structure_checks(batch, n_struct, atomic, who):
    """Assertions that every key of a sparse batch that pinn does not know and that is not in
    ``atomic`` has one row per structure (such keys are taken as per structure)."""
    known = set(K.SHAPES) | set(atomic) | {K.IND_1, K.REAL}
    return [tf.debugging.assert_equal(tf.shape(value)[0], n_struct,
                                      message=f"{who}: key {key} is taken as per structure but does not have one "
                                              "row per structure; name per-atom keys in atomic_props")
            for key, value in batch.items() if key not in known and not isinstance(value, tf.RaggedTensor)]


def structure_count(batch):
    """The number of structures of a sparse batch (int32 scalar tensor): the rows of its first
    per-structure key (``cell``, ``pbc``, ``e_data``, ...), else one more than the largest ``ind_1``."""
    for key in K.STRUCTURE_KEYS:
        if key in batch:
            return tf.shape(batch[key])[0]
    return tf.maximum(tf.reduce_max(tf.cast(batch[K.IND_1], tf.int32)) + 1, 0)


def with_cell_and_pbc(tensors):
    """``tensors`` with ``cell`` and ``pbc`` where a loader gave none (upstream PiNN's loaders give
    neither for molecules, and a ``cell`` without ``pbc`` for periodic data).

    Without ``cell`` a structure is open (a cell of zeros); without ``pbc`` a structure is
    periodic along a, b and c where its cell is not all zeros, and open where it is (upstream's
    reading).  Works on one structure and on a sparse batch (``ind_1`` present), in
    ``tf.data`` maps and in functions.

    Args:
        tensors: dict of tensors with ``coord`` (Å) and, for a batch, ``ind_1``.

    Returns:
        ``tensors`` itself when it has both keys, else a new dict with ``cell`` [3, 3] (batch:
        [n_struct, 3, 3], Å, the ``coord`` dtype) and ``pbc`` [3] (batch: [n_struct, 3]) bool.
    """
    if K.CELL in tensors and K.PBC in tensors:
        return tensors
    out = dict(tensors)
    if K.CELL not in out:
        coord = tf.convert_to_tensor(out[K.COORD])
        if K.IND_1 in out:
            out[K.CELL] = tf.zeros(tf.stack([structure_count(out), 3, 3]), coord.dtype)
        else:
            out[K.CELL] = tf.zeros([3, 3], coord.dtype)
    if K.PBC not in out:
        has_cell = tf.reduce_any(tf.not_equal(out[K.CELL], 0), axis=[-2, -1])
        out[K.PBC] = tf.repeat(has_cell[..., None], 3, axis=-1)
    return out


def pair_geometry(tensors):
    """``tensors`` (a sparse batch with ``coord``, ``cell``, ``ind_1``, ``ind_2`` and ``shift``) with
    ``diff`` [n_pairs, 3] = r_j + shift·cell − r_i (Å) and ``dist`` [n_pairs] = |diff| (Å), computed in
    TensorFlow so that gradients reach ``coord`` and ``cell``; a new dict."""
    ind_2 = tensors[K.IND_2]
    # through a reshape, the gradient with respect to coord is a dense tensor (tf.gather's alone would be
    # IndexedSlices, which a user's tape.gradient(energy, coord) would hand back)
    coord = tf.reshape(tensors[K.COORD], [-1, 3])
    cell_of_pair = tf.gather(tensors[K.CELL], tf.gather(tensors[K.IND_1][:, 0], ind_2[:, 0]))
    diff = (tf.gather(coord, ind_2[:, 1]) - tf.gather(coord, ind_2[:, 0])
            + tf.reduce_sum(tensors[K.SHIFT][:, :, None] * cell_of_pair, axis=1))  # shift @ cell, per pair
    out = dict(tensors)
    out[K.DIFF] = diff
    out[K.DIST] = tf.norm(diff, axis=1)
    return out


@tf.autograph.experimental.do_not_convert
def batch_pairs(tensors, rc):
    """Every pair of atoms of a sparse batch closer than ``rc``, with their geometry (in a function
    or a ``tf.data`` map).

    The pairs are those of :func:`pinn.io.neighbors.neighbor_list`, found structure by structure
    with cell lists in NumPy (``tf.numpy_function``), among the QM atoms of QM/MM frames (``qm``, as
    :func:`add_neighbors`); ``diff`` and ``dist`` come from
    :func:`pair_geometry`, so gradients reach ``coord`` and ``cell``.

    Args:
        tensors: dict with ``ind_1`` [n_atoms, 1] (atoms of a structure contiguous, in structure
            order, as :func:`sparse_batch` makes them), ``coord`` [n_atoms, 3] (Å), and optionally
            ``cell`` [n_struct, 3, 3] (Å; [3, 3] for a batch of one) and ``pbc`` [n_struct, 3]
            (see :func:`with_cell_and_pbc` for their absence), ``qm`` [n_atoms] bool (QM/MM frames).
        rc: cutoff radius, Å.

    Returns:
        dict: ``ind_2`` [n_pairs, 2] int32 (both orders of a pair, sorted by structure and i),
        ``shift`` [n_pairs, 3] (the image of j in multiples of a, b, c), ``diff`` [n_pairs, 3] and
        ``dist`` [n_pairs] (Å), 0 < dist < rc.
    """
    coord = tf.convert_to_tensor(tensors[K.COORD])
    ind_1 = tf.cast(tf.reshape(tensors[K.IND_1], [-1, 1]), tf.int32)
    geometry = {K.COORD: coord, K.IND_1: ind_1}
    if K.CELL in tensors:
        geometry[K.CELL] = tf.reshape(tf.cast(tensors[K.CELL], coord.dtype), [-1, 3, 3])
    if K.PBC in tensors:
        geometry[K.PBC] = tf.reshape(tf.cast(tensors[K.PBC], tf.bool), [-1, 3])
    geometry = with_cell_and_pbc(geometry)
    rc = float(rc)

    def pairs(c, cell, pbc, i1, qm):
        ind_2, shift = _among(qm, lambda c, i: batch_neighbor_list(c, cell, pbc, i, rc), c, i1)
        return ind_2.astype("int32"), shift.astype(c.dtype)

    qm = tf.reshape(tensors[K.QM], [-1]) if K.QM in tensors else tf.ones(tf.shape(coord)[:1], tf.bool)
    ind_2, shift = tf.numpy_function(pairs, [coord, geometry[K.CELL], geometry[K.PBC], ind_1, qm],
                                     (tf.int32, coord.dtype), stateful=False)
    geometry[K.IND_2] = tf.ensure_shape(ind_2, (None, 2))
    geometry[K.SHIFT] = tf.ensure_shape(shift, (None, 3))
    geometry = pair_geometry(geometry)
    return {key: geometry[key] for key in (K.IND_2, K.SHIFT, K.DIFF, K.DIST)}


def add_neighbors(rc, num_parallel_calls=tf.data.AUTOTUNE):
    """Dataset transform: add the neighbor list (``ind_2``, ``shift``) with cutoff ``rc`` (Å).

    Works on single structures (apply it before ``.cache()`` to compute every
    list once) and on sparse batches (what models do when the input has no
    list yet).  The list is computed in NumPy by :func:`pinn.io.neighbors.neighbor_list`.
    Structures without ``cell`` or ``pbc`` get them as :func:`with_cell_and_pbc` says.  In QM/MM frames
    (``qm`` in the data, :mod:`pinn.io.qmmm`) the pairs are those among the QM atoms: the network sees the QM
    region, the MM atoms act through their charges (:mod:`pinn.physics.embedding`).
    """
    rc = float(rc)

    @tf.autograph.experimental.do_not_convert
    def pairs(structure):
        structure = with_cell_and_pbc(structure)
        coord = structure[K.COORD]
        batched = K.IND_1 in structure
        if batched:
            args = [coord, structure[K.CELL], structure[K.PBC], structure[K.IND_1]]
            fn = lambda c, cell, pbc, ind_1, qm: _as_types(
                _among(qm, lambda c, i: batch_neighbor_list(c, cell, pbc, i, rc), c, ind_1), c.dtype)
        else:
            args = [coord, structure[K.CELL], structure[K.PBC]]
            fn = lambda c, cell, pbc, qm: _as_types(_among(qm, lambda c: neighbor_list(c, cell, pbc, rc), c), c.dtype)
        qm = structure[K.QM] if K.QM in structure else tf.ones(tf.shape(coord)[:1], tf.bool)
        ind_2, shift = tf.numpy_function(fn, args + [qm], (tf.int32, coord.dtype), stateful=False)
        out = dict(structure)
        out[K.IND_2] = tf.ensure_shape(ind_2, (None, 2))
        out[K.SHIFT] = tf.ensure_shape(shift, (None, 3))
        return out

    def transform(dataset):
        return dataset_holding_callbacks(
            lambda: dataset.map(pairs, num_parallel_calls=num_parallel_calls, deterministic=True))
    return transform


def _among(qm, neighbors, coord, *atomic):
    """``neighbors(coord, *atomic)`` (a ``(ind_2, shift)`` function) over the atoms where ``qm`` [n_atoms] is
    true, with the indices of ``coord``: a QM/MM frame's network sees its QM atoms alone."""
    qm = np.asarray(qm, bool).reshape(-1)
    if qm.all():
        return neighbors(coord, *atomic)
    index = np.flatnonzero(qm)
    ind_2, shift = neighbors(coord[index], *(np.asarray(a)[index] for a in atomic))
    return index[ind_2], shift


def _as_types(result, float_dtype):
    ind_2, shift = result
    return ind_2.astype(np.int32), shift.astype(float_dtype)


def batch_from_atoms(atoms_list, rc, float_dtype="float32", neighbors=None):
    """A sparse batch (NumPy arrays, with neighbor lists) from ``ase.Atoms`` objects.

    Used by the ASE calculator and handy in scripts and tests.

    Args:
        atoms_list: an ``Atoms`` or a list of them.
        rc: cutoff radius of the neighbor list, Å.
        float_dtype: dtype of the float arrays.
        neighbors: function ``(coord, cell, pbc) -> (ind_2, shift)`` giving the pairs
            within ``rc`` (default :func:`pinn.io.neighbors.neighbor_list`; the calculator
            passes a :class:`pinn.io.neighbors.VerletNeighbors`).

    Returns:
        dict with ``elems``, ``coord``, ``cell``, ``pbc``, ``ind_1``, ``ind_2``, ``shift``.
    """
    if hasattr(atoms_list, "positions"):
        atoms_list = [atoms_list]
    elems = []
    coord = []
    cell = []
    pbc = []
    ind_1 = []
    ind_2 = []
    shift = []
    offset = 0
    for s, atoms in enumerate(atoms_list):
        if neighbors is None:
            pairs, sh = neighbor_list(atoms.positions, atoms.cell[:], atoms.pbc, rc)
        else:
            pairs, sh = neighbors(atoms.positions, atoms.cell[:], atoms.pbc)
        elems.append(atoms.numbers)
        coord.append(atoms.positions)
        cell.append(np.asarray(atoms.cell[:]))
        pbc.append(atoms.pbc)
        ind_1.append(np.full(len(atoms), s))
        ind_2.append(pairs + offset if offset else pairs)
        shift.append(sh)
        offset += len(atoms)
    return {K.ELEMS: _joined(elems, np.int32),
            K.COORD: _joined(coord, float_dtype),
            K.CELL: np.stack(cell).astype(float_dtype),
            K.PBC: np.stack(pbc).astype(bool),
            K.IND_1: _joined(ind_1, np.int32)[:, None],
            K.IND_2: _joined(ind_2, np.int32),
            K.SHIFT: _joined(shift, float_dtype)}


def _joined(parts, dtype):
    """The arrays ``parts`` concatenated, as a new array of ``dtype`` (one part: one copy, not two;
    the calculator's batch of one large cell)."""
    return (parts[0] if len(parts) == 1 else np.concatenate(parts)).astype(dtype)
