"""The ASE calculator: consistent with the model, traced once, energy-conserving MD, clear errors."""
import numpy as np
import pytest
from ase import units
from ase.build import bulk, molecule
from ase.md.velocitydistribution import MaxwellBoltzmannDistribution
from ase.md.verlet import VelocityVerlet

import pinn
from pinn.io import load_ase, sparse_batch
from pinn.models import potential_model


def _alloy(size=(2, 2, 2), seed=0):
    atoms = bulk("Cu", "fcc", a=3.7, cubic=True) * size
    atoms.numbers[np.random.RandomState(seed).rand(len(atoms)) < 0.3] = 79
    return atoms


@pytest.mark.parametrize("engine", ["numba", "tensorflow"])
def test_matches_model_predict(trained_alloy_model, alloy_xyz, engine):
    calc = pinn.get_calc(trained_alloy_model, engine=engine)
    assert calc.engine == engine
    import ase.io
    atoms = ase.io.read(alloy_xyz, 3)
    model = potential_model(trained_alloy_model)
    pred = next(model.predict(lambda: load_ase([atoms]).apply(sparse_batch(1))))
    atoms.calc = calc
    # XLA code or the Numba kernels: float32 results differ in the last digits (their own tanh, sum order)
    assert atoms.get_potential_energy() == pytest.approx(float(pred["energy"]), rel=1e-6, abs=1e-5)
    np.testing.assert_allclose(atoms.get_forces(), pred["forces"], atol=1e-5)
    from ase.stress import full_3x3_to_voigt_6_stress
    np.testing.assert_allclose(atoms.get_stress(), full_3x3_to_voigt_6_stress(pred["stress"]), atol=1e-6)


def test_a_calculator_loads_no_training(trained_alloy_model):
    """A calculator of a model directory, for MD, loads the model through the inference layer (pinn.inference):
    its energy and forces come without a module of pinn.training imported."""
    import subprocess
    import sys
    code = ("import sys, numpy as np, pinn\n"
            "from ase.build import bulk\n"
            f"calc = pinn.get_calc({trained_alloy_model!r}, engine='tensorflow')\n"
            "atoms = bulk('Cu', 'fcc', a=3.7, cubic=True)\n"
            "atoms.calc = calc\n"
            "assert np.isfinite(atoms.get_potential_energy()) and np.isfinite(atoms.get_forces()).all()\n"
            "print(sorted(m for m in sys.modules if m.startswith('pinn.training')))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_traced_once_for_all_sizes(trained_alloy_model):
    calc = pinn.get_calc(trained_alloy_model, engine="tensorflow")
    for size in [(1, 1, 1), (2, 2, 2), (2, 1, 3), (1, 1, 1)]:
        atoms = _alloy(size)
        atoms.rattle(0.05, seed=1)
        atoms.calc = calc
        atoms.get_forces()
        atoms.get_stress()
    assert calc._engine._function.experimental_get_tracing_count() == 1


def test_flat_call_equals_the_public_call(trained_alloy_model):
    """The TensorFlow engine's flat call of its compiled function (ConcreteFunction._call_flat) gives
    the public call's numbers, padded and not, which a TensorFlow without _call_flat takes."""
    for jit in (True, False):
        engine = pinn.get_calc(trained_alloy_model, engine="tensorflow", jit=jit)._engine
        assert engine._call_flat is not None  # TensorFlow 2.15 has it: the path under test
        atoms = _alloy((2, 1, 1))
        atoms.rattle(0.05, seed=2)
        flat = engine(atoms, None)
        engine._call_flat = None
        public = engine(atoms, None)
        assert sorted(flat) == sorted(public) == ["energies", "energy", "forces", "stress"]
        for key in flat:
            np.testing.assert_array_equal(flat[key], public[key], err_msg=key)


def test_unchanged_atoms_are_not_recomputed(trained_alloy_model):
    """check_state's exact test: identical atoms reuse the results, any change recomputes, and it
    names the same changes as ASE's own test."""
    atoms = _alloy()
    atoms.calc = calc = pinn.get_calc(trained_alloy_model)
    calls = []
    engine = calc._engine
    calc._engine = lambda *args: calls.append(1) or engine(*args)
    atoms.get_forces()
    atoms.get_forces()
    assert len(calls) == 1
    moved = atoms.positions.copy()
    moved[0, 0] += 1e-9
    atoms.positions = moved
    atoms.get_forces()
    assert len(calls) == 2
    atoms.set_initial_charges(np.full(len(atoms), 0.1))  # a change ASE's own test reports
    atoms.get_forces()
    assert len(calls) == 3
    assert calc.check_state(atoms) == []
    other = atoms.copy()
    other.cell[0, 0] += 1e-3
    other.positions[1] += 0.1
    other.set_initial_magnetic_moments(np.ones(len(atoms)))
    from ase.calculators.calculator import compare_atoms
    assert sorted(calc.check_state(other)) == sorted(compare_atoms(atoms, other)) \
        == ["cell", "initial_magmoms", "positions"]


@pytest.mark.parametrize("engine", ["numba", "tensorflow"])
def test_nve_conserves_energy(trained_alloy_model, engine):
    atoms = _alloy()
    atoms.calc = pinn.get_calc(trained_alloy_model, engine=engine)
    MaxwellBoltzmannDistribution(atoms, temperature_K=300, rng=np.random.RandomState(0))
    md = VelocityVerlet(atoms, 1.0 * units.fs)
    totals = []
    for _ in range(200):
        md.run(1)
        totals.append(atoms.get_potential_energy() + atoms.get_kinetic_energy())
    kinetic_scale = 1.5 * units.kB * 300 * len(atoms)
    drift = np.max(np.abs(np.array(totals) - totals[0]))
    # stated bound: over 200 fs the total energy stays within 1 meV/atom (float32 model)
    assert drift < 1e-3 * len(atoms), drift
    assert drift < 0.05 * kinetic_scale


def test_errors(trained_alloy_model, tmp_path):
    calc = pinn.get_calc(trained_alloy_model)
    water = molecule("H2O")
    water.calc = calc
    with pytest.raises(ValueError, match=r"elements \['H', 'O'\]"):
        water.get_potential_energy()
    cluster = _alloy((1, 1, 1))
    cluster.pbc = False
    cluster.calc = calc
    assert np.isfinite(cluster.get_potential_energy())
    from ase.calculators.calculator import PropertyNotImplementedError
    with pytest.raises(PropertyNotImplementedError):
        cluster.get_stress()
    with pytest.raises(ValueError, match="params.yml"):
        pinn.get_calc(str(tmp_path))
    with pytest.raises(ValueError, match="engine must be one of"):
        pinn.get_calc(trained_alloy_model, engine="cuda")


def test_engine_choice(trained_alloy_model, tmp_path):
    """auto: numba for a PiNet potential, tensorflow for other networks; numba refused where it cannot run."""
    assert pinn.get_calc(trained_alloy_model).engine == "numba"
    lj = potential_model({"model_dir": str(tmp_path / "lj"), "network": {"name": "LJ", "params": {
        "atom_types": [29, 79], "rc": 4.5}}})
    assert pinn.get_calc(lj).engine == "tensorflow"
    with pytest.raises(ValueError, match="engine='tensorflow'"):
        pinn.get_calc(lj, engine="numba")


def test_fast_engine_follows_a_model_in_training(alloy_xyz, tmp_path):
    """A calculator made from a model object in memory uses the (averaged) weights of the latest step."""
    net = {"atom_types": [29, 79], "rc": 4.5, "depth": 2, "pp_nodes": [8], "pi_nodes": [8], "ii_nodes": [8],
           "out_nodes": [8]}
    model = potential_model({"model_dir": str(tmp_path / "m"), "network": {"name": "PiNet", "params": net},
                             "model": {"params": {"use_force": True, "ema_decay": 0.9, "lr_warmup_steps": 0,
                                                  "log_every_n_steps": 1000}}})
    data = lambda: load_ase(alloy_xyz).cache().repeat().apply(sparse_batch(8))  # noqa: E731
    fast, plain = pinn.get_calc(model), pinn.get_calc(model, engine="tensorflow", jit=False)
    energies = []
    for steps in (5, 15):
        model.train(data, steps)
        atoms = _alloy(seed=steps)  # new positions: no cached results
        atoms.calc = fast
        ref = atoms.copy()
        ref.calc = plain
        assert atoms.get_potential_energy() == pytest.approx(ref.get_potential_energy(), rel=1e-6, abs=1e-5)
        np.testing.assert_allclose(atoms.get_forces(), ref.get_forces(), atol=1e-5)
        energies.append(ref.get_potential_energy() / len(atoms))
    assert abs(energies[1] - energies[0]) > 1e-4  # training moved the predictions


@pytest.mark.parametrize("engine, skin", [("numba", 0.5), ("numba", 0.0), ("tensorflow", 0.5)])
def test_fast_calculators_match_the_plain_one(trained_alloy_model, engine, skin):
    """The Numba engine, and XLA on padded batches, with a Verlet list or fresh lists, against
    the plain traced TensorFlow function with fresh lists, along a hot MD run that rebuilds the
    list and changes the pair bucket, then on an open cluster (the model was trained with a
    weight average: the averaged weights are used)."""
    fast = pinn.get_calc(trained_alloy_model, engine=engine, skin=skin)
    plain = pinn.get_calc(trained_alloy_model, engine="tensorflow", jit=False, skin=0)
    assert fast.engine == engine and (engine == "numba" or fast.jit) and not plain.jit
    atoms = _alloy()
    MaxwellBoltzmannDistribution(atoms, temperature_K=2000, rng=np.random.RandomState(1))
    atoms.calc = fast
    md = VelocityVerlet(atoms, 2.0 * units.fs)
    for _ in range(12):
        md.run(2)
        ref = atoms.copy()
        ref.calc = plain
        # float32 sums of 32 atomic energies: the plain function's own result is up to 1e-5 eV off
        # the float64 evaluation of the same weights here (the Numba engine's 2e-6; measured)
        assert atoms.get_potential_energy() == pytest.approx(ref.get_potential_energy(), rel=0, abs=3e-5)
        np.testing.assert_allclose(atoms.get_forces(), ref.get_forces(), atol=1e-5)
        np.testing.assert_allclose(atoms.get_stress(), ref.get_stress(), atol=1e-6)
    assert fast.neighbors.builds > (1 if skin else 20)
    cluster = molecule("CH4")
    cluster.numbers[:] = 29
    cluster.positions *= 2.0
    cluster.calc = fast
    ref = cluster.copy()
    ref.calc = plain
    np.testing.assert_allclose(cluster.get_forces(), ref.get_forces(), atol=1e-5)


@pytest.mark.parametrize("engine", ["numba", "tensorflow"])
def test_coincident_atoms_and_non_finite_positions_are_refused(trained_alloy_model, engine):
    """Two atoms at one place (also through a periodic image, also after a move too small to rebuild the Verlet
    list) and a NaN position or cell: a ValueError naming the atoms, not NaN forces or an atom without
    neighbours; a committee's calculator refuses them too."""
    options = {"jit": False} if engine == "tensorflow" else {}  # no XLA compilation per size: the checks are the same
    calc = pinn.get_calc(trained_alloy_model, engine=engine, **options)
    committee = pinn.get_calc([trained_alloy_model, trained_alloy_model], engine=engine, **options)
    for calculator in (calc, committee):
        atoms = _alloy()
        atoms.positions[5] = atoms.positions[2]
        atoms.calc = calculator
        with pytest.raises(ValueError, match=r"^atoms 2 and 5 are at the same position \(0 Å apart, closer than "
                           r"0.01 Å\) at \["):
            atoms.get_forces()
        atoms = _alloy()
        atoms.positions[5] = atoms.positions[2] + atoms.cell[1] + [0, 0, 0.004]
        with pytest.raises(ValueError, match=r"^atoms 2 and 5 are at the same position \(0.004 Å apart"):
            calculator.get_forces(atoms)
        pair = bulk("Cu", "fcc", a=3.7, cubic=True)
        pair.positions[1] = pair.positions[0] + [0.2, 0, 0]  # 0.2 Å: evaluated
        assert np.all(np.isfinite(calculator.get_forces(pair)))
        builds = calculator.neighbors.builds
        pair.positions[1] = pair.positions[0]  # moved less than skin/2: the list is kept, the distances refuse it
        with pytest.raises(ValueError, match=r"^atoms 0 and 1 are at the same position \(0 Å apart"):
            calculator.get_forces(pair)
        assert calculator.neighbors.builds == builds
        atoms = _alloy()
        calculator.get_forces(atoms)
        atoms.positions[4, 1] = np.nan
        with pytest.raises(ValueError, match=r"^atom 4 has a non-finite position \[.*, nan, .*\] Å"):
            calculator.get_potential_energy(atoms)
        atoms = _alloy()
        atoms.cell[2, 2] = np.inf
        with pytest.raises(ValueError, match=r"^the cell has non-finite values"):
            calculator.get_potential_energy(atoms)


def test_a_checkpoint_outside_the_model_directory_is_refused(trained_alloy_model, alloy_xyz, tmp_path, capsys):
    """A `checkpoint` state file naming a checkpoint elsewhere: get_calc and `pinn eval` refuse it in one line
    naming the directory and the path, and nothing is written there; a checkpoint given by its path elsewhere is
    read, and its directory is not written either."""
    import os
    import re
    import shutil
    from pinn.cli import main
    from pinn.files.checkpoint_dir import latest
    for name in ("model", "elsewhere"):
        shutil.copytree(trained_alloy_model, tmp_path / name, ignore=shutil.ignore_patterns("engine-weights.npz"))
    other = latest(str(tmp_path / "elsewhere"))
    (tmp_path / "model" / "checkpoint").write_text(f'model_checkpoint_path: "{other}"\n'
                                                   f'all_model_checkpoint_paths: "{other}"\n')
    before = sorted(os.listdir(tmp_path / "elsewhere"))
    line = (f"{tmp_path}/model: its checkpoint state file names {other}, outside the directory; refused (remove "
            f"{tmp_path}/model/checkpoint, or name a checkpoint of the directory)")
    for engine in ("numba", "tensorflow"):
        with pytest.raises(ValueError, match=f"^{re.escape(line)}$"):
            pinn.get_calc(str(tmp_path / "model"), engine=engine)
    assert main(["eval", str(tmp_path / "model"), alloy_xyz]) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"pinn eval: error: {line}"
    (tmp_path / "model" / "checkpoint").unlink()
    atoms = _alloy()
    atoms.calc = pinn.get_calc(str(tmp_path / "model"), checkpoint=other)
    assert np.isfinite(atoms.get_potential_energy())
    assert sorted(os.listdir(tmp_path / "elsewhere")) == before  # no engine-weights.npz written there
    assert (tmp_path / "model" / "engine-weights.npz").exists() is False
    pinn.get_calc(str(tmp_path / "model"))
    assert (tmp_path / "model" / "engine-weights.npz").exists()  # its own checkpoint: written, inside


def test_each_kind_of_model_is_recognised_and_anything_else_is_refused_naming_the_kinds(tmp_path):
    """get_calc's sources, each recognised in order without loading anything; a model of none of these kinds is a
    TypeError that names every kind get_calc takes."""
    from pinn import calculator
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "params.yml").write_text("{}\n")
    committee = tmp_path / "committee"
    (committee / "member-0").mkdir(parents=True)
    (committee / "member-0" / "params.yml").write_text("{}\n")
    model_file = tmp_path / "model.pinn"
    model_file.write_bytes(b"")

    class InMemory:
        params = {}

    for model, kind in [({"network": {}, "model_dir": "m"}, calculator._ParamsDict),
                        ({"e_unit": 1.0}, calculator._EngineWeights),
                        (str(model_file), calculator._ModelFile), (model_file, calculator._ModelFile),
                        ([str(model_dir)], calculator._Committee), ((model_dir,), calculator._Committee),
                        (str(committee), calculator._Committee), (committee, calculator._Committee),
                        (str(model_dir), calculator._ModelDirectory), (model_dir, calculator._ModelDirectory),
                        (str(tmp_path / "nowhere"), calculator._ModelDirectory), (InMemory(), calculator._InMemory)]:
        assert type(calculator._Source.from_(model)) is kind, model
    for other in (42, None, {29, 79}):
        with pytest.raises(TypeError, match=rf"^get_calc: the model is a {type(other).__name__}, none of what "
                           r"get_calc takes: a params dict .*; engine weights .*; a model file .*; a list of model "
                           r"directories .*; a model directory; a model object"):
            pinn.get_calc(other)


def test_options_of_some_kinds_are_refused_for_the_others_before_anything_loads(trained_alloy_model, tmp_path):
    """checkpoint= (a directory's), drive= (a committee's), to_eV= and properties= (one model's) and the engine's
    name: each refused by one check, the same for every kind, before a model loads; a model file's committee
    like a committee of directories."""
    from pinn.models.export import export_model
    nowhere = str(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="engine must be one of"):
        pinn.get_calc(nowhere, engine="cuda")
    with pytest.raises(ValueError, match="checkpoint= selects a checkpoint of a model directory"):
        pinn.get_calc({"e_unit": 1.0}, checkpoint="best")
    with pytest.raises(ValueError, match=r"drive='first' chooses what drives a committee; 'a dict' is one model"):
        pinn.get_calc({"e_unit": 1.0}, drive="first")
    with pytest.raises(ValueError, match=r"drive='first' chooses .*; the params' model_dir '.*nowhere' is one model"):
        pinn.get_calc({"model_dir": nowhere, "network": {"name": "PiNet"}}, drive="first")
    for options in ({"to_eV": 2.0}, {"properties": ["energy"]}):
        with pytest.raises(ValueError, match="a committee takes neither to_eV nor properties"):
            pinn.get_calc([nowhere, nowhere], **options)
    path = tmp_path / "committee.pinn"
    export_model([trained_alloy_model, trained_alloy_model], str(path))
    for options in ({"to_eV": 2.0}, {"properties": ["energy"]}):
        with pytest.raises(ValueError, match="a committee takes neither to_eV nor properties"):
            pinn.get_calc(str(path), **options)
    with pytest.raises(ValueError, match="holds one checkpoint's weights; checkpoint= is for a model directory"):
        pinn.get_calc(str(path), checkpoint="best")
    calc = pinn.get_calc(str(path), drive="first")
    assert calc.size == 2 and calc.drive == "first"
