"""The error type of every reader and loader (kept free of TensorFlow so readers import fast)."""
import re


class DataError(ValueError):
    """Bad input data; the message names the source (file), the frame and the problem."""


def op_error_line(err):
    """One line of a TensorFlow op error (``tf.errors.OpError``; read as text, without importing
    TensorFlow): the Python exception a ``tf.data`` function raised, as ``'DataError: x.xyz, frame 3:
    ...'`` (the traceback TensorFlow appends left out), else the first line of the message without
    TensorFlow's ``{{function_node ...}}`` and ``Error in user-defined function passed to ...`` (2.16+)
    prefixes and ``[Op:...]`` suffix.

    Args:
        err: the exception.

    Returns:
        str.
    """
    text = getattr(err, "message", None) or str(err)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    first = re.sub(r"^(\{\{[^}]*\}\}\s*)+", "", lines[0]) if lines else type(err).__name__
    # TensorFlow 2.16+: "Error in user-defined function passed to ParallelMapDatasetV2:13 transformation with
    # iterator: Iterator::Root::ParallelMapV2: ValueError: ..."
    first = re.sub(r"^Error in user-defined function passed to \S+ transformation with iterator: \S+: ", "", first)
    return re.sub(r"\s*\[Op:[^\]]*\].*$", "", first).rstrip(" '") or type(err).__name__
