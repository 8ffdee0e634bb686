"""``pinn train``: a run file (params with ``data`` and ``train`` sections), upstream PiNN's params file
trained on ``-t``/``-e`` data, or an input script; ``--committee N`` trains N members.

A run file trains through :func:`pinn.training.run_file.run_training`; upstream PiNN's form through
:mod:`pinn.cli.upstream_train`, on the same input pipeline."""
import argparse
import os
import sys

from pinn.cli.arguments import positive_int


def add_parser(commands, common):
    """Add ``pinn train`` to the ``pinn`` command's subparsers."""
    parser = commands.add_parser("train", parents=[common], help="train from a YAML run file or an input script",
                                 description="Train a model.  A .yml/.yaml file holds the params of an input "
                                 "script plus `data` and `train` sections (see docs/cli.md), or only the params "
                                 "(upstream PiNN's params.yml), trained on the data of -t and -e; a .py file is "
                                 "run as an input script, with the remaining arguments as its sys.argv.  In a "
                                 "parallel run, launch `pinn train` itself with srun, mpirun or horovodrun.")
    parser.add_argument("config", help="run file or params file (.yml, .yaml) or input script (.py)")
    train_arguments(parser)
    parser.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments of an input script")


def train_arguments(parser):
    """The options of ``pinn train`` for a YAML file: pinn's and upstream PiNN's."""
    from pinn.cli.upstream_train import add_options
    parser.add_argument("-d", "--model-dir", help="override model_dir of the file")
    parser.add_argument("--max-steps", type=positive_int, help="override train.max_steps of a run file (the "
                        "same as --train-steps)")
    parser.add_argument("--max-time", metavar="TIME", help="a time budget: seconds, or 90s, 15m, 1.5h, or slurm "
                        "(the job's end); overrides train.max_time of a run file; with --committee, each member's")
    parser.add_argument("--init-model", metavar="DIR", help="warm start: begin from this model directory's weights "
                        "(model.params.init_model); with --committee, a directory of members: member K from its "
                        "member-K")
    parser.add_argument("--committee", type=positive_int, metavar="N", help="train a committee of N members into "
                        "MODEL_DIR/member-K, seeds seed+K and their own data order (a run file)")
    parser.add_argument("--member", type=int, metavar="K", help="with --committee: train member K alone (one task "
                        "of a job array, scripts/slurm_train_committee.sh)")
    add_options(parser)


def prepare(args):
    """Options given after a YAML file (``pinn train run.yml --max-steps 10``); an input script's are its own.
    Called before anything else of the command (``--verbose`` given late included)."""
    if args.config.endswith(".py") or not args.script_args:
        return
    late = argparse.ArgumentParser(prog="pinn train", add_help=False)
    train_arguments(late)
    late.add_argument("-v", "--verbose", action="store_true")
    late.set_defaults(**{k: v for k, v in vars(args).items() if k not in ("config", "script_args", "command")})
    parsed, unknown = late.parse_known_args(args.script_args)
    if unknown:
        raise ValueError(f"unexpected arguments {unknown} (only input scripts take arguments)")
    for key, value in vars(parsed).items():
        setattr(args, key, value)
    args.script_args = []


def run(args):
    """``pinn train``; returns the exit status."""
    path = args.config
    if path.endswith(".py"):
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path}: no such input script")
        import runpy
        sys.argv = [path] + [a for a in args.script_args if a != "--"]
        runpy.run_path(path, run_name="__main__")
        return 0
    if not path.endswith((".yml", ".yaml")):
        raise ValueError(f"{path}: expected a run file or params file (.yml, .yaml) or an input script (.py)")
    from pinn.cli import upstream_train
    from pinn.params import read_params_file
    if args.max_steps is not None and args.train_steps is not None and args.max_steps != args.train_steps:
        raise ValueError("--max-steps and --train-steps are the same option: give one")
    args.max_steps = args.max_steps if args.max_steps is not None else args.train_steps
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such file")
    from pinn.training.budget import count_the_process
    count_the_process()  # a time budget (--max-time, train.max_time) counts the whole command
    if "data" not in read_params_file(path):  # upstream PiNN's params.yml: the data come from -t and -e
        if args.committee is not None or args.member is not None:
            raise ValueError(f"--committee: for a run file (with a data section); {path} is a params file")
        model, metrics = upstream_train.run(path, args)
        if model.is_chief:
            print(metrics_table(metrics))
        return 0
    given = upstream_train.given_data_options(args) + [
        "--" + k.replace("_", "-") for k in ("log_every", "ckpt_every", "max_ckpts", "early_stop")
        if getattr(args, k) is not None]
    if given:
        raise ValueError(f"{given[0]}: for a params file without a data section (upstream PiNN's form); {path} "
                         "has a data section, which says the data, and its model.params the run's settings")
    from pinn.training.run_file import run_training
    if args.committee is None:
        if args.member is not None:
            raise ValueError("--member K needs --committee N")
        model, metrics = run_training(path, model_dir=args.model_dir, max_steps=args.max_steps,
                                      init_model=args.init_model, max_time=args.max_time)
        if metrics is not None and model.is_chief:
            print(metrics_table(metrics))
        return 0
    if args.member is not None and not 0 <= args.member < args.committee:
        raise ValueError(f"--member {args.member}: a committee of {args.committee} has members 0 to "
                         f"{args.committee - 1}")
    for k in range(args.committee) if args.member is None else [args.member]:
        model, metrics = run_training(path, model_dir=args.model_dir, max_steps=args.max_steps,
                                      init_model=args.init_model, member=k, max_time=args.max_time)
        if metrics is not None and model.is_chief:
            print(f"member {k} ({model.model_dir}):\n{metrics_table(metrics)}")
    return 0


def metrics_table(metrics):
    """A text table of MAE and RMSE per quantity, with units."""
    from pinn.training.metrics import NAMES, UNITS
    rows = [("quantity", "MAE", "RMSE", "unit")]
    for key in UNITS:
        if f"{key}_MAE" in metrics:
            rows.append((NAMES[key], f"{metrics[f'{key}_MAE']:.6g}", f"{metrics[f'{key}_RMSE']:.6g}", UNITS[key]))
    rows.append(("loss", f"{metrics['loss']:.6g}", "", ""))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)
