"""The ``pinn`` command: train, convert, eval, report, log, devi, md, export, ipi, version.

Each command is one module of :mod:`pinn.cli` with ``add_parser(commands, common)``, which adds its
subparser, and ``run(args)``, which returns the exit status (and, for ``pinn train`` alone,
``prepare(args)``: the options given after a run file); :data:`COMMANDS` lists them in the order of
``pinn --help`` and one loop registers them.  A command parses its arguments and calls the library
(:mod:`pinn.training.run_file`, :mod:`pinn.io`, :mod:`pinn.models`, :mod:`pinn.training.report`,
:mod:`pinn.training.metrics`); nothing outside :mod:`pinn.cli` imports these modules.
TensorFlow's start-up messages are hidden unless ``--verbose`` is given or
``TF_CPP_MIN_LOG_LEVEL`` is set (:func:`pinn.runtime.quiet_tensorflow`).
Exit status: 0 success, 1 an error (one line on stderr naming the file, frame or
key: :mod:`pinn.cli.errors`; the traceback too with ``--verbose``), 2 bad
command-line arguments, 75 training stopped by a signal after writing a
checkpoint (launch it again to resume).
"""
import argparse
import sys
import traceback

from pinn.cli import (convert, devi, eval_command, export, ipi, learn_command, log_command, md_command,
                      report_command, train_command, version)
from pinn.cli.errors import error_line

EXIT_ERROR = 1
#: the commands by name, in the order of `pinn --help`: each a module with add_parser(commands, common) and run(args)
COMMANDS = {"train": train_command, "convert": convert, "eval": eval_command, "report": report_command,
            "log": log_command, "devi": devi, "md": md_command, "learn": learn_command, "export": export, "ipi": ipi,
            "version": version}


DESCRIPTION = """Train and use PiNN-style neural-network potentials and dipole models.

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
    commands = parser.add_subparsers(title="commands", dest="command", metavar="COMMAND")
    for command in COMMANDS.values():
        command.add_parser(commands, common)
    return parser


def main(argv=None):
    """Entry point of the ``pinn`` command; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    from pinn.runtime import quiet_tensorflow
    command = COMMANDS[args.command]
    try:
        if hasattr(command, "prepare"):  # the parsing a command finishes itself (pinn train's late options)
            command.prepare(args)
        quiet_tensorflow(verbose=args.verbose)  # before any command imports TensorFlow
        return command.run(args)
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


if __name__ == "__main__":
    sys.exit(main())
