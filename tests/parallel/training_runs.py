"""Runs of tests/parallel/parallel_train.py under the launchers (test_parallel.py, test_parallel_stops.py).

``LAUNCHERS``: each launcher's availability check and command line (``command_of``); ``run_training``
runs the script (one process or a launcher's ranks) and returns its output; ``load_rank`` reads what a
rank wrote.
"""
import importlib.util
import json
import os
import shutil
import subprocess
import sys

import numpy as np
from launching import ENV, horovod_has

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "parallel_train.py")
LAUNCHERS = {
    "horovodrun-gloo": (lambda: shutil.which("horovodrun") and horovod_has("gloo"),
                        ["horovodrun", "-np", "2", "--gloo"]),
    "mpirun": (lambda: shutil.which("mpirun") and horovod_has("mpi"),
               ["mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none"]),
    # the script's own option picks the backend: mpirun starts it as ["--backend", "mpi"] below
    "mpirun-mpi4py": (lambda: shutil.which("mpirun") and importlib.util.find_spec("mpi4py") is not None,
                      ["mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none"]),
}
#: extra arguments of the training script per launcher
SCRIPT_ARGS = {"mpirun-mpi4py": ["--backend", "mpi"]}
CONTROLLER = {"horovodrun-gloo": "controller Gloo", "mpirun": "controller MPI", "mpirun-mpi4py": "no Horovod"}
#: what carries the step's exchange (parallel_params.host_exchange: auto) under each launcher
EXCHANGE = {"horovodrun-gloo": "host arrays over TCP sockets to rank 0",
            "mpirun": "host arrays over MPI (" if importlib.util.find_spec("mpi4py") else "host arrays over Horovod",
            "mpirun-mpi4py": "MPI through mpi4py"}


def run_training(command, workdir, tag, *args, timeout=600, env=None):
    """The training script (``command``: a launcher's, ending in the script and its backend; ``[]``: one
    process) in ``workdir`` (``env``: more environment variables)."""
    command = command or [sys.executable, SCRIPT]
    run = subprocess.run(command + [str(workdir), tag, *args], env={**ENV, **(env or {})}, cwd=workdir,
                         capture_output=True, text=True, timeout=timeout)
    return run, run.stdout + run.stderr


def load_rank(workdir, tag, rank):
    """What rank ``rank`` of the run ``tag`` in ``workdir`` wrote (parallel_train.py's npz): its variables, step,
    learning rate, world size, validation metrics, writes into model_dir and what it read."""
    out = np.load(os.path.join(workdir, f"{tag}.rank{rank}.npz"), allow_pickle=True)
    return {"weights": [np.asarray(w, dtype=float) for w in out["weights"]],
            "average": [np.asarray(w, dtype=float) for w in out["average"]],
            "optimizer": [np.asarray(w, dtype=float) for w in out["optimizer"]],
            "step": int(out["step"]), "lr": float(out["lr"]), "size": int(out["size"]),
            "metrics": json.loads(str(out["metrics"])), "writes": json.loads(str(out["writes"])),
            "read": json.loads(str(out["read"]))}


def command_of(name):
    """The command line of launcher ``name`` up to and including the script and its backend option."""
    return LAUNCHERS[name][1] + [sys.executable, SCRIPT] + SCRIPT_ARGS.get(name, [])
