"""What upstream PiNN 2.x's own tests and input files check, run with pinn's API (issue 30).

Upstream's ``tests/test_misc.py`` (commit 79d8c5e) and ``tests/test_io.py`` with its
``tests/helpers.py`` (commit 01b03e0) check: a PiNet potential trained on Lennard-Jones
three-body samples through ``load_numpy`` and the estimator specs; an LJ network's energy,
forces and stress against ASE's ``LennardJones``; the cell-list neighbor distances against
ASE's ``neighbor_list``; the numpy, QM9 and RuNNer loaders on a three-atom "trivial"
structure; the split ratio; TFRecord files of structures and of batches named ``X.yml``.
Upstream's ``inputs/qm9-pinet.yml``, ``md17-pinet2.yml`` and ``pinet2-dipole.yml`` are
restated here (configuration data) and run through ``pinn train`` as upstream's command
line takes them.  The tests are this package's own; the behaviours are upstream's.

Where pinn differs on purpose the test says so: energies in eV (pinn converts QM9's and
RuNNer's Hartree), a ``pbc`` key beside ``cell``.
"""
import os

import numpy as np
import pytest
import tensorflow as tf
import yaml
from ase import Atoms
from ase.build import bulk
from ase.calculators.emt import EMT
from ase.calculators.lj import LennardJones
from ase.collections import g2
from ase.neighborlist import neighbor_list

import pinn
from pinn import units
from pinn.cli import main
from pinn.io import add_neighbors, load_numpy, load_qm9, load_runner, load_tfrecord, sparse_batch, write_tfrecord
from pinn.layers import CellListNL
from pinn.params import resolve

from upstream_inputs import MD17_PINET2_YML, PINET2_DIPOLE_YML, QM9_PINET_YML

# --- the "trivial" structure of upstream's tests/helpers.py: H at (0, 0, 0), O at (1, 0, 0), H at (1, 1, 0)
# in a 100 x 100 x 100 box, energy 11 (in the file's unit)

TRIVIAL_COORD = np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 0.0]], np.float32)
TRIVIAL_ELEMS = np.array([1, 8, 1], np.int32)
TRIVIAL_CELL = np.diag([100.0, 100.0, 100.0]).astype(np.float32)
TRIVIAL_ENERGY = 11.0


def trivial_arrays():
    return {"coord": TRIVIAL_COORD.copy(), "elems": TRIVIAL_ELEMS.copy(), "cell": TRIVIAL_CELL.copy(),
            "e_data": np.array(TRIVIAL_ENERGY)}


def qm9_text(symbols, positions, u0, index=1, charges=None):
    """A molecule in QM9's .xyz layout: count, 'gdb' and the 15 properties (U0 the 11th, Hartree), atoms
    (QM9's '*^' exponents), frequencies, SMILES and InChI lines."""
    properties = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, u0, u0 + 0.01, u0 + 0.02, u0 - 0.03, 15.0]
    lines = [str(len(symbols)), f"gdb {index}\t" + "\t".join(f"{p:.6f}" for p in properties)]
    for k, (symbol, xyz) in enumerate(zip(symbols, positions)):
        mantissa, exponent = f"{xyz[0]:.6E}".split("E")
        charge = "" if charges is None else f"\t{charges[k]:.6f}"
        lines.append(f"{symbol}\t{mantissa}*^{int(exponent)}\t{xyz[1]:.8f}\t{xyz[2]:.8f}{charge}")
    return "\n".join(lines + ["1.0\t1.0\t1.0", "C\tC", "InChI=1S/x\tInChI=1S/x"]) + "\n"


RUNNER_TRIVIAL = """\
begin
comment the trivial structure in RuNNer's units (bohr, Hartree)
lattice   100.0    0.0    0.0
lattice     0.0  100.0    0.0
lattice     0.0    0.0  100.0
atom   0.0 0.0 0.0   H   0.1   0.0   0.0001   -0.0002   0.0003
atom   1.0 0.0 0.0   O  -0.2   0.0   0.0001   -0.0002   0.0003
atom   1.0 1.0 0.0   H   0.1   0.0   0.0001   -0.0002   0.0003
energy   11.0
charge   0.0
end
"""


@pytest.fixture(scope="module")
def trivial_files(tmp_path_factory):
    """(QM9 file, RuNNer file) of the trivial structure."""
    folder = tmp_path_factory.mktemp("trivial")
    qm9 = folder / "trivial.xyz"
    qm9.write_text(qm9_text(["H", "O", "H"], TRIVIAL_COORD, TRIVIAL_ENERGY))
    runner = folder / "trivial.data"
    runner.write_text(RUNNER_TRIVIAL)
    return str(qm9), str(runner)


def only(dataset):
    """The one structure of a dataset, as numpy arrays; fails when there are more."""
    iterator = iter(dataset)
    out = {k: v.numpy() for k, v in next(iterator).items()}
    with pytest.raises(StopIteration):
        next(iterator)
    return out


# --- test_io.py: the loaders on the trivial structure, the split, TFRecord files

def test_numpy_loader_gives_the_trivial_structure_with_exactly_its_keys():
    """Upstream's test_numpy: one dataset without splits, every key as given and no other."""
    data = {k: v[None] for k, v in trivial_arrays().items()}
    out = only(load_numpy(data))
    assert set(out) == set(data)
    for key, value in data.items():
        np.testing.assert_allclose(out[key], value[0])


def test_a_single_ratio_as_split_gives_one_dataset_of_every_structure(trivial_files):
    data = {k: v[None] for k, v in trivial_arrays().items()}
    out = only(load_numpy(data, split=1))
    np.testing.assert_allclose(out["coord"], TRIVIAL_COORD)
    assert only(load_qm9([trivial_files[0]], split=1))["elems"].tolist() == [1, 8, 1]
    assert only(load_runner(trivial_files[1], split=1))["elems"].tolist() == [1, 8, 1]


def test_a_cell_without_pbc_is_read_as_periodic_and_no_cell_as_open():
    """Nothing is added to the structures; add_neighbors, the models and the trainer read a cell without pbc
    as periodic (upstream's reading) and a structure without cell as open."""
    data = {k: v[None] for k, v in trivial_arrays().items()}
    small = dict(data, cell=np.eye(3)[None] * 2.0)  # a 2 Å cell: pairs with images within 2.5 Å
    structure = only(load_numpy(small))
    assert "pbc" not in structure
    periodic = next(iter(load_numpy(small).apply(add_neighbors(2.5))))
    assert periodic["pbc"].numpy().tolist() == [True, True, True] and periodic["shift"].numpy().any()
    molecule = {k: v for k, v in data.items() if k != "cell"}
    open_ = next(iter(load_numpy(molecule).apply(sparse_batch(1)).apply(add_neighbors(2.5))))
    assert open_["pbc"].numpy().tolist() == [[False, False, False]] and not open_["shift"].numpy().any()
    assert not open_["cell"].numpy().any()


def test_qm9_loader_gives_the_trivial_structure_in_the_files_units(trivial_files):
    """Upstream's test_qm9: U0 as the file gives it (Hartree), no cell; units='pinn' converts to eV."""
    out = only(load_qm9([trivial_files[0]]))
    assert set(out) == {"elems", "coord", "e_data"}
    assert out["elems"].tolist() == [1, 8, 1]
    np.testing.assert_allclose(out["coord"], TRIVIAL_COORD, atol=1e-6)  # "0.000000*^0" is QM9's 0
    assert out["e_data"] == pytest.approx(TRIVIAL_ENERGY, rel=1e-6)
    in_ev = only(load_qm9([trivial_files[0]], units="pinn"))
    assert in_ev["e_data"] == pytest.approx(TRIVIAL_ENERGY * units.HARTREE, rel=1e-6)


def test_runner_loader_gives_the_trivial_structure_as_upstream_reads_it(trivial_files):
    """Upstream's test_runner: lengths in Å, the energy in Hartree, forces in Hartree/Å; units='atomic': eV."""
    out = only(load_runner(trivial_files[1]))
    assert out["elems"].tolist() == [1, 8, 1]
    np.testing.assert_allclose(out["coord"], TRIVIAL_COORD * units.BOHR, rtol=1e-6)
    np.testing.assert_allclose(out["cell"], TRIVIAL_CELL * units.BOHR, rtol=1e-6)
    assert out["pbc"].all()  # lattice lines: periodic
    assert out["e_data"] == pytest.approx(TRIVIAL_ENERGY, rel=1e-6)
    np.testing.assert_allclose(out["f_data"][0], np.array([0.0001, -0.0002, 0.0003]) / units.BOHR, rtol=1e-5)
    in_ev = only(load_runner(trivial_files[1], units="atomic"))
    assert in_ev["e_data"] == pytest.approx(TRIVIAL_ENERGY * units.HARTREE, rel=1e-6)
    np.testing.assert_allclose(in_ev["f_data"][0], np.array([0.0001, -0.0002, 0.0003]) * units.HARTREE / units.BOHR,
                               rtol=1e-5)


def test_split_follows_the_ratio():
    data = {k: np.stack([v] * 10) for k, v in trivial_arrays().items()}
    for subsets in (load_numpy(data, split={"train": 8, "test": 2}), load_numpy(data, splits={"train": 8, "test": 2})):
        assert set(subsets) == {"train", "test"}
        assert sum(1 for _ in subsets["train"]) == 8
        assert sum(1 for _ in subsets["test"]) == 2


def test_frames_of_another_shape_are_carried_as_upstream_and_refused_at_batching(caplog):
    """Upstream's test_split stacks [[v]] * 10: frames of coord [1, 3, 3]. Its loader splits them; so does pinn's,
    with a warning, and sparse_batch then refuses them naming the key."""
    data = {k: np.stack([[v]] * 10, axis=0) for k, v in trivial_arrays().items()}
    with caplog.at_level("WARNING", logger="pinn"):
        subsets = load_numpy(data, splits={"train": 8, "test": 2})
    assert sum(1 for _ in subsets["train"]) == 8 and sum(1 for _ in subsets["test"]) == 2
    assert "'coord' [1, 3, 3]" in caplog.text and "sparse_batch and the models refuse them" in caplog.text
    with pytest.raises(ValueError, match=r"sparse_batch: 'coord' has the shape \[1, 3, 3\] per structure"):
        subsets["train"].apply(sparse_batch(2))


def test_tfrecord_of_structures_and_of_batches_named_by_their_spec(trivial_files, tmp_path):
    structures = load_runner(trivial_files[1]).repeat(20)
    write_tfrecord(str(tmp_path / "test.yml"), structures)
    batches = structures.apply(sparse_batch(20))
    write_tfrecord(str(tmp_path / "test_batch.yml"), batches)
    assert {p.name for p in tmp_path.iterdir()} == {"test.yml", "test.tfr", "test_batch.yml", "test_batch.tfr"}
    spec = yaml.safe_load((tmp_path / "test.yml").read_text())
    assert isinstance(spec, dict) and "elems" in str(spec)  # the spec file names the keys it holds
    for written, name, count in ((structures, "test.yml", 20), (batches, "test_batch.yml", 1)):
        loaded = load_tfrecord(str(tmp_path / name))
        assert sum(1 for _ in loaded) == count
        label, out = next(iter(written)), next(iter(loaded))
        assert set(out) == set(label)
        for key in out:
            np.testing.assert_allclose(out[key].numpy(), label[key].numpy())
    assert next(iter(load_tfrecord(str(tmp_path / "test_batch.yml"))))["ind_1"].shape == (60, 1)


# --- test_misc.py: the potential model on LJ three-body samples, the LJ calculator, the cell list

def three_body(atoms, angle, r):
    """Atoms 0 and 1 two Å apart along y, atom 2 at ``r`` Å from atom 0, ``angle`` degrees from y."""
    x = np.radians(angle)
    atoms.positions = [[0.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, r * np.cos(x), r * np.sin(x)]]
    return atoms


@pytest.fixture(scope="module")
def lj_samples():
    """50 H3 structures on upstream's grid of angles (30-180°) and distances (1-3 Å), with ASE's LJ energy and
    forces, as the arrays upstream gives load_numpy."""
    rng = np.random.RandomState(0)
    atoms = Atoms("H3", calculator=LennardJones())
    data = {"e_data": [], "f_data": [], "elems": [], "coord": []}
    for angle, r in zip(rng.choice(np.linspace(30, 180, 50), 50), rng.choice(np.linspace(1, 3, 50), 50)):
        three_body(atoms, angle, r)
        data["e_data"].append(atoms.get_potential_energy())
        data["f_data"].append(atoms.get_forces())
        data["coord"].append(atoms.get_positions())
        data["elems"].append(atoms.numbers)
    return {k: np.array(v) for k, v in data.items()}


def test_load_numpy_without_splits_is_one_dataset_of_every_frame_in_order(lj_samples):
    dataset = load_numpy(lj_samples)
    energies = [float(s["e_data"]) for s in dataset]
    np.testing.assert_allclose(energies, lj_samples["e_data"], rtol=1e-6)


def test_potential_model_trains_on_lj_three_body_samples(lj_samples, tmp_path):
    dataset = lambda: load_numpy(lj_samples, splits={"train": 8, "test": 2})  # noqa: E731  (upstream's test)
    train = lambda: dataset()["train"].shuffle(100).repeat().apply(sparse_batch(100))  # noqa: E731
    test = lambda: dataset()["test"].repeat().apply(sparse_batch(100))  # noqa: E731
    nodes = [8, 8]
    params = {"model_dir": str(tmp_path / "lj"),
              "network": {"name": "PiNet", "params": {"ii_nodes": nodes, "pi_nodes": nodes, "pp_nodes": nodes,
                                                      "out_nodes": nodes, "rc": 3.0, "atom_types": [1]}},
              "model": {"name": "potential_model", "params": {"use_force": True}}}
    model = pinn.get_model(params)
    specs = getattr(tf, "estimator", pinn)  # TensorFlow 2.16+ has no tf.estimator: pinn's specs then
    metrics, _ = pinn.train_and_evaluate(model, specs.TrainSpec(input_fn=train, max_steps=3),  # upstream: 200
                                         specs.EvalSpec(input_fn=test, steps=1))
    assert metrics["global_step"] == 3
    assert np.isfinite(metrics["METRICS/E_RMSE"]) and np.isfinite(metrics["METRICS/F_RMSE"])


def test_lj_calculator_matches_ase_lennard_jones(tmp_path):
    # upstream's params: an LJ network without atom_types, a model directory that does not exist yet
    params = {"model_dir": str(tmp_path / "lj"), "network": {"name": "LJ", "params": {"rc": 3}},
              "model": {"name": "potential_model", "params": {}}}
    pi_lj = pinn.get_calc(params)
    rng = np.random.RandomState(1)
    structures = [bulk("Cu").repeat([3, 3, 3]), bulk("Mg"), g2["H2O"]]
    for atoms in structures:
        atoms.positions += rng.uniform(0, 0.2, atoms.positions.shape)
        atoms.calc = pi_lj
        e_pinn, f_pinn = atoms.get_potential_energy(), atoms.get_forces()
        s_pinn = atoms.get_stress() if atoms.pbc.any() else None
        atoms.calc = LennardJones()  # sigma 1 Å, epsilon 1 eV, cutoff 3 Å: the LJ network's defaults
        assert e_pinn == pytest.approx(atoms.get_potential_energy(), abs=1e-4)
        np.testing.assert_allclose(f_pinn, atoms.get_forces(), rtol=1e-4, atol=1e-4)
        if s_pinn is not None:
            np.testing.assert_allclose(s_pinn, atoms.get_stress(), rtol=1e-4, atol=1e-5)
    assert structures[0].get_potential_energy() < -1.0  # Cu's neighbors are within 3 Å: not a trivial zero


def test_cell_list_distances_match_ase():
    structures = [bulk("Cu"), bulk("Mg"), bulk("Fe")]
    tensors = {
        "ind_1": tf.constant(np.concatenate([[[i]] * len(a) for i, a in enumerate(structures)]), tf.int32),
        "coord": tf.constant(np.concatenate([a.positions for a in structures]), tf.float32),
        "cell": tf.constant(np.stack([a.cell[:] for a in structures]), tf.float32)}
    nl = CellListNL(rc=10)(tensors)
    dist_ase = np.concatenate([neighbor_list("d", a, 10.0) for a in structures])
    assert nl["dist"].shape == dist_ase.shape
    np.testing.assert_allclose(np.sort(nl["dist"].numpy()), np.sort(dist_ase), rtol=1e-5)
    ind_2, shift, diff = nl["ind_2"].numpy(), nl["shift"].numpy(), nl["diff"].numpy()
    structure = tensors["ind_1"].numpy()[ind_2[:, 0], 0]
    assert (structure == tensors["ind_1"].numpy()[ind_2[:, 1], 0]).all()  # pairs stay within their structure
    coord, cell = tensors["coord"].numpy(), tensors["cell"].numpy()
    expected = coord[ind_2[:, 1]] + np.einsum("pk,pkx->px", shift, cell[structure]) - coord[ind_2[:, 0]]
    np.testing.assert_allclose(diff, expected, atol=1e-4)


def test_cell_list_without_a_cell_or_with_pbc_false_is_open():
    water = g2["H2O"]
    open_pairs = {"ind_1": np.zeros((3, 1), np.int32), "coord": water.positions.astype(np.float32)}
    nl = CellListNL(rc=3.0)(open_pairs)
    assert sorted(map(tuple, nl["ind_2"].numpy())) == [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)]
    np.testing.assert_allclose(np.sort(nl["dist"].numpy()), np.sort(water.get_all_distances()[~np.eye(3, dtype=bool)]),
                               rtol=1e-6)
    boxed = dict(open_pairs, cell=np.eye(3, dtype=np.float32)[None] * 2.0, pbc=np.zeros((1, 3), bool))
    assert CellListNL(rc=3.0)(boxed)["dist"].shape == (6,)  # pbc False: the 2 Å box's images are not neighbors
    with pytest.raises(ValueError, match="positive cutoff"):
        CellListNL(rc=0)


# --- upstream's inputs/*.yml, as upstream's `pinn train` takes them (texts in upstream_inputs.py)


#: small molecules of QM9's elements (H, C, N, O: those ASE's EMT knows)
MOLECULES = ["CH4", "H2O", "NH3", "C2H4", "CH3OH", "HCN", "C2H6", "CO2", "HCOOH", "N2", "H2CO", "C2H2"]


@pytest.fixture(scope="module")
def qm9_folder(tmp_path_factory):
    """A folder with dsgdb9nsd/: QM9-format files (one molecule each, U0 in Hartree, Mulliken charges), and
    mols.xyz: the same molecules with EMT energies and forces (extended XYZ); both converted as upstream's
    command line does: `pinn convert dsgdb9nsd/*.xyz -f qm9 -o 'qm9_train:8,qm9_eval:2'` and
    `pinn convert mols.xyz -o 'train:8,eval:2'`."""
    import ase.io
    folder = tmp_path_factory.mktemp("qm9")
    (folder / "dsgdb9nsd").mkdir()
    rng = np.random.RandomState(3)
    frames = []
    for index, name in enumerate(MOLECULES, 1):
        atoms = g2[name]
        atoms.rattle(0.02, rng=rng)
        atoms.calc = EMT()
        u0 = atoms.get_potential_energy() / units.HARTREE - 40.0  # some energy, Hartree
        text = qm9_text(atoms.get_chemical_symbols(), atoms.positions, u0, index,
                        charges=rng.uniform(-0.3, 0.3, len(atoms)))
        (folder / "dsgdb9nsd" / f"dsgdb9nsd_{index:06d}.xyz").write_text(text)
        atoms.get_forces()
        frames.append(atoms)
    ase.io.write(folder / "mols.xyz", frames, format="extxyz")
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        files = sorted(str(p.relative_to(folder)) for p in (folder / "dsgdb9nsd").glob("*.xyz"))
        assert main(["convert", *files, "-f", "qm9", "-o", "qm9_train:8,qm9_eval:2"]) == 0
        assert main(["convert", "mols.xyz", "-o", "train:8,eval:2"]) == 0
    finally:
        os.chdir(cwd)
    return folder


def test_convert_reads_qm9_files_with_upstreams_format_option(qm9_folder):
    structures = list(load_tfrecord(str(qm9_folder / "qm9_train.yml"))) + list(
        load_tfrecord(str(qm9_folder / "qm9_eval.yml")))
    assert len(structures) == len(MOLECULES)
    assert sorted(len(s["elems"]) for s in structures) == sorted(len(g2[name]) for name in MOLECULES)
    assert "f_data" not in structures[0]  # QM9 has no forces
    u0 = {}
    for path in (qm9_folder / "dsgdb9nsd").glob("*.xyz"):
        lines = path.read_text().splitlines()
        u0[int(lines[0])] = u0.get(int(lines[0]), []) + [float(lines[1].split()[12])]
    for s in structures:  # U0 of a molecule of that size, in the file's Hartree as upstream's loader gives it
        assert min(abs(s["e_data"].numpy() - e) for e in u0[len(s["elems"])]) < 1e-5


def test_qm9_pinet_yml_trains_unchanged(qm9_folder, monkeypatch, capsys):
    monkeypatch.chdir(qm9_folder)
    (qm9_folder / "qm9-pinet.yml").write_text(QM9_PINET_YML)
    # the TensorFlow step without XLA: compiling this PiNet (depth 5, 64 wide) takes ~25 s more on 2 cores, and the
    # test is about the file; the compiled step is tested in test_training.py
    import pinn.training.backends
    monkeypatch.setattr(pinn.training.backends, "_jit_setting", lambda params, model: False)
    # the file trains on forces (use_force: true): the QM9 molecules with EMT forces (mols.xyz, converted)
    assert main(["train", "-d", "model", "-t", "train.yml", "-e", "eval.yml", "-b", "4", "--train-steps", "2",
                 "qm9-pinet.yml"]) == 0
    assert (qm9_folder / "model" / "ckpt-2.index").exists()
    written = yaml.safe_load((qm9_folder / "model" / "params.yml").read_text())
    net = written["network"]["params"]
    assert written["network"]["name"] == "PiNet"
    assert (net["depth"], net["rc"], net["n_basis"], net["basis_type"], net["ii_nodes"]) == (5, 4.5, 10, "gaussian",
                                                                                             [64] * 4)
    model = written["model"]["params"]
    assert model["use_force"] and model["f_loss_multiplier"] == 10.0 and model["log_e_per_atom"]
    assert model["learning_rate"] == pytest.approx(1e-4)  # from the optimizer section
    capsys.readouterr()
    assert main(["log", "model"]) == 0
    assert "E_PER_ATOM" in capsys.readouterr().out  # log_e_per_atom


def test_qm9_pinet_yml_on_qm9_files_asks_for_the_forces_it_trains_on(qm9_folder, monkeypatch, capsys):
    """QM9 has no forces: upstream's model fails on the missing f_data (a KeyError); pinn says so at the start."""
    monkeypatch.chdir(qm9_folder)
    (qm9_folder / "qm9-pinet.yml").write_text(QM9_PINET_YML)
    capsys.readouterr()
    assert main(["train", "-d", "qm9_model", "-t", "qm9_train.yml", "-e", "qm9_eval.yml", "-b", "4",
                 "--train-steps", "2", "qm9-pinet.yml"]) == 1
    err = capsys.readouterr().err
    assert "f_data" in err and "forces" in err
    assert not (qm9_folder / "qm9_model" / "ckpt-2.index").exists()


def _refusal(text, folder, monkeypatch, capsys):
    """The error of `pinn train` with params ``text`` on the converted data of ``folder``."""
    monkeypatch.chdir(folder)
    (folder / "refused.yml").write_text(text)
    capsys.readouterr()
    assert main(["train", "-d", "refused_model", "-t", "train.yml", "-e", "eval.yml", "-b", "4",
                 "--train-steps", "2", "refused.yml"]) == 1
    assert not (folder / "refused_model" / "ckpt-2.index").exists()
    return capsys.readouterr().err


def test_md17_pinet2_yml_resolves_with_pinet2(tmp_path):
    """PiNet2 is in pinn now (issue 31): the file resolves as written; tests/networks/test_pinet2.py trains it through
    `pinn train`."""
    params = yaml.safe_load(MD17_PINET2_YML)
    resolved = resolve(dict(params, model_dir=str(tmp_path / "m")))
    net = resolved["network"]
    assert net["name"] == "PiNet2"
    assert (net["params"]["depth"], net["params"]["rank"], net["params"]["n_basis"]) == (5, 3, 10)


def test_pinet2_dipole_yml_resolves_or_names_only_what_pinn_lacks(qm9_folder, monkeypatch, capsys, tmp_path):
    """Upstream's pinet2-dipole.yml: its PiNet2 is pinn's; its AC_dipole_model resolves where pinn has it (issue 31)
    and is refused by name, alone, where it has not."""
    from pinn.physics.registry import NOT_YET
    params = yaml.safe_load(PINET2_DIPOLE_YML)
    if "AC_dipole_model" in NOT_YET:
        err = _refusal(PINET2_DIPOLE_YML, qm9_folder, monkeypatch, capsys)
        assert "AC_dipole_model" in err and "not in pinn yet" in err
        assert "PiNet2" not in err
    else:
        resolved = resolve(dict(params, model_dir=str(tmp_path / "m")))
        assert (resolved["model"]["name"], resolved["network"]["name"]) == ("AC_dipole_model", "PiNet2")
    # the network section on its own is pinn's
    params["model"] = {"name": "potential_model", "params": {}}
    net = resolve(dict(params, model_dir=str(tmp_path / "m")))["network"]["params"]
    assert (net["weighted"], net["rank"], net["atom_types"]) == (False, 3, [1, 6, 7, 8, 9])


def test_get_calc_of_params_without_a_checkpoint_uses_the_initial_weights(tmp_path, caplog):
    """Upstream's estimator predicts with freshly initialised weights where model_dir holds no checkpoint (the last
    cell of its Quick_tour notebook does so); pinn's get_calc(params) gives that model, with a warning, and
    writes nothing (no Trainer is built for inference)."""
    nodes = [4]
    params = {"model_dir": str(tmp_path / "untrained"),
              "network": {"name": "PiNet", "params": {"depth": 1, "rc": 3.0, "atom_types": [1, 8], "pp_nodes": nodes,
                                                      "pi_nodes": nodes, "ii_nodes": nodes, "out_nodes": nodes}},
              "model": {"name": "potential_model", "params": {}}}
    water = g2["H2O"]
    with caplog.at_level("WARNING", logger="pinn"):
        water.calc = pinn.get_calc(params)
    assert f"get_calc: {tmp_path / 'untrained'} holds no checkpoint" in caplog.text
    assert not (tmp_path / "untrained").exists()
    energy = water.get_potential_energy()
    water.calc = pinn.get_calc(pinn.get_model(params))  # the same params, the same (seeded) initial weights
    assert water.get_potential_energy() == pytest.approx(energy, rel=1e-6)
    with pytest.raises(ValueError, match="no checkpoint"):  # a checkpoint asked for by name must be there
        pinn.get_calc(params, checkpoint="last")
