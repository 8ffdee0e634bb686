"""Report of a training run: learning curves, parity plots and a text summary (``pinn report``).

:func:`write_report` reads what a run leaves in its model directory
(:mod:`pinn.training.metrics`: ``metrics.jsonl`` and ``eval_predictions.npz``) and writes

- ``learning_curves.png``: the loss, each quantity's errors (RMSE solid, MAE
  dashed) and the learning rate against the step; training records in
  :data:`TRAIN_COLOR`, evaluation records in :data:`EVAL_COLOR` with markers,
  the best evaluation as a dotted :data:`BEST_COLOR` line;
- ``parity.png`` (when ``eval_predictions.npz`` exists): predicted against
  reference values of the latest evaluation, with their MAE and RMSE;
- ``summary.txt``: steps, record counts, final and best metrics with units,
  the last learning rate and the throughput.

Figures are :class:`matplotlib.figure.Figure` objects on the Agg canvas: no
pyplot, no global state, no display needed.
"""
import math
import os

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from pinn.training.metrics import (METRICS_FILE, NAMES, PREDICTIONS_FILE, UNITS, metrics_path, read_eval_predictions,
                          read_metrics)

TRAIN_COLOR = "#1f77b4"
EVAL_COLOR = "#d62728"
BEST_COLOR = "#2ca02c"
PARITY_COLOR = "#ff7f0e"
DPI = 100
#: panels per row; with the panel sizes (inches) below, figures are at most 1320 px wide
COLUMNS = 3
CURVE_PANEL = (4.4, 3.2)
PARITY_PANEL = (4.2, 4.0)
#: title and y label of the learning-curve panels that are not errors
CURVE_LABELS = {"loss": "loss", "lr": "learning rate"}


def load_curves(model_dir):
    """Training and evaluation records of ``model_dir/metrics.jsonl``, one per step.

    Args:
        model_dir: model directory.

    Returns:
        ``(train, evals)``: lists of records (dicts, see :mod:`pinn.training.metrics`)
        sorted by step; of a step logged more than once (a resumed run), the
        record written last.

    Raises:
        ValueError: ``model_dir`` has no metrics file, or it holds no records.
    """
    if not os.path.exists(metrics_path(model_dir)):
        raise ValueError(f"no {METRICS_FILE} in {model_dir}: the model has not been trained, "
                         "or was trained by a version of pinn that did not log metrics")
    records = read_metrics(model_dir)
    if not records:
        raise ValueError(f"{metrics_path(model_dir)} holds no records")
    return (by_step(r for r in records if r.get("kind") == "train"),
            by_step(r for r in records if r.get("kind") == "eval"))


def by_step(records):
    """``records`` sorted by step, keeping of each step the record that comes last."""
    latest = {}
    for record in records:
        latest[record["step"]] = record
    return [latest[step] for step in sorted(latest)]


def series(records, key):
    """``(steps, values)``: float arrays of the records that hold a finite number under ``key``."""
    pairs = [(r["step"], r[key]) for r in records
             if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]
    if not pairs:
        return np.empty(0), np.empty(0)
    steps, values = zip(*pairs)
    return np.array(steps, dtype=float), np.array(values, dtype=float)


def flagged_best(evals):
    """The last evaluation record with ``"best": true``, or ``None``."""
    flagged = [r for r in evals if r.get("best")]
    return flagged[-1] if flagged else None


def curve_panels(records):
    """Panels of the learning curves, in order: ``'loss'``, each quantity of :data:`pinn.training.metrics.UNITS`
    with logged errors (``'E'``, ``'F'``, ...), then ``'lr'`` when a record has a learning rate."""
    logged = set().union(*(r.keys() for r in records))
    panels = ["loss"] + [q for q in UNITS if {f"{q}_MAE", f"{q}_RMSE"} & logged]
    return panels + ["lr"] if "lr" in logged else panels


def panel_grid(n, panel_size):
    """A Figure (Agg canvas, :data:`DPI`) with ``n`` ≥ 1 axes in rows of :data:`COLUMNS`, each
    ``panel_size`` (inches); returns ``(figure, axes)``."""
    columns = min(n, COLUMNS)
    rows = -(-n // columns)
    fig = Figure(figsize=(panel_size[0] * columns, panel_size[1] * rows), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig, [fig.add_subplot(rows, columns, i + 1) for i in range(n)]


def draw_curves(ax, panel, train, evals):
    """Draw one learning-curve panel (a key of :func:`curve_panels`) on ``ax``: training records as lines,
    evaluation records as lines with markers; log-scale y when all values are positive."""
    if panel in UNITS:
        keys = [(f"{panel}_RMSE", "-"), (f"{panel}_MAE", "--")]
        ax.set_title(f"{NAMES[panel]} error")
        ax.set_ylabel(f"{NAMES[panel]} error ({UNITS[panel]})")
    else:
        keys = [(panel, "-")]
        ax.set_title(CURVE_LABELS[panel])
        ax.set_ylabel(CURVE_LABELS[panel])
    drawn = []
    for records, color, marker in ((train, TRAIN_COLOR, None), (evals, EVAL_COLOR, "o")):
        for key, style in keys:
            steps, values = series(records, key)
            if len(values):
                ax.plot(steps, values, color=color, ls=style, marker=marker, ms=3, lw=1.5)
                drawn.append(values)
    if drawn and np.concatenate(drawn).min() > 0:
        ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)


def curve_legend(train, evals, best):
    """Legend entries of the learning curves (series present, line styles, best evaluation)."""
    handles = [Line2D([], [], color=TRAIN_COLOR, label="train")] if train else []
    handles += [Line2D([], [], color=EVAL_COLOR, marker="o", ms=3, label="eval")] if evals else []
    handles += [Line2D([], [], color="0.3", label="RMSE"), Line2D([], [], color="0.3", ls="--", label="MAE")]
    if best is not None:
        handles.append(Line2D([], [], color=BEST_COLOR, ls=":", label=f"best eval (step {best['step']})"))
    return handles


def learning_curves_figure(train, evals):
    """Learning curves against the step.

    Args:
        train: training records sorted by step (:func:`load_curves`).
        evals: evaluation records sorted by step.

    Returns:
        Figure with one panel per entry of :func:`curve_panels`: the loss, each
        quantity's RMSE (solid) and MAE (dashed) in its unit of
        :data:`pinn.training.metrics.UNITS`, the learning rate; the step of the best
        evaluation (``"best": true``) marked in every panel.
    """
    best = flagged_best(evals)
    panels = curve_panels(train + evals)
    fig, axes = panel_grid(len(panels), CURVE_PANEL)
    for ax, panel in zip(axes, panels):
        draw_curves(ax, panel, train, evals)
        if best is not None:
            ax.axvline(best["step"], color=BEST_COLOR, ls=":", lw=1.5)
    fig.legend(handles=curve_legend(train, evals, best), loc="outside upper center", ncols=5, frameon=False)
    return fig


def parity_sets(predictions):
    """Reference and predicted values of each quantity of an evaluation, for parity panels.

    Args:
        predictions: the arrays of ``eval_predictions.npz`` (:func:`pinn.training.metrics.read_eval_predictions`).

    Returns:
        list of ``(label, unit, reference, prediction)``, flat float arrays, for
        the quantities with both arrays: energy per atom (meV/atom) when
        ``n_atoms`` is present, else per structure (eV); force components
        (eV/Å); dipole components (e·Å); atomic charges (e).
    """
    sets = []
    for q, name in NAMES.items():
        if f"{name}_ref" not in predictions or f"{name}_pred" not in predictions:
            continue
        ref = np.asarray(predictions[f"{name}_ref"], dtype=float)
        pred = np.asarray(predictions[f"{name}_pred"], dtype=float)
        label = f"{name} components" if ref.ndim > 1 else name
        unit = UNITS[q]
        if q == "E" and "n_atoms" in predictions:
            scale = 1e3 / np.asarray(predictions["n_atoms"], dtype=float)
            ref, pred, label, unit = ref * scale, pred * scale, "energy per atom", f"m{UNITS['E']}/atom"
        sets.append((label, unit, ref.ravel(), pred.ravel()))
    return sets


def draw_parity(ax, label, unit, ref, pred):
    """Draw one parity panel on ``ax``: ``pred`` against ``ref`` (same square limits, equal aspect), the
    y = x line, and the MAE, RMSE (in ``unit``) and count in the upper left corner."""
    lo, hi = min(ref.min(), pred.min()), max(ref.max(), pred.max())
    pad = 0.05 * (hi - lo) or 0.05 * abs(hi) or 1.0
    limits = (lo - pad, hi + pad)
    ax.plot(limits, limits, color="k", lw=1, ls="--", zorder=1)
    ax.scatter(ref, pred, s=6, color=PARITY_COLOR, edgecolors="none", zorder=2, rasterized=True)
    ax.set_xlim(limits)
    ax.set_ylim(limits)
    ax.set_aspect("equal", adjustable="box")
    ax.set_title(label)
    ax.set_xlabel(f"reference {label} ({unit})")
    ax.set_ylabel(f"predicted {label} ({unit})")
    error = pred - ref
    ax.text(0.04, 0.96, f"MAE {np.abs(error).mean():.3g} {unit}\nRMSE {np.sqrt(np.mean(error ** 2)):.3g} {unit}"
            f"\nn = {len(ref)}", transform=ax.transAxes, ha="left", va="top",
            bbox={"facecolor": "white", "edgecolor": "0.8"})


def parity_figure(sets):
    """Parity plots.

    Args:
        sets: non-empty list of ``(label, unit, reference, prediction)`` (:func:`parity_sets`).

    Returns:
        Figure with one panel per set, predicted against reference values in
        :data:`PARITY_COLOR`.
    """
    fig, axes = panel_grid(len(sets), PARITY_PANEL)
    for ax, (label, unit, ref, pred) in zip(axes, sets):
        draw_parity(ax, label, unit, ref, pred)
    return fig


def save(fig, path):
    """Write ``fig`` as a PNG at :data:`DPI` to ``path``; returns ``path``."""
    fig.savefig(path, dpi=DPI)
    return path


def metric_label(key):
    """``(label, unit)`` of a metric key: ``'E_RMSE'`` → ``('energy RMSE', 'eV')``; ``'loss'`` → ``('loss', '-')``
    (the loss is a weighted sum without a unit)."""
    if key == "loss":
        return "loss", "-"
    q, kind = key.split("_")
    return f"{NAMES[q]} {kind}", UNITS[q]


def value(record, key):
    """``record[key]`` formatted to 4 significant digits, ``'-'`` when absent."""
    number = record.get(key)
    return "-" if number is None else f"{number:.4g}"


def metrics_table(train, evals):
    """Lines of a table of the metrics: label, unit, then the last training record, the last evaluation
    record and the best evaluation record (flagged ``best``, else the one of lowest loss), as present."""
    columns = [(f"train (step {train[-1]['step']})", train[-1])] if train else []
    if evals:
        best = flagged_best(evals)
        best_name = "best eval" if best is not None else "lowest-loss eval"
        best = best or min(evals, key=lambda r: r.get("loss", math.inf))
        columns += [(f"eval (step {evals[-1]['step']})", evals[-1]), (f"{best_name} (step {best['step']})", best)]
    keys = ["loss"] + [f"{q}_{kind}" for q in UNITS for kind in ("MAE", "RMSE")]
    rows = [["metric", "unit"] + [name for name, _ in columns]]
    rows += [[*metric_label(key)] + [value(record, key) for _, record in columns]
             for key in keys if any(key in record for _, record in columns)]
    widths = [max(len(cell) for cell in column) for column in zip(*rows)]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]


def summary_text(model_dir, train, evals, parity_note, files):
    """The text of ``summary.txt``.

    Args:
        model_dir: model directory.
        train: training records sorted by step (:func:`load_curves`).
        evals: evaluation records sorted by step.
        parity_note: one line on the parity plot (:func:`parity_note`).
        files: paths of the files the report writes.

    Returns:
        str: steps trained, record counts, the last learning rate, throughput
        (structures/s), the metrics table (:func:`metrics_table`), the parity
        note and the files written.
    """
    last = max(train + evals, key=lambda r: r["step"])
    epoch = f" (epoch {last['epoch']:.4g})" if last.get("epoch") is not None else ""
    lines = [f"pinn training report: {model_dir}",
             f"steps trained: {last['step']}{epoch}",
             f"records: {len(train)} train, {len(evals)} eval (one per step)"]
    _, lrs = series(train, "lr")
    lines.append(f"last learning rate: {lrs[-1]:.4g}" if len(lrs) else "last learning rate: not logged")
    _, speed = series(train, "structures_per_s")
    lines.append(f"throughput: {speed[-1]:.4g} structures/s (last train record), {speed.mean():.4g} structures/s "
                 "(mean)" if len(speed) else "throughput: not logged")
    if not evals:
        lines.append("no eval records: train with an eval input and eval_every_n_steps to get them")
    lines += ["", *metrics_table(train, evals), "", parity_note, "files written:"]
    lines += [f"  {path}" for path in files]
    return "\n".join(lines) + "\n"


def parity_note(model_dir, predictions, parity_path):
    """One line saying what the parity plot shows, or why there is none."""
    if predictions is None:
        return (f"parity plot not written: no {PREDICTIONS_FILE} in {model_dir}; train with an eval input and "
                "eval_every_n_steps to get one")
    if parity_path is None:
        return f"parity plot not written: {PREDICTIONS_FILE} holds no reference/prediction pairs"
    step = f" at step {int(predictions['step'])}" if "step" in predictions else ""
    return f"parity plot: predictions of the evaluation{step}"


def write_report(model_dir, out_dir=None):
    """Write the learning curves, parity plot and summary of a training run.

    Args:
        model_dir: model directory with ``metrics.jsonl`` (and optionally
            ``eval_predictions.npz``), see :mod:`pinn.training.metrics`.
        out_dir: directory for the report (created), ``model_dir/report`` by default.

    Returns:
        dict: ``"learning_curves"``, ``"parity"`` (``None`` when there are no
        evaluation predictions), ``"summary"``: paths of ``learning_curves.png``,
        ``parity.png`` and ``summary.txt``; ``"text"``: the summary.

    Raises:
        ValueError: ``model_dir`` has no (or an empty) ``metrics.jsonl``.
    """
    train, evals = load_curves(model_dir)
    out_dir = os.path.join(os.fspath(model_dir), "report") if out_dir is None else os.fspath(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    curves = save(learning_curves_figure(train, evals), os.path.join(out_dir, "learning_curves.png"))
    predictions = read_eval_predictions(model_dir)
    sets = parity_sets(predictions) if predictions is not None else []
    parity = save(parity_figure(sets), os.path.join(out_dir, "parity.png")) if sets else None
    summary = os.path.join(out_dir, "summary.txt")
    files = [path for path in (curves, parity, summary) if path is not None]
    text = summary_text(model_dir, train, evals, parity_note(model_dir, predictions, parity), files)
    with open(summary, "w") as f:
        f.write(text)
    return {"learning_curves": curves, "parity": parity, "summary": summary, "text": text}
