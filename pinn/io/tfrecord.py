"""A TFRecord cache of preprocessed structures, in upstream PiNN's layout.

``write_tfrecord('train.tfr', dataset)`` stores every element of a dataset of
(unbatched or batched) structures in ``train.tfr`` and the keys, dtypes and shapes in
``train.yml`` beside it, so ``load_tfrecord('train.tfr')`` (or ``load_tfrecord('train.yml')``,
upstream PiNN's call) restores the same dataset without re-reading or re-processing the
original files.  The spec has upstream PiNN's form (``format``: key → dtype and shape;
``info``: ``n_sample``), and each record stores every key as a serialized tensor as upstream
PiNN does, so either package reads the other's files.  Earlier versions of pinn named the spec
``train.tfr.yml`` and wrote its own layout: such files still load.
"""
import logging
import os

import numpy as np
import tensorflow as tf
import yaml

from pinn import keys as K
from pinn.io.base import DataError
from pinn.io.structure import periodic
from pinn.io.errors import op_error_line
from pinn.io.neighbors import geometry_problem

log = logging.getLogger(__name__)

#: what pinn writes in a spec besides upstream PiNN's keys
FORMAT_NAME = "pinn-tfrecord-2"


def tfrecord_paths(path):
    """``(records, spec)``: the file names of a TFRecord cache given by either of them.

    ``X.yml`` / ``X.yaml`` (upstream PiNN's argument) → ``(X.tfr, X.yml)``; ``X.tfr`` →
    ``(X.tfr, X.yml)``; any other name ``X`` → ``(X, X.yml)``.
    """
    path = os.fspath(path)
    stem, ext = os.path.splitext(path)
    if ext in (".yml", ".yaml"):
        return stem + ".tfr", path
    if ext == ".tfr":
        return path, stem + ".yml"
    return path, path + ".yml"


def _is_spec(path):
    """Whether ``path`` is a TFRecord spec (pinn's either layout, or upstream PiNN's)."""
    try:
        with open(path) as f:
            meta = yaml.safe_load(f)
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return False
    return isinstance(meta, dict) and (isinstance(meta.get("format"), dict) or
                                       (isinstance(meta.get("keys"), dict) and "format" in meta))


def write_tfrecord(path, dataset, log_every=1000):
    """Write a dataset of structures to a TFRecord file and its spec (upstream PiNN's naming).

    Args:
        path: ``X.tfr`` (records in ``X.tfr``, spec in ``X.yml``), ``X.yml`` (upstream PiNN's
            argument: the same two files), or another name ``X`` (records in ``X``, spec in
            ``X.yml``).
        dataset: ``tf.data.Dataset`` of structure dicts (single structures or sparse batches;
            any keys, with their dtypes and shapes).
        log_every: log progress every that many elements.

    Returns:
        The number of elements (structures) written.

    Raises:
        DataError: the spec file exists and is not a TFRecord spec (it is never overwritten:
            ``train.tfr`` would otherwise replace a ``train.yml`` of another kind), or the
            dataset's elements are not dicts of tensors.
    """
    records, spec_file = tfrecord_paths(path)
    if os.path.exists(spec_file) and not _is_spec(spec_file):
        raise DataError(f"{spec_file}: exists and is not a TFRecord spec; not overwriting it with the spec of "
                        f"{records} (write to another name)")
    spec = dataset.element_spec
    if not isinstance(spec, dict) or not all(isinstance(s, tf.TensorSpec) for s in spec.values()):
        raise DataError(f"{records}: only datasets of dicts of tensors can be written, got {spec}")
    meta = {key: {"dtype": s.dtype.name, "shape": s.shape.as_list()} for key, s in spec.items()}
    count = 0
    tmp = records + ".part"
    with tf.io.TFRecordWriter(tmp) as writer:
        for structure in dataset:
            feature = {key: tf.train.Feature(bytes_list=tf.train.BytesList(
                value=[tf.io.serialize_tensor(value).numpy()])) for key, value in structure.items()}
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
            count += 1
            if log_every and count % log_every == 0:
                log.info("%s: %d structures written", records, count)
    os.replace(tmp, records)
    with open(spec_file + ".part", "w") as f:
        yaml.safe_dump({"format": meta, "info": {"n_sample": count, "writer": FORMAT_NAME}}, f)
    os.replace(spec_file + ".part", spec_file)
    log.info("%s: %d structures written (spec %s)", records, count, spec_file)
    return count


def load_tfrecord(path, num_parallel_calls=tf.data.AUTOTUNE, verify=True):
    """Read a dataset written by :func:`write_tfrecord` or by upstream PiNN's.

    Args:
        path: the records ``X.tfr`` or the spec ``X.yml`` (upstream PiNN's argument).  The spec
            is ``X.yml``, or ``X.tfr.yml`` as earlier versions of pinn named it.
        num_parallel_calls: parallel calls of the parsing map.
        verify: read the file once now (:func:`verify_records`): every record whole (TensorFlow's
            checksums), as many as the spec says, and every structure's positions finite, without
            two atoms at one place.  ``False`` leaves a damaged file to fail while the dataset is
            iterated, without naming it.

    Returns:
        ``tf.data.Dataset`` of structure dicts with the stored dtypes and shapes.

    Raises:
        DataError: the records or the spec is missing, the spec is not one (not YAML, or not a
            mapping of keys to dtype and shape), and with ``verify`` a damaged file or a bad
            structure, naming the file (and the record).
    """
    records, spec_file = tfrecord_paths(path)
    if not _is_spec(spec_file) and os.path.exists(records + ".yml"):
        spec_file = records + ".yml"  # earlier versions of pinn (X.yml absent, or another kind of file)
    if not os.path.exists(records) or not os.path.exists(spec_file):
        raise DataError(f"{path}: TFRecord file {records} or its spec {spec_file} is missing")
    meta, n_sample = read_spec(spec_file)
    if verify:
        verify_records(records, meta, n_sample)
    return tf.data.TFRecordDataset(records).map(_parser(meta), num_parallel_calls=num_parallel_calls,
                                                 deterministic=True)


def read_spec(spec_file):
    """The keys of a TFRecord spec and the number of records it declares.

    Args:
        spec_file: the spec (``X.yml``; upstream PiNN's layout, or earlier pinn's).

    Returns:
        ``(meta, n_sample)``: dict key → ``{'dtype': name, 'shape': [size or None, ...]}``, and the
        ``info.n_sample`` of the spec (``None`` where it declares none).

    Raises:
        DataError: naming the file: not readable as YAML, or not a mapping of keys to dtype and shape
            (naming the first bad key).
    """
    try:
        with open(spec_file) as f:
            spec = yaml.safe_load(f)
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        first = " ".join(line.strip() for line in str(err).splitlines() if line.strip())
        raise DataError(f"{spec_file}: a TFRecord spec that is not YAML ({first})") from None
    n_sample = None
    if isinstance(spec, dict) and isinstance(spec.get("format"), dict):
        meta = spec["format"]  # upstream PiNN's layout, which pinn writes too
        info = spec.get("info")
        n_sample = info.get("n_sample") if isinstance(info, dict) else None
    elif isinstance(spec, dict) and isinstance(spec.get("keys"), dict):
        meta = spec["keys"]  # earlier versions of pinn
    else:
        raise DataError(f"{spec_file}: not a TFRecord spec (no 'format' mapping of keys to dtype and shape)")
    for key, entry in meta.items():
        shape = entry.get("shape") if isinstance(entry, dict) else None
        if not (isinstance(entry, dict) and isinstance(entry.get("dtype"), str) and isinstance(shape, list)
                and all(d is None or (isinstance(d, int) and d >= 0) for d in shape)):
            raise DataError(f"{spec_file}: key {key!r} is not {{dtype: NAME, shape: [SIZE or null, ...]}}: {entry!r}")
        try:
            tf.as_dtype(entry["dtype"])
        except TypeError:
            raise DataError(f"{spec_file}: key {key!r} has the dtype {entry['dtype']!r}, which is not one") from None
    if n_sample is not None and (isinstance(n_sample, bool) or not isinstance(n_sample, int)):
        raise DataError(f"{spec_file}: info.n_sample is {n_sample!r}, not a number of records")
    return meta, n_sample


def verify_records(records, meta, n_sample=None):
    """Read a TFRecord file once, whole: every record intact, their number, and the geometry of every
    structure (:func:`pinn.io.neighbors.geometry_problem`; per structure of a record of sparse batches).

    Args:
        records: the ``.tfr`` file.
        meta: its keys (:func:`read_spec`).
        n_sample: the number of records the spec declares, or ``None``.

    Returns:
        int: the number of records.

    Raises:
        DataError: naming the file: damaged (TensorFlow's checksums, a truncated last record), fewer or
            more records than ``n_sample``, a record that does not parse as the spec says, or a
            structure with a non-finite position or two atoms at one place (naming the record).
    """
    geometry = {key: meta[key] for key in (K.COORD, K.CELL, K.PBC, K.IND_1) if key in meta}
    dataset = tf.data.TFRecordDataset(records)
    if K.COORD in geometry:
        dataset = dataset.map(_parser(geometry))
    count = 0
    try:
        for record in dataset.as_numpy_iterator():
            problem = _record_problem(record) if K.COORD in geometry else None
            if problem:
                raise DataError(f"{records}, record {count}: {problem}")
            count += 1
    except tf.errors.OpError as err:
        raise DataError(f"{records}: damaged TFRecord file after {count} intact records ({op_error_line(err)}); "
                        "write it again (pinn convert)") from None
    if n_sample is not None and count != n_sample:
        raise DataError(f"{records}: {count} records, but its spec declares {n_sample} (info.n_sample): a file "
                        "cut short or of another spec; write it again (pinn convert)")
    return count


def _parser(meta):
    """The function of a serialized record → dict of the tensors of ``meta``'s keys."""
    features = {key: tf.io.FixedLenFeature([], tf.string) for key in meta}

    @tf.autograph.experimental.do_not_convert
    def parse(record):
        raw = tf.io.parse_single_example(record, features)
        out = {}
        for key, m in meta.items():
            value = tf.io.parse_tensor(raw[key], tf.as_dtype(m["dtype"]))
            out[key] = tf.ensure_shape(value, m["shape"])
        return out
    return parse


def _record_problem(record):
    """What is wrong with the geometry of a record (NumPy arrays: one structure, or a sparse batch with
    ``ind_1``), or ``None``."""
    if K.IND_1 not in record:
        pbc = record[K.PBC] if K.PBC in record else np.full(3, periodic(record))
        return geometry_problem(record[K.COORD], record.get(K.CELL), pbc)
    ind_1 = record[K.IND_1].reshape(-1)
    bounds = np.searchsorted(ind_1, np.arange(int(ind_1.max(initial=-1)) + 2))
    for s in range(len(bounds) - 1):
        cell = record[K.CELL][s] if K.CELL in record else None
        pbc = record[K.PBC][s] if K.PBC in record else np.full(3, cell is not None and bool(np.any(cell != 0)))
        problem = geometry_problem(record[K.COORD][bounds[s]:bounds[s + 1]], cell, pbc)
        if problem:
            return f"structure {s} of the batch: {problem}"
    return None
