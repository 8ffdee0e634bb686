"""The file readers of MiMiC runs: trr (vs MDAnalysis, on files real GROMACS wrote), mpt (vs mimicpy 0.2.1),
ENERGIES, ndx, CPMD OVERLAPS / atom order / FTRAJECTORY; and their errors."""
import json
import logging
import os
import shutil
import subprocess

import numpy as np
import pytest

from pinn.io.readers.cpmd import FTrajectory, gromacs_to_cpmd_order, read_overlaps
from pinn.io.readers.energies import read_energies, write_energies
from pinn.io.errors import DataError
from pinn.io.readers.mpt import read_mpt, write_mpt
from pinn.io.readers.ndx import read_ndx
from pinn.io.readers.trr import TRRFile, write_trr

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")  # tests/data
GMX = os.path.join(DATA, "gromacs")
MIMIC = os.path.join(DATA, "mimic")
GMX_FIXTURES = ["water_single_xvf.trr", "water_double_mixed.trr", "water_single_mixed.trr"]


def _mdanalysis_files():
    from MDAnalysisTests import datafiles
    return [datafiles.TRR_xvf, datafiles.COORDINATES_TRR, datafiles.TRR_multi_frame]


def assert_same_as_mdanalysis(path):
    """Every frame, every block: pinn.io.readers.trr against MDAnalysis's TRRReader (its own C xdrfile code)."""
    from MDAnalysis.coordinates.TRR import TRRReader
    reader = TRRReader(path, convert_units=False)
    with TRRFile(path) as trr:
        assert len(trr) == reader.n_frames
        for ts, frame in zip(reader, trr):
            assert frame["step"] == ts.data["step"]
            assert frame["time"] == pytest.approx(ts.time, rel=1e-6)
            assert frame["lambda"] == pytest.approx(ts.data["lambda"])
            assert frame["natoms"] == ts.n_atoms
            # MDAnalysis hands out float32 even for double files
            np.testing.assert_allclose(frame["box"], ts.triclinic_dimensions, rtol=1e-6, atol=1e-6)
            for block, present, values in (("x", ts.has_positions, lambda: ts.positions),
                                           ("v", ts.has_velocities, lambda: ts.velocities),
                                           ("f", ts.has_forces, lambda: ts.forces)):
                assert (frame[block] is not None) == present, (path, frame["step"], block)
                if present:
                    np.testing.assert_allclose(frame[block], values(), rtol=2e-6, atol=1e-5 * (block == "f") + 1e-7)
    return len(trr)


@pytest.mark.parametrize("name", GMX_FIXTURES)
def test_trr_matches_mdanalysis_on_gromacs_fixtures(name):
    path = os.path.join(GMX, name)
    assert_same_as_mdanalysis(path)
    with TRRFile(path) as trr:
        assert trr[0]["double"] == ("double" in name)
        assert trr[0]["f" if name == "water_single_mixed.trr" else "x"].dtype == \
            (np.float64 if "double" in name else np.float32)
        assert list(trr.steps) == ([10, 11, 12, 13, 14, 15, 16] if "xvf" in name else [10, 12, 14, 15, 16])
        box = trr[0]["box"]
        assert box[2, 0] != 0 and box[2, 1] != 0  # rhombic dodecahedron: triclinic
    if name == "water_double_mixed.trr":  # x every 2 steps, f every 3, no v
        with TRRFile(path) as trr:
            assert list(trr.has("x")) == [True, True, True, False, True]
            assert list(trr.has("f")) == [False, True, False, True, False]
            assert not trr.has("v").any()


@pytest.mark.parametrize("which", range(3))
def test_trr_matches_mdanalysis_on_its_test_files(which):
    assert_same_as_mdanalysis(_mdanalysis_files()[which])


def test_trr_cobrotoxin_and_triclinic_box():
    from MDAnalysisTests import datafiles
    with TRRFile(datafiles.TRR_xvf) as trr:
        assert len(trr) == 3 and trr[0]["natoms"] == 19385 and not trr[0]["double"]
        assert list(trr.steps) == [0, 25000, 50000]
    with TRRFile(datafiles.COORDINATES_TRR) as trr:
        from ase.geometry import cell_to_cellpar
        cellpar = cell_to_cellpar(trr[0]["box"] * 10)
        np.testing.assert_allclose(cellpar, [81.1, 82.2, 83.3, 75, 80, 85], rtol=1e-4)


@pytest.mark.skipif(not (shutil.which("gmx") and shutil.which("gmx_d")), reason="GROMACS (gmx, gmx_d) not installed")
def test_trr_on_files_gromacs_writes_now(tmp_path):
    """Run real GROMACS (single and double precision, mixed blocks) and read what it wrote."""
    subprocess.run(["bash", os.path.join(GMX, "make_fixtures.sh"), str(tmp_path)], check=True,
                   capture_output=True)
    for name in GMX_FIXTURES:
        assert_same_as_mdanalysis(str(tmp_path / name))
    with TRRFile(tmp_path / "water_double_mixed.trr") as trr:
        assert trr[1]["double"] and trr[1]["f"].dtype == np.float64


def test_trr_random_access_iteration_and_blocks():
    path = os.path.join(GMX, "water_single_xvf.trr")
    with TRRFile(path) as trr:
        frames = list(trr)
        np.testing.assert_array_equal(trr[-1]["x"], frames[-1]["x"])
        np.testing.assert_array_equal(trr[3]["f"], frames[3]["f"])
        only_x = trr.read_frame(2, blocks=("x",))
        assert only_x["f"] is None and only_x["box"] is None
        np.testing.assert_array_equal(only_x["x"], frames[2]["x"])
        with pytest.raises(IndexError, match="out of range"):
            trr[len(trr)]
        again = TRRFile(path, index=trr.index)  # reopen without scanning
        np.testing.assert_array_equal(again[5]["v"], frames[5]["v"])
        again.close()
    with pytest.raises(ValueError, match="closed"):
        trr[0]


def test_trr_x_less_mimic_file():
    """tfep's MiMiC trr: box and forces only, no positions (real third-party file)."""
    with TRRFile(os.path.join(MIMIC, "equilibrated-forces-gromacs-only.trr")) as trr:
        frame = trr[0]
        assert frame["x"] is None and frame["f"].shape == (1528, 3) and frame["natoms"] == 1528
        np.testing.assert_allclose(np.diag(frame["box"]), 2.48732, rtol=1e-6)


def _copy(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def test_trr_errors_name_file_and_frame(tmp_path, caplog):
    raw = open(os.path.join(GMX, "water_double_mixed.trr"), "rb").read()
    with TRRFile(os.path.join(GMX, "water_double_mixed.trr")) as trr:
        offsets = trr.index["offset"]
    # truncated inside the data of the last frame
    cut = _copy(tmp_path, "cut.trr", raw[:-100])
    with pytest.raises(DataError, match=r"cut.trr: frame 4 \(byte offset \d+\): truncated.*4 frames before it"):
        TRRFile(cut)
    with caplog.at_level(logging.WARNING, logger="pinn"):
        logging.getLogger("pinn").addHandler(caplog.handler)
        try:
            with TRRFile(cut, allow_truncated=True) as trr:
                assert len(trr) == 4
        finally:
            logging.getLogger("pinn").removeHandler(caplog.handler)
    assert "dropping the incomplete frame" in caplog.text
    # truncated inside a header
    head_cut = _copy(tmp_path, "headcut.trr", raw[:int(offsets[3]) + 30])
    with pytest.raises(DataError, match="headcut.trr: frame 3 .*truncated.*inside its header"):
        TRRFile(head_cut)
    # wrong magic at the start, and in the middle of the file
    with pytest.raises(DataError, match=r"bad.trr: frame 0 .*magic number 1994, expected 1993"):
        TRRFile(_copy(tmp_path, "bad.trr", (1994).to_bytes(4, "big") + raw[4:]))
    mid = bytearray(raw)
    mid[int(offsets[2]):int(offsets[2]) + 4] = b"\0\0\0\0"
    with pytest.raises(DataError, match=r"mid.trr: frame 2 \(byte offset %d\).*magic" % offsets[2]):
        TRRFile(_copy(tmp_path, "mid.trr", bytes(mid)))
    with pytest.raises(DataError, match="not a GROMACS trr"):
        TRRFile(os.path.join(MIMIC, "argon.mpt"))
    with pytest.raises(DataError, match="empty"):
        TRRFile(_copy(tmp_path, "empty.trr", b""))
    with pytest.raises(DataError, match="no such file"):
        TRRFile(tmp_path / "missing.trr")


def test_mpt_matches_mimicpy_on_repeated_and_renamed_types(tmp_path):
    mimicpy = pytest.importorskip("mimicpy")
    for top, fixture in (("mixed.top", "mixed.mpt"), ("argon.top", "argon.mpt")):
        written = str(tmp_path / fixture)
        mimicpy.Mpt.from_file(os.path.join(MIMIC, top)).write(written)
        assert open(written, "rb").read() == open(os.path.join(MIMIC, fixture), "rb").read()
        for path in (written, os.path.join(MIMIC, "acetone_water.mpt"), os.path.join(GMX, "water.mpt")):
            ours, theirs = read_mpt(path), mimicpy.Mpt.from_file(path)
            assert ours.natoms == theirs.number_of_atoms
            assert ours.molecules == [tuple(m) for m in theirs.molecules]
            for column in theirs.columns:
                expected = theirs[column]
                if isinstance(expected[0], float):
                    np.testing.assert_array_equal(ours[column], np.asarray(expected))
                else:
                    assert ours[column].tolist() == list(expected), (path, column)
    mixed = read_mpt(os.path.join(MIMIC, "mixed.mpt"))
    assert mixed.repeating == {"WAT": "SOL"}
    assert mixed.natoms == 2 * 3 + 8 + 3 * 3 + 2 + 3 + 1 + 2 * 8


def test_mpt_real_mimic_file():
    mpt = read_mpt(os.path.join(MIMIC, "acetone_water.mpt"))
    assert mpt.natoms == 1528 and mpt.molecules == [("ACT", 1), ("SOL", 506)]
    assert mpt["element"][:12].tolist() == ["C", "C", "C", "O"] + ["H"] * 6 + ["O", "H"]
    assert mpt.atomic_numbers.tolist() == [6, 6, 6, 8] + [1] * 6 + [8, 1, 1] * 506
    assert mpt["resname"][10] == "SOL" and mpt["charge"][10] == pytest.approx(-0.82, abs=1e-7)
    assert mpt["resid"][-1] == 507


def test_mpt_errors(tmp_path):
    raw = open(os.path.join(MIMIC, "mixed.mpt"), "rb").read()
    with pytest.raises(DataError, match="cut.mpt: truncated"):
        read_mpt(_copy(tmp_path, "cut.mpt", raw[:len(raw) // 2 // 4 * 4]))
    with pytest.raises(DataError, match="empty"):
        read_mpt(_copy(tmp_path, "e.mpt", b""))
    with pytest.raises(DataError, match="trr.mpt"):
        read_mpt(_copy(tmp_path, "trr.mpt", open(os.path.join(GMX, "water_single_xvf.trr"), "rb").read()))


def test_energies_real_file_and_layouts(tmp_path, caplog):
    e = read_energies(os.path.join(MIMIC, "ENERGIES_acetone_head"))
    assert list(e) == ["NFI", "EKINC", "TEMPP", "EKS", "ECLASSIC", "EHAM", "DIS", "TCPU"]
    assert e["NFI"].tolist() == list(range(1, 201))
    assert e["EKS"][0] == -44.4971086445 and e["TEMPP"][0] == 297.086 and e["DIS"][0] == pytest.approx(0.118154e-3)
    np.testing.assert_allclose(e["EHAM"] - e["ECLASSIC"], e["EKINC"], atol=1e-8)  # EHAM = ECLASSIC + EKINC
    six = _copy(tmp_path, "six", b"         1  297.086    -44.4971086445    -43.0562486076   0.118154E-03     0.09\n"
                                 b"         2  296.000    -44.5000000000    -43.0000000000   0.200000E-03     0.08\n")
    e6 = read_energies(six)
    assert list(e6) == ["NFI", "TEMPP", "EKS", "ECLASSIC", "DIS", "TCPU"] and e6["EKS"].tolist() == [-44.4971086445, -44.5]
    # a restart appends steps 2 and 3 again: the later lines win, and the log says so
    line = "{:10d}  0.00003168  297.086{:18.10f}    -43.0562486076    -43.0562169315   0.118154E-03     0.09\n"
    text = "".join(line.format(n, -40.0 - n) for n in (1, 2, 3)) + "".join(line.format(n, -50.0 - n) for n in (2, 3, 4))
    logging.getLogger("pinn").addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.INFO, logger="pinn"):
            restarted = read_energies(_copy(tmp_path, "restart", text.encode()))
    finally:
        logging.getLogger("pinn").removeHandler(caplog.handler)
    assert restarted["NFI"].tolist() == [1, 2, 3, 4]
    assert restarted["EKS"].tolist() == [-41.0, -52.0, -53.0, -54.0]
    assert "2 lines repeat an earlier step" in caplog.text


def test_energies_errors(tmp_path):
    good = "         7  0.00003168  297.086    -44.4971086445    -43.0562486076    -43.0562169315   0.118154E-03     0.09\n"
    over = good + "         8  0.00003168  ******* -44.4971086445    -43.0562486076    -43.0562169315   0.118154E-03     0.09\n"
    with pytest.raises(DataError, match=r"over: line 2, column 3: '\*\*\*\*\*\*\*' is a Fortran overflow"):
        read_energies(_copy(tmp_path, "over", over.encode()))
    with pytest.raises(DataError, match="ragged: line 2 has 7 columns, line 1 has 8"):
        read_energies(_copy(tmp_path, "ragged", (good + " ".join(good.split()[:7]) + "\n").encode()))
    with pytest.raises(DataError, match="5 columns per line is not a known ENERGIES layout"):
        read_energies(_copy(tmp_path, "five", b"1 2 3 4 5\n"))
    with pytest.raises(DataError, match=r"text: line 1, column 4: 'abc' is not a number"):
        read_energies(_copy(tmp_path, "text", good.replace("-44.4971086445", "abc").encode()))
    with pytest.raises(DataError, match="empty"):
        read_energies(_copy(tmp_path, "empty", b"\n"))
    custom = read_energies(_copy(tmp_path, "five2", b"1 2 3 4 5\n"), columns=["NFI", "A", "B", "EKS", "C"])
    assert custom["EKS"].tolist() == [4.0]


def test_ndx_overlaps_and_cpmd_order():
    groups = read_ndx(os.path.join(MIMIC, "index.ndx"))
    assert groups["QMatoms"].tolist() == list(range(10)) and len(groups["SOL"]) == 1518
    overlaps = read_overlaps(os.path.join(MIMIC, "cpmd.inp"))
    assert overlaps.tolist()[:2] == [[3, 0], [4, 1]] and len(overlaps) == 10
    mpt = read_mpt(os.path.join(MIMIC, "acetone_water.mpt"))
    order = gromacs_to_cpmd_order(mpt["type"], overlaps)
    # the order of a real MiMiC run (tfep's test data), for all 1528 atoms
    reference = json.load(open(os.path.join(MIMIC, "gmx_to_cpmd_atom_indices.json")))
    np.testing.assert_array_equal(order, [reference[str(i)] for i in range(1528)])


def test_overlaps_errors(tmp_path):
    with pytest.raises(DataError, match="no &MIMIC section"):
        read_overlaps(_copy(tmp_path, "a.inp", b"&CPMD\nMIMIC\n&END\n"))
    with pytest.raises(DataError, match="b.inp: line 5: OVERLAPS line 2 of 2"):
        read_overlaps(_copy(tmp_path, "b.inp", b"&MIMIC\nOVERLAPS\n2\n2 1 1 1\n&END\n"))
    with pytest.raises(DataError, match="codes 3, 1"):
        read_overlaps(_copy(tmp_path, "c.inp", b"&MIMIC\nOVERLAPS\n1\n3 1 1 1\n&END\n"))


def test_ftrajectory_index_restart_and_errors(tmp_path, caplog):
    rng = np.random.RandomState(0)

    def block(step, values):
        return "".join(f"{step:7d}" + "".join(f"  {v:22.14f}" for v in row) + "\n" for row in values)
    data = {s: rng.normal(size=(4, 9)) for s in (1, 2, 3)}
    redo = rng.normal(size=(4, 9))
    text = block(1, data[1]) + block(2, data[2]) + "   <<<<<<  NEW DATA  >>>>>>\n" + block(2, redo) + block(3, data[3])
    path = _copy(tmp_path, "FTRAJECTORY", text.encode())
    ftraj = FTrajectory(path, natoms=4)
    assert ftraj.steps.tolist() == [1, 2, 3]
    x, v, f = ftraj.read(2)
    np.testing.assert_allclose(np.hstack([x, v, f]), redo, atol=1e-13)
    np.testing.assert_allclose(ftraj.read(3)[2], data[3][:, 6:], atol=1e-13)
    with pytest.raises(DataError, match="no step 9"):
        ftraj.read(9)
    with pytest.raises(DataError, match=r"step 1 \(from line 1\) has 4 atom lines, expected 5"):
        FTrajectory(path, natoms=5)


# ------------------------------------------------------------------------------------------ writers
def test_write_mpt_is_byte_identical_to_mimicpy_and_mimicpy_reads_it(tmp_path):
    """write_mpt of what read_mpt read gives back the mimicpy-written bytes; mimicpy reads a new file."""
    for name in ("argon.mpt", "mixed.mpt", "acetone_water.mpt"):
        source = read_mpt(os.path.join(MIMIC, name))
        out = write_mpt(str(tmp_path / name), source.molecules, source.moleculetypes, source.repeating)
        assert open(out, "rb").read() == open(os.path.join(MIMIC, name), "rb").read(), name
    mimicpy = pytest.importorskip("mimicpy")
    table = {"number": [1, 2], "type": ["OW", "HW"], "resid": [1, 1], "resname": ["SOL", "SOL"],
             "name": ["OW", "HW1"], "charge": [-0.8, 0.4], "element": ["O", "H"], "mass": [15.999, 1.008]}
    path = write_mpt(str(tmp_path / "new.mpt"), [("SOL", 3), ("WAT", 1)], {"SOL": table}, {"WAT": "SOL"})
    theirs = mimicpy.Mpt.from_file(path)
    assert theirs.number_of_atoms == 8 and list(theirs["element"]) == ["O", "H"] * 4
    np.testing.assert_allclose(np.asarray(theirs["charge"], float), [-0.8, 0.4] * 4, rtol=1e-6)


@pytest.mark.parametrize("double", [False, True])
def test_write_trr_reads_back_in_mdanalysis(double, tmp_path):
    rng = np.random.RandomState(3)
    frames = [{"step": 10 * i, "x": rng.rand(5, 3), "f": rng.randn(5, 3) * 100, "box": np.diag([2.0, 2.5, 3.0])}
              for i in range(4)]
    frames[2]["v"] = rng.randn(5, 3)  # a frame with one more block
    path = write_trr(str(tmp_path / "w.trr"), frames, double=double)
    assert_same_as_mdanalysis(path)
    with TRRFile(path) as trr:
        assert [f["step"] for f in trr] == [0, 10, 20, 30]
        for frame, written in zip(trr, frames):
            assert frame["double"] == double
            np.testing.assert_allclose(frame["x"], written["x"], rtol=1e-6 if not double else 1e-15)
            np.testing.assert_allclose(frame["f"], written["f"], rtol=1e-6 if not double else 1e-15)


def test_write_energies_reads_back(tmp_path):
    eks = np.array([-17.123456789, -17.2, -16.9])
    path = write_energies(str(tmp_path / "ENERGIES"), [1, 2, 3], eks, temperature=[10.0, 20.0, 30.0],
                          kinetic=[0.001, 0.002, 0.003])
    table = read_energies(path)
    np.testing.assert_array_equal(table["NFI"], [1, 2, 3])
    np.testing.assert_allclose(table["EKS"], eks, atol=1e-10)
    np.testing.assert_allclose(table["ECLASSIC"], eks + [0.001, 0.002, 0.003], atol=1e-10)
    np.testing.assert_allclose(table["TEMPP"], [10.0, 20.0, 30.0])
