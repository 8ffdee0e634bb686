"""``pinn export``: a model directory (or a committee) as one model file (:mod:`pinn.files.model_file`).

``pinn export MODEL [MODEL...] -o model.pinn [--checkpoint last|best|PATH]``

One directory exports one model; several, or one directory holding ``member-K/``, a committee.
The file loads with ``pinn.get_calc('model.pinn')`` and in the MD engines (:mod:`pinn.md`); a
PiNet or PiNet2 potential then runs without TensorFlow.
"""
import os


def export_model(spec, path, checkpoint=None):
    """Write a model directory's checkpoint, or a committee's, to one model file (atomically;
    :mod:`pinn.files.model_file`).

    Args:
        spec: a model directory; a list of model directories or a directory of ``member-K/`` (a
            committee: :func:`pinn.committee.member_directories`).
        path: the file to write (``.pinn`` by convention).
        checkpoint: ``None``/``'last'``, ``'best'`` or a checkpoint path (of every member).

    Returns:
        dict: the header written.

    Raises:
        ValueError: a directory without a checkpoint, or a committee whose members differ in cutoff
            or elements (as :func:`pinn.get_calc` refuses them).
    """
    from pinn import __version__
    from pinn.committee import is_committee_directory, member_directories
    from pinn.engines.committee import check_same_kind
    from pinn.files.model_file import write_model_file
    committee = isinstance(spec, (list, tuple)) or is_committee_directory(spec)
    directories = member_directories(spec) if committee else [os.fspath(spec)]
    members = []
    arrays = {}
    for k, directory in enumerate(directories):
        info, member_arrays = _member(directory, checkpoint)
        members.append(info)
        arrays.update({f"m{k}/{key}": value for key, value in member_arrays.items()})
    if committee:
        check_same_kind([(m["source"], m["rc"], m["atom_types"]) for m in members])
    return write_model_file(path, "committee" if committee else "model", members, arrays, __version__)


def _member(directory, checkpoint):
    """The header entry and the arrays of one model directory's checkpoint (read with TensorFlow): the
    variables the model predicts with and, for a PiNet or PiNet2 potential, the Numba engine's arrays."""
    import numpy as np

    from pinn.engines.lowering import capability
    from pinn.models.inference import load_for_inference, variable_values
    handle = load_for_inference(directory, checkpoint)
    params = dict(handle.params)
    params.pop("model_dir", None)
    arrays = {"var/" + key: value for key, value in variable_values(handle.model).items()}
    answer = capability(handle, "md")
    if answer:
        arrays.update({"engine/" + key: np.asarray(value) for key, value in answer.spec.arrays().items()})
    info = {"name": os.path.basename(os.path.normpath(os.fspath(directory))),
            "source": os.path.abspath(os.fspath(directory)), "checkpoint": os.path.basename(handle.checkpoint),
            "step": handle.step, "averaged": handle.averaged, "params": params,
            "model": params["model"]["name"], "network": params["network"]["name"],
            "atom_types": [int(z) for z in handle.atom_types], "rc": handle.rc, "e_unit": handle.e_unit,
            "numba_engine": bool(answer), "needs_tensorflow": None if answer else answer.reason}
    return info, arrays


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
