"""The metrics a training run leaves in its model directory, and how to read them back.

``model_dir/metrics.jsonl``: one JSON object per line, appended by rank 0:

- ``{"kind": "train", "step", "epoch", "time", "lr", "loss", "E_MAE", "E_RMSE", ...,
  "structures_per_s"}``: the training figures since the previous progress line
  (errors from the training batches, before each update);
- ``{"kind": "eval", "step", "epoch", "time", "loss", "E_MAE", "E_RMSE", ...}``:
  an evaluation on the validation input (every ``eval_every_n_steps``), with
  ``"best": true`` when it improved the early-stopping metric.

``time`` is Unix time (s); ``epoch`` is ``null`` when the length of an epoch
is unknown.  Error keys are ``<Q>_MAE`` / ``<Q>_RMSE`` for the quantities in
:data:`UNITS`.

``model_dir/eval_predictions.npz``: predictions and labels of the latest
evaluation, for parity plots (``pinn report``): ``step``; ``energy_ref``,
``energy_pred`` [n] (eV) and ``n_atoms`` [n]; ``forces_ref``, ``forces_pred``
[m, 3] (eV/Å, at most :data:`~pinn.inference.errors.MAX_PARITY_ROWS` atoms); ``dipole_ref``,
``dipole_pred`` [n, 3] (e·Å); ``charges_ref``, ``charges_pred`` [m] (e).
Only the arrays the model predicts and the data labels are present.
"""
import json
import os

import numpy as np

from pinn.files.durable import append_line, replacing

#: unit of each quantity whose errors are logged
UNITS = {"E": "eV", "E_PER_ATOM": "eV/atom", "F": "eV/Å", "F_QM": "eV/Å", "S": "eV/Å³", "D": "e·Å", "Q": "e",
         # the polarizability models (pinn.physics.polarizability): bohr³ per atom with p_unit 1, Hartree
         "alpha_per_atom": "bohr³/atom", "alpha_per_atom_diag": "bohr³/atom", "alpha_per_atom_offdiag": "bohr³/atom",
         "egap": "Hartree"}
#: names of the quantities, for tables and plots
NAMES = {"E": "energy", "E_PER_ATOM": "energy per atom", "F": "forces", "F_QM": "forces on the QM atoms",
         "S": "stress", "D": "dipole",
         "Q": "charges", "alpha_per_atom": "polarizability per atom",
         "alpha_per_atom_diag": "isotropic polarizability per atom",
         "alpha_per_atom_offdiag": "anisotropic polarizability per atom", "egap": "HOMO–LUMO gap"}
METRICS_FILE = "metrics.jsonl"
PREDICTIONS_FILE = "eval_predictions.npz"


def metrics_path(model_dir):
    return os.path.join(os.fspath(model_dir), METRICS_FILE)


def append_metrics(model_dir, record):
    """Append one record (a dict of JSON-serialisable values) to ``model_dir/metrics.jsonl`` (one whole
    line, flushed to the disk: :func:`pinn.files.durable.append_line`)."""
    clean = {k: (float(v) if isinstance(v, (np.floating, np.integer)) and not isinstance(v, np.bool_) else v)
             for k, v in record.items()}
    append_line(metrics_path(model_dir), json.dumps(clean))


def read_metrics(model_dir, kind=None):
    """Records of ``model_dir/metrics.jsonl``, oldest first.

    A resumed run appends to the same file; records of steps that a rollback
    or a restart from an older checkpoint trained again are kept, in the
    order written.  A truncated last line (a run killed while writing) is
    ignored.

    Args:
        model_dir: model directory.
        kind: ``'train'``, ``'eval'`` or ``None`` (all).

    Returns:
        list of dicts (empty when there is no metrics file).
    """
    path = metrics_path(model_dir)
    if not os.path.exists(path):
        return []
    records = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # an interrupted write
            if kind is None or record.get("kind") == kind:
                records.append(record)
    return records


def predictions_path(model_dir):
    return os.path.join(os.fspath(model_dir), PREDICTIONS_FILE)


def write_eval_predictions(model_dir, arrays):
    """Write ``arrays`` (see the module docstring) to ``model_dir/eval_predictions.npz`` atomically."""
    path = predictions_path(model_dir)
    with replacing(path, "wb") as f:
        np.savez_compressed(f, **arrays)
    return path


def read_eval_predictions(model_dir):
    """The arrays of ``model_dir/eval_predictions.npz`` as a dict, or ``None`` when there is none."""
    path = os.path.join(os.fspath(model_dir), PREDICTIONS_FILE)
    if not os.path.exists(path):
        return None
    with np.load(path) as data:
        return {k: data[k] for k in data.files}
