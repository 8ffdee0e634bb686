"""A reader for GROMACS index (``.ndx``) files."""
import logging
import os

import numpy as np

from pinn.io.errors import DataError

log = logging.getLogger(__name__)


def read_ndx(path):
    """Read the groups of a GROMACS ``.ndx`` file.

    Args:
        path: the index file (``[ name ]`` headers followed by 1-based atom
            numbers, any number per line).

    Returns:
        dict group name -> int64 array of **0-based** atom indices, in file
        order.  A group name that appears twice keeps its first definition
        (GROMACS tools pick the first too), and a log line says so.

    Raises:
        DataError: missing file, numbers before the first group, text that is
            not an atom number, atom numbers below 1.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise DataError(f"{path}: no such file")
    groups = {}
    name = None
    numbers = []

    def close_group():
        if name is None:
            return
        if name in groups:
            log.info("%s: group [ %s ] appears again; the first definition is used", path, name)
        else:
            groups[name] = np.asarray(numbers, dtype=np.int64) - 1

    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            text = line.split(";")[0].strip()
            if not text:
                continue
            if text.startswith("["):
                close_group()
                if not text.endswith("]"):
                    raise DataError(f"{path}: line {lineno}: malformed group header {text!r}")
                name = text[1:-1].strip()
                numbers = []
                continue
            if name is None:
                raise DataError(f"{path}: line {lineno}: atom numbers before the first [ group ] header")
            try:
                values = [int(v) for v in text.split()]
            except ValueError:
                raise DataError(f"{path}: line {lineno} of group [ {name} ]: {text!r} is not a list of "
                                "atom numbers") from None
            if min(values) < 1:
                raise DataError(f"{path}: line {lineno} of group [ {name} ]: atom numbers start at 1")
            numbers.extend(values)
    close_group()
    if not groups:
        raise DataError(f"{path}: no [ group ] in the file")
    return groups
