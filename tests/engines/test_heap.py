"""The engines' heap thresholds (pinn.engines.heap): freed blocks stay mapped, counted in page faults.

Each case runs in a fresh process (the thresholds are the process's): it allocates and frees 48 arrays of 1 MiB
six times, as an engine call allocates its per-atom arrays, and counts the minor page faults of the last five
rounds.  With glibc's defaults the freed top of the heap goes back to the system and every round faults its pages
in again; with :func:`keep_heap` none do.
"""
import json
import os
import subprocess
import sys

import pytest

_ROUNDS = """
import json, resource, sys
import numpy as np
from pinn.engines.heap import keep_heap
kept = keep_heap()
faults = []
for _ in range(6):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    arrays = [np.ones(1 << 17) for _ in range(48)]  # 48 x 1 MiB, written
    del arrays
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps({"kept": kept, "faults": faults[1:]}))
"""
_PAGES = 48 * (1 << 20) // 4096


def _rounds(**env):
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "PINN_KEEP_HEAP"}
    done = subprocess.run([sys.executable, "-c", _ROUNDS], env=dict(environment, **env), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_freed_arrays_stay_mapped_and_the_opt_out_leaves_the_defaults():
    kept = _rounds()
    assert kept["kept"] is True
    assert max(kept["faults"]) < 0.05 * _PAGES, kept
    default = _rounds(PINN_KEEP_HEAP="0")
    assert default["kept"] is False
    assert min(default["faults"]) > 0.5 * _PAGES, default  # what the thresholds remove


def test_a_users_malloc_setting_is_left_alone():
    run = _rounds(MALLOC_TRIM_THRESHOLD_="131072")
    assert run["kept"] is False


def test_a_bad_opt_out_value_is_refused_by_name():
    done = subprocess.run([sys.executable, "-c", "from pinn.engines.heap import keep_heap; keep_heap()"],
                          env=dict(os.environ, PINN_KEEP_HEAP="no"), capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "PINN_KEEP_HEAP must be 0" in done.stderr


_ENGINES = """
import sys
sys.path.insert(0, sys.argv[1])
from physics import perturbed_model
from pinn.engines import heap
from pinn.engines.gradients import TrainingEngine
from pinn.engines.md import FastPiNet
model = perturbed_model("PiNet", {"atom_types": [1, 6, 8, 29], "rc": 4.0, "depth": 2, "pp_nodes": [4],
                                  "pi_nodes": [4, 4], "ii_nodes": [4], "out_nodes": [4], "n_basis": 3})
built = []
for engine in (FastPiNet, TrainingEngine):
    heap._state.update(done=False, kept=False)
    engine(model)
    built.append(heap._state["kept"])
print(built)
"""


def test_both_engines_keep_the_heap_when_built():
    """The MD engine and the training engine each raise the thresholds when constructed."""
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "PINN_KEEP_HEAP"}
    done = subprocess.run([sys.executable, "-c", _ENGINES, tests], env=environment, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-1] == "[True, True]"
