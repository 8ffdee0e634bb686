#!/usr/bin/env bash
# A restart chain: train until the walltime signal, checkpoint, resubmit this job; repeat
# until the input script finishes (status 0) or fails (any status but 75).
#
#   sbatch scripts/slurm_restart_chain.sh [INPUT_SCRIPT] [ARGS...]
#
# 300 s before the walltime Slurm sends SIGUSR1 to every task (--signal=USR1@300); pinn's
# trainer agrees across ranks, rank 0 writes a checkpoint, and all ranks exit with 75. This
# script then submits itself again with the same arguments (plus PINN_SBATCH_ARGS, for
# options given on the first sbatch command line), and the next job resumes from the
# checkpoint. PINN_MAX_CHAIN (default 20) bounds the number of jobs.
#
# A node lost mid-run: Slurm ends the job (NODE_FAIL, once the node has not answered for the
# site's SlurmdTimeout) and, the job being requeueable (--requeue), queues it again; it starts
# afresh with the same arguments on the next allocation and resumes from the newest checkpoint.
# The output file is appended to (--open-mode=append), so the lost run's lines stay.
#SBATCH --job-name=pinn-chain
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=4
#SBATCH --cpus-per-task=6
#SBATCH --gres=gpu:4
#SBATCH --time=04:00:00
#SBATCH --signal=USR1@300
#SBATCH --output=pinn-%j.out
#SBATCH --requeue
#SBATCH --open-mode=append

# the modules of your cluster's Python stack (docs/cluster.md), e.g. a Python 3.11 with TensorFlow 2.15 and
# Horovod, or a Python 3.12 and an MPI; none by default (PINN_MODULES="" loads none either)
PINN_MODULES=${PINN_MODULES-}
PINN_VENV=${PINN_VENV:-}
PINN_MAX_CHAIN=${PINN_MAX_CHAIN:-20}
PINN_CHAIN_INDEX=${PINN_CHAIN_INDEX:-1}

here=${SLURM_SUBMIT_DIR:-$(pwd)}
# shellcheck source=scripts/pinn_env.sh
. "$here/scripts/pinn_env.sh"

echo "pinn: restart chain, job $PINN_CHAIN_INDEX of at most $PINN_MAX_CHAIN${SLURM_RESTART_COUNT:+, requeued by Slurm \
after a failure (restart $SLURM_RESTART_COUNT)}" >&2
pinn_train "$@"
status=$?
if [ "$status" -eq 75 ]; then
  if [ "$PINN_CHAIN_INDEX" -ge "$PINN_MAX_CHAIN" ]; then
    echo "pinn: PINN_MAX_CHAIN=$PINN_MAX_CHAIN jobs done; not resubmitting" >&2
    exit 75
  fi
  next=$((PINN_CHAIN_INDEX + 1))
  # shellcheck disable=SC2086
  PINN_CHAIN_INDEX=$next sbatch --export=ALL ${PINN_SBATCH_ARGS:-} "$here/scripts/slurm_restart_chain.sh" "$@" ||
    { echo "pinn: resubmission failed" >&2; exit 1; }
  echo "pinn: resubmitted as job $next of the chain" >&2
  exit 0
fi
exit "$status"
