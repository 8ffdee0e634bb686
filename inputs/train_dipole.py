"""Train a dipole model (atomic charges → dipole moment) on any ASE-readable file with dipoles and charges.

Usage:  python inputs/train_dipole.py [DATA.xyz] [MODEL_DIR] [MAX_EPOCHS]
        horovodrun -np 2 python inputs/train_dipole.py ...   (or srun / mpirun: the same script on N ranks)

Copy and edit: the params dict is the whole configuration (docs/dipole.md,
docs/training.md).  Without arguments it trains on water clusters with
charge-equilibration charges (pinn.demo, written if missing).  Launched on
several ranks it trains in parallel, each rank on its shard of the data.
Running it again continues from the last checkpoint in MODEL_DIR.
"""
import os
import sys

from pinn.runtime import quiet_tensorflow

quiet_tensorflow()  # before TensorFlow is imported: its start-up messages only if TF_CPP_MIN_LOG_LEVEL is set

from pinn.io import add_neighbors, load_ase, sparse_batch  # noqa: E402
from pinn.models import dipole_model  # noqa: E402
from pinn.parallel import init  # noqa: E402
from pinn.runtime.ranks import launcher_size  # noqa: E402

data_file = sys.argv[1] if len(sys.argv) > 1 else "demo/water-dipole.xyz"
model_dir = sys.argv[2] if len(sys.argv) > 2 else "demo/dipole-model"
max_epochs = float(sys.argv[3]) if len(sys.argv) > 3 else 60

params = {
    "model_dir": model_dir,
    "network": {"name": "PiNet",
                "params": {"atom_types": [1, 8], "rc": 4.0, "depth": 3, "pp_nodes": [16, 16],
                           "pi_nodes": [16, 16], "ii_nodes": [16, 16], "out_nodes": [16, 16],
                           "basis_type": "polynomial", "n_basis": 5, "cutoff_type": "f1", "act": "tanh"}},
    "model": {"name": "dipole_model",
              "params": {"use_dipole": True, "use_charge": True, "charge_neutrality": True,
                         "d_loss_multiplier": 1.0, "q_loss_multiplier": 1.0,
                         "learning_rate": 3e-3, "lr_schedule": "cosine", "lr_warmup_steps": 50,
                         "lr_min_factor": 0.02, "ema_decay": 0.99,
                         "eval_every_n_steps": 100, "early_stopping_patience": 10,
                         "save_checkpoint_steps": 500, "log_every_n_steps": 100}},
    "parallel": launcher_size() > 1,  # one script for 1 rank and N
}

# The world of this run, first: on N ranks Horovod or MPI alone starts and pins this process to its GPU
# (or its share of the cores); on one, a world of one process. Then the data, then the model.
world = init(params)

if world.is_chief and not os.path.exists(data_file) and data_file == "demo/water-dipole.xyz":
    from pinn.demo import make_dipole_dataset
    print(f"writing the water-cluster dipole demo data to {data_file}", flush=True)
    make_dipole_dataset(data_file, n_frames=600, seed=0)
world.barrier()  # the other ranks wait for the data

data = load_ase(data_file, split={"train": 8, "vali": 1, "test": 1}, seed=0)
shard = lambda d: d.shard(world.size, world.rank)  # noqa: E731  (each rank its share; the whole set on 1)
# neighbor lists once per structure, before the cache (not at every epoch)
rc = params["network"]["params"]["rc"]
train = lambda: (shard(data["train"]).apply(add_neighbors(rc)).cache().shuffle(1000, seed=world.rank)
                 .apply(sparse_batch(16)))
vali = lambda: shard(data["vali"]).apply(sparse_batch(16))
test = lambda: shard(data["test"]).apply(sparse_batch(16))

model = dipole_model(params, world=world)

model.train(train, max_epochs=max_epochs, eval_fn=vali)
for name, input_fn in (("validation", vali), ("test", test)):
    m = model.evaluate(input_fn)  # summed over all ranks: the same numbers everywhere
    if world.is_chief:
        print(f"{name:>10}: D_MAE {m['D_MAE']:.4f} e·Å   D_RMSE {m['D_RMSE']:.4f} e·Å   "
              f"Q_MAE {m['Q_MAE']:.4f} e   Q_RMSE {m['Q_RMSE']:.4f} e   "
              f"(step {m['global_step']}, {world.size} rank(s))", flush=True)
