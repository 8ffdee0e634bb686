"""Load structures through ASE: any ASE-readable file or a list of them, a list of ``Atoms``, or an ASE database."""
import os

import numpy as np

from pinn.io import ase_files
from pinn.io.ase_structure import atoms_to_structure
from pinn.io.base import (DataError, Frame, check_structure, held_dataset, map_nested, ragged_keys, signature_of,
                          sliced_structures)
from pinn.io.parse_process import ParseProcesses
from pinn.io.splits import chosen_split, split_items
from pinn.runtime.py_funcs import dataset_holding_callbacks


def _read_atoms(dataset):
    """Return a list of (source, Atoms) from a file name, a database, a list of file names or a list of Atoms."""
    from ase import Atoms
    if isinstance(dataset, Atoms):
        dataset = [dataset]
    if isinstance(dataset, (str, os.PathLike)):
        return _read_file(os.fspath(dataset))
    if hasattr(dataset, "select"):  # an open ase.db connection (the user's: its queries made this process's)
        name = getattr(dataset, "filename", None)
        with ase_files.per_process():
            return _database_rows(dataset, f"{name}, row" if name else "database row", name or "the database")
    items = list(dataset)
    is_path = [isinstance(item, (str, os.PathLike)) for item in items]
    for i, item in enumerate(items):
        if not is_path[i] and not isinstance(item, Atoms):
            raise DataError(f"item {i} of the list is a {type(item).__name__}, not a file name or ase.Atoms")
    if any(is_path) and not all(is_path):
        first_path = is_path.index(True)
        first_atoms = is_path.index(False)
        raise DataError(f"load_ase: the list mixes file names and Atoms (item {first_path} is a file name, "
                        f"item {first_atoms} an Atoms); give a list of file names or a list of Atoms")
    if items and all(is_path):  # e.g. what distribute_data returns: the frames of every file, in order
        return [frame for path in items for frame in _read_file(os.fspath(path))]
    return [(f"Atoms {i}", a) for i, a in enumerate(items)]


def _read_file(path):
    """(source, Atoms) of every frame of one file: anything ase.io reads, or an ASE database."""
    if not os.path.exists(path):
        raise DataError(f"{path}: no such file")
    if os.path.getsize(path) == 0:
        raise DataError(f"{path}: file is empty")
    if path.endswith((".db", ".aselmdb", ".json")) and _is_ase_db(path):
        try:
            db = ase_files.database(path)  # shared with a streamed dataset of the file (one LMDB env per process)
        except Exception as err:
            raise DataError(f"{path}: could not open it as an ASE database: {type(err).__name__}: {err}") from err
        return _database_rows(db, f"{path}, row", path)
    try:
        frames = ase_files.read(path, index=":")
    except Exception as err:
        raise DataError(f"{path}: ASE could not read it: {type(err).__name__}: {err}") from err
    if not isinstance(frames, list):
        frames = [frames]
    return [(f"{path}, frame {i}", a) for i, a in enumerate(frames)]


def _database_rows(db, prefix, name):
    """(source, Atoms) of every row of an open database; an error of the database names ``name`` (its file).

    The database may be one this process holds open already (:func:`pinn.io.ase_files.database`: an LMDB
    database opened by a streamed dataset keeps the rows it listed then), so a row another process deleted
    since is an error here, said with the file's name."""
    frames = []
    last = None
    try:
        for row in db.select():
            frames.append((f"{prefix} {row.id}", row.toatoms(add_additional_information=False)))
            last = row.id
    except Exception as err:
        after = f" (after row {last})" if last is not None else ""
        held = ("; it was open in this process already (a streamed dataset of it holds it, as it was then): "
                "another process changed it since?" if str(name).endswith(".aselmdb") else "")
        raise DataError(f"{name}: could not read its rows{after}: {type(err).__name__}: {err}{held}") from err
    return frames


def _is_ase_db(path):
    if path.endswith((".db", ".aselmdb")):
        return True
    try:
        with ase_files.connect(path) as db:
            return db.count() >= 0
    except Exception:
        return False


def load_ase(dataset, split=False, shuffle=True, seed=0, splits=None, stream=None):
    """Load structures from anything ASE reads.

    Args:
        dataset: a file name in any format ``ase.io.read`` understands (all
            frames are read), an ASE database file (``.db``) or connection, a
            list of such file names (the frames of every file, in order, e.g.
            this rank's share from :func:`pinn.io.distribute_data`), an
            ``Atoms`` or a list of ``Atoms``.  Labels (energy, forces, stress,
            dipole, charges) come from the stored calculator results; QM/MM
            frames (a per-atom ``qm`` array) bring their region and MM charges
            (docs/qmmm.md).
        split: ``False`` for one dataset, or nested ratios such as
            ``{'train': 8, 'vali': 1, 'test': 1}`` (see :func:`pinn.io.split_items`).
        shuffle: shuffle frames before splitting.
        seed: seed of that shuffle.
        splits: upstream PiNN's name of ``split`` (give one of the two).
        stream: ``True``: read each frame when the dataset reaches it, holding only an index of
            the frames (16 bytes each; :mod:`pinn.io.ase_stream`), for extended XYZ files
            (``.xyz``, ``.extxyz``) and ASE databases (``.db``, ``.aselmdb``); ``False``: read
            every frame now and hold them; ``None`` (default): stream such files when they hold
            more than :data:`pinn.io.ase_stream.STREAM_ABOVE_BYTES` in all.  Both give the same
            structures, splits and order.

    Returns:
        A ``tf.data.Dataset`` of structures (float32), or a nested dict of them.

    Raises:
        DataError: missing or empty file, frames without a label the first
            frame has, non-finite values, a list that mixes file names and
            ``Atoms``; messages name the file and frame.  Streamed, a frame's
            problem is found when the dataset reaches it (the index pass checks
            the files' frame structure only), and so is a file that changed
            since it was indexed (its size or modification time: refused by name).
    """
    from pinn.io.ase_stream import stream_paths
    split = chosen_split(split, splits, "load_ase")
    streamed = stream_paths(dataset, stream)
    if streamed is not None:
        return _stream_frames(streamed, split, shuffle, seed)
    frames = [Frame(src, check_structure(atoms_to_structure(a, src), src)) for src, a in _read_atoms(dataset)]
    if not frames:
        raise DataError(f"{dataset}: no structures found")
    first_keys = set(frames[0].payload)
    for frame in frames:
        if set(frame.payload) != first_keys:
            raise DataError(f"{frame.source}: has {sorted(frame.payload)}, but the first frame has "
                            f"{sorted(first_keys)}; every frame needs the same labels")
    spec = signature_of(frames[0].payload)  # checked above (check_structure), so not again when iterated
    return map_nested(split_items(frames, split, shuffle=shuffle, seed=seed),
                       lambda part: held_dataset([frame.payload for frame in part], spec))


def _stream_frames(paths, split, shuffle, seed):
    """The datasets of ``load_ase(paths, stream=True)``: the frame numbers split as the frames would be.

    Extended XYZ files are parsed in a process of their own (:mod:`pinn.io.parse_process`); databases are
    read in this one (through :class:`pinn.io.base.ItemReader`).
    """
    from pinn.io.ase_stream import FrameIndex
    from pinn.io.base import ItemReader
    index = FrameIndex(paths)
    if not len(index):
        raise DataError(f"{', '.join(paths)}: no structures found")

    def read_frame(k):  # checked by the reader (check_structure), once
        return atoms_to_structure(index.read(k), index.source(k))

    reader = ItemReader(read_frame, "load_ase", source_of=index.source)
    parts = split_items(np.arange(len(index)), split, shuffle=shuffle, seed=seed)
    if index.holds_databases:
        return reader.datasets(parts)
    spec = signature_of(reader.read(0))
    processes = ParseProcesses(index, list(spec), ragged_keys(spec))
    return map_nested(parts, lambda frames: _parsed_apart(frames, processes, spec))


def _parsed_apart(frames, processes, spec):
    """A dataset of the frames numbered ``frames``, in their order, parsed by ``processes``
    (:class:`pinn.io.parse_process.ParseProcesses`) a chunk at a time and sliced here."""
    import tensorflow as tf
    ragged = ragged_keys(spec)
    chunk_spec = ({key: tf.TensorSpec([None] + spec[key].shape[int(key in ragged):].as_list(), spec[key].dtype)
                   for key in spec},
                  {key: tf.TensorSpec([None], tf.int64) for key in ragged})
    frames = np.asarray(frames, dtype=np.int64)
    # the generator (and the child processes it holds) held by the dataset (pinn.runtime.py_funcs); its length
    # declared, so that an epoch's batches are counted without a pass (pinn.training.epochs)
    return dataset_holding_callbacks(
        lambda: tf.data.Dataset.from_generator(lambda: processes.chunks(frames), output_signature=chunk_spec)
        .flat_map(sliced_structures)
        .apply(tf.data.experimental.assert_cardinality(len(frames))))
