#!/usr/bin/env bash
# The main job: set up the environment (once), make the EMT demo data, train a
# PiNet potential with forces, report validation/test errors, run NVE MD with it.
# Idempotent: a second run reuses the environment, the data and the model.
set -euo pipefail
cd "$(dirname "$0")"
. tools/env.sh
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}
python inputs/train_ase.py demo/alloy.xyz demo/model "${PINN_DEMO_STEPS:-3000}"
python inputs/md_ase.py demo/model 500
