#!/usr/bin/env bash
# Creates (once) and activates the project's Python environment.
#
# Source it:  . tools/env.sh
# It is idempotent: a second call reuses the virtual environment and the cached
# Horovod wheel.  Variables that change its behaviour:
#   PINN_VENV       where the venv lives          (default: <repo>/.venv)
#   PINN_PYTHON     interpreter used to create it (default: python3.11, then python3)
#   PINN_CACHE      wheel cache for Horovod        (default: ~/.cache/pinn)
#   PINN_TF         TensorFlow requirement         (default: tensorflow-cpu==2.15.1;
#                   GPU machines: tensorflow==2.15.1)
#   PINN_NO_HOROVOD=1  skip Horovod (single-process use only)
set -eo pipefail
PINN_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PINN_VENV="${PINN_VENV:-$PINN_ROOT/.venv}"
PINN_CACHE="${PINN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pinn}"
PINN_TF="${PINN_TF:-tensorflow-cpu==2.15.1}"
HOROVOD_VERSION=0.28.1

_log() { printf '[pinn env] %s\n' "$*" >&2; }

if [ ! -x "$PINN_VENV/bin/python" ]; then
  py="${PINN_PYTHON:-}"
  if [ -z "$py" ]; then
    if command -v python3.11 >/dev/null 2>&1; then py=python3.11; else py=python3; fi
  fi
  "$py" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' 2>/dev/null ||
    _log "warning: $py is not Python 3.11; TensorFlow 2.15 supports 3.9-3.11"
  _log "creating virtual environment $PINN_VENV with $py"
  "$py" -m venv "$PINN_VENV"
fi
# shellcheck disable=SC1091
. "$PINN_VENV/bin/activate"

# Python packages: reinstalled only when the requirement files change.
req_hash=$(cat "$PINN_ROOT/setup.py" "$PINN_ROOT/tools/env.sh" | sha256sum | cut -c1-16)
stamp="$PINN_VENV/.pinn-deps-$req_hash"
if [ ! -f "$stamp" ]; then
  _log "installing Python dependencies ($PINN_TF, numpy<2, ase, test tools)"
  python -m pip install -q --upgrade pip 'setuptools<70' wheel
  python -m pip install -q "$PINN_TF" 'numpy<2'
  python -m pip install -q -e "$PINN_ROOT[test]"
  rm -f "$PINN_VENV"/.pinn-deps-*
  touch "$stamp"
fi

# Horovod, built from source against the installed TensorFlow, cached as a wheel.
# The flavour says which controllers it has: MPI is added when OpenMPI (mpicxx,
# mpirun) is installed, and a Horovod built before MPI appeared is rebuilt once.
horovod_flavour="gloo"
if command -v mpicxx >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1; then horovod_flavour="gloo-mpi"; fi
if [ -n "${HOROVOD_GPU_OPERATIONS:-}" ]; then horovod_flavour="$horovod_flavour-gpu$HOROVOD_GPU_OPERATIONS"; fi
horovod_stamp="$PINN_VENV/.pinn-horovod-$horovod_flavour"
if [ "${PINN_NO_HOROVOD:-0}" != 1 ] &&
   { [ ! -f "$horovod_stamp" ] || ! python -c 'import horovod.tensorflow' >/dev/null 2>&1; }; then
  tfver=$(python -c 'import tensorflow as tf; print(tf.__version__)' 2>/dev/null)
  flavour="$horovod_flavour"
  build_env=(HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_PYTORCH=1
             HOROVOD_WITHOUT_MXNET=1 CMAKE_POLICY_VERSION_MINIMUM=3.5)
  case "$flavour" in
    *mpi*) build_env+=(HOROVOD_WITH_MPI=1) ;;
    *) build_env+=(HOROVOD_WITHOUT_MPI=1) ;;
  esac
  wheeldir="$PINN_CACHE/wheels/horovod-$HOROVOD_VERSION-tf$tfver-py$(python -c 'import sys; print("%d%d" % sys.version_info[:2])')-$flavour"
  if ! ls "$wheeldir"/horovod-*.whl >/dev/null 2>&1; then
    _log "building Horovod $HOROVOD_VERSION ($flavour) against TensorFlow $tfver; this takes 2-7 minutes once"
    mkdir -p "$wheeldir"
    python -m pip install -q 'cmake>=3.13,<4' 'packaging' 'cloudpickle' 'psutil' 'pyyaml'
    env "${build_env[@]}" MAKEFLAGS="-j$(nproc)" \
      python -m pip wheel --no-deps --no-build-isolation --no-cache-dir \
      -w "$wheeldir" "horovod==$HOROVOD_VERSION"
  fi
  python -m pip install -q --force-reinstall --no-deps "$wheeldir"/horovod-*.whl
  python -m pip install -q 'cloudpickle' 'psutil' 'pyyaml' 'packaging'
  rm -f "$PINN_VENV"/.pinn-horovod-*
  touch "$horovod_stamp"
  horovodrun --check-build >&2 || true
fi
# mpi4py carries the per-step exchange of MPI-launched jobs (pinn.parallel.mpi_host); its wheel
# finds the installed MPI library at run time
if [ "${PINN_NO_HOROVOD:-0}" != 1 ] && command -v mpirun >/dev/null 2>&1 &&
   ! python -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("mpi4py") is None)' 2>/dev/null; then
  python -m pip install -q 'mpi4py>=3.1'
fi
set +eo pipefail
