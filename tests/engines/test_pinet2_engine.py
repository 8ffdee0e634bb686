"""PiNet2 on the Numba MD engine: every choice of its schema equals TensorFlow to 1e-12 in float64, or is refused.

The cases are generated from ``PiNet2.PARAMS``, as PiNet's are (test_engine_parity.py): each option
with a list of choices (activation, radial basis, cutoff, rank) and each boolean option (weighted), each
value; a new option the lowering does not read is refused.  Forces and stress are also checked as the
derivatives of the engine's own energy (finite differences), the pair tiles on a cell of 4 000 pairs, and
float32 models to float32 rounding.
"""
import numpy as np
import pytest
from ase.build import bulk, molecule

from pinn.engines.lowering import LOWERED_PINET2_PARAMS, capability
from pinn.engines.md import TILE, FastPiNet
from pinn.io.neighbors import neighbor_list
from pinn.networks.pinet2 import PARAMS as PINET2_PARAMS

from physics import evaluate, parity_structures, perturbed_model

RC = 4.0
BASE = {"atom_types": [1, 6, 8, 29], "rc": RC, "depth": 2, "pp_nodes": [5, 6], "pi_nodes": [6, 6],
        "ii_nodes": [7, 6], "out_nodes": [6], "n_basis": 3, "rank": 3}
CHOICES = [(key, value) for key, option in PINET2_PARAMS.items() if option.choices for value in option.choices]
FLAGS = [(key, value) for key, option in PINET2_PARAMS.items() if option.types == (bool,) for value in (False, True)]


def _model(settings, precision="float64"):
    return perturbed_model("PiNet2", {**BASE, **settings}, precision)


_structures = parity_structures


def _run(engine, atoms, skin=0.5):
    ind, shift = neighbor_list(atoms.positions, atoms.cell[:], atoms.pbc, RC + skin)
    return engine(atoms.numbers, atoms.positions, ind[:, 0].copy(), ind[:, 1].copy(), shift @ atoms.cell[:],
                  atoms.cell[:], atoms.pbc)


def _check_parity(model, atoms, tol=1e-12):
    ref = evaluate(model, atoms, RC)
    out = _run(FastPiNet(model), atoms)
    assert out["energy"] == pytest.approx(float(ref["energy"][0]), rel=tol, abs=tol)
    scale = np.abs(ref["forces"]).max()
    assert scale > 1e-4  # not a trivially zero comparison
    np.testing.assert_allclose(out["forces"], ref["forces"], rtol=0, atol=tol * max(1.0, scale))
    if atoms.pbc.any():
        np.testing.assert_allclose(out["stress"], ref["stress"][0], rtol=0, atol=tol)


def test_the_cases_cover_the_schema():
    """A new option with choices must be added to the lowering (and so to these cases) knowingly."""
    assert {key for key, _ in CHOICES} == {"act", "basis_type", "cutoff_type", "rank"}
    assert {key for key, _ in FLAGS} == {"weighted"}


def test_every_option_is_lowered_or_refused():
    assert set(PINET2_PARAMS) <= LOWERED_PINET2_PARAMS, "a PiNet2 option the lowering ignores: lower it or refuse it"
    model = _model({})
    model.network.params["new_option"] = 1.0
    answer = capability(model, "md")
    assert not answer and "network.params.new_option" in answer.reason


@pytest.mark.parametrize("key, value", CHOICES + FLAGS)
def test_md_engine_matches_tensorflow_or_refuses(key, value):
    model = _model({key: value})
    answer = capability(model, "md")
    if not answer:
        assert f"network.params.{key}" in answer.reason
        return
    for atoms in _structures():
        _check_parity(model, atoms)


@pytest.mark.parametrize("rank", [3, 5])
def test_weighted_deep_nets_and_residual_maps(rank):
    """The weighted style at each rank with nets of several layers and blocks whose widths change."""
    model = _model({"rank": rank, "weighted": True, "depth": 3, "pi_nodes": [8, 5, 6], "ii_nodes": [6, 4],
                    "pp_nodes": [7, 4], "out_nodes": [5, 3], "basis_type": "gaussian", "n_basis": 4})
    for atoms in _structures():
        _check_parity(model, atoms)


def test_no_hidden_pi_layer_and_extra_heads():
    """One PI layer (the basis weights themselves); ``out_extra`` heads, which the energy does not read."""
    model = _model({"pi_nodes": [6], "rank": 5, "out_extra": {"p3": 1, "i1": 2}})
    for atoms in _structures():
        _check_parity(model, atoms)


def test_many_tiles_and_pairs_in_any_order():
    """A cell of ~4 000 pairs (many tiles), and the same pairs shuffled: the same energy and forces."""
    model = _model({"rank": 5, "weighted": True})
    atoms = bulk("Cu", "fcc", a=3.61, cubic=True) * (3, 3, 3)
    atoms.rattle(0.1, seed=4)
    ind, shift = neighbor_list(atoms.positions, atoms.cell[:], atoms.pbc, RC + 0.5)
    assert len(ind) > 8 * TILE
    _check_parity(model, atoms)
    engine = FastPiNet(model)
    order = np.random.RandomState(0).permutation(len(ind))
    args = (atoms.numbers, atoms.positions, ind[:, 0].copy(), ind[:, 1].copy(), shift @ atoms.cell[:],
            atoms.cell[:], atoms.pbc)
    sorted_out = engine(*args)
    shuffled = engine(atoms.numbers, atoms.positions, ind[order, 0].copy(), ind[order, 1].copy(),
                      (shift @ atoms.cell[:])[order], atoms.cell[:], atoms.pbc)
    assert shuffled["energy"] == pytest.approx(sorted_out["energy"], rel=1e-12)
    np.testing.assert_allclose(shuffled["forces"], sorted_out["forces"], rtol=0, atol=1e-12)


def test_forces_and_stress_are_derivatives_of_the_engine_energy():
    """−∂E/∂r and ∂E/∂ε by central differences of the engine's own energy (float64)."""
    model = _model({"rank": 5, "weighted": True})
    engine = FastPiNet(model)
    atoms = bulk("Cu", "fcc", a=3.61, cubic=True) * (2, 1, 1)
    atoms.numbers[[1, 5]] = 8
    atoms.rattle(0.15, seed=5)
    out = _run(engine, atoms)
    h = 1e-5
    for atom in range(0, len(atoms), 3):
        for axis in range(3):
            plus, minus = atoms.copy(), atoms.copy()
            plus.positions[atom, axis] += h
            minus.positions[atom, axis] -= h
            fd = -(_run(engine, plus)["energy"] - _run(engine, minus)["energy"]) / (2 * h)
            assert out["forces"][atom, axis] == pytest.approx(fd, abs=1e-7, rel=1e-6)
    volume = atoms.get_volume()
    for a, b in ((0, 0), (1, 2), (0, 2)):
        eps = np.zeros((3, 3))
        eps[a, b] = eps[b, a] = h / 2 if a != b else h
        plus, minus = atoms.copy(), atoms.copy()
        plus.set_cell(atoms.cell[:] @ (np.eye(3) + eps), scale_atoms=True)
        minus.set_cell(atoms.cell[:] @ (np.eye(3) - eps), scale_atoms=True)
        de = (_run(engine, plus)["energy"] - _run(engine, minus)["energy"]) / (2 * h)
        assert 0.5 * (out["stress"][a, b] + out["stress"][b, a]) * volume == pytest.approx(de, abs=1e-7, rel=1e-6)


def test_float32_matches_tensorflow_to_float32_rounding():
    model = _model({"rank": 5, "weighted": True}, "float32")
    for atoms in _structures():
        ref = evaluate(model, atoms, RC)
        out = _run(FastPiNet(model), atoms)
        assert out["energy"] == pytest.approx(float(ref["energy"][0]), rel=2e-6)
        np.testing.assert_allclose(out["forces"], ref["forces"], rtol=0, atol=2e-5 * np.abs(ref["forces"]).max())


def test_structures_without_pairs():
    model = _model({"rank": 5})
    atoms = molecule("H2O")
    atoms.positions *= 5.0  # every distance beyond the cutoff
    ref = evaluate(model, atoms, RC)
    out = _run(FastPiNet(model), atoms)
    assert out["energy"] == pytest.approx(float(ref["energy"][0]), rel=1e-12)
    np.testing.assert_array_equal(out["forces"], 0.0)


def test_load_weights_follows_the_model():
    model = _model({"rank": 3, "weighted": True})
    engine = FastPiNet(model)
    atoms = _structures()[0]
    before = _run(engine, atoms)["energy"]
    for v in model.trainable_variables:
        v.assign(v.numpy() * 1.01)
    assert _run(engine, atoms)["energy"] == before  # copies, until reloaded
    engine.load_weights()
    _check_parity(model, atoms)


_THREADS_SCRIPT = """
import sys
import numpy as np
from pinn.engines import md
from pinn.engines.numba import pinet2_kernels
data = dict(np.load(sys.argv[1]))
pinet2_kernels.PARALLEL_MIN_PAIRS = 1
engine = md.FastPiNet({key: data[key] for key in md.ARRAY_KEYS}, threads=3)
inputs = [data[key] for key in ("numbers", "positions", "cand_i", "cand_j", "offsets", "cell", "pbc")]
outs = [engine(*inputs) for _ in range(3)]
np.savez(sys.argv[2], energy=[o["energy"] for o in outs], forces=[o["forces"] for o in outs],
         stress=[o["stress"] for o in outs])
"""


@pytest.mark.parametrize("rank, weighted", [(3, False), (5, True)])
def test_threads_give_the_one_thread_result_call_after_call(tmp_path, rank, weighted):
    """3 threads (a process with NUMBA_NUM_THREADS=3, whatever this machine has), three calls on the kept
    workspace: each thread's sums over its pair tiles, added up, give the one-thread result every time."""
    import os
    import subprocess
    import sys
    model = _model({"rank": rank, "weighted": weighted, "depth": 3})
    atoms = bulk("Cu", "fcc", a=3.61, cubic=True) * (2, 2, 2)
    atoms.rattle(0.1, seed=6)
    ind, shift = neighbor_list(atoms.positions, atoms.cell[:], atoms.pbc, RC + 0.5)
    assert len(ind) > 3 * TILE  # every thread gets tiles
    engine = FastPiNet(model, threads=1)
    serial = _run(engine, atoms)
    np.savez(tmp_path / "inputs.npz", **engine.arrays, numbers=atoms.numbers, positions=atoms.positions,
             cand_i=ind[:, 0].copy(), cand_j=ind[:, 1].copy(), offsets=shift @ atoms.cell[:], cell=atoms.cell[:],
             pbc=atoms.pbc)
    env = dict(os.environ, NUMBA_NUM_THREADS="3")
    subprocess.run([sys.executable, "-c", _THREADS_SCRIPT, str(tmp_path / "inputs.npz"), str(tmp_path / "out.npz")],
                   env=env, check=True, timeout=900)
    with np.load(tmp_path / "out.npz") as threaded:
        for call in range(3):
            assert threaded["energy"][call] == pytest.approx(serial["energy"], rel=1e-13)
            np.testing.assert_allclose(threaded["forces"][call], serial["forces"], atol=1e-12)
            np.testing.assert_allclose(threaded["stress"][call], serial["stress"], atol=1e-13)
