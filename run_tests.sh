#!/usr/bin/env bash
# Run the whole test suite (sets up the environment first, once).
# Two pytest-xdist workers, a test file each at a time (the launch tests first, tests/conftest.py);
# extra arguments go to pytest, e.g.  ./run_tests.sh -k physics   or   ./run_tests.sh -n 0  (one process)
# or   ./run_tests.sh tests/networks tests/application/test_cli.py   (those folders and files instead of all
# of tests/). The launch tests (marked hpc: real horovodrun, mpirun and a private Slurm, 2 ranks each) are
# part of the suite: they wait on their ranks much of the time, in which the other worker runs the rest
# (apart: 17:38 and 25:42, together before their trims 38:08; benchmarks/results/0.30.0-dev-suite-time.jsonl);
# -m hpc runs only them, -m "not hpc" all but them. The multi-node tests (emulated nodes: root, about
# 5 minutes), the Slurm job tests and how a parallel job stops (jobs on real launchers, about 4 minutes
# together), the Numba cache-state test (a cold compile, 3-4 minutes) and `pinn learn` end to end (OpenMM, PySCF,
# a kill and resume, mpirun: about 3 minutes) run only when named:
#   ./run_tests.sh tests/parallel/test_multinode.py     (.ci/run runs them all in one leg, its long leg)
#   ./run_tests.sh tests/parallel/test_hpc_launch.py tests/parallel/test_parallel_stops.py
#   ./run_tests.sh tests/engines/test_cache_state.py
#   ./run_tests.sh tests/application/test_learn_loop.py
set -euo pipefail
cd "$(dirname "$0")"
. tools/env.sh
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}
# the whole tests/ folder but the multi-node, job, stop, cache-state and learning-loop tests, unless the arguments
# name test files or folders
targets=(tests --ignore=tests/parallel/test_multinode.py --ignore=tests/engines/test_cache_state.py
         --ignore=tests/parallel/test_hpc_launch.py --ignore=tests/parallel/test_parallel_stops.py
         --ignore=tests/application/test_learn_loop.py)
for arg in "$@"; do
  case "$arg" in tests|tests/*) targets=() ;; esac
done
python -m pytest -q -n 2 --dist loadfile "${targets[@]}" "$@"
