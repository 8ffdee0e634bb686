"""The report of a ``pinn learn`` directory: the committee's deviation over simulated time, the labels of each
round and the audit (the deviation against the committee's true error on the frames it chose), as one PNG and a
text summary.  ``pinn report LOOP_DIR`` writes them to ``LOOP_DIR/report``."""
import json
import os

import numpy as np


def loop_records(workdir):
    """Every round of a loop's directory: ``[{round, time_ps [n], max_devi_f_qm [n], exploration, labels,
    failed, audit, rejected}]`` (the times of the records in ps: step × the explorer's time step; ``rejected``:
    ``rejected.json`` of a round whose MD was not accepted, a blow-up its audit found, else ``None``)."""
    from pinn.io.model_devi import read_model_devi
    timestep_fs = loop_config(workdir)["explorer"]["timestep_fs"]
    rounds = []
    round_ = 1
    while os.path.isdir(os.path.join(workdir, f"round-{round_}")):
        folder = os.path.join(workdir, f"round-{round_}")
        record = {"round": round_}
        path = os.path.join(folder, "model_devi.out")
        table = read_model_devi(path) if os.path.exists(path) else {"step": np.zeros(0), "max_devi_f_qm": np.zeros(0)}
        record["time_ps"] = table["step"] * timestep_fs / 1000.0
        record["max_devi_f_qm"] = table["max_devi_f_qm"]
        record["exploration"] = read_json(os.path.join(folder, "exploration.json"))
        record["audit"] = read_json(os.path.join(folder, "audit.json"))
        record["rejected"] = read_json(os.path.join(folder, "rejected.json"))
        labels = os.path.join(folder, "labels.xyz")
        record["labels"] = _count_frames(labels)
        failed = os.path.join(folder, "failed.txt")
        record["failed"] = sum(1 for _ in open(failed)) if os.path.exists(failed) else 0
        rounds.append(record)
        round_ += 1
    return rounds


def loop_config(workdir):
    """The run file's sections as the loop read them (``config.json`` of its directory)."""
    return read_json(os.path.join(workdir, "config.json"))


def read_json(path):
    """A JSON file of a loop's directory, or ``None`` when it is not there."""
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def _count_frames(path):
    if not os.path.exists(path):
        return 0
    from pinn.io import ase_files
    return len(ase_files.read(path, index=":"))


def summary(workdir, rounds):
    """The text summary: a line per round and the totals."""
    lines = [f"pinn learn: {workdir}", "round  steps  time_ps  records  selected  labels  set_aside  stopped_at  "
             "max_devi_f_qm  audit_rmse_f_qm  accepted"]
    for r in rounds:
        e = r["exploration"] or {}
        audit = r["audit"]
        rmse = f"{np.mean(audit['rmse_f_qm']):.4g}" if audit and audit["rmse_f_qm"] else "-"
        devi = e.get("max_devi_f_qm")
        lines.append(f"{r['round']:5d}  {e.get('steps', 0):5d}  {e.get('time_ps', 0.0):7.4f}  {e.get('records', 0):7d}"
                     f"  {e.get('selected', 0):8d}  {r['labels']:6d}  {r['failed']:9d}  "
                     f"{str(e.get('stopped_at')):>10}  {('-' if devi is None else f'{devi:.4g}'):>13}  {rmse:>15}  "
                     f"{'no' if r.get('rejected') else 'yes':>8}")
    total = sum(r["labels"] for r in rounds)
    steps = sum((r["exploration"] or {}).get("steps", 0) for r in rounds)
    share = f"{100.0 * total / steps:.2f} % of the steps" if steps else "no steps"
    rejected = sum(1 for r in rounds if r.get("rejected"))
    not_accepted = f" ({rejected} not accepted: blow-ups their audit found)" if rejected else ""
    lines.append(f"{len(rounds)} rounds{not_accepted}, {steps} steps explored, {total} frames labelled ({share})")
    return "\n".join(lines)


def learning_figure(rounds, select=None):
    """The figure: deviation over time (each round in its colour; the band when ``select`` is given), labels per
    round, audit (the deviation against the true error; y = x)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(13, 4), layout="constrained")
    FigureCanvasAgg(fig)
    ax_time, ax_labels, ax_audit = fig.subplots(1, 3)
    for r in rounds:
        if len(r["time_ps"]):
            ax_time.plot(r["time_ps"], r["max_devi_f_qm"], ".-", ms=3, lw=0.8, label=f"round {r['round']}")
    if select:
        for key in ("low", "high"):
            ax_time.axhline(select[key], color="grey", lw=0.8, ls="--")
    ax_time.set_yscale("log")
    ax_time.set_xlabel("simulated time (ps)")
    ax_time.set_ylabel("max force deviation on QM atoms (eV/Å)")
    ax_time.set_title("committee deviation")
    ax_labels.bar([r["round"] for r in rounds], [r["labels"] for r in rounds], color="C0", label="labelled")
    ax_labels.bar([r["round"] for r in rounds], [r["failed"] for r in rounds], bottom=[r["labels"] for r in rounds],
                  color="C3", label="set aside")
    ax_labels.set_xticks([r["round"] for r in rounds])
    ax_labels.set_xlabel("round")
    ax_labels.set_ylabel("frames")
    ax_labels.set_title("labels per round")
    ax_labels.legend(fontsize=8)
    deviations = [d for r in rounds if r["audit"] for d in r["audit"]["max_devi_f_qm"]]
    errors = [e for r in rounds if r["audit"] for e in r["audit"]["max_error_f_qm"]]
    if deviations:
        ax_audit.plot(deviations, errors, "o", ms=4)
        high = 1.05 * max(deviations + errors)
        ax_audit.plot([0, high], [0, high], color="grey", lw=0.8)
        ax_audit.set_xlim(0, high)
        ax_audit.set_ylim(0, high)
    ax_audit.set_xlabel("max force deviation on QM atoms (eV/Å)")
    ax_audit.set_ylabel("max force error on QM atoms (eV/Å)")
    ax_audit.set_title("audit: deviation against error")
    if len(rounds) > 1 and any(len(r["time_ps"]) for r in rounds):
        ax_time.legend(fontsize=7)
    return fig


def write_learning_report(workdir, out_dir=None):
    """Write ``learning.png`` and ``summary.txt`` of a loop's directory to ``out_dir`` (default
    ``workdir/report``); the band of the run file's ``select`` is drawn.

    Returns:
        dict with ``text`` (the summary) and ``files``.

    Raises:
        FileNotFoundError: ``workdir`` holds no loop (no ``state.json``).
    """
    if not os.path.exists(os.path.join(workdir, "state.json")):
        raise FileNotFoundError(f"{workdir}: no pinn learn directory (no state.json)")
    out_dir = out_dir or os.path.join(workdir, "report")
    os.makedirs(out_dir, exist_ok=True)
    rounds = loop_records(workdir)
    text = summary(workdir, rounds)
    figure = os.path.join(out_dir, "learning.png")
    learning_figure(rounds, loop_config(workdir)["select"]).savefig(figure, dpi=120)
    with open(os.path.join(out_dir, "summary.txt"), "w") as f:
        f.write(text + "\n")
    return {"text": text, "files": [figure, os.path.join(out_dir, "summary.txt")]}
