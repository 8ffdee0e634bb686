"""``pinn export``: a model directory (or a committee) as one model file (:mod:`pinn.files.model_file`).

``pinn export MODEL [MODEL...] -o model.pinn [--checkpoint last|best|PATH]``

One directory exports one model; several, or one directory holding ``member-K/``, a committee.
The file loads with ``pinn.get_calc('model.pinn')`` and in the MD engines (:mod:`pinn.md`); a
PiNet or PiNet2 potential then runs without TensorFlow.  The command parses its arguments and calls
:func:`pinn.models.export.export_model`.
"""
import os
import warnings


def add_parser(commands, common):
    """Add ``pinn export`` to the ``pinn`` command's subparsers."""
    export = commands.add_parser("export", parents=[common], help="write a trained model (or a committee) to one "
                                 "model file", description=__doc__.split("\n\n")[0])
    export.add_argument("models", nargs="+", metavar="MODEL",
                        help="a model directory; several, or a directory of member-K/, for a committee")
    export.add_argument("-o", "--output", required=True, help="the model file to write (e.g. model.pinn)")
    export.add_argument("--checkpoint", default="last", help="which checkpoint: last (default), best or a path")


def run(args):
    """``pinn export``; returns the exit status."""
    from pinn.models.export import export_model
    spec = args.models if len(args.models) > 1 else args.models[0]
    header = export_model(spec, args.output, None if args.checkpoint == "last" else args.checkpoint)
    members = header["members"]
    first = members[0]
    from ase.data import chemical_symbols
    elements = " ".join(chemical_symbols[z] for z in first["atom_types"])
    what = f"a committee of {len(members)}" if header["kind"] == "committee" else "one model"
    runs = ("the Numba engine, without TensorFlow" if all(m["numba_engine"] for m in members) else
            f"TensorFlow ({next(m['needs_tensorflow'] for m in members if not m['numba_engine'])})")
    print(f"wrote {args.output} ({os.path.getsize(args.output) / 1e6:.2f} MB): {what}, {first['network']} "
          f"{first['model']}, elements {elements}, rc {first['rc']:g} Å, step {first['step']} "
          f"({'averaged' if first['averaged'] else 'trained'} weights of {first['checkpoint']}); "
          f"sha256 {header['sha256'][:16]}…; runs on {runs}")
    return 0


def __getattr__(name):
    """``pinn.cli.export.export_model``, the name before pinn 0.30, with a warning."""
    if name == "export_model":
        warnings.warn("pinn.cli.export.export_model is now pinn.models.export.export_model (pinn 0.30); import it "
                      "from there", DeprecationWarning, stacklevel=2)
        from pinn.models.export import export_model
        return export_model
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
