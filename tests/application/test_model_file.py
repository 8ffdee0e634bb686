"""One model file (pinn export): a model directory or a committee as one versioned file that get_calc
loads, a PiNet potential without TensorFlow; newer formats and damaged files refused in one line."""
import io
import json
import os
import shutil
import subprocess
import sys
import zipfile

import numpy as np
import pytest
from ase.io import read

from pinn import get_calc
from pinn.cli.commands import main
from pinn.committee import CommitteeCalc
from pinn.files.model_file import FORMAT_VERSION, ModelFileError, read_model_file
from pinn.models.export import export_model


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
    with pytest.raises(ModelFileError, match=r"missing.pinn: damaged pinn model file \(its header lists the array "
                       r"m0/engine/\w+, which it lacks\)"):
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


def test_a_pinet2_file_runs_on_the_numba_engine_without_tensorflow(alloy_xyz, frame, tmp_path):
    """PiNet2's engine arrays in the file: a fresh process predicts without TensorFlow, as the directory does
    on TensorFlow."""
    from pinn.io import load_ase, sparse_batch
    from pinn.models import potential_model
    from settings import training_params
    params = training_params(tmp_path / "pinet2", {"atom_types": [29, 79], "rc": 4.5, "depth": 2, "rank": 5,
                                                   "weighted": True, "pp_nodes": [8], "pi_nodes": [8, 8],
                                                   "ii_nodes": [8], "out_nodes": [8]}, {"use_force": True},
                             network="PiNet2")
    potential_model(params).train(lambda: load_ase(alloy_xyz).repeat().apply(sparse_batch(8)), 2)
    header = export_model(str(tmp_path / "pinet2"), tmp_path / "pinet2.pinn")
    assert header["members"][0]["numba_engine"]
    reference = get_calc(str(tmp_path / "pinet2"), engine="tensorflow")
    code = ("import sys, pinn; from ase.io import read; a = read(sys.argv[2], index=3); "
            "a.calc = pinn.get_calc(sys.argv[1]); e = a.get_potential_energy(); f = a.get_forces(); "
            "print(e, abs(f).max(), a.calc.engine, 'tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "pinet2.pinn"), alloy_xyz], capture_output=True,
                         text=True, check=True).stdout.split()
    assert out[2:] == ["numba", "False"], "the PiNet2 file ran on TensorFlow"
    assert float(out[0]) == pytest.approx(reference.get_potential_energy(frame), abs=1e-5)
    assert float(out[1]) == pytest.approx(np.abs(reference.get_forces(frame)).max(), abs=1e-5)


# -- files from elsewhere: checked from the header before anything is read ----------------------------------

V1 = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "model_file_v1")


def _v1_structure():
    """The structure whose predictions tests/data/model_file_v1/expected.json holds."""
    from ase.build import bulk
    atoms = bulk("Cu", "fcc", a=3.7, cubic=True).repeat((2, 1, 1))
    atoms.numbers[[1, 6]] = 79
    atoms.positions += 0.05 * np.sin(np.arange(24.0)).reshape(8, 3)
    return atoms


@pytest.mark.parametrize("engine", ["numba", "tensorflow"])
def test_a_file_of_format_1_from_pinn_0_29_still_loads(engine):
    """tests/data/model_file_v1/alloy-v1.pinn, exported by pinn 0.29.0 (format 1: no list of arrays, the hash over
    the arrays alone), loads and predicts what it predicted then."""
    path = os.path.join(V1, "alloy-v1.pinn")
    assert read_model_file(path).header["format_version"] == 1 and "arrays" not in read_model_file(path).header
    with open(os.path.join(V1, "expected.json")) as f:
        expected = json.load(f)
    atoms = _v1_structure()
    atoms.calc = get_calc(path, engine=engine)
    assert atoms.get_potential_energy() == pytest.approx(expected["energy"], abs=2e-5)
    np.testing.assert_allclose(atoms.get_forces(), expected["forces"], atol=2e-5)
    np.testing.assert_allclose(atoms.get_stress(), expected["stress"], atol=2e-6)


def _npy(array):
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def _rewritten(source, target, header=None, extra=(), compressed=()):
    """A copy of model file ``source`` at ``target``: its header replaced by ``header`` (any JSON value; None:
    kept) and the members of ``extra`` ((name, bytes) pairs) added, those named in ``compressed`` deflated."""
    with zipfile.ZipFile(source) as z:
        contents = {name: z.read(name) for name in z.namelist()}
    if header is not None:
        contents["header.npy"] = _npy(np.array(json.dumps(header)))
    contents.update(extra)
    with zipfile.ZipFile(target, "w") as z:
        for name, data in contents.items():
            z.writestr(name, data, compress_type=zipfile.ZIP_DEFLATED if name in compressed else zipfile.ZIP_STORED)
    return str(target)


def test_arrays_are_checked_against_the_header_and_the_header_by_the_hash(exported, tmp_path):
    """Formats 2 and 3 list every array's dtype and shape in the header, and its hash covers the header: an array not
    listed, one whose .npy header or size disagrees, a compressed one and a header edited after writing are
    refused in one line naming the file and the array."""
    single, _ = exported
    header = read_model_file(single).header
    assert header["format_version"] == FORMAT_VERSION == 3
    dress = header["arrays"]["m0/var/e_dress"]
    assert dress["shape"] == [2] and np.dtype(dress["dtype"]).kind == "f"
    dtype = dress["dtype"]
    edited = {**header, "members": [{**header["members"][0], "rc": 5.0}]}
    with pytest.raises(ModelFileError, match=r"edited.pinn: damaged pinn model file \(its header and arrays do not "
                       r"match the SHA-256 of its header\)"):
        read_model_file(_rewritten(single, tmp_path / "edited.pinn", edited))
    with pytest.raises(ModelFileError, match=r"extra.pinn: damaged pinn model file \(the array m0/var/extra is not in "
                       r"its header's list\)"):
        read_model_file(_rewritten(single, tmp_path / "extra.pinn", extra=[("m0/var/extra.npy", _npy(np.zeros(3)))]))
    reshaped = _rewritten(single, tmp_path / "reshaped.pinn", extra=[("m0/var/e_dress.npy", _npy(np.zeros(3, dtype)))])
    with pytest.raises(ModelFileError, match=rf"reshaped.pinn: damaged pinn model file \(the array m0/var/e_dress is "
                       rf"{dtype} \[3\], its header lists {dtype} \[2\]\)"):
        read_model_file(reshaped)
    size = np.dtype(dtype).itemsize
    short = _npy(np.zeros(2, dtype))[:-size]  # the .npy header says 2 floats, the zip holds one
    with pytest.raises(ModelFileError, match=rf"short.pinn: damaged pinn model file \(the array m0/var/e_dress of "
                       rf"{dtype} \[2\] needs {2 * size} bytes; the zip holds {size}\)"):
        read_model_file(_rewritten(single, tmp_path / "short.pinn", extra=[("m0/var/e_dress.npy", short)]))
    with pytest.raises(ModelFileError, match=r"deflated.pinn: damaged pinn model file \(the array m0/var/e_dress is "
                       r"compressed, \d+ bytes for \d+; pinn stores arrays uncompressed\)"):
        read_model_file(_rewritten(single, tmp_path / "deflated.pinn", compressed=["m0/var/e_dress.npy"]))


def _zip_bomb(source, target, listed):
    """``source`` with an extra array of 10⁸ zero bytes, deflated (about 100 kB in the file); ``listed``: named
    in the header's list of arrays as well."""
    shutil.copy(source, target)
    if listed:
        header = json.loads(np.load(source)["header"].item())
        header["arrays"]["m0/var/bomb"] = {"dtype": "|u1", "shape": [10 ** 8]}
        _rewritten(source, target, header)
    with zipfile.ZipFile(target, "a") as z:
        info = zipfile.ZipInfo("m0/var/bomb.npy")
        info.compress_type = zipfile.ZIP_DEFLATED
        with z.open(info, "w", force_zip64=True) as f:
            np.lib.format.write_array_header_1_0(f, {"descr": "|u1", "fortran_order": False, "shape": (10 ** 8,)})
            zeros = bytes(2 ** 22)
            for _ in range(10 ** 8 // len(zeros)):
                f.write(zeros)
            f.write(bytes(10 ** 8 % len(zeros)))
    return str(target)


def test_a_zip_bomb_is_refused_before_it_is_decompressed(exported, tmp_path):
    """An extra array of 10⁸ deflated zeros (not listed; listed; in a format-1 file) is refused from the zip's
    directory and the header alone: the process reading it grows by far less than the 100 MB it would unpack."""
    single, _ = exported
    bombs = {"unlisted": _zip_bomb(single, tmp_path / "unlisted.pinn", listed=False),
             "listed": _zip_bomb(single, tmp_path / "listed.pinn", listed=True),
             "format 1": _zip_bomb(os.path.join(V1, "alloy-v1.pinn"), tmp_path / "v1.pinn", listed=False)}
    # the peak resident memory of this process's own address space (VmHWM, kB; getrusage's ru_maxrss would
    # count the parent's memory at the fork, here pytest's with TensorFlow)
    code = ("import sys\nfrom pinn.files.model_file import ModelFileError, read_model_file\n"
            "def peak():\n    with open('/proc/self/status') as f:\n"
            "        return int(next(line for line in f if line.startswith('VmHWM')).split()[1])\n"
            "read_model_file(sys.argv[2])\nbefore = peak()\n"
            "try:\n    read_model_file(sys.argv[1])\nexcept ModelFileError as err:\n    print(err)\n"
            "print((peak() - before) // 1024)\n")
    messages = {"unlisted": "the array m0/var/bomb is not in its header's list",
                "listed": "the array m0/var/bomb is compressed",
                "format 1": "the array m0/var/bomb is compressed"}
    for kind, path in bombs.items():
        assert os.path.getsize(path) < os.path.getsize(single) + 200_000
        out = subprocess.run([sys.executable, "-c", code, path, str(single)], capture_output=True, text=True,
                             check=True).stdout.splitlines()
        assert int(out[1]) < 20, f"{kind}: reading grew the process by {out[1]} MB ({out[0]})"
        assert out[0].startswith(f"{path}: damaged pinn model file ({messages[kind]}"), out


def test_a_header_of_the_wrong_shape_is_refused_naming_the_key(exported, tmp_path, alloy_xyz, capsys):
    """Valid JSON of the wrong shape (a list, a key missing, a key of another type) is a ModelFileError naming the
    file and the key, in get_calc and in one line of `pinn devi`."""
    single, committee = exported
    header = read_model_file(committee).header
    member = header["members"][1]
    cases = [([header], r"not a pinn model file \(its header is a JSON list, not an object\)"),
             ({**header, "members": "m"}, r"damaged pinn model file \(its header's members is 'm' \(a string\), not a list\)"),
             ({k: v for k, v in header.items() if k != "kind"}, r"damaged pinn model file \(its header has no kind\)"),
             ({**header, "members": [header["members"][0], {k: v for k, v in member.items() if k != "e_unit"}]},
              r"damaged pinn model file \(its header has no members\[1\].e_unit\)"),
             ({**header, "members": [header["members"][0], {**member, "rc": "4.5"}]},
              r"damaged pinn model file \(its header's members\[1\].rc is '4.5' \(a string\), not a number\)"),
             ({**header, "arrays": {**header["arrays"], "m0/var/e_dress": {"dtype": "<f4", "shape": 2}}},
              r"damaged pinn model file \(its header's arrays\['m0/var/e_dress'\].shape is 2 \(an integer\), not a "
              r"list of sizes\)")]
    for k, (bad, message) in enumerate(cases):
        path = _rewritten(committee, tmp_path / f"bad{k}.pinn", bad)
        with pytest.raises(ModelFileError, match=f"^{path}: {message}$"):
            get_calc(path)
    assert main(["devi", path, alloy_xyz, "-o", str(tmp_path / "devi.out")]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith(f"pinn devi: error: {path}: damaged")
    assert not (tmp_path / "devi.out").exists()
