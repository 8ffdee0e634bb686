"""The table of model directories under a folder (``pinn report FOLDER``, upstream PiNN's ``-k``): each
directory's last step and latest validation RMSEs, and the mean ± spread of each group of members
(a committee's ``member-K``, upstream's ``<name>-<seed>``)."""
import os
import re

import numpy as np


def models_table(root, keyword=None):
    """A text table of the model directories under ``root`` (those with a ``params.yml``; ``root`` too):
    path, last step and the latest evaluation's RMSE of each quantity.

    Args:
        root: a folder.
        keyword: only the directories whose path (relative to ``root``) contains it.

    Raises:
        ValueError: no model directory matches.
    """
    from pinn.training.metrics import UNITS, read_metrics
    found = []
    for folder, subfolders, files in os.walk(root):
        subfolders.sort()
        if "params.yml" in files:
            name = os.path.relpath(folder, root)
            if keyword is None or keyword in name:
                found.append((name, folder))
    if not found:
        where = f" whose path contains {keyword!r}" if keyword is not None else ""
        raise ValueError(f"{root}: no model directory (with a params.yml){where}")
    rows = []
    quantities = []
    for name, folder in found:
        records = read_metrics(folder) if os.path.exists(os.path.join(folder, "metrics.jsonl")) else []
        evals = [r for r in records if r.get("kind") == "eval"]
        last = evals[-1] if evals else {}
        step = max((r.get("step", 0) for r in records), default=None)
        quantities += [q for q in UNITS if f"{q}_RMSE" in last and q not in quantities]
        rows.append((name, step, last))
    header = ["model", "step", *[f"{q}_RMSE ({UNITS[q]})" for q in quantities]]
    table = [header] + [[name, "" if step is None else str(step),
                         *[f"{last[f'{q}_RMSE']:.4g}" if f"{q}_RMSE" in last else "" for q in quantities]]
                        for name, step, last in rows]
    table += _group_rows(rows, quantities)
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in table)


#: a committee's member (``member-3``) or upstream's seeded runs (``pinet-2``): a group name and a number
MEMBER_NAME = re.compile(r"^(?P<group>.*-)(?P<number>\d+)$")


def _group_rows(rows, quantities):
    """Rows of ``mean ± std`` over the members of each group of two or more model directories named
    ``NAME-K`` (a committee's ``member-K``, upstream's ``<name>-<seed>``): ``NAME* (N)``."""
    groups = {}
    for name, _, last in rows:
        match = MEMBER_NAME.match(name)
        if match:
            groups.setdefault(match["group"], []).append(last)
    out = []
    for group, members in groups.items():
        if len(members) < 2:
            continue
        cells = []
        for q in quantities:
            values = [m[f"{q}_RMSE"] for m in members if f"{q}_RMSE" in m]
            cells.append(f"{np.mean(values):.4g} ± {np.std(values):.2g}" if values else "")
        out.append([f"{group}* ({len(members)})", "", *cells])
    return out
