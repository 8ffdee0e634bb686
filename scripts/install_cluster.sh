#!/usr/bin/env bash
# Make a virtual environment for pinn on a cluster without a ready Horovod module:
# the pinned TensorFlow, Horovod built against the cluster's MPI (and NCCL when present),
# and pinn itself (editable, from this checkout).
#
#   module load GCC OpenMPI CUDA cuDNN NCCL Python/3.11   # whatever your cluster calls them
#   bash scripts/install_cluster.sh [VENV_DIR]            # default: ./venv-cluster
#
# Then in job scripts: PINN_VENV=VENV_DIR (scripts/pinn_env.sh activates it), or
# `. VENV_DIR/bin/activate`.  Run it on a node like the compute nodes (a login node with
# the same CPU and modules, or an interactive job): Horovod is compiled there.
#
# Environment variables it reads:
#   PINN_PYTHON          interpreter (default python3.11, then python3); TensorFlow 2.15 needs 3.9-3.11
#   PINN_TF              TensorFlow requirement (default tensorflow==2.15.1: the GPU build;
#                        tensorflow-cpu==2.15.1 on CPU-only clusters)
#   HOROVOD_GPU_OPERATIONS  NCCL by default when nvcc and an NCCL are found (HOROVOD_NCCL_HOME,
#                        or NCCL_HOME / EBROOTNCCL set by the module); unset it for CPU-only
#   HOROVOD_NCCL_HOME    where NCCL lives (include/, lib/)
#   CC, CXX, MPICXX      compilers; mpicxx must be the cluster MPI's wrapper
# Horovod 0.28.1 does not build against TensorFlow >= 2.16, hence the pin.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
venv="${1:-$here/venv-cluster}"
py="${PINN_PYTHON:-$(command -v python3.11 || command -v python3)}"
tf="${PINN_TF:-tensorflow==2.15.1}"

log() { printf '[pinn install] %s\n' "$*" >&2; }
command -v mpicxx >/dev/null || { log "no mpicxx on PATH: load the cluster's MPI module first"; exit 1; }
"$py" -c 'import sys; assert (3, 9) <= sys.version_info[:2] <= (3, 11), sys.version' ||
  { log "$py is not Python 3.9-3.11, which TensorFlow 2.15 needs"; exit 1; }

log "virtual environment $venv with $("$py" --version)"
"$py" -m venv "$venv"
# shellcheck disable=SC1091
. "$venv/bin/activate"
python -m pip install -q --upgrade pip 'setuptools<70' wheel
python -m pip install -q "$tf" 'numpy<2' 'cmake>=3.13,<4' packaging cloudpickle psutil pyyaml

build=(HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_MPI=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_PYTORCH=1
       HOROVOD_WITHOUT_MXNET=1 CMAKE_POLICY_VERSION_MINIMUM=3.5)
nccl_home="${HOROVOD_NCCL_HOME:-${NCCL_HOME:-${EBROOTNCCL:-}}}"
if [ -z "${HOROVOD_GPU_OPERATIONS+set}" ] && command -v nvcc >/dev/null && [ -n "$nccl_home" ]; then
  export HOROVOD_GPU_OPERATIONS=NCCL
fi
if [ -n "${HOROVOD_GPU_OPERATIONS:-}" ]; then
  build+=(HOROVOD_GPU_OPERATIONS="$HOROVOD_GPU_OPERATIONS")
  [ -n "$nccl_home" ] && build+=(HOROVOD_NCCL_HOME="$nccl_home")
  log "Horovod with MPI, Gloo and GPU operations $HOROVOD_GPU_OPERATIONS (NCCL: ${nccl_home:-system})"
else
  log "Horovod with MPI and Gloo, CPU operations"
fi
env "${build[@]}" MAKEFLAGS="-j${SLURM_CPUS_PER_TASK:-$(nproc)}" \
  python -m pip install -q --no-build-isolation --no-cache-dir horovod==0.28.1
# the per-step exchange of parallel training (pinn.parallel.mpi_host), built against the loaded MPI module
log "mpi4py against $(command -v mpicc || echo 'no mpicc')"
python -m pip install -q --no-cache-dir --no-binary mpi4py 'mpi4py>=3.1'
python -m pip install -q -e "$here"
horovodrun --check-build
log "done: PINN_VENV=$venv sbatch scripts/slurm_train_1node.sh"
