"""Argument types of the ``pinn`` command's options."""
import argparse


def whole_number(minimum):
    """An argparse type: an integer of at least ``minimum``, else a usage error naming the text."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum:
            kind = "positive" if minimum == 1 else "non-negative" if minimum == 0 else f">= {minimum}"
            raise argparse.ArgumentTypeError(f"expected a {kind} integer, got {text!r}")
        return value
    return parse


#: a positive integer (steps, sizes)
positive_int = whole_number(1)
#: a non-negative integer (buffers)
non_negative_int = whole_number(0)
