#!/usr/bin/env bash
# Run the whole test suite (sets up the environment first, once).
# Extra arguments go to pytest, e.g.  ./run_tests.sh -k physics
set -euo pipefail
cd "$(dirname "$0")"
. tools/env.sh
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}
python -m pytest -q tests "$@"
