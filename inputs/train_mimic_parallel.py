"""Train a PiNet potential on MiMiC QM/MM output, in parallel (one process per GPU or per core group).

Usage:
    python inputs/train_mimic_parallel.py [DATA_DIR] [MODEL_DIR] [MAX_STEPS]          # 1 process
    horovodrun -np 2 --gloo python inputs/train_mimic_parallel.py ...                # 2 ranks, Gloo
    mpirun -np 2 python inputs/train_mimic_parallel.py ...                           # 2 ranks, MPI
    srun -n 2 python inputs/train_mimic_parallel.py ...                              # Slurm (scripts/)

DATA_DIR holds the runs: one ``.mpt`` and, per run, ``NAME.trr`` with
``NAME.ENERGIES`` (or a folder per run holding ``*.trr`` and ``ENERGIES``; edit
``find_runs`` for other layouts).  Without one, the argon demo data is written
there first (``pinn.demo.make_mimic_demo``: Lennard-Jones argon MD written as
MiMiC output, nm / kJ mol⁻¹ nm⁻¹ / Hartree).  Each rank trains on its own whole
runs (``distribute_data``), gradients are summed over all ranks every step,
and rank 0 writes MODEL_DIR.  Running the same command again continues from
the last checkpoint; after SIGTERM/SIGUSR1 (walltime) it exits with status 75
once the checkpoint is written.
"""
import glob
import os
import sys

from pinn.runtime import quiet_tensorflow

quiet_tensorflow()  # before TensorFlow is imported: its start-up messages only if TF_CPP_MIN_LOG_LEVEL is set

from pinn.io import add_neighbors, distribute_data, load_mimic, sparse_batch  # noqa: E402
from pinn.models import potential_model  # noqa: E402
from pinn.parallel import init  # noqa: E402

data_dir = sys.argv[1] if len(sys.argv) > 1 else "demo/mimic"
model_dir = sys.argv[2] if len(sys.argv) > 2 else "demo/mimic-model"
max_steps = int(sys.argv[3]) if len(sys.argv) > 3 else 2000

params = {
    "model_dir": model_dir,
    "network": {"name": "PiNet",
                "params": {"atom_types": [18], "rc": 6.0, "depth": 3, "pp_nodes": [16, 16], "pi_nodes": [16, 16],
                           "ii_nodes": [16, 16], "out_nodes": [16, 16], "basis_type": "polynomial", "n_basis": 6,
                           "cutoff_type": "f1", "act": "tanh"}},
    "model": {"name": "potential_model",
              "params": {"use_force": True, "f_loss_multiplier": 10.0, "fit_e_dress": True,
                         "learning_rate": 1e-3, "lr_schedule": "exponential", "decay_step": 2000, "decay_rate": 0.5,
                         "save_checkpoint_steps": 500, "log_every_n_steps": 100,
                         "eval_every_n_steps": 250, "ema_decay": 0.99}},
    "parallel": True,
    "parallel_params": {"lr_scaling": "linear", "warmup_steps": 100},
}

# The world of this run, first: Horovod or MPI alone starts and pins this process to its GPU
# before any other TensorFlow work (a SerialWorld for a process started alone without either).
world = init(params)


def find_runs(directory):
    """(mpt, trr, ENERGIES) lists, one entry per run, sorted by name."""
    trrs = sorted(glob.glob(os.path.join(directory, "*.trr")))
    if trrs:
        mpt = sorted(glob.glob(os.path.join(directory, "*.mpt")))[0]
        return [mpt] * len(trrs), trrs, [t[:-len(".trr")] + ".ENERGIES" for t in trrs]
    runs = sorted(d for d in glob.glob(os.path.join(directory, "*")) if glob.glob(os.path.join(d, "*.trr")))
    return ([sorted(glob.glob(os.path.join(d, "*.mpt")))[0] for d in runs],
            [sorted(glob.glob(os.path.join(d, "*.trr")))[0] for d in runs],
            [os.path.join(d, "ENERGIES") for d in runs])


if world.is_chief and not glob.glob(os.path.join(data_dir, "**", "*.trr"), recursive=True):
    from pinn.demo import make_mimic_demo
    print(f"writing the argon MiMiC demo data to {data_dir}", flush=True)
    make_mimic_demo(data_dir)
world.barrier()  # the other ranks wait for the data

# this rank's whole runs, balanced by frame count; then its datasets
mpt, trr, energies = distribute_data(*find_runs(data_dir), world=world)
# the demo's trr forces are exact LJ forces; in real MiMiC output they are MM-only (docs/mimic.md)
data = load_mimic(mpt, trr, energies, split={"train": 8, "vali": 1, "test": 1}, seed=0, forces="trr")
model = potential_model(params, world=world)
# neighbor lists once per structure, before the cache (not at every step)
train = lambda: (data["train"].apply(add_neighbors(model.rc)).cache().repeat().shuffle(1000, seed=world.rank)
                 .apply(sparse_batch(8)))
vali = lambda: data["vali"].apply(sparse_batch(8))
test = lambda: data["test"].apply(sparse_batch(8))

# validation every eval_every_n_steps: metrics.jsonl, the best checkpoint, parity data for `pinn report`
model.train(input_fn=train, max_steps=max_steps, eval_fn=vali)
for name, input_fn in (("validation", vali), ("test", test)):
    m = model.evaluate(input_fn=input_fn)  # sums over all ranks: the same numbers everywhere
    if world.is_chief:
        print(f"{name:>10}: E_MAE {m['E_MAE'] * 1000:8.2f} meV   E_RMSE {m['E_RMSE'] * 1000:8.2f} meV   "
              f"F_MAE {m['F_MAE'] * 1000:8.1f} meV/Å   F_RMSE {m['F_RMSE'] * 1000:8.1f} meV/Å   "
              f"(step {m['global_step']}, {world.size} rank(s))", flush=True)
