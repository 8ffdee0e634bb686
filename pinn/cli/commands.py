"""The ``pinn`` command: train, convert, eval, report, log, devi, md, export, ipi, version.

Each command is a thin layer over the library (:mod:`pinn.cli.runconfig`,
:mod:`pinn.io`, :mod:`pinn.training.trainer`, :mod:`pinn.cli.report`, :mod:`pinn.training.metrics`).
TensorFlow's start-up messages are hidden unless ``--verbose`` is given or
``TF_CPP_MIN_LOG_LEVEL`` is set (:func:`pinn.runtime.quiet_tensorflow`).
Exit status: 0 success, 1 an error (one line on stderr naming the file, frame or
key: :mod:`pinn.cli.errors`; the traceback too with ``--verbose``), 2 bad
command-line arguments, 75 training stopped by a signal after writing a
checkpoint (launch it again to resume).
"""
import argparse
import csv
import json
import os
import sys
import traceback

from pinn.cli import devi, export, ipi, md_command
from pinn.cli.arguments import positive_int
from pinn.cli.errors import error_line
from pinn.cli.train_command import metrics_table, train, train_arguments, train_options

EXIT_ERROR = 1
#: the formats whose labels are in eV, Å (pinn's units), from which `pinn convert --subtract-d3` takes D3 out
D3_FORMATS = ("ase", "deepmd", "cp2k")
#: what `pinn convert -f` takes (pinn.io.formats.LOADERS, without importing the loaders)
LOADER_FORMATS = ("tfr", "pinn", "ase", "runner", "qm9", "ani", "cp2k", "deepmd", "qm7b")


DESCRIPTION = """Train and use PiNN-style neural-network potentials and dipole models.

commands:
  train     train from a YAML run file or an input script
  convert   write data (ASE-readable files or MiMiC runs) to TFRecord caches, optionally split
  eval      errors of a trained model on data (a table, or JSON)
  report    learning curves and parity plots (PNG) and a text summary of a model directory
  log       the metrics a training run recorded (a table, or CSV)
  devi      a committee's model deviation over a trajectory
  md        MD with a model or a committee, stopping where the members disagree
  version   the installed pinn version

Run `pinn COMMAND --help` for the options of each.  TensorFlow's start-up messages are
hidden unless you give --verbose or set TF_CPP_MIN_LOG_LEVEL yourself.  An error is one line
naming the file, frame or key (exit status 1); --verbose adds its traceback."""


VERBOSE_HELP = ("show TensorFlow's start-up and compilation messages (hidden by default unless "
                "TF_CPP_MIN_LOG_LEVEL is set), and the traceback of an error")


def _parser():
    parser = argparse.ArgumentParser(prog="pinn", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true", help=VERBOSE_HELP)
    # --verbose after the command too (SUPPRESS: absent there, the value before the command stays)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help=VERBOSE_HELP)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    train_parser = commands.add_parser("train", parents=[common], help="train from a YAML run file or an input script",
                                description="Train a model.  A .yml/.yaml file holds the params of an input "
                                "script plus `data` and `train` sections (see docs/cli.md), or only the params "
                                "(upstream PiNN's params.yml), trained on the data of -t and -e; a .py file is "
                                "run as an input script, with the remaining arguments as its sys.argv.  In a "
                                "parallel run, launch `pinn train` itself with srun, mpirun or horovodrun.")
    train_parser.add_argument("config", help="run file or params file (.yml, .yaml) or input script (.py)")
    train_arguments(train_parser)
    train_parser.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments of an input script")

    convert = commands.add_parser("convert", parents=[common], help="write data to TFRecord caches",
                                  description="Read structures (any ASE-readable file, a format of -f, or MiMiC "
                                  "files with --mpt/--trr/--energies) and write OUTPUT.tfr, or OUTPUT.<part>.tfr per "
                                  "part of --split, each with its spec OUTPUT.yml / OUTPUT.<part>.yml; `pinn train` "
                                  "and load_tfrecord read them.")
    convert.add_argument("inputs", nargs="*", help="input files (ASE-readable, or of the format -f)")
    convert.add_argument("-o", "--output", default="dataset",
                         help="output name without .tfr (default 'dataset'); or upstream PiNN's 'name:ratio,...' "
                              "(e.g. 'train:8,eval:2'), which splits and writes name.tfr for each part")
    convert.add_argument("-f", "--format", default="auto", choices=["auto", *sorted(LOADER_FORMATS)],
                         help="format of the inputs (default auto: .yml/.tfr TFRecords, .data RuNNer, else ASE)")
    convert.add_argument("--split", help="parts and ratios, e.g. train=8,eval=2")
    convert.add_argument("--shuffle", dest="shuffle", action="store_true", default=True,
                         help="shuffle the structures before splitting (the default)")
    convert.add_argument("--no-shuffle", dest="shuffle", action="store_false", help="keep the inputs' order")
    convert.add_argument("--batch", type=positive_int, help="write sparse batches of this many structures")
    convert.add_argument("--seed", type=int, default=0, help="seed of the split (default 0)")
    convert.add_argument("--mpt", nargs="+", help="MiMiC topology file(s)")
    convert.add_argument("--trr", nargs="+", help="GROMACS trr file(s), one per run")
    convert.add_argument("--energies", nargs="+", help="CPMD ENERGIES file(s), one per run")
    convert.add_argument("--precision", choices=("float32", "float64"), default="float32")
    convert.add_argument("--subtract-d3", metavar="FUNCTIONAL",
                         help="take D3 dispersion (for this DFT functional, e.g. PBE) out of the energy, force and "
                              "stress labels, for a model used with get_calc(..., dispersion=, functional=); "
                              "needs the dftd3 package")
    convert.add_argument("--d3-damping", default="d3bj", metavar="NAME",
                         help="with --subtract-d3: the damping, d3bj (default), d3zero, d3bjm, d3zerom or d3op")

    evaluate = commands.add_parser("eval", parents=[common], help="errors of a trained model on data",
                                   description="Evaluate a model directory on data (ASE-readable files or .tfr "
                                   "caches): MAE and RMSE of every labelled quantity.")
    evaluate.add_argument("model_dir")
    evaluate.add_argument("data", nargs="+", help="ASE-readable files or .tfr caches")
    evaluate.add_argument("--checkpoint", default="last", help="'last' (default), 'best' or a checkpoint path")
    evaluate.add_argument("--batch-size", type=positive_int, default=32)
    evaluate.add_argument("--json", action="store_true", help="print the metrics as JSON")
    evaluate.add_argument("--per-atom", metavar="OUT.xyz", help="also write every structure with the model's "
                          "energy, forces, per-atom energies (and stress) to this extended XYZ file (a potential "
                          "model without an embedding)")

    report = commands.add_parser("report", parents=[common],
                                 help="learning curves, parity plots and a summary of a model directory",
                                 description="Write learning_curves.png, parity.png and summary.txt from the "
                                 "metrics.jsonl and eval_predictions.npz of a model directory; or, for a folder "
                                 "of model directories (or with -k), a table of their steps and latest errors "
                                 "(upstream PiNN's `pinn report models_dir -k KEYWORD`).")
    report.add_argument("model_dir", help="a model directory, or a folder holding model directories")
    report.add_argument("-o", "--output", help="directory for the report (default MODEL_DIR/report)")
    report.add_argument("-k", "--keyword", "-f", "--filter", dest="keyword",
                        help="only the model directories whose path contains KEYWORD (a table of them)")

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
    devi.add_parser(commands, common)
    md_command.add_parser(commands, common)
    export.add_parser(commands, common)
    ipi.add_parser(commands, common)
    commands.add_parser("version", parents=[common],
                        help="the installed pinn version (as upstream PiNN's `pinn version`)")
    return parser


def main(argv=None):
    """Entry point of the ``pinn`` command; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    from pinn.runtime import quiet_tensorflow
    try:
        if args.command == "train":
            train_options(args)
        quiet_tensorflow(verbose=args.verbose)  # before any command imports TensorFlow
        return COMMANDS[args.command](args)
    except Exception as err:  # noqa: BLE001 - every error is one line (pinn.cli.errors); --verbose: the traceback
        if args.verbose:
            traceback.print_exc()
        print(f"pinn {args.command}: error: {error_line(err)}", file=sys.stderr)
        return EXIT_ERROR
    except SystemExit as err:  # a one-line stop of the library (no intact checkpoint): the same form
        if not isinstance(err.code, str):
            raise
        print(f"pinn {args.command}: error: {err.code}", file=sys.stderr)
        return EXIT_ERROR


def _ratio_pairs(text, separator, error):
    """``{name: ratio}`` of ``'name<separator>ratio,...'``; ``ValueError(error)`` for an empty name, a ratio
    that is not a positive number, or a name given twice."""
    pairs = {}
    for part in text.split(","):
        name, _, ratio = part.rpartition(separator)
        try:
            value = float(ratio)
        except ValueError:
            value = -1
        name = name.strip()
        if not name or value <= 0 or name in pairs:
            raise ValueError(error)
        pairs[name] = value
    return pairs


def _parse_split(text):
    """``--split train=8,eval=2``: {part: ratio}."""
    return _ratio_pairs(text, "=", f"--split: expected name=ratio pairs such as train=8,eval=2, got {text!r}")


def _parse_upstream_outputs(text):
    """Upstream PiNN's ``-o 'train:8,eval:2'``: {output name: ratio}; ``None`` for a plain output name.

    Raises:
        ValueError: a name with ':' or ',' that is not such a list (never taken as a file name).
    """
    if ":" not in text and "," not in text:
        return None
    return _ratio_pairs(text, ":", f"-o {text!r}: an output name, or upstream PiNN's name:ratio pairs such as "
                                   "'train:8,eval:2' (distinct names, positive ratios)")


def _convert(args):
    from pinn.io import load_ase, load_mimic, write_tfrecord
    from pinn.runtime.logs import setup_logging
    setup_logging()
    split = _parse_split(args.split) if args.split else False
    named = _parse_upstream_outputs(args.output)  # upstream PiNN's -o 'train:8,eval:2'
    if named:
        if args.split:
            raise ValueError(f"-o {args.output!r} (upstream PiNN's name:ratio form) already splits: leave out --split")
        split = named
    mimic = [args.mpt, args.trr, args.energies]
    if args.subtract_d3:
        from pinn.dispersion import check_d3
        check_d3(args.d3_damping, args.subtract_d3)  # before any data are read
    elif args.d3_damping != "d3bj":
        raise ValueError(f"--d3-damping {args.d3_damping}: goes with --subtract-d3 FUNCTIONAL")
    if any(mimic):
        if not all(mimic):
            raise ValueError("MiMiC data need --mpt, --trr and --energies together")
        if args.subtract_d3:
            raise ValueError("--subtract-d3: MiMiC frames are QM/MM; D3 of the whole frame is not the QM "
                             "region's (take it out in CPMD's output instead)")
        if args.inputs:
            raise ValueError("give ASE-readable files or MiMiC files (--mpt/--trr/--energies), not both")
        if args.format != "auto":
            raise ValueError(f"-f {args.format}: MiMiC files (--mpt/--trr/--energies) have their own reader")
        mpt = args.mpt * len(args.trr) if len(args.mpt) == 1 else args.mpt
        data = load_mimic(mpt, args.trr, args.energies, split=split, seed=args.seed, shuffle=args.shuffle)
    else:
        if not args.inputs:
            raise ValueError("no input files (give ASE-readable files or --mpt/--trr/--energies)")
        from pinn.io.formats import format_of, load_ds
        fmt = format_of(args.inputs) if args.format == "auto" else args.format
        if args.subtract_d3 and fmt not in D3_FORMATS:
            raise ValueError(f"--subtract-d3: the {fmt} format's labels are not in eV (upstream PiNN's units); "
                             f"D3 can be taken out of {', '.join(D3_FORMATS)} data")
        if fmt == "ase":  # the frames of every file, pooled
            data = load_ase(args.inputs, split=split, seed=args.seed, shuffle=args.shuffle)
        else:
            inputs = args.inputs[0] if len(args.inputs) == 1 else args.inputs
            data = load_ds(inputs, fmt=fmt, splits=split or None, shuffle=args.shuffle, seed=args.seed)
    parts = data if isinstance(data, dict) else {None: data}
    for name, dataset in _flatten(parts):
        if args.subtract_d3:
            from pinn.dispersion import subtract_d3
            dataset = subtract_d3(dataset, args.d3_damping, args.subtract_d3, source=", ".join(args.inputs))
        if args.precision == "float64":
            import tensorflow as tf
            dataset = dataset.map(lambda s: {k: tf.cast(v, tf.float64) if v.dtype.is_floating else v
                                             for k, v in s.items()})
        if args.batch:
            from pinn.io import sparse_batch
            dataset = dataset.apply(sparse_batch(args.batch))
        path = f"{name}.tfr" if named else f"{args.output}.{name}.tfr" if name else f"{args.output}.tfr"
        count = write_tfrecord(path, dataset)
        print(f"{path}: {count} {'batches' if args.batch else 'structures'}")
    return 0


def _flatten(parts, prefix=""):
    for name, value in parts.items():
        full = f"{prefix}{name}" if name is not None else None
        if isinstance(value, dict):
            yield from _flatten(value, f"{full}.")
        else:
            yield full, value


def _evaluate(args):
    from pinn.cli.predictions import refuse_per_atom, write_predictions
    from pinn.cli.runconfig import load_structures, region_for_model
    from pinn.io import sparse_batch
    from pinn.models.inference import load_for_inference
    if not os.path.isdir(args.model_dir):
        raise FileNotFoundError(f"{args.model_dir}: no such model directory")
    model = load_for_inference(args.model_dir, checkpoint=None if args.checkpoint == "last" else args.checkpoint)
    dataset = region_for_model(load_structures(args.data), ", ".join(args.data),
                               embedding=model.params["model"]["params"].get("embedding", "mechanical"))
    if args.per_atom:
        refuse_per_atom(model.model, args.model_dir)
    metrics = model.evaluate(lambda: dataset.apply(sparse_batch(args.batch_size)))
    written = {}
    if args.per_atom:
        count = write_predictions(model.predict(lambda: dataset.apply(sparse_batch(args.batch_size))), args.per_atom)
        written = {"per_atom": args.per_atom, "per_atom_structures": count}
    if args.json:
        print(json.dumps({**metrics, "checkpoint": model.checkpoint, **written}))
    else:
        averaged = " (averaged weights)" if model.averaged else ""
        print(f"model {args.model_dir}: checkpoint {os.path.basename(model.checkpoint)}, step {metrics['global_step']}"
              f"{averaged}\ndata: {', '.join(args.data)}\n")
        print(metrics_table(metrics))
        if written:
            print(f"\n{written['per_atom_structures']} structures with the model's energy, forces and per-atom "
                  f"energies: {args.per_atom}")
    return 0


def _report(args):
    from pinn.cli.models_table import models_table
    from pinn.cli.report import write_report
    if not os.path.isdir(args.model_dir):
        raise FileNotFoundError(f"{args.model_dir}: no such directory")
    if args.keyword is not None or not os.path.exists(os.path.join(args.model_dir, "params.yml")):
        if args.output:
            raise ValueError("-o writes one model directory's report; the table of several goes to stdout")
        print(models_table(args.model_dir, args.keyword))
        return 0
    result = write_report(args.model_dir, args.output)
    print(result["text"])
    return 0


def _log(args):
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


def _version(args):
    from pinn import __version__
    print(f"pinn version: {__version__}")
    return 0


COMMANDS = {"train": train, "convert": _convert, "eval": _evaluate, "report": _report, "log": _log,
            "devi": devi.run, "md": md_command.run, "export": export.run, "ipi": ipi.run,
            "version": _version}

if __name__ == "__main__":
    sys.exit(main())
