#!/usr/bin/env bash
# Train in parallel on one node with several GPUs: one task (rank) per GPU.
#
#   sbatch scripts/slurm_train_1node.sh [INPUT_SCRIPT] [ARGS...]
#   (default input: inputs/train_mimic_parallel.py)
#
# Edit the #SBATCH lines and the module names below for your cluster. Each rank
# gets its GPU from pinn (by local rank) and its share of the CPU cores.
#SBATCH --job-name=pinn-train
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=4
#SBATCH --cpus-per-task=6
#SBATCH --gres=gpu:4
#SBATCH --time=24:00:00
#SBATCH --signal=USR1@300
#SBATCH --output=pinn-%j.out
#SBATCH --open-mode=append

# --- environment: modules (skipped where there is no `module` command) ------------------
# the modules of your cluster's Python stack (docs/cluster.md), e.g. a Python 3.11 with TensorFlow 2.15 and
# Horovod, or a Python 3.12 and an MPI; none by default (PINN_MODULES="" loads none either)
PINN_MODULES=${PINN_MODULES-}
# or a venv made by scripts/install_cluster.sh:
PINN_VENV=${PINN_VENV:-}

here=${SLURM_SUBMIT_DIR:-$(pwd)}
# shellcheck source=scripts/pinn_env.sh
. "$here/scripts/pinn_env.sh"

pinn_train "$@"
