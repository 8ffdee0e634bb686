import pytest
import yaml

from pinn.params import ParamsError, read_params, resolve, write_params

BASE = {"model_dir": "m", "network": {"name": "PiNet", "params": {"atom_types": [1, 8]}}}


def test_defaults_filled_and_written(tmp_path):
    p = resolve(BASE)
    assert p["network"]["params"]["depth"] == 4 and p["model"]["name"] == "potential_model"
    assert p["model"]["params"]["use_force"] is False and p["precision"] == "float32"
    write_params(p, tmp_path)
    assert read_params(tmp_path)["network"] == p["network"]
    assert yaml.safe_load((tmp_path / "params.yml").read_text())["seed"] == 0


@pytest.mark.parametrize("change,message", [
    ({"network": {"name": "PiNet", "params": {"atom_types": [1], "rcut": 4.0}}}, r"network\.params\.rcut: unknown key"),
    ({"network": {"name": "PiNet", "params": {"atom_types": [1], "rc": "4"}}},
     r"network\.params\.rc: expected float, got str \('4'\)$"),
    ({"model": {"name": "potential_model", "params": yaml.safe_load("learning_rate: 1e-2")}},
     r"model\.params\.learning_rate: expected float, got str \('1e-2'\); YAML reads an exponent .* 1\.0e-3"),
    ({"network": {"name": "PiNet", "params": {"atom_types": [1], "depth": True}}}, r"network\.params\.depth"),
    ({"network": {"name": "PiNet", "params": {"atom_types": [1], "rc": -1.0}}}, r"network\.params\.rc: must be positive"),
    ({"network": {"name": "PiNet", "params": {"atom_types": [1, 1]}}}, r"network\.params\.atom_types: lists an element twice"),
    ({"network": {"name": "PiNet", "params": {"atom_types": [119]}}}, r"network\.params\.atom_types"),
    ({"network": {"name": "PiNet", "params": {"act": "sigmoidish"}}}, r"network\.params\.act: 'sigmoidish' is not one of"),
    ({"network": {"name": "SchNet"}}, r"network\.name: 'SchNet' is not one of"),
    ({"model": {"name": "potential_model", "params": {"use_forces": True}}}, r"model\.params\.use_forces: unknown key"),
    ({"model": {"name": "potential_model", "params": {"use_force": "yes"}}}, r"model\.params\.use_force: expected bool"),
    ({"precision": "float16"}, r"params\.precision"),
    ({"extra": 1}, r"params\.extra: unknown key"),
])
def test_bad_params_name_the_key(change, message):
    with pytest.raises(ParamsError, match=message):
        resolve({**BASE, **change})


MIRRORED = {"parallel": True, "parallel_params": {"backend": "mirrored"}}


@pytest.mark.parametrize("change,message", [
    ({"parallel_params": {"backend": "mirrored", "compression": "fp16"}},
     r"parallel_params\.compression: 'fp16', but backend 'mirrored' is one process; the key compresses"),
    ({"parallel_params": {"backend": "mirrored", "stall_timeout_s": 60.0}}, r"parallel_params\.stall_timeout_s: 60\.0"),
    ({"parallel_params": {"backend": "mirrored", "intra_op_threads": 2}}, r"parallel_params\.intra_op_threads: 2"),
    ({"model": {"params": {"engine": "numba"}}}, r"model\.params\.engine: 'numba' computes on the CPU cores"),
    ({"model": {"params": {"optimizer": "ekf"}}}, r"model\.params\.optimizer: 'ekf' with parallel_params\.backend "
                                                  r"'mirrored'"),
])
def test_mirrored_refuses_what_one_process_cannot_follow(change, message):
    params = {**BASE, **MIRRORED, **change}
    with pytest.raises(ParamsError, match=message):
        resolve(params)
    resolve({**params, "parallel": False})  # the same keys without a parallel run: accepted


def test_mirrored_is_one_process(monkeypatch):
    from pinn.parallel.mirrored import open_mirrored_world
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")  # what mpirun announces to its 2 processes
    with pytest.raises(RuntimeError, match="backend is 'mirrored' .* but the launcher started 2 processes"):
        open_mirrored_world(resolve({**BASE, **MIRRORED})["parallel_params"])


@pytest.mark.parametrize("change,suggestion", [
    ({"model": {"params": {"learnin_rate": 1e-3}}},
     r"model\.params\.learnin_rate: unknown key; did you mean `learning_rate`\?"),
    ({"model": {"params": {"Use_Forces": True}}},  # case ignored
     r"model\.params\.Use_Forces: unknown key; did you mean `use_force`\?"),
    ({"network": {"name": "PiNet", "params": {"atom_types": [1], "rcut": 4.0}}}, r"did you mean `rc`\?"),
    ({"network": {"name": "PiNett"}},
     r"network\.name: 'PiNett' is not one of \['BPNN', 'LJ', 'PiNet', 'PiNet2'\]; did you mean `PiNet`\?"),
    ({"network": {"name": "bpn"}}, r"network\.name: 'bpn' .*; did you mean `BPNN`\?"),
    ({"model": {"name": "potential"}}, r"model\.name: 'potential' .*; did you mean `potential_model`\?"),
    ({"modle": {"name": "potential_model"}}, r"params\.modle: unknown key; did you mean `model`\?"),
    ({"parallel_params": {"lr_scalling": "linear"}},
     r"parallel_params\.lr_scalling: unknown key; did you mean `lr_scaling`\?"),
])
def test_unknown_names_suggest_the_nearest(change, suggestion):
    with pytest.raises(ParamsError, match=suggestion):
        resolve({**BASE, **change})


@pytest.mark.parametrize("change", [{"network": {"name": "SchNet"}}, {"model": {"params": {"zzz": 1}}}])
def test_nothing_near_no_suggestion(change):
    with pytest.raises(ParamsError) as info:
        resolve({**BASE, **change})
    assert "did you mean" not in str(info.value)


def test_missing_model_dir():
    with pytest.raises(ParamsError, match="params.model_dir: required"):
        resolve({"network": BASE["network"]})


def test_legacy_flat_params():
    legacy = {"model_dir": "m", "network": "pinet",
              "network_params": {"atom_types": [1, 6], "rc": 4.5, "depth": 3},
              "model_params": {"learning_rate": 1e-3, "decay_step": 500, "decay_rate": 0.9, "use_force": True}}
    p = resolve(legacy)
    assert p["network"]["name"] == "PiNet" and p["network"]["params"]["depth"] == 3
    assert p["model"]["params"]["decay_step"] == 500 and p["model"]["params"]["use_force"] is True


def test_bpnn_sf_spec_checked():
    bad = {"model_dir": "m", "network": {"name": "bpnn", "params": {"sf_spec": [{"type": "G2", "eta": [1.0]}]}}}
    with pytest.raises(ParamsError, match="sf_spec"):
        resolve(bad)


def test_params_doc_is_up_to_date():
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run([sys.executable, os.path.join(root, "tools", "gen_params_doc.py"), "--check"],
                         env=dict(os.environ, PYTHONPATH=root))
    assert out.returncode == 0, "docs/params.md is stale: run python tools/gen_params_doc.py"
