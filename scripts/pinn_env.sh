# Sourced by the job scripts in scripts/: loads the environment and defines pinn_srun.
#
# Variables (set them before sbatch, or edit the job script):
#   PINN_MODULES     modules to load (none by default), e.g. "Python/3.12 OpenMPI/4.1"; skipped
#                    where there is no `module` command (a workstation, CI)
#   PINN_VENV        a virtual environment to activate (scripts/install_cluster.sh makes one)
#   PINN_SRUN_MPI    srun's --mpi plugin (default pmix: Horovod's MPI controller needs it)
#   PINN_CPU_BIND    srun's --cpu-bind (default cores: each rank on its --cpus-per-task cores)
#   PINN_SRUN_ARGS   more srun options
#   PINN_STAGE_DIR   a data folder to copy to each node's local scratch ($TMPDIR) before training;
#                    the input script's arguments then name the copy instead (stage-in, one copy per node)
# Each rank runs with OMP_NUM_THREADS = --cpus-per-task; pinn gives TensorFlow the cores
# the rank is bound to and pins it to the GPU of its local rank.

if [ -n "${PINN_MODULES:-}" ]; then
  if command -v module >/dev/null 2>&1; then
    # shellcheck disable=SC2086
    module load $PINN_MODULES || { echo "pinn: module load $PINN_MODULES failed" >&2; exit 1; }
  else
    echo "pinn: no 'module' command here; skipping module load $PINN_MODULES" >&2
  fi
fi
if [ -n "${PINN_VENV:-}" ]; then
  # shellcheck disable=SC1091
  . "$PINN_VENV/bin/activate"
fi
export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-${OMP_NUM_THREADS:-1}}
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}
export PYTHONUNBUFFERED=1
cd "${SLURM_SUBMIT_DIR:-.}" || exit 1
echo "pinn: job ${SLURM_JOB_ID:-?} on ${SLURM_JOB_NODELIST:-$(hostname)}: ${SLURM_NTASKS:-1} task(s), " \
     "${SLURM_CPUS_PER_TASK:-?} cpu(s) per task, python $(command -v python)" >&2

pinn_srun() {
  # shellcheck disable=SC2086
  srun --mpi="${PINN_SRUN_MPI:-pmix}" --cpu-bind="${PINN_CPU_BIND:-cores}" ${PINN_SRUN_ARGS:-} "$@"
}

pinn_stage() {
  # copy PINN_STAGE_DIR to $TMPDIR/pinn-stage on every node of the job (one task per node), and say so
  local source=${PINN_STAGE_DIR%/} target=${TMPDIR:-/tmp}/pinn-stage
  [ -d "$source" ] || { echo "pinn: PINN_STAGE_DIR $source is not a folder" >&2; return 1; }
  srun --ntasks="${SLURM_NNODES:-1}" --ntasks-per-node=1 --mpi=none \
    sh -c 'rm -rf "$1" && mkdir -p "$1" && cp -r "$2"/. "$1"/' staging "$target" "$source" || {
    echo "pinn: staging $source to $target failed" >&2; return 1; }
  echo "pinn: staged $source to $target on ${SLURM_NNODES:-1} node(s)" >&2
}

pinn_train() {
  # srun the input script (default inputs/train_mimic_parallel.py) with its arguments on all
  # tasks, say what its exit status means, and return it; with PINN_STAGE_DIR, the data are first
  # copied to each node's scratch and the arguments that name PINN_STAGE_DIR name the copy
  local input=${1:-inputs/train_mimic_parallel.py}
  [ $# -gt 0 ] && shift
  if [ -n "${PINN_STAGE_DIR:-}" ]; then
    pinn_stage || return 1
    local staged=() arg
    local renamed=0
    for arg in "$@"; do
      staged+=("${arg/#"${PINN_STAGE_DIR%/}"/${TMPDIR:-/tmp}/pinn-stage}")
      [ "${staged[-1]}" != "$arg" ] && renamed=$((renamed + 1))
    done
    set -- "${staged[@]}"
    echo "pinn: $renamed argument(s) of the input script now name the copy" >&2
  fi
  pinn_srun python "$input" "$@"
  local status=$?
  pinn_report_exit "$status"
  return "$status"
}

pinn_report_exit() {
  case "$1" in
    0) echo "pinn: training finished" >&2 ;;
    75) echo "pinn: stopped by the walltime/preemption signal after writing a checkpoint; submit again to resume" >&2 ;;
    70) echo "pinn: a rank stalled (stall_timeout_s); see the log of each rank" >&2 ;;
    *) echo "pinn: training failed with status $1; see the log above" >&2 ;;
  esac
}
