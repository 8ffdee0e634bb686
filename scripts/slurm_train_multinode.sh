#!/usr/bin/env bash
# Train in parallel on several nodes with several GPUs each: one task (rank) per GPU.
#
#   sbatch scripts/slurm_train_multinode.sh [INPUT_SCRIPT] [ARGS...]
#
# Ranks talk over MPI (Horovod's MPI controller; NCCL for GPU allreduces when
# Horovod was built with it). The model directory must be on a file system all
# nodes see only for the data: checkpoints are written by rank 0 alone.
#SBATCH --job-name=pinn-train
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=4
#SBATCH --cpus-per-task=6
#SBATCH --gres=gpu:4
#SBATCH --time=24:00:00
#SBATCH --signal=USR1@300
#SBATCH --output=pinn-%j.out
#SBATCH --open-mode=append

# the modules of your cluster's Python stack (docs/cluster.md), e.g. a Python 3.11 with TensorFlow 2.15 and
# Horovod, or a Python 3.12 and an MPI; none by default (PINN_MODULES="" loads none either)
PINN_MODULES=${PINN_MODULES-}
PINN_VENV=${PINN_VENV:-}
# Horovod: larger fusion buffer for inter-node allreduces (also params['parallel_params'])
export HOROVOD_FUSION_THRESHOLD=${HOROVOD_FUSION_THRESHOLD:-67108864}

here=${SLURM_SUBMIT_DIR:-$(pwd)}
# shellcheck source=scripts/pinn_env.sh
. "$here/scripts/pinn_env.sh"

pinn_train "$@"
