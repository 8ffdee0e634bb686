"""The training and evaluation input: checked, with neighbor lists, split and padded as the step needs;
and the length of an epoch."""
import logging

import numpy as np
import tensorflow as tf

from pinn import keys as K
from pinn.io.batch import add_neighbors, split_batch, with_cell_and_pbc
from pinn.io.padding import pad_to_buckets

log = logging.getLogger("pinn")


def prepared_input(input_fn, network, skip=0, pad=False, parts=1):
    """The dataset of ``input_fn`` checked, with ``cell``/``pbc`` (:func:`pinn.io.batch.with_cell_and_pbc`)
    and neighbor lists (at ``network.rc``), ``skip`` batches
    skipped, split into tuples of ``parts`` sparse batches when ``parts > 1``, padded to bucket sizes
    when ``pad`` (for the XLA-compiled training step) and prefetched.

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
    return dataset.prefetch(tf.data.AUTOTUNE)


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


def steps_per_epoch_of(input_fn, k, world):
    """Steps in one pass over every rank's input (the shortest rank's, in whole steps of ``k`` batches).

    Raises:
        ValueError: the input repeats forever, or an epoch is shorter than one step.
    """
    dataset = input_fn()
    cardinality = int(dataset.cardinality())
    if cardinality == tf.data.INFINITE_CARDINALITY:
        raise ValueError("max_epochs: input_fn repeats forever; remove .repeat() so that one pass of it is "
                         "an epoch (train repeats it), or give max_steps instead")
    if cardinality < 0:
        log.info("counting the batches of one epoch")
        cardinality = int(dataset.reduce(np.int64(0), lambda n, _: n + 1))
    per_rank = world.allgather_numpy(np.array([cardinality]))[:, 0]
    steps = int(per_rank.min()) // k
    if steps == 0:
        raise ValueError(f"max_epochs: an epoch has {int(per_rank.min())} batches on the shortest rank, fewer "
                         f"than accumulate_batches = {k}")
    if per_rank.max() != per_rank.min():
        log.info("ranks hold %d to %d batches per epoch: an epoch is %d steps (the shortest rank's)",
                 per_rank.min(), per_rank.max(), steps)
    return steps
