"""Upstream PiNN's quick start, as written: `pinn convert data.traj -o 'train:8,eval:2'`, a params.yml
with upstream's optimizer block, `pinn train -d model -t train.yml -e eval.yml -b N --train-steps N
params.yml`, `pinn log model`; and the options of upstream's `pinn train` (--init, --early-stop,
--eval-steps, the run settings, the data checks)."""
import numpy as np
import pytest
import yaml
from ase.calculators.emt import EMT
from ase.cluster import Octahedron

from pinn.cli import main

PARAMS = """\
model_dir: pinet_potential
model:
  name: potential_model
  params:
    use_force: true
network:
  name: PiNet
  params:
    atom_types: [29, 79]
    rc: 4.0
    depth: 1
    pp_nodes: [4]
    pi_nodes: [4]
    ii_nodes: [4]
    out_nodes: [4]
optimizer:
  class_name: {optimizer}
  config:
    learning_rate: {rate}
"""


@pytest.fixture(scope="module")
def quick_start(tmp_path_factory):
    """A folder with data.traj (20 EMT CuAu clusters), split by `pinn convert` as the quick start does."""
    import ase.io
    folder = tmp_path_factory.mktemp("quick_start")
    rng = np.random.RandomState(0)
    frames = []
    for _ in range(20):
        atoms = Octahedron("Cu", 2)
        atoms.numbers[rng.rand(len(atoms)) < 0.4] = 79
        atoms.rattle(0.1, rng=rng)
        atoms.calc = EMT()
        atoms.get_forces()
        frames.append(atoms)
    ase.io.write(folder / "data.traj", frames)
    return folder


def test_quick_start_as_written(quick_start, monkeypatch, capsys):
    monkeypatch.chdir(quick_start)
    assert main(["convert", "data.traj", "-o", "train:8,eval:2"]) == 0
    assert all((quick_start / name).exists() for name in ("train.yml", "train.tfr", "eval.yml", "eval.tfr"))
    (quick_start / "params.yml").write_text(PARAMS.format(optimizer="EKF", rate=0.03))  # the quick start's block
    capsys.readouterr()
    assert main(["train", "-d", "model", "-t", "train.yml", "-e", "eval.yml", "-b", "4", "--train-steps", "6",
                 "params.yml"]) == 0
    table = capsys.readouterr().out
    assert "energy" in table and "forces" in table
    assert (quick_start / "model" / "ckpt-6.index").exists()
    written = yaml.safe_load((quick_start / "model" / "params.yml").read_text())
    assert written["model_dir"].endswith("model")
    assert written["model"]["params"]["optimizer"] == "ekf" and written["model"]["params"]["learning_rate"] == 0.03
    # upstream's defaults of the run settings: checkpoints every 10000 steps, 1 kept, records every 1000
    assert {k: written["model"]["params"][k] for k in ("save_checkpoint_steps", "keep_checkpoint_max",
                                                      "log_every_n_steps")} == {
        "save_checkpoint_steps": 10000, "keep_checkpoint_max": 1, "log_every_n_steps": 1000}
    assert main(["log", "model"]) == 0
    assert "E_RMSE" in capsys.readouterr().out


def test_upstream_train_options(quick_start, monkeypatch, capsys):
    monkeypatch.chdir(quick_start)
    if not (quick_start / "train.yml").exists():
        assert main(["convert", "data.traj", "-o", "train:8,eval:2"]) == 0
    (quick_start / "p.yml").write_text(PARAMS.format(optimizer="Adam", rate=0.003))
    assert main(["train", "p.yml", "-d", "init_model", "-b", "4", "--train-steps", "2", "--init", "--eval-steps",
                 "1", "--ckpt-every", "1", "--max-ckpts", "2", "--early-stop", "METRICS/E_RMSE:3",
                 "--no-cache", "--shuffle-buffer", "0"]) == 0
    written = yaml.safe_load((quick_start / "init_model" / "params.yml").read_text())["model"]["params"]
    assert set(written["e_dress"]) == {29, 79} and all(np.isfinite(list(written["e_dress"].values())))
    assert written["early_stopping_metric"] == "E_RMSE" and written["early_stopping_patience"] == 3
    assert written["save_checkpoint_steps"] == 1 and written["keep_checkpoint_max"] == 2
    assert sorted(p.name for p in (quick_start / "init_model").glob("ckpt-*.index")) == ["ckpt-1.index",
                                                                                         "ckpt-2.index"]
    capsys.readouterr()
    cases = [
        (["train", "p.yml", "-d", "m2", "--train-steps", "1"], "the data are single structures; give the batch"),
        (["train", "p.yml", "-d", "m2", "-t", "nothere.yml", "-b", "4"], "nothere.yml: no such file"),
        (["train", "p.yml", "-d", "m2", "-b", "4", "--early-stop", "E_RMSE:3,F_RMSE:2"], "one METRIC:STEPS"),
        (["train", "p.yml", "-d", "m2", "-b", "4", "--max-steps", "3", "--train-steps", "4"], "give one"),
    ]
    for argv, message in cases:
        assert main(argv) == 1, argv
        assert message in capsys.readouterr().err
    run_file = yaml.safe_load(PARAMS.format(optimizer="Adam", rate=0.003))
    run_file.update(data={"train": "data.traj", "batch_size": 4}, train={"max_steps": 1})
    (quick_start / "run.yml").write_text(yaml.safe_dump(run_file))
    assert main(["train", "run.yml", "-t", "train.yml"]) == 1
    assert "--train-ds: for a params file without a data section" in capsys.readouterr().err


def test_upstream_convert_options_and_load_ds(quick_start, monkeypatch, capsys):
    from pinn.cli.convert import LOADER_FORMATS
    from pinn.io import load_ase, load_ds, load_tfrecord
    from pinn.io.formats import LOADERS
    assert set(LOADER_FORMATS) == set(LOADERS)
    monkeypatch.chdir(quick_start)
    assert main(["convert", "data.traj", "-o", "ordered", "--no-shuffle", "-f", "ase"]) == 0
    ordered = [s["e_data"].numpy() for s in load_tfrecord("ordered.yml")]
    assert ordered == [s["e_data"].numpy() for s in load_ase("data.traj", shuffle=False)]
    assert main(["convert", "ordered.yml", "-o", "batched", "--batch", "8"]) == 0  # auto: a TFRecord, re-batched
    assert "batched.tfr: 3 batches" in capsys.readouterr().out
    batches = list(load_ds("batched.yml"))
    assert [len(b["e_data"]) for b in batches] == [8, 8, 4]
    np.testing.assert_allclose(np.concatenate([b["e_data"].numpy() for b in batches]), ordered)
    parts = load_ds("data.traj", splits={"a": 3, "b": 1}, seed=2)
    assert sum(1 for _ in parts["a"]) == 15 and sum(1 for _ in parts["b"]) == 5
    with pytest.raises(ValueError, match="split when written"):
        load_ds("ordered.yml", splits={"a": 1})
    with pytest.raises(ValueError, match="unknown format 'xyzzy'"):
        load_ds("data.traj", fmt="xyzzy")
    assert main(["convert", "ordered.yml", "-o", "x:1,y:1"]) == 1
    assert "split when written" in capsys.readouterr().err
