"""The one line the ``pinn`` command prints for an error, naming the file, frame or key.

:func:`pinn.cli.commands.main` prints ``pinn COMMAND: error: LINE`` for any exception a command
raises (exit status 1) and the traceback only with ``--verbose``.  This module turns each kind of
exception into that line: pinn's own (:class:`~pinn.io.errors.DataError`,
:class:`~pinn.params.ParamsError`, :class:`~pinn.files.model_file.ModelFileError`, every other
``ValueError``) say the file, frame or key in their first line; the operating system's name the path
(a read-only or missing directory, a file where a directory belongs); YAML's name the file, line and
column; TensorFlow's (a damaged ``.tfr`` read by a user's own pipeline, an error raised inside a
``tf.data`` function) give the line of the error inside them.  Anything else is a bug or a case not
foreseen (or an input script's own error): its type and first line, and a pointer to ``--verbose``.
"""
import errno
import os
import re
import sys

from pinn.io.errors import op_error_line


def error_line(err):
    """The one line that describes ``err`` to a user of the ``pinn`` command.

    Args:
        err: the exception a command raised.

    Returns:
        str: one line (no newline).
    """
    if isinstance(err, OSError) and err.filename is not None:
        return _os_error_line(err)
    if _is_tensorflow_op_error(err):
        line = re.sub(r"^(DataError|ValueError): ", "", op_error_line(err))  # raised in a tf.data function
        return f"damaged data file: {line}" if type(err).__name__ == "DataLossError" else line
    if _is_yaml_error(err):
        return "not valid YAML: " + " ".join(line.strip() for line in str(err).splitlines() if line.strip())
    text = str(err).strip()
    first = text.splitlines()[0] if text else type(err).__name__
    if isinstance(err, (ValueError, OSError)):
        return first
    return f"{type(err).__name__}: {first} (unexpected: run with --verbose for the traceback)"


def _os_error_line(err):
    """``PATH: what is wrong`` of an ``OSError`` that names a path (and the second path of a rename)."""
    path = os.fsdecode(err.filename)
    if err.errno == errno.EEXIST and os.path.exists(path) and not os.path.isdir(path):
        what = "is a file, not a directory"
    elif err.errno == errno.ENOTDIR:
        what = "a part of this path is a file, not a directory"
    elif err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        what = f"{err.strerror.lower()} (a read-only directory or file?)"
    else:
        what = (err.strerror or type(err).__name__).lower()
    second = f" (renaming to {os.fsdecode(err.filename2)})" if err.filename2 is not None else ""
    return f"{path}: {what}{second}"


def _is_tensorflow_op_error(err):
    """Whether ``err`` is TensorFlow's ``tf.errors.OpError`` (without importing TensorFlow: a command
    that has not imported it cannot have raised one)."""
    tf = sys.modules.get("tensorflow")
    return tf is not None and isinstance(err, tf.errors.OpError)


def _is_yaml_error(err):
    yaml = sys.modules.get("yaml")
    return yaml is not None and isinstance(err, yaml.YAMLError)
