"""Train a PiNet potential on any ASE-readable file (energies and forces).

Usage:  python inputs/train_ase.py [DATA.xyz] [MODEL_DIR] [MAX_STEPS]

Copy and edit: the params dict is the whole configuration (see docs/params.md).
Without arguments it trains on the EMT CuAu demo data (written if missing).
Running it again continues from the last checkpoint in MODEL_DIR.
"""
import os
import sys

from pinn.runtime import quiet_tensorflow

quiet_tensorflow()  # before TensorFlow is imported: its start-up messages only if TF_CPP_MIN_LOG_LEVEL is set

from pinn.io import add_neighbors, load_ase, sparse_batch  # noqa: E402
from pinn.models import potential_model  # noqa: E402

data_file = sys.argv[1] if len(sys.argv) > 1 else "demo/alloy.xyz"
model_dir = sys.argv[2] if len(sys.argv) > 2 else "demo/model"
max_steps = int(sys.argv[3]) if len(sys.argv) > 3 else 3000

if not os.path.exists(data_file) and data_file == "demo/alloy.xyz":
    from pinn.demo import make_alloy_dataset
    print(f"writing EMT demo data to {data_file}")
    make_alloy_dataset(data_file, n_frames=400, seed=0)

dataset = lambda: load_ase(data_file, split={"train": 8, "vali": 1, "test": 1}, seed=0)
# neighbor lists once per structure, before the cache (not at every step)
train = lambda: (dataset()["train"].apply(add_neighbors(4.5)).cache().repeat().shuffle(1000, seed=0)
                 .apply(sparse_batch(16)))
vali = lambda: dataset()["vali"].apply(sparse_batch(16))
test = lambda: dataset()["test"].apply(sparse_batch(16))

params = {
    "model_dir": model_dir,
    "network": {"name": "PiNet",
                "params": {"atom_types": [29, 79], "rc": 4.5, "depth": 4, "pp_nodes": [16, 16],
                           "pi_nodes": [16, 16], "ii_nodes": [16, 16], "out_nodes": [16, 16],
                           "basis_type": "polynomial", "n_basis": 4, "cutoff_type": "f1", "act": "tanh"}},
    "model": {"name": "potential_model",
              # the default training settings: Adam 5e-3, warmup, cosine decay, weight average
              "params": {"use_force": True, "f_loss_multiplier": 10.0, "fit_e_dress": True,
                         "save_checkpoint_steps": 500, "log_every_n_steps": 250}},
}

model = potential_model(params)
model.train(input_fn=train, max_steps=max_steps)
for name, input_fn in (("validation", vali), ("test", test)):
    m = model.evaluate(input_fn=input_fn)
    print(f"{name:>10}: E_MAE {m['E_MAE'] * 1000:8.2f} meV   E_RMSE {m['E_RMSE'] * 1000:8.2f} meV   "
          f"F_MAE {m['F_MAE'] * 1000:8.1f} meV/Å   F_RMSE {m['F_RMSE'] * 1000:8.1f} meV/Å   "
          f"(step {m['global_step']})")
