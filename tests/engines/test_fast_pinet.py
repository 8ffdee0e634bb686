"""The fast PiNet engine (Numba kernels) against the TensorFlow model and against the physics.

float64 models: the engine must give the TensorFlow model's energy, forces and stress to
rounding (~1e-12), for every architecture the params allow; forces and stress must also be
the finite-difference derivatives of its own energy.  float32 models: the same to float32
rounding.  Parallel chunks, weight updates and bad input are covered too.
"""
import numpy as np
import pytest
from ase.build import bulk, molecule

from pinn.engines import lowering
from pinn.engines import md as fast_pinet
from pinn.engines.md import FastPiNet
from pinn.engines.numba import md_kernels
from pinn.engines.numba.layout import TANH_FAST
from pinn.io.neighbors import neighbor_list

from physics import evaluate, make_model

RC = 4.5
BASE = {"atom_types": [1, 6, 8, 29], "rc": RC, "depth": 3}
ARCHITECTURES = {
    "reference": {},
    "no hidden PI layer": {"pi_nodes": [8]},
    "deep nets, residual maps": {"pp_nodes": [12, 6], "pi_nodes": [8, 10, 6], "ii_nodes": [6, 9], "out_nodes": [5, 7]},
    "gaussian basis, f2": {"basis_type": "gaussian", "n_basis": 5, "cutoff_type": "f2", "gamma": 2.0},
    "ssp, hip cutoff": {"act": "ssp", "cutoff_type": "hip", "pi_nodes": [8, 8]},
    "softplus, polynomial cutoff": {"act": "softplus", "cutoff_type": "polynomial", "n_basis": 3},
    "swish": {"act": "swish", "depth": 2},
    "relu": {"act": "relu", "depth": 2},
    "linear": {"act": "linear", "depth": 2, "pi_nodes": [6, 6]},
}


def _structures():
    ethanol = molecule("CH3CH2OH")
    ethanol.rattle(0.1, seed=1)
    copper = bulk("Cu", "fcc", a=3.61, cubic=True) * (2, 2, 2)
    copper.rattle(0.1, seed=2)
    slab = bulk("Cu", "fcc", a=3.61, cubic=True) * (2, 2, 1)
    slab.pbc = [True, True, False]
    slab.rattle(0.1, seed=3)
    return {"ethanol": ethanol, "Cu32": copper, "slab": slab}


_INPUT_NAMES = ("numbers", "positions", "cand_i", "cand_j", "offsets", "cell", "pbc")


def _inputs(atoms, skin=0.5):
    """The engine's arguments for ``atoms`` (candidates within RC + skin), in the order of _INPUT_NAMES."""
    ind, shift = neighbor_list(atoms.positions, atoms.cell[:], atoms.pbc, RC + skin)
    return (atoms.numbers, atoms.positions, ind[:, 0].copy(), ind[:, 1].copy(), shift @ atoms.cell[:],
            atoms.cell[:], atoms.pbc)


def _run(engine, atoms, skin=0.5):
    return engine(*_inputs(atoms, skin))


def _model(arch, precision="float64", **model_params):
    model = make_model("PiNet", {**BASE, **ARCHITECTURES[arch]}, precision)
    model.e_dress.assign(np.array([-0.5, -1.0, -2.0, -3.0]))
    return model


@pytest.mark.parametrize("arch", list(ARCHITECTURES))
def test_equals_tensorflow_model_float64(arch):
    model = _model(arch)
    engine = FastPiNet(model)
    for name, atoms in _structures().items():
        ref = evaluate(model, atoms, RC)
        out = _run(engine, atoms)
        assert out["energy"] == pytest.approx(float(ref["energy"][0]), rel=1e-12, abs=1e-12), name
        np.testing.assert_allclose(out["forces"], ref["forces"], rtol=0, atol=1e-11 * max(1, np.abs(ref["forces"]).max()))
        if atoms.pbc.any():
            np.testing.assert_allclose(out["stress"], ref["stress"][0], rtol=0, atol=1e-12)
        else:
            assert "stress" not in out
        assert np.abs(out["forces"]).max() > 1e-4  # not a trivially zero comparison


def test_forces_and_stress_are_derivatives_of_the_energy():
    engine = FastPiNet(_model("deep nets, residual maps"))
    atoms = _structures()["Cu32"]
    out = _run(engine, atoms)
    h = 1e-5
    for a, x in [(0, 0), (5, 1), (17, 2), (31, 0)]:
        moved = atoms.copy()
        moved.positions[a, x] += h
        e_plus = _run(engine, moved)["energy"]
        moved.positions[a, x] -= 2 * h
        e_minus = _run(engine, moved)["energy"]
        assert out["forces"][a, x] == pytest.approx(-(e_plus - e_minus) / (2 * h), abs=1e-8)
    volume = atoms.get_volume()
    for i, j in [(0, 0), (1, 2), (2, 1)]:
        energies = []
        for sign in (1, -1):
            strain = np.eye(3)
            strain[i, j] += sign * h
            strained = atoms.copy()
            strained.set_cell(atoms.cell[:] @ strain, scale_atoms=True)
            energies.append(_run(engine, strained)["energy"])
        assert out["stress"][i, j] == pytest.approx((energies[0] - energies[1]) / (2 * h) / volume, abs=1e-9)


def test_float32_matches_tensorflow_to_float32_rounding():
    model = _model("reference", "float32")
    engine = FastPiNet(model)
    for name, atoms in _structures().items():
        ref = evaluate(model, atoms, RC)
        out = _run(engine, atoms)
        assert out["energy"] == pytest.approx(float(ref["energy"][0]), rel=2e-6), name
        np.testing.assert_allclose(out["forces"], ref["forces"], atol=2e-5 * np.abs(ref["forces"]).max())


def test_float32_tanh_approximation():
    x = np.concatenate([np.linspace(-12, 12, 400001), np.geomspace(1e-8, 12, 20001)]).astype(np.float32)
    approx = _tanh32_values(x)
    assert np.abs(approx - np.tanh(x.astype(np.float64))).max() < 4e-7
    small = np.abs(x) < 1e-3
    np.testing.assert_allclose(approx[small], x[small], rtol=1e-6)  # odd and exact in slope at 0
    np.testing.assert_array_equal(_tanh32_values(-x), -approx)


def _tanh32_values(x):
    y = np.empty((1, x.size), np.float32)
    md_kernels._act_tile(x.reshape(1, -1), y, 1, TANH_FAST)
    return y[0]


@pytest.mark.parametrize("n_in,n_out", [(16, 64), (3, 5), (7, 6), (4, 1)])
def test_tile_products_set_or_add(n_in, n_out):
    """The register-blocked products on a tile, for widths that are and are not multiples of the
    blocking (4): set (the output's old contents, NaN here, must not leak) and accumulate."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n_in, 37))
    w = rng.normal(size=(n_in, n_out))
    dy = rng.normal(size=(n_out, 37))
    out = np.full((n_out, 37), np.nan)
    md_kernels._tile_matmul(x, w, out, n_in, n_out)
    np.testing.assert_allclose(out, w.T @ x, rtol=1e-12, atol=1e-12)
    md_kernels._tile_matmul(x, w, out, n_in, n_out, True)
    np.testing.assert_allclose(out, 2 * w.T @ x, rtol=1e-12, atol=1e-12)
    back = np.full((n_in, 37), np.nan)
    md_kernels._tile_matmul_t(dy, w, back, n_in, n_out)
    np.testing.assert_allclose(back, w @ dy, rtol=1e-12, atol=1e-12)
    md_kernels._tile_matmul_t(dy, w, back, n_in, n_out, True)
    np.testing.assert_allclose(back, 2 * w @ dy, rtol=1e-12, atol=1e-12)


def test_parallel_chunks_give_the_serial_result(monkeypatch):
    import numba
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("needs 2 Numba threads")
    model = _model("reference")
    engine = FastPiNet(model, threads=2)
    atoms = bulk("Cu", "fcc", a=3.61, cubic=True) * (3, 3, 3)
    atoms.rattle(0.1, seed=4)
    monkeypatch.setattr(fast_pinet, "PARALLEL_MIN_PAIRS", 10 ** 9)
    serial = _run(engine, atoms)
    monkeypatch.setattr(fast_pinet, "PARALLEL_MIN_PAIRS", 1)
    parallel = _run(engine, atoms)
    assert parallel["energy"] == pytest.approx(serial["energy"], rel=1e-13)
    np.testing.assert_allclose(parallel["forces"], serial["forces"], atol=1e-12)
    np.testing.assert_allclose(parallel["stress"], serial["stress"], atol=1e-13)
    ref = evaluate(model, atoms, RC)
    np.testing.assert_allclose(parallel["forces"], ref["forces"], atol=1e-11)


_MANY_THREADS_SCRIPT = """
import sys
import numpy as np
from pinn.engines import md as fast_pinet
data = dict(np.load(sys.argv[1]))
fast_pinet.PARALLEL_MIN_PAIRS = 1
engine = fast_pinet.FastPiNet({key: data[key] for key in fast_pinet.ARRAY_KEYS}, threads=int(sys.argv[3]))
out = engine(*(data[key] for key in sys.argv[4].split(",")))
np.savez(sys.argv[2], energy=out["energy"], forces=out["forces"], stress=out["stress"], pairs=engine.last_pairs)
"""


def test_many_threads_give_the_serial_result(tmp_path):
    """7 threads (a prime, more than this machine's cores, in a process with NUMBA_NUM_THREADS=7): the
    threads' sums over the pair tiles, added up per atom in parallel, give the one-thread result
    and the TensorFlow model's numbers.  Cu 500, so that every thread gets pair tiles."""
    import os
    import subprocess
    import sys
    model = _model("reference")
    engine = FastPiNet(model, threads=1)
    atoms = bulk("Cu", "fcc", a=3.61, cubic=True) * (5, 5, 5)
    atoms.rattle(0.1, seed=4)
    inputs = _inputs(atoms)
    serial = engine(*inputs)
    np.savez(tmp_path / "inputs.npz", **engine.arrays, **dict(zip(_INPUT_NAMES, inputs)))
    env = dict(os.environ, NUMBA_NUM_THREADS="7")
    subprocess.run([sys.executable, "-c", _MANY_THREADS_SCRIPT, str(tmp_path / "inputs.npz"),
                    str(tmp_path / "out.npz"), "7", ",".join(_INPUT_NAMES)], env=env, check=True, timeout=600)
    with np.load(tmp_path / "out.npz") as many:
        tiles = -(-int(many["pairs"]) // md_kernels.TILE)
        assert tiles > 6 * -(-tiles // 7), "the last of the 7 threads must get pair tiles too"
        assert float(many["energy"]) == pytest.approx(serial["energy"], rel=1e-13)
        np.testing.assert_allclose(many["forces"], serial["forces"], atol=1e-12)
        np.testing.assert_allclose(many["stress"], serial["stress"], atol=1e-13)
        ref = evaluate(model, atoms, RC)
        np.testing.assert_allclose(many["forces"], ref["forces"], atol=1e-11)


def test_pairs_beyond_the_cutoff_and_workspace_changes():
    """Candidates from a larger radius give the same result; a structure of another size reuses nothing stale."""
    model = _model("reference")
    engine = FastPiNet(model)
    structures = _structures()
    for skin in (0.0, 1.5):
        for name in ("Cu32", "ethanol", "Cu32", "slab"):
            out = _run(engine, structures[name], skin=skin)
            ref = evaluate(model, structures[name], RC)
            assert out["energy"] == pytest.approx(float(ref["energy"][0]), rel=1e-12)
            np.testing.assert_allclose(out["forces"], ref["forces"], atol=1e-11)


def test_pairs_in_any_order(monkeypatch):
    """Candidate pairs in any order (not sorted by first atom) give the TensorFlow model's numbers, on
    one thread and split over chunks."""
    model = _model("reference")
    engine = FastPiNet(model)
    rng = np.random.RandomState(5)
    for threshold in (10 ** 9, 1):
        monkeypatch.setattr(fast_pinet, "PARALLEL_MIN_PAIRS", threshold)
        for name, atoms in _structures().items():
            ind, shift = neighbor_list(atoms.positions, atoms.cell[:], atoms.pbc, RC + 0.5)
            order = rng.permutation(len(ind))
            assert np.any(np.diff(ind[order, 0]) < 0)
            out = engine(atoms.numbers, atoms.positions, ind[order, 0].copy(), ind[order, 1].copy(),
                         shift[order] @ atoms.cell[:], atoms.cell[:], atoms.pbc)
            ref = evaluate(model, atoms, RC)
            assert out["energy"] == pytest.approx(float(ref["energy"][0]), rel=1e-12), name
            np.testing.assert_allclose(out["forces"], ref["forces"], atol=1e-11, err_msg=name)
            if atoms.pbc.any():
                np.testing.assert_allclose(out["stress"], ref["stress"][0], atol=1e-12, err_msg=name)


def test_structures_without_pairs():
    """A single atom, and two atoms beyond the cutoff: the per-atom terms alone, zero forces."""
    from ase import Atoms
    model = _model("reference")
    engine = FastPiNet(model)
    for atoms in (Atoms("C", positions=[[0, 0, 0]]), Atoms("CO", positions=[[0, 0, 0], [0, 0, 6.0]])):
        out = _run(engine, atoms)
        ref = evaluate(model, atoms, RC)
        assert out["energy"] == pytest.approx(float(ref["energy"][0]), rel=1e-12)
        np.testing.assert_array_equal(out["forces"], np.zeros((len(atoms), 3)))


def test_refuses_bad_input():
    engine = FastPiNet(_model("reference"))
    atoms = _structures()["ethanol"]
    for numbers in ([7] + [6] * 8, [100] + [6] * 8):  # N is not in atom_types; Fm is past all of them
        with pytest.raises(ValueError, match=r"elements \[(7|100)\] are not in the model's atom_types \[1, 6, 8, 29\]"):
            engine(numbers, atoms.positions, np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros((0, 3)))
    from pinn.physics.potential import PotentialModel
    lj = make_model("LJ", {"atom_types": [18], "rc": 5.0})
    assert isinstance(lj, PotentialModel) and not lowering.supports(lj)
    with pytest.raises(ValueError, match="PiNet"):
        FastPiNet(lj)


def test_load_weights_follows_the_model():
    model = _model("reference")
    engine = FastPiNet(model)
    atoms = _structures()["Cu32"]
    before = _run(engine, atoms)["energy"]
    for v in model.trainable_variables:
        v.assign(v * 1.1)
    assert _run(engine, atoms)["energy"] == before  # a copy: unchanged until reloaded
    engine.load_weights()
    out = _run(engine, atoms)
    assert out["energy"] != pytest.approx(before, rel=1e-6)
    assert out["energy"] == pytest.approx(float(evaluate(model, atoms, RC)["energy"][0]), rel=1e-12)
