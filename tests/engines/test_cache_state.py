"""Results do not depend on the Numba cache state: a process that compiles the kernels (cold cache) and one that
loads them (warm) give the same numbers to the bit (pinn.engines.numba.warm_cache).

A cold compile of the training and MD kernels takes 3-4 minutes on 2 cores, so this file runs only when named
(``./run_tests.sh tests/engines/test_cache_state.py``); .ci/run runs it as a leg of its own.
"""
import numpy as np


# one process computes a training gradient and an MD energy/forces (float32, the alloy) and
# saves them; run with a cold NUMBA_CACHE_DIR and again with the warm one
_CACHE_STATE_CHILD = r"""
import sys
import numpy as np
from ase.build import bulk
sys.path.insert(0, sys.argv[2])
from physics import alloy_cell, make_model
from pinn import keys as K
from pinn.engines.gradients import TrainingEngine
from pinn.engines.md import FastPiNet
from pinn.io.batch import batch_from_atoms
from pinn.io.neighbors import neighbor_list

model = make_model("PiNet", {"atom_types": [29, 79], "rc": 4.5, "depth": 2}, "float32")
rng = np.random.RandomState(0)
for v in model.trainable_variables:
    v.assign(v.numpy() + 0.1 * rng.randn(*v.shape))
cells = [alloy_cell(np.random.default_rng(seed)) for seed in range(8)]
batch = batch_from_atoms(cells, 4.5, "float32")
batch[K.E_DATA] = (rng.randn(len(cells)) * 0.3 - 20).astype("float32")
batch[K.F_DATA] = (rng.randn(len(batch[K.ELEMS]), 3) * 0.5).astype("float32")
engine = TrainingEngine(model)
engine.set_weights([v.numpy() for v in model.trainable_variables])
n = float(len(batch[K.ELEMS]))
out = engine(batch, {"energy": 1.0, "forces": 1.0}, {"energy": float(len(cells)), "forces": 3.0 * n})
atoms = cells[0]
ind, shift = neighbor_list(atoms.positions, atoms.cell[:], atoms.pbc, 5.0)
md = FastPiNet(model)(atoms.numbers, atoms.positions, ind[:, 0].copy(), ind[:, 1].copy(), shift @ atoms.cell[:],
                      atoms.cell[:], atoms.pbc)
np.savez(sys.argv[1], gradient=engine.flat_gradient(), energies=out["energy"], forces=out["forces"],
         md_energy=md["energy"], md_forces=md["forces"], md_virial=md["virial"])
"""


def test_results_do_not_depend_on_the_numba_cache_state(tmp_path):
    """A process that finds the Numba cache cold (kernels compiled for it) and one that finds it
    warm (kernels loaded): the same numbers to the bit.  Freshly compiled and cached fastmath
    code reassociate sums differently, so every process runs the cached code (the kernels are
    compiled in a child process; pinn.engines.numba.warm_cache).  Compiles the float32 training
    and MD kernels once (1-3 minutes on 2 cores)."""
    import os
    import subprocess
    import sys
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba"), "TF_CPP_MIN_LOG_LEVEL": "2"}
    results = []
    for state in ("cold", "warm"):
        path = tmp_path / f"{state}.npz"
        done = subprocess.run([sys.executable, "-c", _CACHE_STATE_CHILD, str(path), tests], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert done.returncode == 0, done.stdout[-3000:]
        results.append(np.load(path))
    cold, warm = results
    for key in cold.files:
        np.testing.assert_array_equal(cold[key], warm[key], err_msg=key)
