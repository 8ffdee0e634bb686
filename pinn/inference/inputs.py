"""A model's input for evaluation and prediction (and, padded and split, for training): checked, with
``cell``/``pbc`` and neighbor lists."""
import numpy as np
import tensorflow as tf

from pinn import keys as K
from pinn.io.batch import add_neighbors, split_batch, with_cell_and_pbc
from pinn.io.padding import pad_to_buckets


def prepared_input(input_fn, network, skip=0, pad=False, parts=1):
    """The dataset of ``input_fn`` checked, with ``cell``/``pbc`` (:func:`pinn.io.batch.with_cell_and_pbc`)
    and neighbor lists (at ``network.rc``), ``skip`` batches
    skipped, split into tuples of ``parts`` sparse batches when ``parts > 1``, padded to bucket sizes
    when ``pad`` (for the XLA-compiled training step) and prefetched, without tf.data's autotuning thread
    (:func:`without_autotune_thread`).

    Args:
        input_fn: function returning a ``tf.data.Dataset`` of sparse batches.
        network: the model's network (its cutoff ``rc`` in Å, its ``element_index``).
        skip, pad, parts: as above.

    Returns:
        the ``tf.data.Dataset``.

    Raises:
        TypeError, ValueError: ``input_fn`` gives no dataset, or no sparse batches.
    """
    dataset = input_fn()
    if not isinstance(dataset, tf.data.Dataset):
        raise TypeError(f"input_fn must return a tf.data.Dataset, got {type(dataset).__name__}")
    spec = dataset.element_spec
    if not isinstance(spec, dict) or K.IND_1 not in spec:
        raise ValueError("input_fn must return sparse batches: apply pinn.io.sparse_batch(batch_size)")
    if skip:
        dataset = dataset.skip(skip)
    if K.CELL not in spec or K.PBC not in spec:
        dataset = dataset.map(tf.autograph.experimental.do_not_convert(with_cell_and_pbc),
                              num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    if K.IND_2 not in spec:
        dataset = dataset.apply(add_neighbors(network.rc))
    if pad:
        # XLA drops assertions: unknown elements are refused here, in the pipeline, before padding
        index = network.element_index

        @tf.autograph.experimental.do_not_convert
        def known_elements(batch):
            with tf.control_dependencies([index(batch[K.ELEMS])]):
                return {**batch, K.ELEMS: tf.identity(batch[K.ELEMS])}
        dataset = dataset.map(known_elements)
    if parts > 1:
        dataset = dataset.map(tf.autograph.experimental.do_not_convert(lambda batch: split_batch(batch, parts)),
                              num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    if pad:
        dataset = dataset.apply(pad_to_buckets(network.rc, network.element_index.atom_types[0]))
    return without_autotune_thread(dataset.prefetch(tf.data.AUTOTUNE))


def without_autotune_thread(dataset):
    """``dataset`` with tf.data's autotuning model off.

    Its thread sleeps between rounds of tuning, for periods that double up to 10 s, and the deletion of an
    iterator waits for it to wake (TensorFlow 2.15: the deletion does not wake it): the end of a training run,
    and of any pass over an input that lived some seconds, waited up to 10 s for nothing, in about one run of
    three (0.30.0-dev-end-delay.jsonl: 7 of 19 runs waited 9.2-11.5 s in the ``del``; 0 of 10 without the model).
    Without it, ``AUTOTUNE`` parallelism is the number of cores and prefetch buffers still grow as needed.
    """
    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.with_options(options)


def evaluation_input(dataset, steps=None):
    """``dataset`` for an evaluation: its first ``steps`` batches (upstream PiNN's ``steps``), or all of it.

    Raises:
        ValueError: ``steps`` is not a positive integer, or it is None and the dataset never ends
            (``repeat()``; it would be evaluated forever).
    """
    if steps is not None:
        if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
            raise ValueError(f"evaluate: steps must be a positive number of batches or None, got {steps!r}")
        return dataset.take(int(steps))
    if dataset.cardinality() == tf.data.INFINITE_CARDINALITY:
        raise ValueError("evaluate: the input never ends (it is repeat()-ed): pass steps= (batches to evaluate) "
                         "or an input without repeat()")
    return dataset
