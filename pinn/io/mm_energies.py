"""The MM force field's potential energy of every step of a GROMACS run (in a MiMiC run: the MM part, whose
difference from CPMD's total EKS is the QM region's energy in the MM charges' field; docs/mimic.md).

Two sources: GROMACS's energy file (``.edr``, read with the ``pyedr`` package from PyPI) or the ``.xvg`` that
``gmx energy`` writes from it (``echo Potential | gmx energy -f ener.edr -o mm.xvg``).
"""
import os

import numpy as np

from pinn import units
from pinn.io.errors import DataError
from pinn.io.readers.xvg import read_xvg

#: the GROMACS energy term taken: the whole potential energy of the force field
POTENTIAL = "Potential"


def read_mm_energies(path):
    """The potential energy of every frame GROMACS recorded.

    Args:
        path: an ``.edr`` (needs ``pyedr``) or an ``.xvg`` with a ``Potential`` series in kJ/mol.

    Returns:
        ``(times, energies)``: [n] float each; ``times`` as GROMACS records them (ps; in a MiMiC run the step
        number), ``energies`` in eV.

    Raises:
        DataError: naming the file: an extension other than ``.edr``/``.xvg``, no ``Potential`` term, an
            ``.xvg`` whose y axis is not in kJ/mol, ``pyedr`` not installed for an ``.edr``, non-finite values.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise DataError(f"{path}: no such file")
    if path.endswith(".xvg"):
        times, series, y_label = read_xvg(path)
        if POTENTIAL not in series:
            raise DataError(f"{path}: no {POTENTIAL!r} series (it has {sorted(series)}); write it with "
                            f"`echo {POTENTIAL} | gmx energy -f ener.edr -o {os.path.basename(path)}`")
        if "kJ/mol" not in y_label:
            raise DataError(f"{path}: its y axis is {y_label!r}, not kJ/mol (gmx energy's unit)")
        energies = series[POTENTIAL]
    elif path.endswith(".edr"):
        try:
            import pyedr
        except ImportError:
            raise DataError(f"{path}: reading GROMACS .edr files needs the pyedr package (pip install pyedr), "
                            "or give the .xvg of `gmx energy` instead") from None
        try:
            terms = pyedr.edr_to_dict(path)
        except Exception as err:
            raise DataError(f"{path}: pyedr could not read it: {type(err).__name__}: {err}") from err
        if POTENTIAL not in terms:
            raise DataError(f"{path}: no {POTENTIAL!r} term (it has {sorted(terms)})")
        times = np.asarray(terms["Time"], dtype=float)
        energies = np.asarray(terms[POTENTIAL], dtype=float)
    else:
        raise DataError(f"{path}: MM energies come from a GROMACS .edr or the .xvg of gmx energy")
    bad = np.flatnonzero(~np.isfinite(energies))
    if bad.size:
        raise DataError(f"{path}: non-finite {POTENTIAL} at time {times[bad[0]]}")
    return times, energies * units.KJ_PER_MOL
