"""Engine weights on disk (pinn.engines.exported): MD without TensorFlow, and never from stale weights."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from ase.build import bulk

import pinn
from pinn.engines import exported
from pinn.files.checkpoint_dir import CheckpointOutside
from pinn.io import load_ase, sparse_batch
from pinn.models import potential_model

NET = {"atom_types": [29, 79], "rc": 4.5, "depth": 2, "pp_nodes": [8], "pi_nodes": [8], "ii_nodes": [8],
       "out_nodes": [8]}


def _alloy(seed=0):
    atoms = bulk("Cu", "fcc", a=3.7, cubic=True) * (2, 2, 2)
    rng = np.random.RandomState(seed)
    atoms.numbers[rng.rand(len(atoms)) < 0.3] = 79
    atoms.rattle(0.05, seed=seed)
    return atoms


def _train(model_dir, alloy_xyz, steps, **model_params):
    params = {"model_dir": str(model_dir), "network": {"name": "PiNet", "params": NET},
              "model": {"params": {"use_force": True, "log_every_n_steps": 1000, "lr_warmup_steps": 0,
                                   **model_params}}}
    model = potential_model(params)
    model.train(lambda: load_ase(alloy_xyz).cache().repeat().apply(sparse_batch(8)), steps)
    return model


def _predict(calc, seed=0):
    atoms = _alloy(seed)
    atoms.calc = calc
    return atoms.get_potential_energy(), atoms.get_forces(), atoms.get_stress()


@pytest.fixture(scope="module")
def model_dir(alloy_xyz, tmp_path_factory):
    path = tmp_path_factory.mktemp("exported") / "alloy"
    _train(path, alloy_xyz, 20, e_unit=0.5, ema_decay=0.9)
    return path


def test_written_on_first_use_and_used_without_tensorflow(model_dir):
    """The first calculator reads the checkpoint with TensorFlow and writes the file; a new process
    then builds the calculator from the file alone (TensorFlow never imported) and predicts the same
    energy, forces and stress as the TensorFlow engine (averaged weights, e_unit applied)."""
    for stale in model_dir.glob(exported.FILE_NAME):
        stale.unlink()
    reference = _predict(pinn.get_calc(str(model_dir), engine="tensorflow", jit=False))
    assert not (model_dir / exported.FILE_NAME).exists()  # the TensorFlow engine writes nothing
    first = pinn.get_calc(str(model_dir))
    assert first.engine == "numba" and (model_dir / exported.FILE_NAME).exists()
    script = (
        "import json, sys\n"
        "import numpy as np, pinn\n"
        "from ase.build import bulk\n"
        f"atoms = bulk('Cu', 'fcc', a=3.7, cubic=True) * (2, 2, 2)\n"
        "rng = np.random.RandomState(0)\n"
        "atoms.numbers[rng.rand(len(atoms)) < 0.3] = 79\n"
        "atoms.rattle(0.05, seed=0)\n"
        f"atoms.calc = calc = pinn.get_calc({str(model_dir)!r})\n"
        "out = dict(engine=calc.engine, energy=atoms.get_potential_energy(),\n"
        "           forces=atoms.get_forces().tolist(), stress=atoms.get_stress().tolist(),\n"
        "           tensorflow='tensorflow' in sys.modules)\n"
        "print(json.dumps(out))\n")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["engine"] == "numba" and out["tensorflow"] is False
    energy, forces, stress = reference
    assert out["energy"] == pytest.approx(energy, rel=1e-6, abs=1e-5)
    np.testing.assert_allclose(out["forces"], forces, atol=1e-5)
    np.testing.assert_allclose(out["stress"], stress, atol=1e-6)
    # and in this process: the same numbers from the file as from the first calculator
    again = pinn.get_calc(str(model_dir))
    assert not hasattr(again, "handle")
    for a, b in zip(_predict(again), _predict(first)):
        np.testing.assert_array_equal(a, b)


def test_stale_files_are_not_used(alloy_xyz, tmp_path):
    """A file made from another checkpoint, other params, another format or a damaged file is
    ignored (the weights come from the checkpoint) and remade."""
    model_dir = tmp_path / "m"
    model = _train(model_dir, alloy_xyz, 5)
    pinn.get_calc(str(model_dir))
    path = model_dir / exported.FILE_NAME
    assert exported.load_engine_weights(model_dir) is not None
    model.train(lambda: load_ase(alloy_xyz).cache().repeat().apply(sparse_batch(8)), 10)  # a new checkpoint
    assert exported.load_engine_weights(model_dir) is None
    trained = _predict(pinn.get_calc(str(model_dir), engine="tensorflow", jit=False))
    _check_file_gives(model_dir, trained)
    # the directory opened by another path (params.yml records it): still the same weights
    assert exported.load_engine_weights(str(model_dir) + "/./") is not None
    pinn.get_calc(str(model_dir) + "/./", engine="tensorflow", jit=False)
    assert "/./" not in (model_dir / "params.yml").read_text()  # the same params: not written again
    assert exported.load_engine_weights(model_dir) is not None
    # params.yml edited: a comment does not count, another value does
    params = (model_dir / "params.yml").read_text()
    (model_dir / "params.yml").write_text(params + "\n# edited\n")
    assert exported.load_engine_weights(model_dir) is not None
    (model_dir / "params.yml").write_text(params.replace("e_unit: 1.0", "e_unit: 2.0"))
    assert "e_unit: 2.0" in (model_dir / "params.yml").read_text()
    assert exported.load_engine_weights(model_dir) is None
    calc = pinn.get_calc(str(model_dir))
    weights = exported.load_engine_weights(model_dir)
    assert calc.e_unit == 2.0 and weights is not None and float(weights["e_unit"]) == 2.0
    (model_dir / "params.yml").write_text(params)
    pinn.get_calc(str(model_dir))
    # another format version
    with np.load(path) as data:
        arrays = dict(data)
    np.savez(path, **{**arrays, "format_version": exported.FORMAT_VERSION + 1})
    assert exported.load_engine_weights(model_dir) is None
    # a damaged file: ignored with a warning, then remade
    path.write_bytes(b"not a zip file")
    assert exported.load_engine_weights(model_dir) is None
    _check_file_gives(model_dir, trained)


def _check_file_gives(model_dir, expected):
    calc = pinn.get_calc(str(model_dir))  # remakes the file
    assert hasattr(calc, "handle")
    from_file = pinn.get_calc(str(model_dir))
    assert not hasattr(from_file, "handle")
    energy, forces, stress = _predict(from_file)
    assert energy == pytest.approx(expected[0], rel=1e-6, abs=1e-5)
    np.testing.assert_allclose(forces, expected[1], atol=1e-5)


def test_best_and_explicit_checkpoints(alloy_xyz, tmp_path):
    """'best' and a checkpoint path select their own file, in their own directory."""
    model_dir = tmp_path / "m"
    data = lambda: load_ase(alloy_xyz).cache().repeat().apply(sparse_batch(8))  # noqa: E731
    val = lambda: load_ase(alloy_xyz).take(16).apply(sparse_batch(8))  # noqa: E731
    params = {"model_dir": str(model_dir), "network": {"name": "PiNet", "params": NET},
              "model": {"params": {"use_force": True, "log_every_n_steps": 1000, "lr_warmup_steps": 0,
                                   "eval_every_n_steps": 5, "save_checkpoint_steps": 5}}}
    potential_model(params).train(data, 15, eval_fn=val)
    best = exported.checkpoint_path(model_dir, "best")
    last = exported.checkpoint_path(model_dir)
    assert os.path.dirname(best) == str(model_dir / "best") and last == str(model_dir / "ckpt-15")
    assert os.path.exists(best + ".index") and os.path.exists(last + ".index")
    for which in ("best", last):
        expected = _predict(pinn.get_calc(str(model_dir), checkpoint=which, engine="tensorflow", jit=False))
        pinn.get_calc(str(model_dir), checkpoint=which)
        weights = exported.load_engine_weights(model_dir, which)
        assert weights["source"] == exported.weights_file(best if which == "best" else last)
        energy, forces, _ = _predict(pinn.get_calc(str(model_dir), checkpoint=which))
        # float32 in both engines, sums in other orders, Numba's tanh within a few ulps: 1.2e-5 eV apart once
        assert energy == pytest.approx(expected[0], rel=2e-5, abs=1e-5)
        np.testing.assert_allclose(forces, expected[1], atol=1e-5)
    assert exported.checkpoint_path(tmp_path / "nothing") is None


def test_checkpoint_state_parsing(tmp_path):
    """The state file TensorFlow writes, relative or absolute paths, read without TensorFlow; a
    checkpoint it names counts when its index exists, one outside the directory is refused, and a
    garbled state file falls back to the checkpoints on disk."""
    for step in (6, 7):
        (tmp_path / f"ckpt-{step}.index").write_bytes(b"")
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "ckpt-7"\n'
                                         'all_model_checkpoint_paths: "ckpt-6"\n'
                                         'all_model_checkpoint_paths: "ckpt-7"\n')
    assert exported.checkpoint_path(tmp_path) == str(tmp_path / "ckpt-7")
    (tmp_path / "best").mkdir()
    (tmp_path / "best" / "ckpt-3.index").write_bytes(b"")
    (tmp_path / "best" / "checkpoint").write_text(f'model_checkpoint_path: "{tmp_path}/best/ckpt-3"\n')
    assert exported.checkpoint_path(tmp_path, "best") == f"{tmp_path}/best/ckpt-3"
    (tmp_path / "abs").mkdir()  # an absolute path elsewhere: refused, naming the directory and the path
    (tmp_path / "abs" / "ckpt-3.index").write_bytes(b"")
    (tmp_path / "best" / "checkpoint").write_text(f'model_checkpoint_path: "{tmp_path}/abs/ckpt-3"\n')
    with pytest.raises(CheckpointOutside, match=f"^{tmp_path}/best: its checkpoint state file names "
                       f"{tmp_path}/abs/ckpt-3, outside the directory; refused"):
        exported.checkpoint_path(tmp_path, "best")
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "ckpt-6"\n')
    assert exported.checkpoint_path(tmp_path) == str(tmp_path / "ckpt-6")
    (tmp_path / "checkpoint").write_text("garbage\n")
    assert exported.checkpoint_path(tmp_path) == str(tmp_path / "ckpt-7")
    for step in (6, 7):
        (tmp_path / f"ckpt-{step}.index").unlink()
    assert exported.checkpoint_path(tmp_path) is None


def test_unwritable_directory_falls_back(model_dir, tmp_path, monkeypatch, caplog):
    """Where the file cannot be written the calculator still works, from the checkpoint, and says why."""
    copy = tmp_path / "copy"
    shutil.copytree(model_dir, copy)
    for stale in copy.glob(exported.FILE_NAME):
        stale.unlink()

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied", kwargs.get("dir"))

    from pinn.files import durable
    monkeypatch.setattr(durable.tempfile, "mkstemp", refuse)
    with caplog.at_level("INFO", logger="pinn.engines.exported"):
        calc = pinn.get_calc(str(copy))
    assert calc.engine == "numba" and hasattr(calc, "handle")
    assert not (copy / exported.FILE_NAME).exists() and not list(copy.glob(".engine-weights*"))
    assert "not written" in caplog.text and "Permission denied" in caplog.text
    reference = _predict(pinn.get_calc(str(copy), engine="tensorflow", jit=False))
    energy, forces, _ = _predict(calc)
    assert energy == pytest.approx(reference[0], rel=1e-6, abs=1e-5)
    np.testing.assert_allclose(forces, reference[1], atol=1e-5)
