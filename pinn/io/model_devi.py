"""DeePMD-kit's ``model_devi.out`` layout: a committee's model deviation, one line per frame or MD step.

A header line, then per frame ``step`` (%12d) and seven %19.6e columns, each name right-aligned in
DeePMD-kit's widths (``step`` 12 characters with the ``#``, the others 19)::

    # step max_devi_v min_devi_v avg_devi_v max_devi_f min_devi_f avg_devi_f devi_e

Forces in eV/Å; the virial's and the energy's per atom, eV (the virial columns are 0 for a structure without
a periodic cell); the figures of :func:`pinn.committee.deviations`.  Extra columns (e.g. an ML/MM run's
largest force deviation over the QM atoms and over the MM atoms the model sees) follow the seven, so that
scripts reading DeePMD-kit's columns by position read this file too.  ``pinn devi`` writes it for a
trajectory, an ML/MM run's :class:`~pinn.md.openmm_deviation.DeviationMonitor` step by step.
"""
import numpy as np

#: the columns after ``step``, DeePMD-kit's order
COLUMNS = ("max_devi_v", "min_devi_v", "avg_devi_v", "max_devi_f", "min_devi_f", "avg_devi_f", "devi_e")
#: :func:`pinn.committee.deviations` keys of :data:`COLUMNS`
KEYS = ("max_virial_deviation", "min_virial_deviation", "avg_virial_deviation", "max_forces_deviation",
        "min_forces_deviation", "avg_forces_deviation", "energy_deviation_per_atom")


def header(extra=()):
    """The header line (without its newline), with ``extra`` column names after DeePMD-kit's seven."""
    return "#" + f"{'step':>11}" + "".join(f"{c:>19}" for c in (*COLUMNS, *extra))


def line(step, values):
    """One frame's line (without its newline): ``step`` and the float ``values`` (the seven, then any extra)."""
    return f"{int(step):12d}" + "".join(f"{float(v):19.6e}" for v in values)


def row_of(step, deviation, extra=()):
    """``[step, the seven columns..., extra...]`` of a :func:`pinn.committee.deviations` dict (a key it lacks,
    e.g. the virial's without a cell: 0)."""
    return [step] + [deviation.get(key, 0.0) for key in KEYS] + list(extra)


def write_model_devi(path, rows, extra=()):
    """Write ``rows`` (each ``[step, values...]``) under the header, replacing ``path``."""
    with open(path, "w") as f:
        f.write(header(extra) + "\n")
        for row in rows:
            f.write(line(row[0], row[1:]) + "\n")


def read_model_devi(path):
    """The columns of a ``model_devi.out`` file.

    Returns:
        dict column name → NumPy array (``step`` as int64, the others float64), in the header's order.

    Raises:
        ValueError: no header line, or a line with another number of columns than the header (naming the file
            and the line).
    """
    with open(path) as f:
        first = f.readline()
        if not first.startswith("#"):
            raise ValueError(f"{path}: no header line (a model_devi.out file starts with '#  step ...')")
        names = first[1:].split()
        rows = []
        for number, text in enumerate(f, 2):
            if not text.strip() or text.startswith("#"):
                continue
            values = text.split()
            if len(values) != len(names):
                raise ValueError(f"{path}, line {number}: {len(values)} columns, the header names {len(names)}")
            rows.append([float(v) for v in values])
    table = np.array(rows, np.float64).reshape(len(rows), len(names))
    return {name: (table[:, k].astype(np.int64) if name == "step" else table[:, k]) for k, name in enumerate(names)}
