"""Helpers of the text-format readers: element symbols, numbers, and the file checks they share.

Every function raises :class:`pinn.io.errors.DataError` with ``where`` (the file and the
line or frame) at the start of its message.
"""
import os
import re

from ase.data import atomic_numbers

from pinn.io.errors import DataError

_LABELLED = re.compile(r"([A-Z][a-z]?)(?:[0-9_+-].*)?$")


def atomic_number(symbol, where):
    """The atomic number of an element symbol.

    Args:
        symbol: ``'O'``, ``'Cu'``; a kind label that starts with a symbol and continues with a
            digit, ``_``, ``+`` or ``-`` (``'Fe1'``, ``'O_w'``, as CP2K kinds are named) is
            that element.
        where: file and line, for the message.

    Raises:
        DataError: not an element symbol.
    """
    number = atomic_numbers.get(symbol)
    if number is None:
        match = _LABELLED.match(symbol)
        number = atomic_numbers.get(match.group(1)) if match else None
    if not number:  # 0 is ASE's dummy atom 'X'
        raise DataError(f"{where}: {symbol!r} is not an element symbol")
    return number


def to_float(text, where, what="a number"):
    """``float(text)``, also with the Mathematica exponent ``1.5*^-6`` of the QM9 files and
    Fortran's ``1.5D-06``.

    Raises:
        DataError: ``text`` is not a number (the message names ``what`` was expected).
    """
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return float(text.replace("*^", "e").replace("D", "e").replace("d", "e"))
    except ValueError:
        raise DataError(f"{where}: {text!r} is not {what}") from None


def to_floats(fields, where, what="numbers"):
    """``[to_float(f) for f in fields]`` with one message naming ``what`` was expected."""
    return [to_float(field, where, what) for field in fields]


def existing_file(path):
    """``os.fspath(path)``, checked to be a non-empty file.

    Raises:
        DataError: no such file, or the file is empty.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise DataError(f"{path}: no such file")
    if os.path.getsize(path) == 0:
        raise DataError(f"{path}: file is empty")
    return path
