"""The `pinn` command: every subcommand on small data, and bad arguments."""
import csv
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import yaml

from chatter import tensorflow_chatter, user_env
import pinn as pinn_package
from pinn.cli import main
from pinn.demo import make_dipole_dataset

NET = {"atom_types": [1, 8], "rc": 4.0, "depth": 2, "pp_nodes": [8], "pi_nodes": [8], "ii_nodes": [8],
       "out_nodes": [8]}


def _run_file(directory, **changes):
    config = {"model_dir": "model", "network": {"name": "PiNet", "params": NET},
              "model": {"name": "dipole_model",
                        "params": {"use_charge": True, "learning_rate": 3e-3, "log_every_n_steps": 20,
                                   "eval_every_n_steps": 20, "progress_bar": "off",
                                   # the command is tested here, not XLA (test_padded_training.py, the
                                   # parallel union test): no compilation per batch size (85 s → 6 s)
                                   "jit": False}},
              "data": {"train": "water.xyz", "split": {"train": 8, "eval": 2}, "batch_size": 16},
              "train": {"max_epochs": 10}}
    for key, value in changes.items():
        config[key] = value
    path = directory / "run.yml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A directory with water.xyz and a dipole model trained by `pinn train run.yml`."""
    directory = tmp_path_factory.mktemp("cli")
    make_dipole_dataset(str(directory / "water.xyz"), n_frames=100, seed=0)
    assert main(["train", _run_file(directory)]) == 0
    return directory


def test_train_from_a_run_file(workdir, capsys):
    model = workdir / "model"  # relative to the run file
    assert (model / "ckpt-50.index").exists()  # 80 training structures, batches of 16: 5 steps × 10 epochs
    evals = [json.loads(line) for line in (model / "metrics.jsonl").read_text().splitlines()
             if json.loads(line)["kind"] == "eval"]
    assert [e["step"] for e in evals] == [20, 40, 50]
    assert evals[-1]["D_RMSE"] < evals[0]["D_RMSE"]


def test_train_with_a_warm_start(workdir, tmp_path, capsys):
    """`pinn train run.yml --init-model DIR` begins from DIR's weights; a mismatched network: one line, exit 1."""
    warm = tmp_path / "warm"
    assert main(["train", str(workdir / "run.yml"), "-d", str(warm), "--init-model", str(workdir / "model"),
                 "--max-steps", "1"]) == 0
    assert (warm / "ckpt-1.index").exists()
    assert "warm start from " + str(workdir / "model" / "ckpt-50") in (warm / "train.log").read_text()
    other = tmp_path / "other"
    other.mkdir()
    (other / "water.xyz").symlink_to(workdir / "water.xyz")
    capsys.readouterr()
    assert main(["train", _run_file(other, network={"name": "PiNet", "params": {**NET, "depth": 3}}),
                 "--init-model", str(workdir / "model"), "--max-steps", "1"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert "its network differs from this run's: depth 2 there, 3 here" in err[-1]


def test_train_a_committee_and_report_it(workdir, tmp_path, capsys):
    """`pinn train run.yml --committee 2`: member-0 and member-1, seeds 0 and 1, the same split; `--member K`
    alone; `pinn report DIR`: the members and their mean ± spread."""
    import pinn.params
    root = tmp_path / "committee"
    assert main(["train", str(workdir / "run.yml"), "-d", str(root), "--committee", "2", "--max-steps", "2"]) == 0
    params = [pinn.params.read_params(str(root / f"member-{k}")) for k in range(2)]
    assert [p["seed"] for p in params] == [0, 1]
    assert (root / "member-0" / "ckpt-2.index").exists() and (root / "member-1" / "ckpt-2.index").exists()
    assert main(["train", str(workdir / "run.yml"), "-d", str(root), "--committee", "3", "--member", "2",
                 "--max-steps", "1"]) == 0
    assert (root / "member-2" / "ckpt-1.index").exists()
    capsys.readouterr()
    assert main(["report", str(root)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert [row.split()[0] for row in table[1:]] == ["member-0", "member-1", "member-2", "member-*"]
    assert "(3)" in table[-1] and "±" in table[-1]
    assert main(["train", str(workdir / "run.yml"), "-d", str(root), "--committee", "2", "--member", "2"]) == 1
    assert "--member 2: a committee of 2 has members 0 to 1" in capsys.readouterr().err
    assert main(["train", str(workdir / "run.yml"), "--member", "1"]) == 1


def _without_log_lines(err):
    """Standard error without the ``pinn`` logger's lines (``12:01:02 pinn INFO ...``): what the command printed."""
    import re
    return "".join(line for line in err.splitlines(keepends=True) if not re.match(r"\d\d:\d\d:\d\d pinn", line))


def test_train_bad_run_files(tmp_path, capsys):
    (tmp_path / "water.xyz").write_text("")
    cases = [
        ({"train": {}}, "train: give max_steps, max_epochs or max_time"),
        ({"data": {"batch_size": 4}}, "give either data.train (files) or data.mimic"),
        ({"data": {"train": "water.xyz", "bogus": 1}}, "data.bogus: unknown key"),
        ({"model": {"name": "dipole_model", "params": {"use_force": True}}}, "model.params.use_force: unknown key"),
        ({"data": {"train": "missing.xyz", "batch_size": 4}}, "missing.xyz: no such file"),
        ({"data": {"train": "water.xyz", "split": {"train": 8, "vali": 2}}}, "data.split: parts must be train and"),
        # unknown names suggest the nearest allowed one
        ({"trian": {"max_steps": 3}}, "trian: unknown top-level key; did you mean `train`?"),
        ({"data": {"train": "water.xyz", "split": {"train": 8, "vali": 2}}}, "(got ['train', 'vali']); did you mean `eval`?"),
        ({"data": {"trian": "water.xyz"}}, "data.trian: unknown key; did you mean `train`?"),
        ({"data": {"mimic": {"mpt": "a.mpt", "force": "trr"}}}, "data.mimic.force: unknown key; did you mean `forces`?"),
        ({"data": {"mimic": {"mpt": "a.mpt", "seed": 1}}}, "data.mimic.seed: unknown key; give it as data.seed;"),
        ({"network": {"name": "PiNett", "params": NET}}, "network.name: 'PiNett' is not one of"),
        ({"network": {"name": "PiNett", "params": NET}}, "did you mean `PiNet`?"),
    ]
    for changes, message in cases:
        path = _run_file(tmp_path, **changes)
        assert main(["train", path]) == 1
        err = _without_log_lines(capsys.readouterr().err)
        assert err.startswith("pinn train: error:") and message in err and err.count("\n") == 1, err
    assert main(["train", str(tmp_path / "nothing.yml")]) == 1
    assert "nothing.yml: no such file" in capsys.readouterr().err
    # an element the network does not know: one line naming it and the file, before any training
    data = tmp_path / "elements"
    data.mkdir()
    make_dipole_dataset(str(data / "water.xyz"), n_frames=4, seed=0)
    hydrogen_only = {"name": "PiNet", "params": dict(NET, atom_types=[1])}
    for data_section, where in (({"train": "water.xyz", "eval": "water.xyz"}, "error: {}/water.xyz:"),
                                ({"train": "water.xyz", "split": {"train": 3, "eval": 1}}, "data.train ({}/water.xyz):")):
        assert main(["train", _run_file(data, network=hydrogen_only, data=data_section)]) == 1
        err = _without_log_lines(capsys.readouterr().err)
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert f"{where.format(data)} element(s) O (8) not in network.params.atom_types [1]" in err, err
    assert main(["train", str(tmp_path / "params.txt")]) == 1
    assert "expected a run file" in capsys.readouterr().err


def test_train_runs_an_input_script_with_its_arguments(tmp_path):
    script = tmp_path / "input.py"
    script.write_text("import sys, json\njson.dump(sys.argv[1:], open(sys.argv[1], 'w'))\n")
    out = tmp_path / "argv.json"
    assert main(["train", str(script), str(out), "7"]) == 0
    assert json.loads(out.read_text()) == [str(out), "7"]


def test_convert_eval_and_bad_arguments(workdir, tmp_path, capsys):
    prefix = str(tmp_path / "water")
    assert main(["convert", str(workdir / "water.xyz"), "-o", prefix, "--split", "train=3,eval=1"]) == 0
    out = capsys.readouterr().out
    assert "water.train.tfr: 75 structures" in out and "water.eval.tfr: 25 structures" in out
    assert main(["eval", str(workdir / "model"), prefix + ".eval.tfr", "--json"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["global_step"] == 50 and 0 < metrics["D_RMSE"] < 1 and metrics["checkpoint"].endswith("ckpt-50")
    # the same structures read from the xyz file give the same numbers
    import ase.io
    ase.io.write(tmp_path / "eval.xyz", [a for a in _tfr_atoms(prefix + ".eval.tfr")])
    assert main(["eval", str(workdir / "model"), str(tmp_path / "eval.xyz"), "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["D_RMSE"] == pytest.approx(metrics["D_RMSE"], rel=1e-5)
    assert main(["eval", str(workdir / "model"), prefix + ".eval.tfr", "--checkpoint", "best"]) == 0
    table = capsys.readouterr().out
    assert "dipole" in table and "e·Å" in table and "charges" in table
    assert main(["eval", str(workdir / "model"), prefix + ".eval.tfr", "--per-atom", str(tmp_path / "p.xyz")]) == 1
    assert "is a DipoleModel; per-atom energies are a potential model's" in capsys.readouterr().err
    # errors: one line, exit 1; usage errors exit 2
    assert main(["eval", str(tmp_path / "nomodel"), prefix + ".eval.tfr"]) == 1
    assert "nomodel: no such model directory" in capsys.readouterr().err
    assert main(["convert", "-o", prefix]) == 1
    assert "no input files" in capsys.readouterr().err
    assert main(["convert", str(workdir / "water.xyz"), "-o", prefix, "--split", "train:8"]) == 1
    assert "--split: expected name=ratio pairs" in capsys.readouterr().err
    # upstream PiNN's form: -o 'name:ratio,...' splits and writes name.tfr per part (never a file of that name)
    upstream = f"{tmp_path}/up_train:3,{tmp_path}/up_eval:1"
    assert main(["convert", str(workdir / "water.xyz"), "-o", upstream]) == 0
    out = capsys.readouterr().out
    assert f"{tmp_path}/up_train.tfr: 75 structures" in out and f"{tmp_path}/up_eval.tfr: 25 structures" in out
    for bad in (f"{tmp_path}/x:eight", f"{tmp_path}/a:1,{tmp_path}/a:1", "train:8,"):
        assert main(["convert", str(workdir / "water.xyz"), "-o", bad]) == 1
        assert "upstream PiNN's name:ratio pairs" in capsys.readouterr().err
    assert main(["convert", str(workdir / "water.xyz"), "-o", upstream, "--split", "a=1"]) == 1
    assert "leave out --split" in capsys.readouterr().err
    assert not list(tmp_path.glob("*:*"))
    for bad in (["eval", str(workdir / "model")], ["eval", str(workdir / "model"), "x.tfr", "--batch-size", "0"],
                ["log", str(workdir / "model"), "--last", "0"]):
        with pytest.raises(SystemExit) as exit_info:
            main(bad)
        assert exit_info.value.code == 2


def _tfr_atoms(path):
    from ase import Atoms
    from ase.calculators.singlepoint import SinglePointCalculator
    from pinn.io import load_tfrecord
    for s in load_tfrecord(path):
        atoms = Atoms(numbers=s["elems"].numpy(), positions=s["coord"].numpy())
        atoms.calc = SinglePointCalculator(atoms, dipole=s["d_data"].numpy(), charges=s["q_data"].numpy())
        yield atoms


def test_report_and_log(workdir, tmp_path, capsys):
    assert main(["report", str(workdir / "model"), "-o", str(tmp_path / "report")]) == 0
    out = capsys.readouterr().out
    assert "dipole RMSE" in out
    from matplotlib.image import imread
    for name in ("learning_curves.png", "parity.png"):
        image = imread(tmp_path / "report" / name)
        assert image.shape[0] > 200 and np.ptp(image[..., :3]) > 0.5  # a drawing, not a blank
    assert main(["log", str(workdir / "model"), "--kind", "eval"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:4] == ["kind", "step", "epoch", "loss"] and len(lines) == 4
    assert main(["log", str(workdir / "model"), "--csv", str(tmp_path / "m.csv"), "--last", "2"]) == 0
    with open(tmp_path / "m.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 and rows[-1]["kind"] == "eval" and float(rows[-1]["D_RMSE"]) > 0
    capsys.readouterr()
    assert main(["log", str(workdir / "model"), "-t", "RMSE", "--kind", "eval"]) == 0  # upstream PiNN's --tag
    header = capsys.readouterr().out.splitlines()[0].split()
    assert header[:2] == ["kind", "step"] and header[2:] and all("RMSE" in c for c in header[2:])
    assert main(["log", str(workdir / "model"), "-t", "NOPE"]) == 1
    assert "no recorded figure's name contains it" in capsys.readouterr().err
    assert main(["report", str(tmp_path)]) == 1
    assert "no model directory (with a params.yml)" in capsys.readouterr().err
    assert main(["report", str(workdir), "-k", "mod"]) == 0  # upstream PiNN's table of model directories
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:3] == ["model", "step", "D_RMSE"] and table[1].split()[:2] == ["model", "50"]
    assert main(["report", str(workdir), "-k", "nothing"]) == 1
    assert "whose path contains 'nothing'" in capsys.readouterr().err
    assert main(["log", str(workdir / "model"), "--kind", "eval", "-t", "D_RMSE", "-f", "%14.6e"]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[-1].count("e") == 1
    assert main(["log", str(tmp_path)]) == 1
    assert "no metrics recorded" in capsys.readouterr().err


def test_console_script_help_and_exit_codes():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    bin_dir = os.path.dirname(sys.executable)
    pinn = os.path.join(bin_dir, "pinn")
    help_text = subprocess.run([pinn, "--help"], capture_output=True, text=True, env=env)
    assert help_text.returncode == 0
    for command in ("train", "convert", "eval", "report", "log"):
        assert command in help_text.stdout
    sub = subprocess.run([pinn, "train", "--help"], capture_output=True, text=True, env=env)
    assert sub.returncode == 0 and "run file" in sub.stdout
    version = subprocess.run([pinn, "version"], capture_output=True, text=True, env=env)
    assert version.returncode == 0 and version.stdout == f"pinn version: {pinn_package.__version__}\n"
    bad = subprocess.run([pinn, "frobnicate"], capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and "invalid choice" in bad.stderr


def test_tensorflow_start_up_lines_only_when_asked(tmp_path):
    """`pinn convert` imports TensorFlow and runs it: its C++ start-up lines are hidden, shown with --verbose
    (before or after the command) or when the user sets TF_CPP_MIN_LOG_LEVEL, whose value is kept."""
    make_dipole_dataset(str(tmp_path / "water.xyz"), n_frames=4, seed=0)
    pinn = os.path.join(os.path.dirname(sys.executable), "pinn")

    def convert(before=(), after=(), level=None):
        env = user_env() if level is None else user_env(TF_CPP_MIN_LOG_LEVEL=level)
        out = subprocess.run([pinn, *before, "convert", "water.xyz", "-o", "w", *after], cwd=tmp_path,
                             env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0 and "w.tfr: 4 structures" in out.stdout, out.stdout + out.stderr
        return out.stdout + out.stderr

    quiet = convert()
    assert tensorflow_chatter(quiet) == [], quiet
    for loud in (convert(before=["--verbose"]), convert(after=["-v"]), convert(level="0")):
        assert "oneDNN custom operations are on" in loud or "This TensorFlow binary is optimized" in loud, loud
    assert tensorflow_chatter(convert(before=["--verbose"], level="3")) != []  # the flag overrides the environment


# -- every bad input: one line naming the file, frame or key; exit status 1; nothing damaged ------------------

def _water_with(workdir, path, change, frame=7, count=20):
    """The first ``count`` frames of the water data (dipoles, charges) written to ``path``, frame ``frame``
    changed by ``change(atoms)``."""
    import ase.io
    from ase.calculators.singlepoint import SinglePointCalculator
    frames = ase.io.read(workdir / "water.xyz", index=f":{count}")
    results = frames[frame].calc.results
    change(frames[frame])
    frames[frame].calc = SinglePointCalculator(frames[frame], **results)
    ase.io.write(path, frames)
    return str(path)


def _same_position(atoms):
    atoms.positions[2] = atoms.positions[0]


def _nan_position(atoms):
    atoms.positions[1, 0] = np.nan


def _files_of(directory):
    """{relative path: bytes} of every file under ``directory``."""
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def _error_line(capsys):
    """The last line on stderr (log lines may precede it), after checking that no traceback came."""
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return err.strip().splitlines()[-1]


def test_bad_structures_are_named_before_training(workdir, tmp_path, capsys):
    """Two atoms at one place in the training data, a NaN position in the validation data: `pinn train` refuses
    before training, naming the file, the frame and the atoms; a trained model directory trained again on them is
    left as it was (but for the run's log); `pinn eval` and `pinn convert` refuse them too."""
    same = _water_with(workdir, tmp_path / "same.xyz", _same_position)
    nan = _water_with(workdir, tmp_path / "nan.xyz", _nan_position)
    shutil.copytree(workdir / "model", tmp_path / "model")
    before = _files_of(tmp_path / "model")
    same_line = f"{same}, frame 7: atoms 0 and 2 are at the same position (0 Å apart, closer than 0.01 Å) at ["
    nan_line = f"{nan}, frame 7: atom 1 has a non-finite position [nan, "
    for data, line in (({"train": "same.xyz", "eval": "water.xyz"}, same_line),
                       ({"train": "water.xyz", "eval": "nan.xyz"}, nan_line),
                       ({"train": "same.xyz", "split": {"train": 8, "eval": 2}}, same_line)):
        shutil.copy(workdir / "water.xyz", tmp_path / "water.xyz")
        assert main(["train", _run_file(tmp_path, data={**data, "batch_size": 16}), "--max-steps", "60"]) == 1
        assert _error_line(capsys).startswith(f"pinn train: error: {line}")
        after = _files_of(tmp_path / "model")
        assert {k: v for k, v in after.items() if k != "train.log"} == \
            {k: v for k, v in before.items() if k != "train.log"}
    assert main(["eval", str(tmp_path / "model"), nan]) == 1
    assert _error_line(capsys).startswith(f"pinn eval: error: {nan_line}")
    assert main(["convert", same, "-o", str(tmp_path / "same")]) == 1
    assert _error_line(capsys).startswith(f"pinn convert: error: {same_line}")
    assert not list(tmp_path.glob("same.tfr*")) and not (tmp_path / "same.yml").exists()


def test_damaged_tfrecord_files_are_named(workdir, tmp_path, capsys):
    """A truncated .tfr, one with fewer records than its spec says, a spec that is not YAML, a record with two
    atoms at one place: `pinn eval` and `pinn train` name the file (and the record) in one line, exit 1."""
    import tensorflow as tf
    from pinn.io import load_ase, write_tfrecord
    prefix = str(tmp_path / "w")
    assert main(["convert", str(workdir / "water.xyz"), "-o", prefix]) == 0
    capsys.readouterr()
    whole = (tmp_path / "w.tfr").read_bytes()
    (tmp_path / "cut.tfr").write_bytes(whole[:len(whole) // 2])
    shutil.copy(tmp_path / "w.yml", tmp_path / "cut.yml")
    (tmp_path / "noyaml.tfr").write_bytes(whole)
    (tmp_path / "noyaml.yml").write_text("format: {coord: [\n")
    spec = yaml.safe_load((tmp_path / "w.yml").read_text())
    spec["info"]["n_sample"] = 120
    (tmp_path / "short.tfr").write_bytes(whole)
    (tmp_path / "short.yml").write_text(yaml.safe_dump(spec))
    same = load_ase(_water_with(workdir, tmp_path / "same.xyz", lambda atoms: None), shuffle=False)
    same = same.map(lambda s: {**s, "coord": tf.tensor_scatter_nd_update(s["coord"], [[2]], s["coord"][:1])})
    write_tfrecord(str(tmp_path / "same.tfr"), same)  # a cache written by another tool: nothing checked it
    cases = {"cut.tfr": rf"{tmp_path}/cut.tfr: damaged TFRecord file after \d+ intact records \(truncated record",
             "noyaml.tfr": rf"{tmp_path}/noyaml.yml: a TFRecord spec that is not YAML \(.*line 2, column 1\)",
             "short.tfr": rf"{tmp_path}/short.tfr: 100 records, but its spec declares 120 \(info.n_sample\)",
             "same.tfr": rf"{tmp_path}/same.tfr, record 0: atoms 0 and 2 are at the same position \(0 Å apart"}
    for name, line in cases.items():
        assert main(["eval", str(workdir / "model"), str(tmp_path / name)]) == 1
        assert re.match(f"pinn eval: error: {line}", _error_line(capsys))
    shutil.copy(workdir / "water.xyz", tmp_path / "water.xyz")
    assert main(["train", _run_file(tmp_path, data={"train": "cut.tfr", "eval": "w.tfr", "batch_size": 16},
                                    model_dir="fresh")]) == 1
    assert re.match(f"pinn train: error: {cases['cut.tfr']}", _error_line(capsys))
    assert not list((tmp_path / "fresh").glob("ckpt-*"))


def _read_only(path):
    """A context in which ``path`` (a directory tree) cannot be written: its mode bits cleared of writing and,
    where the tests run as root, the override of mode bits dropped from this thread's effective capabilities
    (Linux; TensorFlow's threads keep theirs, but the files a command writes first are written by this thread)."""
    import contextlib
    import ctypes
    import stat

    @contextlib.contextmanager
    def context():
        modes = {p: p.stat().st_mode for p in [path, *path.rglob("*")]}
        for p, mode in modes.items():
            p.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
        restore = _drop_root_override(ctypes) if os.geteuid() == 0 else None
        try:
            yield
        finally:
            if restore is not None:
                restore()
            for p, mode in modes.items():
                p.chmod(mode)
    return context()


def _drop_root_override(ctypes):
    """Clear CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH and CAP_FOWNER from this thread's effective set (capset(2));
    returns the function that puts them back."""
    libc = ctypes.CDLL(None, use_errno=True)

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    header, data = Header(0x20080522, 0), (Data * 2)()  # _LINUX_CAPABILITY_VERSION_3
    assert libc.capget(ctypes.byref(header), data) == 0, ctypes.get_errno()
    saved = data[0].effective
    data[0].effective = saved & ~((1 << 1) | (1 << 2) | (1 << 3))
    assert libc.capset(ctypes.byref(header), data) == 0, ctypes.get_errno()

    def restore():
        data[0].effective = saved
        assert libc.capset(ctypes.byref(header), data) == 0, ctypes.get_errno()
    return restore


def test_model_directories_that_cannot_be_written_are_named(workdir, tmp_path, capsys):
    """A model_dir that is a file, one under a file, a read-only one: `pinn train` and `pinn report` say which
    path in one line, exit 1, and change nothing."""
    shutil.copy(workdir / "water.xyz", tmp_path / "water.xyz")
    run = _run_file(tmp_path)
    (tmp_path / "afile").write_text("mine\n")
    for model_dir, what in (("afile", "is a file, not a directory"),
                            ("afile/sub", "a part of this path is a file, not a directory")):
        assert main(["train", run, "-d", str(tmp_path / model_dir), "--max-steps", "1"]) == 1
        assert _error_line(capsys) == f"pinn train: error: {tmp_path / model_dir}: {what}"
        assert (tmp_path / "afile").read_text() == "mine\n"
    shutil.copytree(workdir / "model", tmp_path / "model", ignore=shutil.ignore_patterns("report"))
    before = _files_of(tmp_path / "model")
    with _read_only(tmp_path / "model"):
        assert main(["report", str(tmp_path / "model")]) == 1
        assert _error_line(capsys) == (f"pinn report: error: {tmp_path}/model/report: permission denied (a read-only "
                                       "directory or file?)")
        assert main(["train", run, "-d", str(tmp_path / "model"), "--max-steps", "60"]) == 1
        assert re.fullmatch(rf"pinn train: error: {tmp_path}/model/\S+: permission denied \(a read-only directory or "
                            r"file\?\)", _error_line(capsys))
    assert _files_of(tmp_path / "model") == before


def test_any_error_is_one_line_and_its_traceback_shown_with_verbose(monkeypatch, capsys):
    """What the command does not foresee is one line too (its type, a pointer to --verbose), exit 1; TensorFlow's
    errors give the line inside them; --verbose adds the traceback."""
    import tensorflow as tf
    from pinn.cli import commands
    errors = [KeyError("x"),
              tf.errors.DataLossError(None, None, "{{function_node __wrapped__IteratorGetNext}} truncated record at "
                                                  "12' failed with Read less bytes than requested [Op:IteratorGetNext]"),
              tf.errors.InvalidArgumentError(None, None, "{{function_node f}} DataError: a.xyz, frame 3: bad\n"
                                                         "Traceback (most recent call last):\n  File x\n"),
              PermissionError(13, "Permission denied", "/ro/x")]
    lines = ["KeyError: 'x' (unexpected: run with --verbose for the traceback)",
             "damaged data file: truncated record at 12' failed with Read less bytes than requested",
             "a.xyz, frame 3: bad", "/ro/x: permission denied (a read-only directory or file?)"]
    for err, line in zip(errors, lines):
        def fail(args, err=err):
            raise err
        monkeypatch.setattr(commands.COMMANDS["version"], "run", fail)
        assert main(["version"]) == 1
        assert capsys.readouterr().err == f"pinn version: error: {line}\n"
        assert main(["version", "--verbose"]) == 1
        err_text = capsys.readouterr().err
        assert err_text.startswith("Traceback (most recent call last):") and \
            err_text.endswith(f"pinn version: error: {line}\n"), err_text


def test_the_help_lists_every_command_once(capsys):
    """`pinn --help` lists each registered command (from its own module's parser), none twice, none left out."""
    from pinn.cli.commands import COMMANDS, main
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    listed = [line.split()[0] for line in text.split("\ncommands:\n", 1)[1].splitlines()[1:]
              if line.startswith("    ") and not line.startswith("     ")]
    assert listed == list(COMMANDS), listed
