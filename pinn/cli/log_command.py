"""``pinn log``: the metrics a training run recorded (``MODEL_DIR/metrics.jsonl``), as a table or CSV."""
import csv
import os

from pinn.cli.arguments import positive_int


def add_parser(commands, common):
    """Add ``pinn log`` to the ``pinn`` command's subparsers."""
    logs = commands.add_parser("log", parents=[common], help="the metrics a training run recorded",
                               description="Print the training and validation records of MODEL_DIR/metrics.jsonl.")
    logs.add_argument("model_dir")
    logs.add_argument("--kind", choices=("train", "eval", "all"), default="all")
    logs.add_argument("--last", type=positive_int, help="only the last N records")
    logs.add_argument("--csv", help="write the records to this CSV file instead of printing them")
    logs.add_argument("-t", "--tag", help="only the figures whose name contains TAG, e.g. RMSE (upstream PiNN's "
                      "--tag; default: all)")
    logs.add_argument("-f", "--fmt", help="printf format of the figures, e.g. '%%14.6e' (upstream PiNN's --fmt; "
                      "default: 4 significant digits)")


def run(args):
    """``pinn log``; returns the exit status."""
    from pinn.training.metrics import read_metrics
    if not os.path.isdir(args.model_dir):
        raise FileNotFoundError(f"{args.model_dir}: no such model directory")
    records = read_metrics(args.model_dir, None if args.kind == "all" else args.kind)
    if not records:
        raise ValueError(f"{args.model_dir}: no metrics recorded (no metrics.jsonl, or no {args.kind} records)")
    if args.last:
        records = records[-args.last:]
    columns = ["kind", "step", "epoch", "loss"]
    for record in records:
        columns += [k for k in record if k not in columns and k not in ("time", "best")]
    columns.append("best")
    if args.tag:
        figures = [c for c in columns[2:-1] if c != "epoch" and args.tag in c]
        if not figures:
            raise ValueError(f"--tag {args.tag!r}: no recorded figure's name contains it "
                             f"(recorded: {', '.join(c for c in columns[3:-1])})")
        columns = ["kind", "step"] + figures
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=["time"] + columns, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(records)
        print(f"{args.csv}: {len(records)} records")
        return 0
    if args.fmt:
        try:
            args.fmt % 1.0
        except (TypeError, ValueError):
            raise ValueError(f"--fmt {args.fmt!r}: not a printf format of one number, e.g. '%14.6e'") from None
    rows = [columns] + [[_cell(r.get(c), args.fmt) for c in columns] for r in records]
    widths = [max(len(row[i]) for row in rows) for i in range(len(columns))]
    for row in rows:
        print("  ".join(cell.rjust(w) for cell, w in zip(row, widths)))
    return 0


def _cell(value, fmt=None):
    if value is None:
        return ""
    if isinstance(value, bool):
        return "*" if value else ""
    if isinstance(value, float):
        return (fmt % value).strip() if fmt else f"{value:.4g}"
    return str(value)
