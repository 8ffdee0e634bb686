#!/usr/bin/env bash
# The main job: set up the environment (once), write MiMiC-format demo data (Lennard-Jones
# argon MD as .mpt + .trr + CPMD ENERGIES), train a PiNet potential on 2 ranks
# (distribute_data + load_mimic + parallel training: Horovod on Python 3.11, MPI alone on 3.12+),
# report validation and
# test errors and the training report (PNG plots), and run NVE MD with the trained model
# through the ASE calculator.
# Idempotent: a second run reuses the environment, the data and the model (training
# continues from the last checkpoint up to PINN_DEMO_STEPS).
set -euo pipefail
# a failed step stops the script here, with one line naming it (the steps after it need its output)
trap 'status=$?; echo "[quickstart] stopped: \"$BASH_COMMAND\" failed with exit status $status; the steps after it were not run" >&2' ERR
cd "$(dirname "$0")"
. tools/env.sh
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-3}  # TensorFlow's C++ log lines hidden unless you set it (docs/cli.md)
ranks=${PINN_DEMO_RANKS:-2}
train=(python inputs/train_mimic_parallel.py demo/mimic demo/mimic-model "${PINN_DEMO_STEPS:-2000}")
if command -v horovodrun >/dev/null 2>&1; then      # Python 3.11: Horovod with its Gloo controller
  horovodrun -np "$ranks" --gloo "${train[@]}"
elif command -v mpirun >/dev/null 2>&1 && python -c 'import mpi4py' 2>/dev/null; then   # 3.12+: MPI alone
  openmpi=()   # Open MPI's flags for more ranks than cores, unbound; MPICH's mpirun takes neither
  if mpirun --version 2>&1 | grep -q "Open MPI"; then openmpi=(--oversubscribe --bind-to none); fi
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np "$ranks" "${openmpi[@]}" "${train[@]}"
else
  echo "[quickstart] neither horovodrun nor mpirun with mpi4py is here (apt-get install openmpi-bin libopenmpi-dev): training in one process" >&2
  "${train[@]}"
fi
pinn report demo/mimic-model | tail -n 12   # learning curves and parity plots: demo/mimic-model/report/
python inputs/md_ase.py demo/mimic-model 500 demo/mimic/argon.xyz 60
