"""Package namespaces whose names are imported on first use.

A package ``__init__`` that re-exports names of its modules with
:func:`lazy_exports` stays light to import (``import pinn.io.readers.trr`` does not
import TensorFlow through ``pinn.io``), and its lower modules are never imported by
its own namespace before they are needed.
"""
import importlib


def lazy_exports(package, exports):
    """``(__getattr__, __dir__)`` for a package namespace that imports ``exports`` on first use.

    Args:
        package: the package's ``__name__``.
        exports: dict name → module that defines it (``{'load_ase': 'pinn.io.ase_data'}``).

    Returns:
        the two module-level functions to assign in the package (PEP 562).
    """
    def __getattr__(name):
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(exports[name]), name)
        setattr(importlib.import_module(package), name, value)
        return value

    def __dir__():
        return sorted(set(vars(importlib.import_module(package))) | set(exports))

    return __getattr__, __dir__
