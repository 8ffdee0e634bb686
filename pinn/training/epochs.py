"""The length of an epoch of the training input (the input itself is prepared by
:func:`pinn.inference.inputs.prepared_input`)."""
import logging

import numpy as np
import tensorflow as tf

log = logging.getLogger("pinn")


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
