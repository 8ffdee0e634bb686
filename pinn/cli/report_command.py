"""``pinn report``: learning curves, parity plots and a summary of a model directory (:mod:`pinn.training.report`),
the table of the model directories in a folder (:mod:`pinn.cli.models_table`), or a ``pinn learn`` directory's
deviation, labels and audit (:mod:`pinn.learn.report`)."""
import os


def add_parser(commands, common):
    """Add ``pinn report`` to the ``pinn`` command's subparsers."""
    report = commands.add_parser("report", parents=[common],
                                 help="learning curves, parity plots and a summary of a model directory",
                                 description="Write learning_curves.png, parity.png and summary.txt from the "
                                 "metrics.jsonl and eval_predictions.npz of a model directory; or, for a folder "
                                 "of model directories (or with -k), a table of their steps and latest errors "
                                 "(upstream PiNN's `pinn report models_dir -k KEYWORD`).")
    report.add_argument("model_dir", help="a model directory, a folder holding model directories, or a pinn learn "
                        "directory")
    report.add_argument("-o", "--output", help="directory for the report (default MODEL_DIR/report)")
    report.add_argument("-k", "--keyword", "-f", "--filter", dest="keyword",
                        help="only the model directories whose path contains KEYWORD (a table of them)")


def run(args):
    """``pinn report``; returns the exit status."""
    from pinn.cli.models_table import models_table
    from pinn.training.report import write_report
    if not os.path.isdir(args.model_dir):
        raise FileNotFoundError(f"{args.model_dir}: no such directory")
    if os.path.exists(os.path.join(args.model_dir, "state.json")) and args.keyword is None:
        from pinn.learn.report import write_learning_report  # a pinn learn directory
        print(write_learning_report(args.model_dir, args.output)["text"])
        return 0
    if args.keyword is not None or not os.path.exists(os.path.join(args.model_dir, "params.yml")):
        if args.output:
            raise ValueError("-o writes one model directory's report; the table of several goes to stdout")
        print(models_table(args.model_dir, args.keyword))
        return 0
    result = write_report(args.model_dir, args.output)
    print(result["text"])
    return 0
