"""A trained model (or a committee) written as one model file (:mod:`pinn.files.model_file`): what ``pinn
export`` does (:mod:`pinn.cli.export` parses its arguments and calls :func:`export_model`).

The model file's format, read and checked without TensorFlow, is :mod:`pinn.files.model_file`; writing
one reads each model directory with TensorFlow, through the inference loader
(:func:`pinn.inference.handle.load_for_inference`), and packs the variables the model predicts with and,
for a PiNet or PiNet2 potential, the Numba engine's arrays (:mod:`pinn.engines.lowering`).
"""
import os


def export_model(spec, path, checkpoint=None):
    """Write a model directory's checkpoint, or a committee's, to one model file (atomically;
    :mod:`pinn.files.model_file`).

    Args:
        spec: a model directory; a list of model directories or a directory of ``member-K/`` (a
            committee: :func:`pinn.files.committee_dir.member_directories`).
        path: the file to write (``.pinn`` by convention).
        checkpoint: ``None``/``'last'``, ``'best'`` or a checkpoint path (of every member).

    Returns:
        dict: the header written.

    Raises:
        ValueError: a directory without a checkpoint, or a committee whose members differ in cutoff
            or elements (as :func:`pinn.get_calc` refuses them).
    """
    from pinn import __version__
    from pinn.engines.committee import check_same_kind
    from pinn.files.committee_dir import is_committee_directory, member_directories
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
    from pinn.inference.handle import load_for_inference, variable_values
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


__all__ = ["export_model"]
