"""The small training run of the crash tests (test_crash_consistency.py).

Run as a script (``python crash_train.py MODEL_DIR DATA MAX_STEPS``) it trains, or resumes, a small
PiNet in MODEL_DIR to MAX_STEPS; the tests kill it and launch it again.  Imported, :func:`params`
and :func:`train_input` give the same run in the test's process (the uninterrupted reference).
"""
import os
import sys

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, TESTS)  # the shared helpers of tests/ (settings.py), also when run as a script

from settings import MECHANICS  # noqa: E402

#: a checkpoint every SAVE_EVERY steps, KEEP of them kept
SAVE_EVERY, KEEP = 3, 3


def params(model_dir):
    """A small PiNet potential on the alloy data: resume is exact (no XLA, a plain schedule, data skipped)."""
    net = {"atom_types": [29, 79], "rc": 4.0, "depth": 2, "pp_nodes": [8], "pi_nodes": [8], "ii_nodes": [8],
           "out_nodes": [8], "n_basis": 4}
    return {"model_dir": str(model_dir), "network": {"name": "PiNet", "params": net},
            "model": {"params": {**MECHANICS, "use_force": True, "learning_rate": 3e-3, "engine": "tensorflow",
                                 "save_checkpoint_steps": SAVE_EVERY, "keep_checkpoint_max": KEEP,
                                 "log_every_n_steps": SAVE_EVERY, "tensorboard": False}}}


def train_input(data):
    """Batches of 4 structures in file order, repeated (the same sequence in every process)."""
    from pinn.io import load_ase, sparse_batch
    return lambda: load_ase(data).repeat().apply(sparse_batch(4))


if __name__ == "__main__":
    model_dir, data, max_steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    from pinn.models import potential_model
    potential_model(params(model_dir)).train(train_input(data), max_steps=max_steps)
