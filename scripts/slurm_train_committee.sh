#!/usr/bin/env bash
# Train a committee in one job: one array task per member, all at the same time; each member is
# data-parallel over its task's ranks (one rank per GPU, as slurm_train_1node.sh).
#
#   sbatch --array=0-3 scripts/slurm_train_committee.sh RUN_FILE [PINN_TRAIN_OPTIONS...]
#   e.g.  sbatch --array=0-3 scripts/slurm_train_committee.sh run.yml -d gen1 --init-model gen0
#
# Task K trains member K of a committee of as many members as the array has tasks
# (`pinn train RUN_FILE --committee N --member K`: MODEL_DIR/member-K, seed + K, its own data
# order; with --init-model a directory of members, from its member-K). `pinn report MODEL_DIR`
# then shows the members and their mean ± spread. Edit the #SBATCH lines and the module names
# for your cluster.
#SBATCH --job-name=pinn-committee
#SBATCH --array=0-3
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=8
#SBATCH --gres=gpu:1
#SBATCH --time=24:00:00
#SBATCH --signal=USR1@300
#SBATCH --output=pinn-%A_%a.out
#SBATCH --open-mode=append

# --- environment: modules (skipped where there is no `module` command) ------------------
PINN_MODULES=${PINN_MODULES-}
PINN_VENV=${PINN_VENV:-}

here=${SLURM_SUBMIT_DIR:-$(pwd)}
# shellcheck source=scripts/pinn_env.sh
. "$here/scripts/pinn_env.sh"

if [ -z "${SLURM_ARRAY_TASK_ID:-}" ] || [ -z "${SLURM_ARRAY_TASK_COUNT:-}" ]; then
  echo "pinn: submit this script as a job array, one task per member: sbatch --array=0-3 $0 RUN_FILE" >&2
  exit 2
fi
if [ $# -lt 1 ]; then
  echo "pinn: give the run file: sbatch --array=0-3 $0 RUN_FILE [OPTIONS]" >&2
  exit 2
fi
run_file=$1
shift
echo "pinn: committee member $SLURM_ARRAY_TASK_ID of $SLURM_ARRAY_TASK_COUNT" >&2
pinn_srun pinn train "$run_file" --committee "$SLURM_ARRAY_TASK_COUNT" --member "$SLURM_ARRAY_TASK_ID" "$@"
status=$?
pinn_report_exit "$status"
exit "$status"
