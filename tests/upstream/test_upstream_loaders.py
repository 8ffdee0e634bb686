"""Upstream PiNN's data loaders (QM9, ANI-1, CP2K, DeePMD-kit, RuNNer, QM7b), ``list_loader``'s
``pbc``/``force``/``stress``/``ds_spec`` with extra keys through batching and padding, and upstream's
TFRecord naming.

Every file is written here, small, in the real format with its quirks; values are checked against
what was written times the unit factor, and bad input must name the file and the record.
"""
import os

import numpy as np
import pytest
import tensorflow as tf
import yaml

from pinn import units
from pinn.io import (DataError, list_loader, load_ani, load_cp2k, load_deepmd, load_qm7b, load_qm9, load_runner,
                     load_tfrecord, sparse_batch, write_tfrecord)
from pinn.io.base import periodic
from pinn.io.batch import split_batch
from pinn.io.padding import pad_tensors


def _all(dataset):
    return list(dataset.as_numpy_iterator())


def _iterate_error(dataset):
    """The text of the error that iterating ``dataset`` raises (TensorFlow wraps the reader's DataError)."""
    with pytest.raises(Exception) as caught:
        _all(dataset)
    return str(caught.value)


# -- QM9 ------------------------------------------------------------------------------------------

METHANE = """5
gdb 1\t157.7118\t157.70997\t157.70699\t0.\t13.21\t-0.3877\t0.1171\t0.5048\t35.3641\t0.044749\t-40.47893\t-40.476062\t-40.475117\t-40.498597\t6.469\t
C\t-0.0126981359\t 1.0858041578\t 0.0080009958\t-0.535689
H\t 2.150416*^-3\t-0.0060313176\t 0.0019761204\t 0.133921
H\t 1.0117308433\t 1.4637511618\t 2.765748*^-4\t 0.133922
H\t-0.540815069\t 1.4475266138\t-0.8766437152\t 0.133923
H\t-0.5238136345\t 1.4379326443\t 0.9063972942\t 0.133923
1341.307\t1341.3284\t1341.365\t1562.6731\t1562.7453\t3038.3205\t3151.6034\t3151.6788\t3151.7078
C\tC\t
InChI=1S/CH4/h1H4\tInChI=1S/CH4/h1H4
"""
WATER = """3
gdb 3\t799.58812\t437.90386\t282.94545\t1.8511\t6.31\t-0.2928\t0.0687\t0.3615\t19.0002\t0.021375\t-76.404702\t-76.401867\t-76.400922\t-76.422349\t6.002\t
O\t-0.0343604951\t 0.9775395708\t 0.0076015923\t-0.589706
H\t 0.0647664303\t 0.0205721383\t 0.0015346341\t 0.294853
H\t 0.8717903755\t 1.3007924903\t 0.0006931158\t 0.294853
1736.4956\t3863.4232\t3965.4159
O\tO\t
InChI=1S/H2O/h1H2\tInChI=1S/H2O/h1H2
"""


@pytest.fixture
def qm9_dir(tmp_path):
    folder = tmp_path / "qm9"
    folder.mkdir()
    (folder / "dsgdb9nsd_000001.xyz").write_text(METHANE)
    (folder / "dsgdb9nsd_000003.xyz").write_text(WATER)
    return folder


def test_qm9_converts_units_reads_mathematica_exponents_and_splits(qm9_dir):
    files = sorted(str(p) for p in qm9_dir.iterdir())
    labels = {"e_data": "U0", "gap": "gap", "mu": "mu", "q_data": "mulliken"}
    methane, water = _all(load_qm9(files, label_map=labels, shuffle=False, units="pinn"))
    assert methane["e_data"] == pytest.approx(-40.47893 * units.HARTREE, rel=1e-6)  # Hartree -> eV
    assert water["gap"] == pytest.approx(0.3615 * units.HARTREE, rel=1e-6)
    assert water["mu"] == pytest.approx(1.8511 * units.DEBYE, rel=1e-6)  # debye -> e·Å
    as_written = _all(load_qm9(files, label_map=labels, shuffle=False))  # upstream's: the file's units
    assert as_written[0]["e_data"] == pytest.approx(-40.47893, rel=1e-6)
    assert as_written[1]["mu"] == pytest.approx(1.8511, rel=1e-6)
    np.testing.assert_array_equal(methane["elems"], [6, 1, 1, 1, 1])
    assert methane["coord"][1, 0] == pytest.approx(2.150416e-3)  # 2.150416*^-3
    assert methane["coord"][2, 2] == pytest.approx(2.765748e-4)
    np.testing.assert_allclose(water["q_data"], [-0.589706, 0.294853, 0.294853], rtol=1e-6)
    assert "cell" not in methane and "pbc" not in methane  # a molecule: open
    # upstream's default label_map, a directory, and splits= (molecules are the items)
    parts = load_qm9(str(qm9_dir), splits={"train": 1, "test": 1}, seed=1)
    sizes = {name: [s["e_data"] for s in _all(ds)] for name, ds in parts.items()}
    assert sorted(len(v) for v in sizes.values()) == [1, 1]
    assert sorted(sizes["train"] + sizes["test"]) == pytest.approx([-76.404702, -40.47893], rel=1e-6)  # Hartree


def test_qm9_bad_files_and_labels_are_named(qm9_dir, tmp_path):
    short = tmp_path / "short.xyz"
    short.write_text(METHANE.replace("\t6.469\t", "\t"))  # 16 properties instead of 17
    with pytest.raises(DataError, match=r"short\.xyz, line 2: the property line has 16 fields"):
        load_qm9([str(short)])
    element = tmp_path / "element.xyz"
    element.write_text(METHANE.replace("H\t 1.0117308433", "Q\t 1.0117308433"))
    with pytest.raises(DataError, match=r"element\.xyz, line 5: 'Q' is not an element symbol"):
        load_qm9([str(element)])
    number = tmp_path / "number.xyz"
    number.write_text(WATER.replace("0.0205721383", "0.02O5721383"))
    # the second file is read when the dataset is iterated: the error still names it and the line
    message = _iterate_error(load_qm9([str(qm9_dir / "dsgdb9nsd_000001.xyz"), str(number)], shuffle=False))
    assert "number.xyz, line 4: '0.02O5721383' is not a coordinate" in message
    with pytest.raises(DataError, match="'tag' is not a QM9 property|'gdb' is not a number"):
        load_qm9(str(qm9_dir), label_map={"e_data": "tag"})
    with pytest.raises(DataError, match="a property is one number per molecule"):
        load_qm9(str(qm9_dir), label_map={"f_data": "U0"})


# -- RuNNer ----------------------------------------------------------------------------------------

RUNNER = """begin
comment periodic water, atomic units
lattice  10.0  0.0  0.0
lattice   0.0 11.0  0.0
lattice   0.0  0.0 12.0
atom   1.0  2.0  3.0  O  -0.8  0.0   0.01  0.02  0.03
atom   2.5  2.0  3.0  H   0.4  0.0  -0.01  0.00  0.00   2.0 2.0 2.0
atom   0.5  3.5  3.0  H   0.4  0.0   0.00 -0.02 -0.03
energy  -76.25
charge  0.0
end
begin
comment second frame, with upstream PiNN's energy_weight
atom   1.1  2.0  3.0  O  -0.7  0.0   0.02  0.00  0.00
lattice  10.0  0.0  0.0
lattice   0.0 11.0  0.0
lattice   0.0  0.0 12.0
atom   2.4  2.1  3.0  H   0.3  0.0  -0.02  0.00  0.00
atom   0.6  3.4  3.0  H   0.4  0.0   0.00  0.00  0.00
energy_weight 0.5
energy  -76.20
charge  0.0
end
"""


def test_runner_converts_bohr_and_hartree_and_carries_weights(tmp_path):
    path = tmp_path / "input.data"
    path.write_text(RUNNER)
    upstream_first, _ = _all(load_runner(str(path), shuffle=False))  # upstream's reading: Hartree, Hartree/Å
    assert upstream_first["e_data"] == pytest.approx(-76.25, rel=1e-6)
    np.testing.assert_allclose(upstream_first["f_data"][0], np.array([0.01, 0.02, 0.03]) / units.BOHR, rtol=1e-6)
    first, second = _all(load_runner(str(path), shuffle=False, units="atomic"))
    np.testing.assert_allclose(first["coord"][1], np.array([2.5, 2.0, 3.0]) * units.BOHR, rtol=1e-6)
    np.testing.assert_allclose(upstream_first["coord"], first["coord"])
    np.testing.assert_allclose(first["cell"], np.diag([10.0, 11.0, 12.0]) * units.BOHR, rtol=1e-6)
    assert first["pbc"].all()
    assert first["e_data"] == pytest.approx(-76.25 * units.HARTREE, rel=1e-6)
    np.testing.assert_allclose(first["f_data"][0], np.array([0.01, 0.02, 0.03]) * units.HARTREE_PER_BOHR, rtol=1e-6)
    np.testing.assert_allclose(second["q_data"], [-0.7, 0.3, 0.4], rtol=1e-6)
    assert second["e_data"] == pytest.approx(-76.20 * units.HARTREE, rel=1e-6)
    # upstream's weights: energy_weight line and three columns after the forces, carried by sparse_batch
    weighted = load_runner([str(path)], shuffle=False, weights=True)
    batch = next(iter(weighted.apply(sparse_batch(2))))
    np.testing.assert_allclose(batch["e_weight"].numpy(), [1.0, 0.5])
    np.testing.assert_allclose(batch["f_weights"].numpy()[:, 0], [1, 2, 1, 1, 1, 1])
    assert batch["f_weights"].shape == (6, 3) and batch["ind_1"].shape == (6, 1)
    # units='ase': the file already in Å and eV
    same = _all(load_runner(str(path), shuffle=False, units="ase"))[0]
    np.testing.assert_allclose(same["coord"][1], [2.5, 2.0, 3.0])
    parts = load_runner(str(path), splits={"a": 1, "b": 1})
    assert sorted(len(_all(ds)) for ds in parts.values()) == [1, 1]


def test_runner_reads_what_ase_writes_with_a_begin_layout(tmp_path):
    """ASE writes RuNNer files in atomic units with a ``begin position(3) element charge ...`` line."""
    import ase.io
    from ase import Atoms
    from ase.calculators.singlepoint import SinglePointCalculator
    atoms = Atoms("OH2", positions=[[0, 0, 0.1], [0.76, 0, -0.5], [-0.76, 0, -0.5]])
    atoms.calc = SinglePointCalculator(atoms, energy=-2078.5, forces=[[0.1, 0, 0], [-0.05, 0.01, 0], [-0.05, -0.01, 0]])
    path = tmp_path / "ase.data"
    ase.io.write(str(path), [atoms], format="runnerdata")
    assert path.read_text().split("\n")[0].split()[:3] == ["begin", "position(3)", "element"]
    (got,) = _all(load_runner(str(path), shuffle=False, units="atomic"))
    np.testing.assert_allclose(got["coord"], atoms.positions, atol=1e-6)
    assert got["e_data"] == pytest.approx(-2078.5, rel=1e-6)
    np.testing.assert_allclose(got["f_data"], atoms.get_forces(), atol=1e-6)
    assert "cell" not in got and "pbc" not in got  # no lattice lines: open


def test_runner_bad_structures_name_the_file_and_line(tmp_path):
    unterminated = tmp_path / "unterminated.data"
    unterminated.write_text(RUNNER.replace("charge  0.0\nend\nbegin", "charge  0.0\nbegin", 1))
    with pytest.raises(DataError, match=r"unterminated\.data, structure at line 1: no 'end' before the next 'begin' "
                                        r"on line 11"):
        load_runner(str(unterminated), shuffle=False)
    keyword = tmp_path / "keyword.data"
    keyword.write_text(RUNNER.replace("energy_weight 0.5", "weight 0.5"))
    message = _iterate_error(load_runner(str(keyword), shuffle=False))
    assert "keyword.data, line 20: unknown keyword 'weight'" in message
    fields = tmp_path / "fields.data"
    fields.write_text(RUNNER.replace("atom   1.0  2.0  3.0  O  -0.8  0.0   0.01  0.02  0.03",
                                     "atom   1.0  2.0  3.0  O  -0.8  0.0"))
    with pytest.raises(DataError, match=r"fields\.data, line 6: an atom line needs x y z, the element and 5 columns"):
        load_runner(str(fields), shuffle=False)
    with pytest.raises(DataError, match="no 'begin' line"):
        (tmp_path / "empty.data").write_text("comment nothing\n")
        load_runner(str(tmp_path / "empty.data"))


# -- DeePMD-kit ------------------------------------------------------------------------------------

def _deepmd_system(folder, n_sets=(2, 1), type_map_raw=True, nopbc=False, rng=None):
    """A water system (types O H H) in the deepmd/npy layout; returns the arrays written, frames in order."""
    rng = rng or np.random.RandomState(0)
    folder.mkdir(parents=True)
    (folder / "type.raw").write_text("0 1 1\n")
    if type_map_raw:
        (folder / "type_map.raw").write_text("O\nH\n")
    if nopbc:
        (folder / "nopbc").write_text("")
    written = {name: [] for name in ("coord", "box", "energy", "force", "virial")}
    for k, n in enumerate(n_sets):
        arrays = {"coord": rng.rand(n, 9) * 3, "box": np.tile(np.diag([9.0, 10.0, 11.0]).reshape(1, 9), (n, 1)),
                  "energy": rng.rand(n) - 10, "force": rng.rand(n, 9) - 0.5, "virial": rng.rand(n, 9)}
        (folder / f"set.{k:03d}").mkdir()
        for name, array in arrays.items():
            if name == "box" and nopbc:
                continue
            np.save(folder / f"set.{k:03d}" / f"{name}.npy", array)
            written[name].append(array)
    return {name: np.concatenate(parts) for name, parts in written.items() if parts}


def test_deepmd_sets_type_map_virial_and_splits(tmp_path):
    written = _deepmd_system(tmp_path / "water")
    got = _all(load_deepmd(str(tmp_path / "water"), shuffle=False))
    assert len(got) == 3  # set.000 has 2 frames, set.001 one, in order
    np.testing.assert_array_equal(got[2]["elems"], [8, 1, 1])
    np.testing.assert_allclose(got[2]["coord"], written["coord"][2].reshape(3, 3), rtol=1e-6)
    np.testing.assert_allclose(got[2]["f_data"], written["force"][2].reshape(3, 3), rtol=1e-6)
    assert got[1]["e_data"] == pytest.approx(written["energy"][1], rel=1e-6)
    np.testing.assert_allclose(got[0]["cell"], np.diag([9.0, 10.0, 11.0]))
    assert got[0]["pbc"].all()
    np.testing.assert_allclose(got[0]["s_data"], -written["virial"][0].reshape(3, 3) / (9.0 * 10.0 * 11.0), rtol=1e-5)
    parts = load_deepmd(str(tmp_path / "water"), splits={"train": 2, "test": 1})
    assert {k: len(_all(v)) for k, v in parts.items()} == {"train": 2, "test": 1}


def test_deepmd_open_systems_raw_layout_and_a_directory_of_systems(tmp_path):
    written = _deepmd_system(tmp_path / "all" / "cluster", n_sets=(2,), type_map_raw=False, nopbc=True)
    with pytest.raises(DataError, match=r"type\.raw: atom types are indices .* give type_map="):
        load_deepmd(str(tmp_path / "all" / "cluster"))
    got = _all(load_deepmd(str(tmp_path / "all"), type_map=["O", "H"], shuffle=False))  # found below the folder
    assert len(got) == 2 and "pbc" not in got[0] and "cell" not in got[0]  # open, as upstream's: no cell
    assert "s_data" not in got[0]  # no stress without a box
    np.testing.assert_array_equal(got[0]["elems"], [8, 1, 1])
    # upstream's dict form: atomic number -> type index
    assert _all(load_deepmd(str(tmp_path / "all" / "cluster"), type_map={8: 0, 1: 1}, shuffle=False))[1]["e_data"] \
        == pytest.approx(written["energy"][1], rel=1e-6)
    # deepmd/raw: text files, one frame per line
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "type.raw").write_text("1\n0\n")
    (raw / "type_map.raw").write_text("Cu\nAu\n")
    np.savetxt(raw / "coord.raw", [[0, 0, 0, 1.3, 1.3, 0], [0, 0, 0, 1.4, 1.3, 0]])
    np.savetxt(raw / "box.raw", [[4, 0, 0, 0, 4, 0, 0, 0, 4]] * 2)
    np.savetxt(raw / "energy.raw", [-3.5, -3.25])
    got = _all(load_deepmd(str(raw), shuffle=False))
    np.testing.assert_array_equal(got[0]["elems"], [79, 29])
    assert [g["e_data"] for g in got] == pytest.approx([-3.5, -3.25])
    assert "f_data" not in got[0]


def test_deepmd_bad_systems_name_the_file(tmp_path):
    _deepmd_system(tmp_path / "water")
    with pytest.raises(DataError, match=r"type_map\.raw: type 1 is element 1, but type_map= says 8"):
        load_deepmd(str(tmp_path / "water"), type_map=["O", "O"])
    np.save(tmp_path / "water" / "set.001" / "coord.npy", np.zeros((1, 6)))
    with pytest.raises(DataError, match=r"set\.001[/\\]coord\.npy: shape \(1, 6\), expected \[n_frames, 9\]"):
        load_deepmd(str(tmp_path / "water"))
    np.save(tmp_path / "water" / "set.001" / "coord.npy", np.zeros((1, 9)))
    os.remove(tmp_path / "water" / "set.001" / "virial.npy")
    with pytest.raises(DataError, match=r"set\.000: has \['virial'\], which .*set\.001 lacks"):
        load_deepmd(str(tmp_path / "water"))
    os.remove(tmp_path / "water" / "set.000" / "box.npy")
    with pytest.raises(DataError, match=r"set\.000: no box .* in a periodic system"):
        load_deepmd(str(tmp_path / "water"))


# -- CP2K ------------------------------------------------------------------------------------------

CP2K_OLD = """ CP2K| version string:                                          CP2K version 2023.1
 ENERGY| Total FORCE_EVAL ( QS ) energy [a.u.]:              -17.162361134537130

 ATOMIC FORCES in [a.u.]

 # Atom   Kind   Element          X              Y              Z
      1      1      O          -0.01000000     0.02000000    -0.03000000
      2      2      H           0.00500000    -0.01000000     0.01500000
 SUM OF ATOMIC FORCES         -0.00500000     0.01000000    -0.01500000     0.01870829

 STRESS| Analytical stress tensor [GPa]
 STRESS|                        x                   y                   z
 STRESS|      x        1.00000000E-01      2.00000000E-02      0.00000000E+00
 STRESS|      y        2.00000000E-02     -3.00000000E-01      0.00000000E+00
 STRESS|      z        0.00000000E+00      0.00000000E+00      5.00000000E-01
 STRESS| 1/3 Trace                                 1.00000000E-01

 ENERGY| Total FORCE_EVAL ( QS ) energy [a.u.]:              -17.150000000000000

 ATOMIC FORCES in [a.u.]

 # Atom   Kind   Element          X              Y              Z
      1      1      O           0.01000000     0.00000000     0.00000000
      2      2      H          -0.01000000     0.00000000     0.00000000
 SUM OF ATOMIC FORCES          0.00000000     0.00000000     0.00000000     0.00000000

 STRESS| Analytical stress tensor [GPa]
 STRESS|                        x                   y                   z
 STRESS|      x        0.00000000E+00      0.00000000E+00      0.00000000E+00
 STRESS|      y        0.00000000E+00      0.00000000E+00      0.00000000E+00
 STRESS|      z        0.00000000E+00      0.00000000E+00      1.00000000E+00
"""
CP2K_NEW = """ ENERGY| Total FORCE_EVAL ( QS ) energy [hartree]             -17.170000000000000

 FORCES| Atomic forces [hartree/bohr]
 FORCES|   Atom     x               y               z               |f|
 FORCES|      1 -2.00000000E-02  0.00000000E+00  1.00000000E-02   2.23606798E-02
 FORCES|      2  2.00000000E-02  0.00000000E+00 -1.00000000E-02   2.23606798E-02
 FORCES| Sum     0.00000000E+00  0.00000000E+00  0.00000000E+00
 FORCES| Total atomic force                                       0.00000000E+00

 STRESS| Analytical stress tensor [bar]
 STRESS|                        x                   y                   z
 STRESS|      x        1.00000000E+03      0.00000000E+00      0.00000000E+00
 STRESS|      y        0.00000000E+00      1.00000000E+03      0.00000000E+00
 STRESS|      z        0.00000000E+00      0.00000000E+00      1.00000000E+03
"""
POS = """       2
 i =        {step}, time =        0.000, E =       -17.1623611345
  O         1.0000000000        2.0000000000        3.{step}000000000
  H         1.9000000000        2.0000000000        3.0000000000
"""
CELL = """#   Step   Time [fs]       Ax [Angstrom]       Ay [Angstrom]       Az [Angstrom]       Bx [Angstrom]       By [Angstrom]       Bz [Angstrom]       Cx [Angstrom]       Cy [Angstrom]       Cz [Angstrom]      Volume [Angstrom^3]
       0       0.000        8.0 0.0 0.0 0.0 9.0 0.0 0.0 0.0 10.0 720.0
       1       0.500        8.1 0.0 0.0 0.0 9.0 0.0 0.0 0.0 10.0 729.0
"""


def _cp2k_runs(tmp_path):
    (tmp_path / "old.out").write_text(CP2K_OLD)
    (tmp_path / "old-pos-1.xyz").write_text(POS.format(step=0) + POS.format(step=1))
    (tmp_path / "old-1.cell").write_text(CELL)
    (tmp_path / "new.out").write_text(CP2K_NEW)
    (tmp_path / "new-pos-1.xyz").write_text(POS.format(step=0).replace("O ", "O1"))  # a kind label
    return [{"out": str(tmp_path / "old.out"), "coord": str(tmp_path / "old-pos-1.xyz"),
             "cell_dat": str(tmp_path / "old-1.cell")},
            {"out": str(tmp_path / "new.out"), "coord": str(tmp_path / "new-pos-1.xyz"), "cell_dat": np.eye(3) * 7}]


def test_cp2k_both_output_generations_units_and_stress_sign(tmp_path):
    runs = _cp2k_runs(tmp_path)
    first, second, third = _all(load_cp2k(runs, keys=["coord", "energy", "force", "stress", "cell_dat"],
                                          shuffle=False))
    assert first["e_data"] == pytest.approx(-17.162361134537130 * units.HARTREE, rel=1e-6)
    np.testing.assert_allclose(first["f_data"], np.array([[-0.01, 0.02, -0.03], [0.005, -0.01, 0.015]])
                               * units.HARTREE_PER_BOHR, rtol=1e-6)
    np.testing.assert_allclose(first["s_data"], -np.array([[0.1, 0.02, 0], [0.02, -0.3, 0], [0, 0, 0.5]]) * units.GPA,
                               rtol=1e-6, atol=1e-12)  # CP2K's sign is the opposite of ASE's
    np.testing.assert_allclose(first["cell"], np.diag([8.0, 9.0, 10.0]))
    assert first["pbc"].all()
    np.testing.assert_array_equal(first["elems"], [8, 1])
    assert second["coord"][0, 2] == pytest.approx(3.1) and second["cell"][0, 0] == pytest.approx(8.1)
    assert second["s_data"][2, 2] == pytest.approx(-1.0 * units.GPA, rel=1e-6)
    # the 2025 layout: energy [hartree], FORCES| rows, stress in bar; a fixed cell given as an array
    assert third["e_data"] == pytest.approx(-17.17 * units.HARTREE, rel=1e-6)
    np.testing.assert_allclose(third["f_data"][0], np.array([-0.02, 0, 0.01]) * units.HARTREE_PER_BOHR, rtol=1e-6)
    assert third["s_data"][0, 0] == pytest.approx(-1000 * units.BAR, rel=1e-6)
    np.testing.assert_allclose(third["cell"], np.eye(3) * 7)
    np.testing.assert_array_equal(third["elems"], [8, 1])  # 'O1' is oxygen
    # upstream's default keys without a cell: an open system; splits
    open_run = _all(load_cp2k({"out": runs[0]["out"], "coord": runs[0]["coord"]}, shuffle=False))
    assert "cell" not in open_run[0] and "pbc" not in open_run[0] and "s_data" not in open_run[0]
    parts = load_cp2k(runs, splits={"a": 2, "b": 1})
    assert sorted(len(_all(ds)) for ds in parts.values()) == [1, 2]


def test_cp2k_mismatched_and_bad_sources_are_named(tmp_path):
    runs = _cp2k_runs(tmp_path)
    (tmp_path / "short-pos.xyz").write_text(POS.format(step=0))
    with pytest.raises(DataError, match=r"different numbers of frames: .*short-pos\.xyz \(frames\): 1, "
                                        r".*old\.out \(energies\): 2"):
        load_cp2k({"out": runs[0]["out"], "coord": str(tmp_path / "short-pos.xyz")})
    bad = tmp_path / "bad.out"
    bad.write_text(CP2K_OLD.replace("0.00500000    -0.01000000     0.01500000", "0.005000O0    -0.01000000     0.015"))
    with pytest.raises(DataError, match=r"bad\.out, line 8: '0\.005000O0' is not forces"):
        load_cp2k({"out": str(bad), "coord": runs[0]["coord"]}, keys=["coord", "force"], shuffle=False)
    with pytest.raises(DataError, match="keys must include 'coord'"):
        load_cp2k(runs[0], keys=["energy"])
    with pytest.raises(DataError, match=r"need files \['cell_dat'\]"):
        load_cp2k({"out": runs[0]["out"], "coord": runs[0]["coord"]}, keys=["coord", "cell_dat"])


# -- ANI-1 -----------------------------------------------------------------------------------------

def _ani_file(path, rng):
    import h5py
    molecules = {"gdb11_s01-0": ([b"C", b"H", b"H", b"H", b"H"], 3), "gdb11_s01-1": ([b"N", b"H", b"H", b"H"], 2),
                 "gdb11_s01-2": ([b"O", b"H", b"H"], 4)}
    written = {}
    with h5py.File(path, "w") as store:
        top = store.create_group("gdb11_s01")
        for name, (species, n) in molecules.items():
            group = top.create_group(name)
            group["species"] = np.array(species)
            group["coordinates"] = rng.rand(n, len(species), 3).astype(np.float32) * 2
            group["energies"] = rng.rand(n) - 40
            group["smiles"] = np.array([b"C"])
            written[name] = (group["coordinates"][()], group["energies"][()])
    return written


def test_ani_in_hartree_or_ev_and_split_by_molecule(tmp_path):
    pytest.importorskip("h5py")
    written = _ani_file(str(tmp_path / "ani_gdb_s01.h5"), np.random.RandomState(0))
    got = _all(load_ani(str(tmp_path / "ani_gdb_s01.h5"), shuffle=False))
    assert len(got) == 9 and set(got[0]) == {"elems", "coord", "e_data"}
    np.testing.assert_array_equal(got[0]["elems"], [6, 1, 1, 1, 1])
    np.testing.assert_allclose(got[1]["coord"], written["gdb11_s01-0"][0][1], rtol=1e-6)
    assert got[4]["e_data"] == pytest.approx(written["gdb11_s01-1"][1][1], rel=1e-6)  # Hartree, as upstream's
    in_ev = _all(load_ani(str(tmp_path / "ani_gdb_s01.h5"), shuffle=False, units="pinn"))
    assert in_ev[4]["e_data"] == pytest.approx(written["gdb11_s01-1"][1][1] * units.HARTREE, rel=1e-6)
    parts = load_ani([str(tmp_path / "ani_gdb_s01.h5")], splits={"train": 2, "test": 1}, seed=0)
    formulas = {name: {tuple(s["elems"]) for s in _all(ds)} for name, ds in parts.items()}
    sizes = {name: len(_all(ds)) for name, ds in parts.items()}
    assert not formulas["train"] & formulas["test"]  # each molecule's conformers in one subset
    assert len(formulas["train"]) == 2 and len(formulas["test"]) == 1 and sum(sizes.values()) == 9


def test_ani_bad_files_and_missing_h5py(tmp_path, monkeypatch):
    h5py = pytest.importorskip("h5py")
    with h5py.File(tmp_path / "bad.h5", "w") as store:
        group = store.create_group("top/mol-0")
        group["species"] = np.array([b"O", b"H", b"H"])
        group["coordinates"] = np.zeros((2, 4, 3))
        group["energies"] = np.zeros(2)
    with pytest.raises(DataError, match=r"bad\.h5, top/mol-0: 'coordinates' has shape \(2, 4, 3\), expected "
                                        r"\[n_conformers, 3, 3\]"):
        load_ani(str(tmp_path / "bad.h5"))
    (tmp_path / "text.h5").write_text("not hdf5")
    with pytest.raises(DataError, match=r"text\.h5: not an HDF5 file"):
        load_ani(str(tmp_path / "text.h5"))
    monkeypatch.setitem(__import__("sys").modules, "h5py", None)
    with pytest.raises(ImportError, match="pip install h5py"):
        load_ani(str(tmp_path / "bad.h5"))


# -- QM7b ------------------------------------------------------------------------------------------

QM7B = """5
Properties=species:S:1:pos:R:3 b3lyp_pol="17.1 17.2 17.3 0.1 0.2 0.3" ccsd_pol="16.9 16.9 16.9 0.0 0.0 0.0"
C   0.0000   0.0000   0.0000
H   0.6291   0.6291   0.6291
H  -0.6291  -0.6291   0.6291
H  -0.6291   0.6291  -0.6291
H   0.6291  -0.6291  -0.6291
3
Properties=species:S:1:pos:R:3 b3lyp_pol=" 9.0 9.5 8.0 0.0 0.0 0.5 "
O   0.0000   0.0000   0.1173
H   0.0000   0.7572  -0.4692
H   0.0000  -0.7572  -0.4692
"""


def test_qm7b_polarizability_tensor_and_errors(tmp_path):
    path = tmp_path / "qm7b.xyz"
    path.write_text(QM7B)
    methane, water = _all(load_qm7b(str(path), shuffle=False))
    np.testing.assert_allclose(methane["ptensor"], [[17.1, 0.1, 0.2], [0.1, 17.2, 0.3], [0.2, 0.3, 17.3]], rtol=1e-6)
    np.testing.assert_allclose(water["ptensor"], [[9.0, 0, 0], [0, 9.5, 0.5], [0, 0.5, 8.0]], rtol=1e-6)
    np.testing.assert_allclose(water["coord"][1], [0, 0.7572, -0.4692], rtol=1e-6)
    parts = load_qm7b(str(path), splits={"a": 1, "b": 1})
    assert sorted(len(_all(ds)) for ds in parts.values()) == [1, 1]
    batch = next(iter(load_qm7b(str(path), shuffle=False).apply(sparse_batch(2))))
    assert batch["ptensor"].shape == (2, 3, 3)


def test_qm7b_missing_tensor_names_the_line(tmp_path):
    path = tmp_path / "qm7b.xyz"
    path.write_text(QM7B)
    with pytest.raises(DataError, match=r"qm7b\.xyz, line 9: no ccsd_pol=\"\.\.\.\" on the comment line"):
        load_qm7b(str(path), key="ccsd_pol")
    path.write_text(QM7B.replace("9.0 9.5 8.0 0.0 0.0 0.5", "9.0 9.5 8.0 0.0 0.0"))
    with pytest.raises(DataError, match=r"qm7b\.xyz, line 9: b3lyp_pol has 5 numbers"):
        load_qm7b(str(path))


# -- list_loader: upstream's pbc, force, stress, ds_spec; extra keys through batching ----------------

def _atoms_items():
    from ase.build import bulk, molecule
    copper = bulk("Cu", "fcc", a=3.6, cubic=True)
    return [copper, molecule("H2O"), copper.repeat((1, 1, 2))]


def test_list_loader_flags_declare_the_keys():
    @list_loader(pbc=True, force=True)
    def load_atoms(atoms):
        return {"elems": atoms.numbers, "coord": atoms.positions, "cell": atoms.cell[:],
                "f_data": np.zeros_like(atoms.positions), "e_data": 0.0}
    copper, water, long_copper = _all(load_atoms(_atoms_items(), shuffle=False))
    assert periodic(copper) and not periodic(water)  # a zero cell is an open system
    np.testing.assert_allclose(long_copper["cell"][2, 2], 7.2)
    assert set(copper) == {"elems", "coord", "cell", "e_data", "f_data"}  # the declared keys, nothing added

    @list_loader(force=True)
    def load_without_forces(atoms):
        return {"elems": atoms.numbers, "coord": atoms.positions, "e_data": 0.0}
    with pytest.raises(DataError, match=r"Cu4.*declares \['f_data'\] .* gives only"):
        load_without_forces(_atoms_items(), shuffle=False)

    @list_loader(stress=True)
    def load_with_a_cell(atoms):
        return {"elems": atoms.numbers, "coord": atoms.positions, "e_data": 0.0, "s_data": np.eye(3),
                "cell": atoms.cell[:]}
    with pytest.raises(DataError, match=r"gives \['cell'\], which it does not declare"):
        load_with_a_cell(_atoms_items())


def test_ds_spec_extra_keys_are_carried_through_sparse_batch_split_and_padding():
    ds_spec = {"elems": {"dtype": tf.int32, "shape": [None]}, "coord": {"dtype": tf.float32, "shape": [None, 3]},
               "e_data": {"dtype": "float", "shape": []}, "mw_data": {"dtype": tf.float32, "shape": []},
               "f_weights": {"dtype": "float", "shape": [None, 3]}, "tag": {"dtype": "int32", "shape": [2]}}

    @list_loader(ds_spec=ds_spec)
    def load_atoms(atoms):
        return {"elems": atoms.numbers, "coord": atoms.positions, "e_data": 0.0,
                "mw_data": atoms.get_masses().sum(), "f_weights": np.full((len(atoms), 3), len(atoms)),
                "tag": [len(atoms), 7]}
    dataset = load_atoms(_atoms_items(), shuffle=False)
    assert dataset.element_spec["mw_data"].shape == () and dataset.element_spec["f_weights"].shape.as_list() == [None, 3]
    batch = next(iter(dataset.apply(sparse_batch(3))))
    np.testing.assert_allclose(batch["mw_data"].numpy(), [4 * 63.546, 18.015, 8 * 63.546], rtol=1e-3)
    np.testing.assert_array_equal(batch["f_weights"].numpy()[:, 0], [4] * 4 + [3] * 3 + [8] * 8)  # per atom
    np.testing.assert_array_equal(batch["tag"].numpy(), [[4, 7], [3, 7], [8, 7]])
    first, second = split_batch(batch, 2)
    assert first["f_weights"].shape == (4, 3) and first["mw_data"].shape == (1,)
    assert second["f_weights"].shape == (11, 3) and second["tag"].shape == (2, 2)
    from pinn.io import add_neighbors
    padded = pad_tensors(next(iter(dataset.apply(sparse_batch(3)).apply(add_neighbors(3.0)))), 3.0, 29)
    n_atoms = padded["elems"].shape[0]
    assert padded["f_weights"].shape == (n_atoms, 3) and padded["mw_data"].shape == (4,)
    assert padded["real"].numpy().tolist() == [True, True, True, False]
    # a per-atom key that is not declared as one is not silently taken per structure
    with pytest.raises(tf.errors.InvalidArgumentError, match="key my_weights is taken as per structure"):
        split_batch({**batch, "my_weights": batch["f_weights"]}, 2)
    # sparse_batch(atomic_props=...) concatenates a key of one's own, and checks it has one row per atom
    renamed = dataset.map(lambda s: {**{k: v for k, v in s.items() if k != "f_weights"}, "w": s["f_weights"]})
    assert next(iter(renamed.apply(sparse_batch(3, atomic_props=["w"]))))["w"].shape == (15, 3)
    short = dataset.map(lambda s: {**s, "f_weights": s["f_weights"][:2]})
    with pytest.raises(tf.errors.InvalidArgumentError, match="per-atom key f_weights .* does not have one row per atom"):
        next(iter(short.apply(sparse_batch(3))))


def test_ds_spec_is_checked():
    with pytest.raises(ValueError, match=r"ds_spec\['cell'\] has shape \[9\]; pinn's 'cell' has \[3, 3\]"):
        list_loader(ds_spec={"elems": {"dtype": "int32", "shape": [None]}, "coord": {"dtype": "float", "shape": [None, 3]},
                             "cell": {"dtype": "float", "shape": [9]}})
    with pytest.raises(ValueError, match="must declare 'coord'"):
        list_loader(ds_spec={"elems": {"dtype": "int32", "shape": [None]}})
    with pytest.raises(ValueError, match=r"force=True, but 'f_data' is not in ds_spec"):
        list_loader(force=True, ds_spec={"elems": {"dtype": "int32", "shape": [None]},
                                         "coord": {"dtype": "float", "shape": [None, 3]}})

    @list_loader(ds_spec={"elems": {"dtype": "int32", "shape": [None]}, "coord": {"dtype": "float", "shape": [None, 3]},
                          "mw_data": {"dtype": "float", "shape": []}})
    def load_vector(i):
        return {"elems": [1], "coord": [[0, 0, 0]], "mw_data": [1.0, 2.0]}
    with pytest.raises(DataError, match=r"'mw_data' has shape \(2,\), declared \[\]"):
        load_vector([0])

    @list_loader
    def load_undeclared(i):
        return {"elems": [1], "coord": [[0, 0, 0]], "mw_data": 1.0}
    with pytest.raises(DataError, match=r"unknown data key 'mw_data' .* list_loader\(ds_spec=\.\.\.\)"):
        load_undeclared([0])


# -- TFRecord: upstream's X.yml --------------------------------------------------------------------

def test_tfrecord_writes_upstream_naming_and_reads_old_and_upstream_specs(tmp_path):
    from pinn.io import load_numpy
    rng = np.random.RandomState(0)
    data = {"coord": rng.rand(4, 3, 3), "elems": np.array([8, 1, 1]), "e_data": rng.rand(4),
            "f_data": rng.rand(4, 3, 3)}
    dataset = load_numpy(data, split=False, shuffle=False)
    assert write_tfrecord(str(tmp_path / "train.tfr"), dataset) == 4
    spec = yaml.safe_load((tmp_path / "train.yml").read_text())
    assert spec["info"]["n_sample"] == 4 and spec["format"]["coord"] == {"dtype": "float32", "shape": [None, 3]}
    assert not (tmp_path / "train.tfr.yml").exists()
    expected = _all(dataset)
    for name in ("train.tfr", "train.yml"):  # pinn's call and upstream's call
        back = _all(load_tfrecord(str(tmp_path / name)))
        assert len(back) == 4
        for got, want in zip(back, expected):
            for key in want:
                np.testing.assert_array_equal(got[key], want[key])
    # upstream's write_tfrecord('X.yml', ...) writes X.tfr
    write_tfrecord(str(tmp_path / "up.yml"), dataset)
    assert (tmp_path / "up.tfr").exists() and len(_all(load_tfrecord(str(tmp_path / "up.yml")))) == 4
    # a file of earlier versions of pinn: X.tfr with the spec X.tfr.yml in pinn's old layout
    os.replace(tmp_path / "up.tfr", tmp_path / "old.tfr")
    os.remove(tmp_path / "up.yml")
    (tmp_path / "old.tfr.yml").write_text(yaml.safe_dump({"format": "pinn-tfrecord-1", "count": 4,
                                                          "keys": spec["format"]}))
    old = _all(load_tfrecord(str(tmp_path / "old.tfr")))
    np.testing.assert_array_equal(old[3]["f_data"], expected[3]["f_data"])
    # a X.yml of another kind is neither overwritten nor taken for the spec
    (tmp_path / "run.yml").write_text("model:\n  name: potential_model\n")
    with pytest.raises(DataError, match=r"run\.yml: exists and is not a TFRecord spec"):
        write_tfrecord(str(tmp_path / "run.tfr"), dataset)
    assert "potential_model" in (tmp_path / "run.yml").read_text()
    os.replace(tmp_path / "old.tfr", tmp_path / "run.tfr")
    os.replace(tmp_path / "old.tfr.yml", tmp_path / "run.tfr.yml")
    assert len(_all(load_tfrecord(str(tmp_path / "run.tfr")))) == 4
    with pytest.raises(DataError, match="is missing"):
        load_tfrecord(str(tmp_path / "nothing.tfr"))
    # sparse batches round-trip too (upstream's test writes both)
    batched = dataset.apply(sparse_batch(2))
    write_tfrecord(str(tmp_path / "batch.tfr"), batched)
    got = _all(load_tfrecord(str(tmp_path / "batch.tfr")))
    np.testing.assert_array_equal(got[1]["ind_1"], _all(batched)[1]["ind_1"])
