"""A reader for the ``.xvg`` files GROMACS's tools write (``gmx energy -o``): one column of times and one per
series, after comment lines (``#``) and Grace directives (``@``), which name the series
(``@ s0 legend "Potential"``) and the axes' units (``@    yaxis  label "(kJ/mol)"``).  Values are returned as
written (GROMACS's units: time in ps, energies in kJ/mol); this reader does not convert them.
"""
import os
import re

import numpy as np

from pinn.io.errors import DataError

_LEGEND = re.compile(r'^@\s*s(\d+)\s+legend\s+"(.*)"\s*$')
_YLABEL = re.compile(r'^@\s*yaxis\s+label\s+"(.*)"\s*$')


def read_xvg(path):
    """Read an ``.xvg`` file.

    Args:
        path: the file.

    Returns:
        ``(times, series, y_label)``: ``times`` [n] float (the first column, ps for ``gmx energy``),
        ``series`` {legend: [n] float} in the file's order (unnamed series as ``'s<k>'``), ``y_label`` the
        y axis's label (e.g. ``'(kJ/mol)'``; ``''`` when absent).

    Raises:
        DataError: naming the file: missing or empty, a data line that is not numbers, lines of different
            lengths, more legends than columns.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise DataError(f"{path}: no such file")
    legends = {}
    y_label = ""
    rows = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            if text.startswith("@"):
                legend = _LEGEND.match(text)
                if legend:
                    legends[int(legend.group(1))] = legend.group(2)
                label = _YLABEL.match(text)
                if label:
                    y_label = label.group(1)
                continue
            try:
                values = [float(v) for v in text.split()]
            except ValueError:
                raise DataError(f"{path}, line {number}: not a line of numbers: {text[:80]!r}") from None
            if rows and len(values) != len(rows[0]):
                raise DataError(f"{path}, line {number}: {len(values)} columns, the lines before have "
                                f"{len(rows[0])}")
            rows.append(values)
    if not rows:
        raise DataError(f"{path}: no data lines")
    data = np.array(rows)
    n_series = data.shape[1] - 1
    if legends and max(legends) >= n_series:
        raise DataError(f"{path}: legend of series s{max(legends)}, but only {n_series} data column(s) after "
                        "the times")
    series = {legends.get(k, f"s{k}"): data[:, k + 1] for k in range(n_series)}
    return data[:, 0], series, y_label


def write_xvg(path, times, series, y_label="(kJ/mol)", x_label="Time (ps)"):
    """Write an ``.xvg`` file as ``gmx energy`` does (the inverse of :func:`read_xvg`).

    Args:
        path: file to write (replaced).
        times: [n] the first column.
        series: {legend: [n] values}, in column order.
        y_label, x_label: the axes' labels.

    Returns:
        ``path``.
    """
    columns = [np.asarray(times, dtype=np.float64)] + [np.asarray(v, dtype=np.float64) for v in series.values()]
    with open(path, "w") as f:
        f.write(f'@    title "GROMACS Energies"\n@    xaxis  label "{x_label}"\n@    yaxis  label "{y_label}"\n'
                "@TYPE xy\n")
        for k, legend in enumerate(series):
            f.write(f'@ s{k} legend "{legend}"\n')
        for row in np.column_stack(columns):
            f.write("".join(f"  {value:.12f}" for value in row) + "\n")
    return path
