#!/usr/bin/env bash
# The main job: set up the environment (once), write MiMiC-format demo data (Lennard-Jones
# argon MD as .mpt + .trr + CPMD ENERGIES), train a PiNet potential on 2 ranks
# (distribute_data + load_mimic + parallel training with Horovod), report validation and
# test errors and the training report (PNG plots), and run NVE MD with the trained model
# through the ASE calculator.
# Idempotent: a second run reuses the environment, the data and the model (training
# continues from the last checkpoint up to PINN_DEMO_STEPS).
set -euo pipefail
cd "$(dirname "$0")"
. tools/env.sh
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-3}  # TensorFlow's C++ log lines hidden unless you set it (docs/cli.md)
ranks=${PINN_DEMO_RANKS:-2}
horovodrun -np "$ranks" --gloo python inputs/train_mimic_parallel.py demo/mimic demo/mimic-model "${PINN_DEMO_STEPS:-2000}"
pinn report demo/mimic-model | tail -n 12   # learning curves and parity plots: demo/mimic-model/report/
python inputs/md_ase.py demo/mimic-model 500 demo/mimic/argon.xyz 60
