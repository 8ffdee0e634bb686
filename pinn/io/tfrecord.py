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

import tensorflow as tf
import yaml

from pinn.io.base import DataError

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


def load_tfrecord(path, num_parallel_calls=tf.data.AUTOTUNE):
    """Read a dataset written by :func:`write_tfrecord` or by upstream PiNN's.

    Args:
        path: the records ``X.tfr`` or the spec ``X.yml`` (upstream PiNN's argument).  The spec
            is ``X.yml``, or ``X.tfr.yml`` as earlier versions of pinn named it.
        num_parallel_calls: parallel calls of the parsing map.

    Returns:
        ``tf.data.Dataset`` of structure dicts with the stored dtypes and shapes.

    Raises:
        DataError: the records or the spec is missing, or the spec is not one.
    """
    records, spec_file = tfrecord_paths(path)
    if not _is_spec(spec_file) and os.path.exists(records + ".yml"):
        spec_file = records + ".yml"  # earlier versions of pinn (X.yml absent, or another kind of file)
    if not os.path.exists(records) or not os.path.exists(spec_file):
        raise DataError(f"{path}: TFRecord file {records} or its spec {spec_file} is missing")
    with open(spec_file) as f:
        meta = yaml.safe_load(f)
    if isinstance(meta, dict) and isinstance(meta.get("format"), dict):
        meta = meta["format"]  # upstream PiNN's layout, which pinn writes too
    elif isinstance(meta, dict) and isinstance(meta.get("keys"), dict):
        meta = meta["keys"]  # earlier versions of pinn
    else:
        raise DataError(f"{spec_file}: not a TFRecord spec (no 'format' mapping of keys to dtype and shape)")
    features = {key: tf.io.FixedLenFeature([], tf.string) for key in meta}

    def parse(record):
        raw = tf.io.parse_single_example(record, features)
        out = {}
        for key, m in meta.items():
            value = tf.io.parse_tensor(raw[key], tf.as_dtype(m["dtype"]))
            out[key] = tf.ensure_shape(value, m["shape"])
        return out
    return tf.data.TFRecordDataset(records).map(parse, num_parallel_calls=num_parallel_calls, deterministic=True)
