"""One model file (pinn export): a model directory or a committee as one versioned file that get_calc
loads, a PiNet potential without TensorFlow; newer formats and damaged files refused in one line."""
import json
import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest
from ase.io import read

from pinn import get_calc
from pinn.cli.commands import main
from pinn.committee import CommitteeCalc
from pinn.cli.export import export_model
from pinn.files.model_file import FORMAT_VERSION, ModelFileError, read_model_file


@pytest.fixture(scope="module")
def frame(alloy_xyz):
    atoms = read(alloy_xyz, index=3)
    atoms.calc = None
    return atoms


@pytest.fixture(scope="module")
def exported(committee_dir, tmp_path_factory):
    """``pinn export`` of member-0 alone and of the whole committee."""
    out = tmp_path_factory.mktemp("exported")
    single, committee = out / "member.pinn", out / "committee.pinn"
    assert main(["export", str(committee_dir / "member-0"), "-o", str(single)]) == 0
    assert main(["export", str(committee_dir), "-o", str(committee), "--checkpoint", "last"]) == 0
    return single, committee


@pytest.mark.parametrize("engine", ["numba", "tensorflow"])
def test_the_file_predicts_what_the_directory_does(committee_dir, exported, frame, engine):
    single, committee = exported
    reference = get_calc(str(committee_dir / "member-0"), engine=engine)
    calc = get_calc(str(single), engine=engine)
    assert calc.engine == engine
    assert calc.get_potential_energy(frame) == pytest.approx(reference.get_potential_energy(frame), abs=1e-10)
    np.testing.assert_allclose(calc.get_forces(frame), reference.get_forces(frame), atol=1e-10)
    np.testing.assert_allclose(calc.get_stress(frame), reference.get_stress(frame), atol=1e-12)
    members = get_calc(str(committee), engine=engine, drive="first")
    assert isinstance(members, CommitteeCalc) and members.size == 3 and members.drive == "first"
    directory = get_calc(str(committee_dir), engine=engine)
    directory.get_forces(frame)
    assert members.get_property("max_forces_deviation", frame) == pytest.approx(
        directory.results["max_forces_deviation"], abs=1e-10)


def test_the_header_says_what_the_file_holds(committee_dir, exported, capsys):
    single, committee = exported
    header = read_model_file(single).header
    assert header["format"] == "pinn-model" and header["format_version"] == FORMAT_VERSION
    assert header["kind"] == "model" and len(header["members"]) == 1
    member = header["members"][0]
    assert member["atom_types"] == [29, 79] and member["rc"] == 4.5 and member["e_unit"] == 1.0
    assert member["checkpoint"] == "ckpt-6" and member["step"] == 6 and member["numba_engine"]
    assert "model_dir" not in member["params"] and member["params"]["network"]["name"] == "PiNet"
    assert read_model_file(committee).header["kind"] == "committee"
    assert [m["name"] for m in read_model_file(committee).members] == ["member-0", "member-1", "member-2"]


def test_a_pinet_file_runs_without_tensorflow_in_a_fresh_process(exported, alloy_xyz):
    single, _ = exported
    code = ("import sys, pinn; from ase.io import read; a = read(sys.argv[2], index=3); "
            "a.calc = pinn.get_calc(sys.argv[1]); e = a.get_potential_energy(); "
            "print(e, 'tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(single), alloy_xyz], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out[1] == "False", "the model file imported TensorFlow"
    assert float(out[0]) == pytest.approx(get_calc(str(single)).get_potential_energy(read(alloy_xyz, index=3)),
                                          abs=1e-10)


def test_newer_formats_damaged_files_and_wrong_uses_are_refused_in_one_line(exported, tmp_path):
    single, _ = exported
    with zipfile.ZipFile(single) as z:
        names = z.namelist()
        contents = {name: z.read(name) for name in names}
    header = json.loads(np.load(single)["header"].item())

    def rewrite(path, header=None, drop=None):
        with zipfile.ZipFile(path, "w") as z:
            for name, data in contents.items():
                if name == "header.npy" and header is not None:
                    import io
                    buf = io.BytesIO()
                    np.save(buf, np.array(json.dumps(header)))
                    data = buf.getvalue()
                if name != drop:
                    z.writestr(name, data)
        return str(path)

    newer = rewrite(tmp_path / "newer.pinn", {**header, "format_version": FORMAT_VERSION + 1, "pinn_version": "9.0"})
    with pytest.raises(ModelFileError, match=rf"format version {FORMAT_VERSION + 1} \(written by pinn 9.0\); "
                       rf"this pinn reads versions up to {FORMAT_VERSION}: upgrade pinn"):
        get_calc(newer)
    missing = rewrite(tmp_path / "missing.pinn", drop=next(n for n in names if n.startswith("m0/engine/")))
    with pytest.raises(ModelFileError, match="missing.pinn: damaged pinn model file .*SHA-256"):
        get_calc(missing)
    truncated = tmp_path / "truncated.pinn"
    truncated.write_bytes(single.read_bytes()[:5000])
    with pytest.raises(ModelFileError, match="truncated.pinn: damaged pinn model file"):
        get_calc(str(truncated))
    not_ours = tmp_path / "data.xyz"
    not_ours.write_text("2\n\nH 0 0 0\nH 0 0 0.7\n")
    assert main(["export", str(tmp_path / "nowhere"), "-o", str(tmp_path / "x.pinn")]) != 0
    with pytest.raises(ModelFileError, match="data.xyz: damaged pinn model file|data.xyz: not a pinn model file"):
        get_calc(str(not_ours))
    with pytest.raises(ValueError, match="holds one checkpoint's weights"):
        get_calc(str(single), checkpoint="best")
    with pytest.raises(ValueError, match="drive='first' chooses what drives a committee; .* holds one model"):
        get_calc(str(single), drive="first")
    assert not os.path.exists(tmp_path / "x.pinn")


def test_a_committee_of_mismatched_members_is_not_exported(committee_dir, alloy_xyz, tmp_path):
    from settings import train_alloy_member
    other = train_alloy_member(tmp_path / "rc4", alloy_xyz, seed=0, steps=1, rc=4.0)
    with pytest.raises(ValueError, match="share the cutoff"):
        export_model([str(committee_dir / "member-0"), other], tmp_path / "bad.pinn")
    assert not (tmp_path / "bad.pinn").exists()


def test_a_network_the_numba_engine_cannot_run_is_rebuilt_with_tensorflow(alloy_xyz, frame, tmp_path):
    from pinn.io import load_ase, sparse_batch
    from pinn.models import potential_model
    from settings import training_params
    spec = [{"type": "G2", "i": "ALL", "j": "ALL", "eta": [0.5, 1.0], "Rs": [0.0, 1.0]}]
    params = training_params(tmp_path / "bpnn", {"atom_types": [29, 79], "rc": 4.5, "sf_spec": spec,
                                                 "nn_spec": [4]}, {"use_force": True}, network="BPNN")
    potential_model(params).train(lambda: load_ase(alloy_xyz).repeat().apply(sparse_batch(8)), 2)
    header = export_model(str(tmp_path / "bpnn"), tmp_path / "bpnn.pinn")
    member = header["members"][0]
    assert not member["numba_engine"] and member["needs_tensorflow"]
    calc, reference = get_calc(str(tmp_path / "bpnn.pinn")), get_calc(str(tmp_path / "bpnn"))
    assert calc.engine == "tensorflow"
    assert calc.get_potential_energy(frame) == pytest.approx(reference.get_potential_energy(frame), abs=1e-6)
    np.testing.assert_allclose(calc.get_forces(frame), reference.get_forces(frame), atol=1e-6)
