"""PiNet2 on the Numba training engine: the loss gradients equal TensorFlow's nested tapes, or the engine refuses.

The cases are generated from ``PiNet2.PARAMS`` as the MD engine's are (test_pinet2_engine.py): each option with a
list of choices (activation, radial basis, cutoff, rank) and each boolean option (weighted), each value; the
engine computes TensorFlow's loss, energies, forces and gradients (second derivatives through the vector and
tensor paths included) to 1e-10 in float64, or refuses naming the option.  Also: deep nets with residual maps,
the force term alone, huber losses with per-atom energies and padding, float32, several threads, and six
training steps of a run file equal to the TensorFlow engine's.
"""
import os
import subprocess
import sys

import numpy as np
import pytest

from pinn.engines.lowering import capability
from pinn.networks.pinet2 import PARAMS as PINET2_PARAMS

from physics import compare_training_gradients, perturbed_model, refused_for_training, training_batch

RC = 4.5
BASE = {"atom_types": [1, 6, 8, 29], "rc": RC, "depth": 2, "pp_nodes": [5, 6], "pi_nodes": [6, 6],
        "ii_nodes": [7, 6], "out_nodes": [6], "n_basis": 3, "rank": 3, "weighted": True}
CHOICES = [(key, value) for key, option in PINET2_PARAMS.items() if option.choices for value in option.choices]
FLAGS = [(key, value) for key, option in PINET2_PARAMS.items() if option.types == (bool,) for value in (False, True)]


def _model(settings, precision="float64", **model_params):
    model = perturbed_model("PiNet2", {**BASE, **settings}, precision)
    model.params.update(use_force=True, **model_params)
    return model


@pytest.mark.parametrize("key, value", CHOICES + FLAGS)
def test_training_engine_matches_tensorflow_or_refuses(key, value):
    model = _model({key: value})
    if not refused_for_training(model, key):
        compare_training_gradients(model, training_batch("float64"), rtol=1e-10)


@pytest.mark.parametrize("rank", [3, 5])
def test_deep_nets_residual_maps_and_the_force_term_alone(rank):
    """Three blocks, two hidden PI layers, two-layer PP and output nets: with the energy weight 0 the whole
    gradient is the force loss's, the second derivative through every path."""
    model = _model({"rank": rank, "depth": 3, "pi_nodes": [6, 5, 6], "pp_nodes": [4, 6], "out_nodes": [4, 6]})
    compare_training_gradients(model, training_batch("float64"), rtol=1e-10, weights={"energy": 0.0, "forces": 1.0})


def test_huber_loss_per_atom_energies_and_padding():
    model = _model({"rank": 5, "weighted": False}, loss_type="huber",
                   huber_delta={"energy": 0.0625, "forces": 0.125}, use_e_per_atom=True)
    compare_training_gradients(model, training_batch("float64", padding=True), rtol=1e-10)


def test_energies_alone():
    model = _model({})
    model.params.update(use_force=False)
    compare_training_gradients(model, training_batch("float64"), rtol=1e-10)


def test_float32():
    compare_training_gradients(_model({"rank": 5}, "float32"), training_batch("float32"), rtol=2e-4)


def test_refuses_by_name():
    for settings, message in [({"act": "swish"}, "network.params.act"),
                              ({"pi_nodes": [6]}, "network.params.pi_nodes"),
                              ({"out_extra": {"p3": 2}}, "network.params.out_extra")]:
        answer = capability(_model(settings), "training")
        assert not answer and message in answer.reason, settings


_THREADS_SCRIPT = """
import pickle
import sys
import numpy as np
from pinn.engines.numba import pinet2_kernels
from pinn.engines.pinet2_passes import PiNet2Passes
pinet2_kernels.PARALLEL_MIN_PAIRS = 1
with open(sys.argv[1], "rb") as f:
    arrays, args = pickle.load(f)
from pinn.engines.numba import pinet2_train_kernels
from pinn.engines.numba.layout import CODE_N_BASIS
tile, n_tiles, chunks = PiNet2Passes(arrays, 3).tiling(args[1])
assert chunks == 3 and n_tiles > chunks  # a chunk has tiles past the one kept
rows = pinet2_train_kernels.tile_buffer_rows(arrays["layers"], arrays["blocks"], int(arrays["codes"][CODE_N_BASIS]))
one_tile_a_chunk = chunks * len(arrays["blocks"]) * rows * 2 * tile * arrays["flat"].dtype.itemsize
grads = []
for kept_bytes in (None, None, one_tile_a_chunk, 0):  # all tiles kept (twice), one a chunk, none
    passes = PiNet2Passes(arrays, 3, kept_bytes)
    gflat = np.zeros(len(arrays["flat"]))
    passes.gradients(*args, gflat)
    grads.append(gflat)
np.save(sys.argv[2], np.array(grads))
"""


def test_threads_give_the_one_thread_gradients(tmp_path):
    """3 threads (a process with NUMBA_NUM_THREADS=3), chunks of tiles each with its own gradient row and
    per-atom sums: the one-thread gradient, with every tile's forward kept for the reverse pass (two calls on
    the kept workspace), with one tile a chunk kept and the others computed again, and with none kept."""
    import pickle
    from pinn.engines.numba.md_kernels import find_pairs
    from pinn.engines.pinet2_passes import PiNet2Passes
    from pinn.io.neighbors import neighbor_list
    from ase.build import bulk
    model = _model({"rank": 5, "depth": 3})
    arrays = capability(model, "training").spec.arrays()
    atoms = bulk("Cu", "fcc", a=3.61, cubic=True) * (2, 2, 2)
    atoms.rattle(0.1, seed=6)
    ind, shift = neighbor_list(atoms.positions, atoms.cell[:], atoms.pbc, RC)
    n = len(ind)
    pair_i, pair_j = np.zeros(n, np.int32), np.zeros(n, np.int32)
    diff, dist = np.zeros((n, 3)), np.ones(n)
    n_pairs = find_pairs(atoms.positions, ind[:, 0].astype(np.int32), ind[:, 1].astype(np.int32),
                         shift @ atoms.cell[:], RC, pair_i, pair_j, diff, dist)
    assert n_pairs > 3 * 256  # every thread gets tiles
    rng = np.random.RandomState(4)
    passes = PiNet2Passes(arrays, 1)
    args = (passes.md.types_of(atoms.numbers), n_pairs, pair_i, pair_j, diff, dist, rng.randn(len(atoms), 3),
            rng.randn(len(atoms)))
    serial = np.zeros(len(arrays["flat"]))
    passes.gradients(*args, serial)
    with open(tmp_path / "inputs.pkl", "wb") as f:
        pickle.dump((arrays, args), f)
    subprocess.run([sys.executable, "-c", _THREADS_SCRIPT, str(tmp_path / "inputs.pkl"), str(tmp_path / "out.npy")],
                   env=dict(os.environ, NUMBA_NUM_THREADS="3"), check=True, timeout=900)
    threaded_runs = np.load(tmp_path / "out.npy")
    assert len(threaded_runs) == 4
    for threaded in threaded_runs:
        np.testing.assert_allclose(threaded, serial, rtol=0, atol=1e-12 * np.abs(serial).max())


def test_a_run_file_trains_pinet2_on_the_numba_engine_as_on_tensorflow(alloy_xyz, tmp_path):
    """``engine: auto`` picks the numba engine for PiNet2; six steps (offsets fitted, warmup, clipping, Adam,
    the weight average) give the TensorFlow engine's weights and losses."""
    from pinn.io import load_ase, sparse_batch
    from pinn.models import potential_model
    from pinn.training.metrics import read_metrics
    data = load_ase(alloy_xyz).take(30).cache()
    runs = {}
    for engine in ("auto", "tensorflow"):
        params = {"model_dir": str(tmp_path / engine), "precision": "float64", "seed": 3,
                  "network": {"name": "PiNet2", "params": {"atom_types": [29, 79], "rc": RC, "depth": 2,
                                                           "pp_nodes": [6], "pi_nodes": [6, 6], "ii_nodes": [6],
                                                           "out_nodes": [6], "rank": 3, "weighted": True}},
                  "model": {"name": "potential_model",
                            "params": {"use_force": True, "learning_rate": 3e-3, "lr_warmup_steps": 2,
                                       "ema_decay": 0.9, "max_grad_norm": 0.5, "fit_e_dress": True,
                                       "fit_e_dress_batches": 2, "log_every_n_steps": 1, "tensorboard": False,
                                       "engine": engine, "jit": False if engine == "tensorflow" else None}}}
        trainer = potential_model(params)
        assert (trainer.engine is not None) == (engine == "auto")
        trainer.train(lambda: data.apply(sparse_batch(5)).repeat(), max_steps=6)
        runs[engine] = ([v.numpy() for v in trainer.model.trainable_variables],
                        [r["loss"] for r in read_metrics(tmp_path / engine, "train")])
    np.testing.assert_allclose(runs["auto"][1], runs["tensorflow"][1], rtol=1e-9)
    for mine, theirs in zip(runs["auto"][0], runs["tensorflow"][0]):
        np.testing.assert_allclose(mine, theirs, rtol=1e-9, atol=1e-12)
    assert len(runs["auto"][1]) == 6

