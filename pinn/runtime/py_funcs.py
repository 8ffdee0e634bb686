"""Python callbacks of TensorFlow held by what uses them, not by the process.

``tf.numpy_function``, ``tf.py_function`` and ``tf.data.Dataset.from_generator`` register a Python
callback and, to keep it alive, append it to a list on the outermost graph
(``_py_funcs_used_in_graph``).  In eager mode (TensorFlow 2) that graph is the process-wide
default graph, which lives as long as the process: every callback ever made stays, with all it
refers to.  For pinn that was the frames of every ``load_ase`` dataset (its generator's
closure) and, in a parallel run of the numba engine, the engine and its model (the gradient
op's closure) -- kept after the dataset or the model was gone, model after model.

:func:`held_by` moves the callbacks made inside a block from that list onto an object that
outlives their use (a dataset, which its iterators and the datasets built on it keep alive,
or a model during a synchronous ``train``), so they go when it goes.
"""
import contextlib

#: the attribute of an owner holding its callbacks
ATTRIBUTE = "_pinn_py_funcs"


def _process_list():
    """The list on the outermost graph that TensorFlow appends callbacks to (created if missing)."""
    from tensorflow.python.framework import ops
    graph = ops.get_default_graph()
    while getattr(graph, "outer_graph", None) is not None and graph.outer_graph is not graph:
        graph = graph.outer_graph
    if not hasattr(graph, "_py_funcs_used_in_graph"):
        graph._py_funcs_used_in_graph = []
    return graph._py_funcs_used_in_graph


@contextlib.contextmanager
def held_by(owner=None):
    """Within this block, callbacks TensorFlow registers go to ``owner`` instead of the process.

    Args:
        owner: the object that keeps them (an attribute ``_pinn_py_funcs``, a list, is added to); it
            must live as long as anything that may call them (a ``tf.data.Dataset`` does for its
            iterators and the datasets built on it).  ``None``: give the owner later, as
            ``block.owner = dataset`` inside the block (for a result made in it).

    Yields:
        The block (its ``owner`` attribute may be set).  On an exception the callbacks stay with the
        process, as TensorFlow leaves them (nothing that may still call them loses them).
    """
    block = _Block(owner)
    callbacks = _process_list()
    start = len(callbacks)
    yield block
    if block.owner is None:
        raise ValueError("held_by: no owner was given for the callbacks of the block")
    made = callbacks[start:]
    if not made:
        return
    del callbacks[start:]
    held = getattr(block.owner, ATTRIBUTE, None)
    if held is None:
        held = []
        setattr(block.owner, ATTRIBUTE, held)
    held.extend(made)


class _Block:
    """What :func:`held_by` yields: the owner of the block's callbacks."""

    def __init__(self, owner):
        self.owner = owner


def dataset_holding_callbacks(build):
    """``build()`` (a function returning a ``tf.data.Dataset``), with the callbacks made while building it
    held by that dataset (see :func:`held_by`)."""
    with held_by() as block:
        block.owner = build()
    return block.owner
