"""A TFRecord cache of preprocessed structures.

``write_tfrecord('train.tfr', dataset)`` stores every element of a dataset of
(unbatched) structures; the keys, dtypes and shapes go to ``train.tfr.yml``
beside it, so ``load_tfrecord('train.tfr')`` restores the same dataset without
re-reading or re-processing the original files.
"""
import logging
import os

import tensorflow as tf
import yaml

from pinn.io.base import DataError

log = logging.getLogger(__name__)


def _spec_path(path):
    return os.fspath(path) + ".yml"


def write_tfrecord(path, dataset, log_every=1000):
    """Write a dataset of structures to ``path`` (and its spec to ``path.yml``).

    Args:
        path: output file name.
        dataset: ``tf.data.Dataset`` of structure dicts.
        log_every: log progress every that many structures.

    Returns:
        The number of structures written.
    """
    spec = dataset.element_spec
    meta = {key: {"dtype": s.dtype.name, "shape": [d for d in s.shape.as_list()]}
            for key, s in spec.items()}
    count = 0
    tmp = os.fspath(path) + ".part"
    with tf.io.TFRecordWriter(tmp) as writer:
        for structure in dataset:
            feature = {key: tf.train.Feature(bytes_list=tf.train.BytesList(
                value=[tf.io.serialize_tensor(value).numpy()])) for key, value in structure.items()}
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
            count += 1
            if log_every and count % log_every == 0:
                log.info("%s: %d structures written", path, count)
    os.replace(tmp, path)
    with open(_spec_path(path), "w") as f:
        yaml.safe_dump({"format": "pinn-tfrecord-1", "count": count, "keys": meta}, f)
    log.info("%s: %d structures written", path, count)
    return count


def load_tfrecord(path, num_parallel_calls=tf.data.AUTOTUNE):
    """Read a dataset written by :func:`write_tfrecord`.

    Returns:
        ``tf.data.Dataset`` of structure dicts with the stored dtypes and shapes.
    """
    spec_file = _spec_path(path)
    if not os.path.exists(path) or not os.path.exists(spec_file):
        raise DataError(f"{path}: TFRecord file or its spec {spec_file} is missing")
    with open(spec_file) as f:
        meta = yaml.safe_load(f)["keys"]
    features = {key: tf.io.FixedLenFeature([], tf.string) for key in meta}

    def parse(record):
        raw = tf.io.parse_single_example(record, features)
        out = {}
        for key, m in meta.items():
            value = tf.io.parse_tensor(raw[key], tf.as_dtype(m["dtype"]))
            out[key] = tf.ensure_shape(value, m["shape"])
        return out
    return tf.data.TFRecordDataset(os.fspath(path)).map(parse, num_parallel_calls=num_parallel_calls,
                                                        deterministic=True)
