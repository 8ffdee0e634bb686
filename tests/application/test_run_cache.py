"""`pinn train`'s data.cache: a file cache records what it was made from and is rebuilt when that changed;
its relative path is the run file's; each rank caches its own share; a refused run leaves params.yml as it was."""
import json
import logging
import os
import shutil
import types

import numpy as np
import pytest
import yaml

from pinn.cli import main
from pinn.demo import make_dipole_dataset

NET = {"atom_types": [1, 8], "rc": 4.0, "depth": 1, "pp_nodes": [8], "pi_nodes": [8], "ii_nodes": [8],
       "out_nodes": [8]}


def _run_file(directory, name="run.yml", data=None, model_dir="model", learning_rate=3e-3, **sections):
    config = {"model_dir": model_dir, "network": {"name": "PiNet", "params": NET},
              "model": {"name": "dipole_model",
                        "params": {"use_charge": True, "learning_rate": learning_rate, "log_every_n_steps": 1,
                                   "progress_bar": "off", "jit": False}},
              "data": {"train": "a.xyz", "batch_size": 5, "shuffle_buffer": 0, **(data or {})},
              "train": {"max_epochs": 2}}
    config.update(sections)
    path = directory / name
    path.write_text(yaml.safe_dump(config))
    return str(path)


def _losses(model_dir):
    records = [json.loads(line) for line in (model_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in records if r["kind"] == "train"]


@pytest.fixture(scope="module")
def frames(tmp_path_factory):
    """Two data files of 10 water frames each, other frames in each."""
    directory = tmp_path_factory.mktemp("frames")
    make_dipole_dataset(str(directory / "a.xyz"), n_frames=10, seed=0)
    make_dipole_dataset(str(directory / "b.xyz"), n_frames=10, seed=1)
    return directory


def test_a_cache_of_other_data_is_rebuilt(frames, tmp_path, monkeypatch):
    """The second run names other training data at the same data.cache path: it trains on them (the loss
    of a run without the cache), not on the first run's cached structures, and its log says why the cache
    was made again; a third run on the same data reuses the cache."""
    for name in ("a.xyz", "b.xyz"):
        (tmp_path / name).symlink_to(frames / name)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # relative paths are the run file's
    cache = {"cache": "cache/train"}
    assert main(["train", _run_file(tmp_path, "one.yml", data=cache, model_dir="one")]) == 0
    assert (tmp_path / "cache" / "train.index").exists() and not (elsewhere / "cache").exists()
    assert main(["train", _run_file(tmp_path, "two.yml", data={**cache, "train": "b.xyz"}, model_dir="two")]) == 0
    assert main(["train", _run_file(tmp_path, "ref.yml", data={"train": "b.xyz", "cache": "none"},
                                    model_dir="ref")]) == 0
    one, two, ref = (_losses(tmp_path / d) for d in ("one", "two", "ref"))
    assert len(one) == len(two) == 4
    assert two != one
    assert two == ref
    log = (tmp_path / "two" / "train.log").read_text()
    assert f"data.cache {tmp_path / 'cache' / 'train'}: made from other data" in log
    assert "b.xyz" in log.split("made from other data", 1)[1].splitlines()[0]
    record = json.loads((tmp_path / "cache" / "train.pinn-cache.json").read_text())
    assert record["files"][0]["path"] == str(tmp_path / "b.xyz")
    assert main(["train", _run_file(tmp_path, "three.yml", data={**cache, "train": "b.xyz"},
                                    model_dir="three")]) == 0
    assert _losses(tmp_path / "three") == ref
    assert "reusing it" in (tmp_path / "three" / "train.log").read_text()


def _input_fns(run, world=None, rc=4.0):
    from pinn.training.run_file import input_fns, read_config
    from pinn.parallel.serial import SerialWorld
    _, data, train = read_config(run)
    return input_fns(data, train, world or SerialWorld(), rc=rc, atom_types=[1, 8])


def _energies(train_fn):
    return np.concatenate([batch["d_data"].numpy()[:, 0] for batch in train_fn()])


def test_the_record_says_what_changed(frames, tmp_path, caplog):
    """A cache is reused while its record matches; a changed cutoff, a touched file, a partial cache (a lock
    file TensorFlow left) or a cache without a record are made again, and the log says which."""
    shutil.copy(frames / "a.xyz", tmp_path / "a.xyz")  # its modification time changes below
    run = _run_file(tmp_path, data={"cache": "c/train"})
    path = tmp_path / "c" / "train"
    caplog.set_level(logging.INFO, logger="pinn")

    def rebuilt_because():
        lines = [r.getMessage() for r in caplog.records if "data.cache" in r.getMessage()]
        caplog.clear()
        return lines[-1]

    first = _energies(_input_fns(run)[0])
    assert "no cache there yet" in rebuilt_because()
    np.testing.assert_array_equal(_energies(_input_fns(run)[0]), first)
    assert "reusing it" in rebuilt_because()
    _energies(_input_fns(run, rc=3.5)[0])
    assert "rc" in rebuilt_because().split("made from other data", 1)[1]
    os.utime(tmp_path / "a.xyz", ns=(1, 1))  # the same bytes, another modification time
    _input_fns(run)
    assert "a.xyz" in rebuilt_because().split("made from other data", 1)[1]
    assert not (tmp_path / "c" / "train.index").exists()
    open(f"{path}_0.lockfile", "w").close()  # a run killed in its first epoch
    assert len(_energies(_input_fns(run)[0])) == 10
    assert "incomplete" in rebuilt_because()
    os.remove(f"{path}.pinn-cache.json")  # a cache of an older pinn
    np.testing.assert_array_equal(_energies(_input_fns(run)[0]), first)
    assert "no record" in rebuilt_because()


def test_each_rank_caches_its_own_share(frames, tmp_path):
    """Rank 1 of 2 caches its shard in PATH-rank1, rank 0 in PATH: not one file the ranks share."""
    os.symlink(frames / "a.xyz", tmp_path / "a.xyz")
    run = _run_file(tmp_path, data={"cache": "c/train"})
    energies = {}
    for rank in (0, 1):
        world = types.SimpleNamespace(rank=rank, size=2, is_parallel=True, is_chief=rank == 0)
        energies[rank] = _energies(_input_fns(run, world)[0])
    assert (tmp_path / "c" / "train.index").exists() and (tmp_path / "c" / "train-rank1.index").exists()
    assert len(energies[0]) == len(energies[1]) == 5 and set(energies[0]).isdisjoint(energies[1])
    record = json.loads((tmp_path / "c" / "train-rank1.pinn-cache.json").read_text())
    assert (record["rank"], record["ranks"]) == (1, 2)


def test_a_refused_run_leaves_params_yml_as_it_was(frames, tmp_path, capsys):
    """A trained model given a new learning rate and an empty data file: the run is refused (one line) and
    the model's params.yml is the trained model's, byte for byte."""
    os.symlink(frames / "a.xyz", tmp_path / "a.xyz")
    assert main(["train", _run_file(tmp_path), "--max-steps", "1"]) == 0
    before = (tmp_path / "model" / "params.yml").read_bytes()
    (tmp_path / "empty.xyz").write_text("")
    capsys.readouterr()
    assert main(["train", _run_file(tmp_path, data={"train": "empty.xyz"}, learning_rate=1e-4),
                 "--max-steps", "2"]) == 1
    err = capsys.readouterr().err
    assert "empty.xyz: file is empty" in err and "Traceback" not in err
    assert (tmp_path / "model" / "params.yml").read_bytes() == before
    # accepted, the new settings are written
    assert main(["train", _run_file(tmp_path, learning_rate=1e-4), "--max-steps", "2"]) == 0
    assert "learning_rate: 0.0001" in (tmp_path / "model" / "params.yml").read_text()
