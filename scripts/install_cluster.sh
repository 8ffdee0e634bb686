#!/usr/bin/env bash
# Make a virtual environment for pinn on a cluster, on one of two stacks chosen by the loaded Python:
#
#   Python 3.11 (a cluster with a Horovod-capable toolchain):
#     module load GCC OpenMPI CUDA cuDNN NCCL Python/3.11   # whatever your cluster calls them
#     TensorFlow 2.15.1 and Horovod 0.28.1 built against the cluster's MPI (and NCCL when present)
#   Python 3.12 or 3.13 (a cluster with only Python + MPI modules, e.g. a current software stage):
#     module load GCC OpenMPI Python/3.12
#     TensorFlow 2.21.0, NumPy 2, no Horovod: parallel training on MPI alone (parallel_params.backend)
#
# Both get mpi4py built against the loaded MPI module, and pinn itself (editable, from this checkout).
#
#   bash scripts/install_cluster.sh [VENV_DIR]            # default: ./venv-cluster
#
# Then in job scripts: PINN_VENV=VENV_DIR (scripts/pinn_env.sh activates it), or
# `. VENV_DIR/bin/activate`.  Run it on a node like the compute nodes (a login node with
# the same CPU and modules, or an interactive job): Horovod and mpi4py are compiled there.
#
# Environment variables it reads:
#   PINN_PYTHON          interpreter (default python3.11, then python3.13, python3.12, python3)
#   PINN_TF              TensorFlow requirement (default the GPU build: tensorflow==2.15.1 on 3.11,
#                        tensorflow[and-cuda]==2.21.0 on 3.12+; tensorflow-cpu==<version> on CPU-only clusters)
#   HOROVOD_GPU_OPERATIONS  (3.11) NCCL by default when nvcc and an NCCL are found (HOROVOD_NCCL_HOME,
#                        or NCCL_HOME / EBROOTNCCL set by the module); unset it for CPU-only
#   HOROVOD_NCCL_HOME    where NCCL lives (include/, lib/)
#   CC, CXX, MPICXX      compilers; mpicxx must be the cluster MPI's wrapper
# Horovod 0.28.1 does not build against TensorFlow >= 2.16, which Python 3.12+ needs: hence two stacks.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
venv="${1:-$here/venv-cluster}"
py="${PINN_PYTHON:-}"
if [ -z "$py" ]; then
  for candidate in python3.11 python3.13 python3.12 python3; do
    if "$candidate" -c 'import sys; assert sys.version_info[:2] >= (3, 11)' >/dev/null 2>&1; then py=$candidate; break; fi
  done
fi
log() { printf '[pinn install] %s\n' "$*" >&2; }
command -v mpicxx >/dev/null || { log "no mpicxx on PATH: load the cluster's MPI module first"; exit 1; }
[ -n "$py" ] && "$py" -c 'import sys, venv' >/dev/null 2>&1 ||
  { log "no Python 3.11, 3.12 or 3.13 runs here (PINN_PYTHON=${PINN_PYTHON:-unset}): load a Python module"; exit 1; }
version=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
case "$version" in
  3.11) tf="${PINN_TF:-tensorflow==2.15.1}"; numpy='numpy<2'; horovod=1 ;;
  3.12|3.13) tf="${PINN_TF:-tensorflow[and-cuda]==2.21.0}"; numpy='numpy>=2'; horovod=0 ;;
  *) log "$py is Python $version; pinn needs 3.11 (TensorFlow 2.15 + Horovod) or 3.12/3.13 (TensorFlow 2.21 + MPI)"; exit 1 ;;
esac

log "virtual environment $venv with $("$py" --version)"
"$py" -m venv "$venv" || { log "could not create $venv with $py"; exit 1; }
# shellcheck disable=SC1091
. "$venv/bin/activate"
python -m pip install -q --upgrade pip 'setuptools<70' wheel
python -m pip install -q "$tf" "$numpy" 'cmake>=3.13,<4' packaging cloudpickle psutil pyyaml

if [ "$horovod" = 1 ]; then
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
else
  log "Python $version: TensorFlow ${tf#*==}, no Horovod; parallel training on MPI alone (mpi4py)"
fi
# parallel training on MPI alone, and the per-step exchange of Horovod jobs (pinn.parallel.mpi_host),
# built against the loaded MPI module
log "mpi4py against $(command -v mpicc || echo 'no mpicc')"
python -m pip install -q --no-cache-dir --no-binary mpi4py 'mpi4py>=3.1'
python -m pip install -q -e "$here"
if [ "$horovod" = 1 ]; then horovodrun --check-build; fi
log "done: PINN_VENV=$venv sbatch scripts/slurm_train_1node.sh"
