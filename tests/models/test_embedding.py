"""The potential model with electrostatic embedding (model.params.embedding, pinn.physics.embedding) on QM/MM frames
read from extended XYZ as users write them: forces on QM and MM atoms are −∇E (central differences), the energy
is invariant under rotating and translating QM and MM atoms together and under moving an MM atom by a lattice
vector, the QM charges sum to the region's charge, the MM atoms act through their charges alone, the damped
kernel is MiMiC's, settings it cannot follow are refused naming the key, and `pinn train` / `pinn eval` take
such files."""
import json

import os

import numpy as np
import pytest
import tensorflow as tf
import yaml
from ase import Atoms
from settings import qmmm_frame

from pinn import keys as K
from pinn.io import add_neighbors, ase_files, load_ase, sparse_batch
from pinn.params import ParamsError, resolve
from pinn.physics.embedding import COULOMB, coulomb_kernel
from pinn.physics.registry import build_model

RC = 4.0
NETWORK = {"name": "PiNet", "params": {"atom_types": [1, 8], "rc": RC, "depth": 2, "pp_nodes": [8],
                                       "pi_nodes": [8], "ii_nodes": [8], "out_nodes": [8], "out_units": 2}}


def params_of(**model_params):
    return {"model_dir": "unused", "precision": "float64", "network": NETWORK,
            "model": {"name": "potential_model",
                      "params": {"embedding": "electrostatic", "use_force": True, **model_params}}}


@pytest.fixture(scope="module")
def frames_file(tmp_path_factory):
    """Six QM/MM frames on disk; the third is put in a periodic 15 Å box."""
    frames = [qmmm_frame(seed) for seed in range(6)]
    frames[2].set_cell(np.eye(3) * 15.0)
    frames[2].pbc = True
    path = tmp_path_factory.mktemp("qmmm") / "frames.xyz"
    ase_files.write(str(path), frames, format="extxyz")
    return str(path)


@pytest.fixture(scope="module")
def model():
    return build_model(resolve(params_of(embedding_damping=0.0)))


def batch_of(path, size=6):
    dataset = load_ase(path, shuffle=False).apply(add_neighbors(RC)).apply(sparse_batch(size))
    batch = next(iter(dataset))
    return {k: tf.cast(v, tf.float64) if v.dtype == tf.float32 else v for k, v in batch.items()}


def energies(model, batch, coord):
    return model.predict({**batch, K.COORD: tf.constant(coord)}, forces=False, stress=False)["energy"].numpy()


@pytest.fixture(scope="module")
def pinet2_model():
    network = {"name": "PiNet2", "params": {**NETWORK["params"], "rank": 3}}
    return build_model(resolve({**params_of(embedding_damping=1.0), "network": network}))


@pytest.mark.parametrize("which", ["PiNet", "PiNet2, damped"])
def test_forces_on_qm_and_mm_atoms_are_minus_the_gradient(which, model, pinet2_model, frames_file):
    """Central differences of the energy match the forces on QM atoms and on MM atoms, in open and periodic
    frames, and the MM atoms feel forces (the QM charges' pull): PiNet with the bare kernel, PiNet2 (vector
    features) with MiMiC's damped one."""
    model = model if which == "PiNet" else pinet2_model
    batch = batch_of(frames_file)
    pred = model.predict(batch, stress=False)
    forces = pred["forces"].numpy()
    coord = batch[K.COORD].numpy()
    qm, structure = batch[K.QM].numpy(), batch[K.IND_1].numpy()[:, 0]
    atoms = [int(np.flatnonzero(qm & (structure == s))[0]) for s in (0, 2)]
    atoms += [int(np.flatnonzero(~qm & (structure == s))[1]) for s in (0, 2)]
    h = 1e-5
    for atom in atoms:
        for axis in range(3):
            shifted = []
            for sign in (1, -1):
                moved = coord.copy()
                moved[atom, axis] += sign * h
                shifted.append(energies(model, batch, moved)[structure[atom]])
            assert -(shifted[0] - shifted[1]) / (2 * h) == pytest.approx(forces[atom, axis], abs=1e-7, rel=1e-6)
    assert np.abs(forces[~qm]).max() > 1e-3


def test_energy_is_invariant_under_rotation_translation_and_lattice_shifts(model, frames_file):
    """Rotating and translating all atoms of the frames together leaves the energies and rotates the forces; in
    the periodic frame, an MM atom moved by a lattice vector leaves the energy (minimum image)."""
    batch = batch_of(frames_file)
    pred = model.predict(batch, stress=False)
    rotation = np.linalg.qr(np.random.default_rng(1).normal(size=(3, 3)))[0]
    coord = batch[K.COORD].numpy()
    moved = coord @ rotation.T + np.array([1.3, -2.1, 0.7])
    periodic = batch[K.PBC].numpy().any(axis=1)
    cell = batch[K.CELL].numpy().copy()
    cell[periodic] = cell[periodic] @ rotation.T
    turned = model.predict({**batch, K.COORD: tf.constant(moved), K.CELL: tf.constant(cell)}, stress=False)
    np.testing.assert_allclose(turned["energy"].numpy(), pred["energy"].numpy(), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(turned["forces"].numpy(), pred["forces"].numpy() @ rotation.T, atol=1e-9)
    structure, qm = batch[K.IND_1].numpy()[:, 0], batch[K.QM].numpy()
    mm_atom = int(np.flatnonzero(~qm & (structure == 2))[0])
    shifted = coord.copy()
    shifted[mm_atom] += batch[K.CELL].numpy()[2, 1] * 1.0 + batch[K.CELL].numpy()[2, 0] * -1.0
    assert energies(model, batch, shifted)[2] == pytest.approx(pred["energy"].numpy()[2], abs=1e-10)
    assert np.abs(pred["forces"].numpy()).max() > 0


def test_charges_sum_to_the_region_charge(model, frames_file):
    """The QM atoms' charges sum to each region's charge (0 or −1 e); the MM atoms keep theirs."""
    batch = batch_of(frames_file)
    charges = model.predict(batch, forces=False, stress=False)["charges"].numpy()
    qm, structure = batch[K.QM].numpy(), batch[K.IND_1].numpy()[:, 0]
    for s, total in enumerate(batch[K.QM_CHARGE].numpy()):
        assert charges[qm & (structure == s)].sum() == pytest.approx(total, abs=1e-12)
        assert np.ptp(charges[qm & (structure == s)]) > 1e-4  # not spread evenly: the network's
    np.testing.assert_array_equal(charges[~qm], batch[K.MM_CHARGE].numpy()[~qm])


def test_force_loss_counts_the_qm_atoms(model, frames_file):
    """The force loss sums the errors of every atom over the QM atoms' components (the MM atoms' small pulls do
    not dilute the QM atoms' share); F_QM measures the QM atoms alone."""
    batch = batch_of(frames_file)
    pred = model.predict(batch, stress=False)
    qm = batch[K.QM].numpy()
    assert model.loss_counts(batch)["forces"].numpy() == 3 * qm.sum()
    err = pred["forces"].numpy() - batch[K.F_DATA].numpy()
    assert model.loss_sums(batch, pred)["forces"].numpy() == pytest.approx(np.sum(err ** 2), rel=1e-12)
    abs_sum, sq_sum, count = (x.numpy() for x in model.error_sums(batch, pred)["F_QM"])
    assert count == 3 * qm.sum() and sq_sum == pytest.approx(np.sum(err[qm] ** 2), rel=1e-12)


def test_mm_atoms_act_through_their_charges_alone(model, frames_file):
    """The network sees the QM atoms only: an MM sodium (no element of the network) moved next to the region
    changes nothing once the MM charges are zero, and then the energy is the network's energy of the region
    alone; the Coulomb term is k_e Σ q_QM Q_MM / r."""
    batch = batch_of(frames_file)
    neutral = {**batch, K.MM_CHARGE: tf.zeros_like(batch[K.MM_CHARGE])}
    coord = batch[K.COORD].numpy()
    qm, structure, elems = batch[K.QM].numpy(), batch[K.IND_1].numpy()[:, 0], batch[K.ELEMS].numpy()
    sodium = int(np.flatnonzero(~qm & (elems == 11))[0])
    s = structure[sodium]
    moved = coord.copy()
    moved[sodium] = coord[np.flatnonzero(qm & (structure == s))[0]] + [1.5, 0, 0]
    before = energies(model, neutral, coord)
    after = energies(model, neutral, moved)
    assert after[s] == pytest.approx(before[s], abs=1e-12)
    region = load_ase(frames_file, shuffle=False).skip(int(s)).take(1)
    from pinn.io import qm_region
    alone = next(iter(region.apply(qm_region()).apply(add_neighbors(RC)).apply(sparse_batch(1))))
    alone = {k: tf.cast(v, tf.float64) if v.dtype == tf.float32 else v for k, v in alone.items()}
    assert model.predict(alone, forces=False, stress=False)["energy"].numpy()[0] == pytest.approx(before[s], abs=1e-10)
    charges = model.predict(batch, forces=False, stress=False)["charges"].numpy()
    mm = ~qm & (structure == s)
    r = np.linalg.norm(coord[mm][None] - coord[qm & (structure == s)][:, None], axis=2)
    coulomb = COULOMB * np.sum(charges[qm & (structure == s)][:, None] * charges[mm][None] / r)
    assert energies(model, batch, coord)[s] - before[s] == pytest.approx(coulomb, abs=1e-9)


def test_damped_kernel_is_mimics():
    """(r_d⁴ − r⁴)/(r_d⁵ − r⁵): 1/r_d at 0, finite and continuous at r_d (4/(5 r_d)), → 1/r far away."""
    r_d = 1.2
    r = tf.constant([0.0, 0.5, 1.2, 1.2 + 1e-7, 2.0, 30.0], tf.float64)
    v = coulomb_kernel(r, r_d).numpy()
    x = np.array([0.5, 2.0])
    np.testing.assert_allclose(v[[1, 4]], (r_d ** 4 - x ** 4) / (r_d ** 5 - x ** 5), rtol=1e-12)
    assert v[0] == pytest.approx(1 / r_d) and v[2] == pytest.approx(4 / (5 * r_d), rel=1e-12)
    assert v[3] == pytest.approx(v[2], rel=1e-6) and v[5] == pytest.approx(1 / 30.0, rel=0.05)
    np.testing.assert_allclose(coulomb_kernel(r[1:], 0.0).numpy(), 1 / r.numpy()[1:])


@pytest.mark.parametrize("change, key", [
    ({"network": {**NETWORK, "params": {**NETWORK["params"], "out_units": 1}}}, "network.params.out_units"),
    ({"network": {"name": "LJ", "params": {"rc": 3.0}}}, "network.params.out_units"),
    ({"use_stress": True}, "model.params.use_stress"),
    ({"jit": True}, "model.params.jit"),
    ({"engine": "numba"}, "model.params.engine"),
    ({"embedding": "mechanical", "embedding_damping": 1.0}, "model.params.embedding_damping"),
    ({"embedding": "polarisable"}, "model.params.embedding"),
])
def test_settings_it_cannot_follow_are_refused(change, key, tmp_path):
    params = params_of()
    if "network" in change:
        params["network"] = change["network"]
    else:
        params["model"]["params"].update(change)
    params["model_dir"] = str(tmp_path / "model")
    with pytest.raises(ParamsError, match=key.replace(".", r"\.")):
        from pinn.models import get_model
        get_model(params)


def test_the_kind_asks_the_network_for_what_it_needs(caplog):
    """`embedding: electrostatic` without `out_units` gives the network its two outputs per atom (said in the log),
    and the registry builds the kind's model class, which answers what it can do."""
    import logging

    from pinn.physics.embedded_potential import EmbeddedPotentialModel
    from pinn.physics.embedding_kinds import ELECTROSTATIC
    network = {"name": "PiNet", "params": {k: v for k, v in NETWORK["params"].items() if k != "out_units"}}
    with caplog.at_level(logging.INFO, logger="pinn"):
        params = resolve({**params_of(), "network": network})
    assert params["network"]["params"]["out_units"] == 2
    assert "network.params.out_units: 2, as model.params.embedding 'electrostatic' needs" in caplog.text
    model = build_model(params)
    assert type(model) is EmbeddedPotentialModel and model.embedding is ELECTROSTATIC
    assert not model.jit_compatible and not model.embedding.gives_stress and "charges" in model.embedding.gives


@pytest.fixture(scope="module")
def trained(frames_file, tmp_path_factory):
    """A model directory trained by `pinn train` on the extended XYZ file (4 steps), and its train.log."""
    from pinn.cli import main
    workdir = tmp_path_factory.mktemp("trained")
    run = {"model_dir": str(workdir / "model"), "network": NETWORK, "precision": "float64",
           "model": {"name": "potential_model", "params": {"embedding": "electrostatic", "use_force": True,
                                                           "fit_e_dress": True, "fit_e_dress_batches": 1,
                                                           "log_every_n_steps": 2, "eval_every_n_steps": 4}},
           "data": {"train": frames_file, "split": {"train": 4, "eval": 2}, "batch_size": 2},
           "train": {"max_steps": 4}}
    (workdir / "run.yml").write_text(yaml.safe_dump(run))
    assert main(["train", str(workdir / "run.yml")]) == 0
    return str(workdir / "model"), (workdir / "model" / "train.log").read_text()


def test_pinn_train_and_eval_take_qmmm_extxyz(trained, frames_file, capsys):
    """The user's path: a run file on the extended XYZ file trains an electrostatic model (its log says why the
    TensorFlow engine, and cuts no frame to its QM region), `pinn eval` evaluates energies and the forces on
    every atom and on the QM atoms."""
    from pinn.cli import main
    model_dir, log = trained
    assert "since model.params.embedding 'electrostatic'" in log
    assert "sees each frame's QM region alone" not in log
    capsys.readouterr()
    assert main(["eval", model_dir, frames_file, "--json"]) == 0
    metrics = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert np.isfinite(metrics["F_RMSE"]) and np.isfinite(metrics["E_RMSE"]) and np.isfinite(metrics["F_QM_RMSE"])
    assert main(["eval", model_dir, frames_file, "--per-atom", "never.xyz"]) == 1
    assert "has embedding 'electrostatic'; its energy includes the QM region's Coulomb energy" in capsys.readouterr().err
    assert not os.path.exists("never.xyz")


@pytest.mark.parametrize("engine", ["numba", "tensorflow"])
def test_get_calc_on_qmmm_atoms(trained, frames_file, engine):
    """get_calc of the model directory on a QM/MM frame read with ASE, on either engine: the batch's energy,
    forces on every atom and charges; its forces are −∇E; no stress; a sodium in the MM part is no element the
    model must know.  The numba engine (the default) needs no TensorFlow call."""
    import pinn
    from pinn.inference.handle import load_for_inference
    model_dir, _ = trained
    atoms = ase_files.read(frames_file, index=1)
    assert 11 in atoms.numbers[~atoms.arrays["qm"]]
    calc = pinn.get_calc(model_dir, engine=engine)
    assert calc.engine == engine and "stress" not in calc.implemented_properties
    assert "energies" not in calc.implemented_properties  # the Coulomb energy is the region's, not per atom
    if engine == "numba":
        assert pinn.get_calc(model_dir).engine == "numba"  # engine auto
    atoms.calc = calc
    energy, forces, charges = atoms.get_potential_energy(), atoms.get_forces(), atoms.get_charges()
    handle = load_for_inference(model_dir)
    frame = next(iter(load_ase(frames_file, shuffle=False).skip(1).apply(add_neighbors(RC)).apply(sparse_batch(1))))
    with handle.averaged_weights():
        pred = handle.model.predict({k: tf.cast(v, tf.float64) if v.dtype == tf.float32 else v
                                     for k, v in frame.items()}, stress=False)
    # float32 positions in the dataset, float64 in the Atoms
    assert energy == pytest.approx(float(pred["energy"].numpy()[0]), abs=1e-5)
    np.testing.assert_allclose(forces, pred["forces"].numpy(), atol=1e-5)
    np.testing.assert_allclose(charges, pred["charges"].numpy(), atol=1e-6)
    assert charges[atoms.arrays["qm"]].sum() == pytest.approx(atoms.info.get("charge", 0), abs=1e-9)
    h = 1e-4
    for atom in (0, int(np.flatnonzero(~atoms.arrays["qm"])[2])):  # a QM and an MM atom
        shifted = []
        for sign in (1, -1):
            moved = atoms.copy()
            moved.calc = calc
            moved.positions[atom, 1] += sign * h
            shifted.append(moved.get_potential_energy())
        assert -(shifted[0] - shifted[1]) / (2 * h) == pytest.approx(forces[atom, 1], abs=1e-6)


def test_model_file_committee_and_devi_on_qmmm_frames(trained, frames_file, tmp_path):
    """`pinn export` writes the electrostatic model to a file (it runs on the numba engine) that predicts what its
    directory does; a committee of two copies gives their energy and forces on every atom and a deviation per
    atom, and `pinn devi` writes one line per QM/MM frame of the file."""
    import shutil

    import pinn
    from pinn.cli import main
    model_dir, _ = trained
    assert main(["export", model_dir, "-o", str(tmp_path / "es.pinn")]) == 0
    atoms = ase_files.read(frames_file, index=3)
    direct, from_file = atoms.copy(), atoms.copy()
    direct.calc, from_file.calc = pinn.get_calc(model_dir), pinn.get_calc(str(tmp_path / "es.pinn"))
    assert from_file.calc.engine == "numba"  # the file's engine arrays: no TensorFlow
    import subprocess
    import sys
    script = ("import sys, pinn; from pinn.io import ase_files; a = ase_files.read(sys.argv[2], index=3); "
              "a.calc = pinn.get_calc(sys.argv[1]); print(a.get_potential_energy()); "
              "assert 'tensorflow' not in sys.modules, 'TensorFlow imported'")
    run = subprocess.run([sys.executable, "-c", script, str(tmp_path / "es.pinn"), frames_file], capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    assert float(run.stdout.split()[-1]) == pytest.approx(direct.get_potential_energy(), abs=1e-9)
    assert from_file.get_potential_energy() == pytest.approx(direct.get_potential_energy(), abs=1e-9)
    np.testing.assert_allclose(from_file.get_forces(), direct.get_forces(), atol=1e-9)
    for k in range(2):  # a committee of two copies: the members agree
        shutil.copytree(model_dir, tmp_path / "committee" / f"member-{k}", ignore=shutil.ignore_patterns(".pinn.lock"))
    atoms.calc = members = pinn.get_calc(str(tmp_path / "committee"))
    assert atoms.get_potential_energy() == pytest.approx(direct.get_potential_energy(), abs=1e-9)
    np.testing.assert_allclose(atoms.get_forces(), direct.get_forces(), atol=1e-9)
    deviation = members.get_property("forces_deviation", atoms)
    assert deviation.shape == (len(atoms),) and np.abs(deviation).max() < 1e-9
    from ase.calculators.calculator import PropertyNotImplementedError
    with pytest.raises(PropertyNotImplementedError, match="gives no energies"):
        atoms.get_potential_energies()
    assert main(["devi", str(tmp_path / "committee"), frames_file, "-o", str(tmp_path / "devi.out")]) == 0
    rows = np.loadtxt(tmp_path / "devi.out")
    assert rows.shape == (6, 8) and np.all(np.isfinite(rows))


def test_an_embedded_committee_runs_in_one_call_and_gives_each_members_own_prediction(trained, frames_file,
                                                                                          tmp_path):
    """A committee of electrostatic models on the numba engine shares one MM field and one neighbor search of the
    QM atoms, and its members (one layout) run in one kernel call: each member's energy, forces on every atom
    and charges equal that member's own calculator's, on a NoCutoff-like frame and on the periodic one; the
    calculator's energy and forces are their mean."""
    import pinn
    from pinn.models import get_model
    model_dir, _ = trained
    members = [model_dir]
    for seed in (11, 12):  # other weights of the same layout: the same params, other seeds, untrained
        params = {**params_of(embedding_damping=0.0), "model_dir": str(tmp_path / f"m{seed}"), "seed": seed}
        other = get_model(params)
        other.save()
        other.close()
        members.append(params["model_dir"])
    calc = pinn.get_calc(members)
    assert calc.engine == "numba" and calc._fast_embedded is not None and calc._fast_embedded.committee.stacked
    for index in (1, 2):  # frame 2 is periodic
        atoms = ase_files.read(frames_file, index=index)
        atoms.calc = calc
        energy, forces = atoms.get_potential_energy(), atoms.get_forces()
        assert calc.committee_evaluations == index  # one committee evaluation each
        mine = calc.results
        for k, member in enumerate(members):
            alone = atoms.copy()
            alone.calc = pinn.get_calc(member)
            assert mine["member_energies"][k] == pytest.approx(alone.get_potential_energy(), abs=1e-9)
            np.testing.assert_allclose(mine["member_forces"][k], alone.get_forces(), atol=1e-9)
        assert energy == pytest.approx(mine["member_energies"].mean(), abs=1e-12)
        np.testing.assert_allclose(forces, mine["member_forces"].mean(axis=0), atol=1e-12)
        assert mine["max_forces_deviation"] > 1e-3  # members of other weights disagree


def test_a_mechanical_model_with_two_outputs_runs_on_both_engines(tmp_path):
    """A mechanical potential whose network has two outputs per atom (the second unused) gives the same energy and
    forces on the numba engine as on TensorFlow: the numba engine's second output enters nothing unseeded."""
    import pinn
    from pinn.models import get_model
    params = params_of(embedding="mechanical")
    params["model_dir"] = str(tmp_path / "model")
    model = get_model(params)
    atoms = qmmm_frame(2)[:6]
    del atoms.arrays["qm"]
    results = {}
    for engine in ("numba", "tensorflow"):
        atoms.calc = pinn.get_calc(model, engine=engine)
        results[engine] = (atoms.get_potential_energy(), atoms.get_forces())
    assert results["numba"][0] == pytest.approx(results["tensorflow"][0], abs=1e-10)
    np.testing.assert_allclose(results["numba"][1], results["tensorflow"][1], atol=1e-10)


def test_pinet2_with_the_electrostatic_embedding_on_both_engines(tmp_path):
    """PiNet2 (rank 3, damped kernel) with the electrostatic embedding: the numba engine gives TensorFlow's
    energy, forces on QM and MM atoms, and charges."""
    import pinn
    from pinn.models import get_model
    network = {"name": "PiNet2", "params": {**NETWORK["params"], "rank": 3, "weighted": True}}
    params = {**params_of(embedding_damping=1.0), "network": network, "model_dir": str(tmp_path / "model")}
    model = get_model(params)
    rng = np.random.RandomState(3)
    for v in model.model.trainable_variables:  # away from the initial weights (zero biases)
        v.assign(v.numpy() + 0.05 * rng.randn(*v.shape))
    atoms = qmmm_frame(1)
    results = {}
    for engine in ("numba", "tensorflow"):
        atoms.calc = pinn.get_calc(model, engine=engine)
        results[engine] = (atoms.get_potential_energy(), atoms.get_forces(), atoms.get_charges())
    assert results["numba"][0] == pytest.approx(results["tensorflow"][0], abs=1e-9)
    assert np.abs(results["numba"][1][~atoms.arrays["qm"]]).max() > 1e-6  # the MM atoms feel the QM charges
    np.testing.assert_allclose(results["numba"][1], results["tensorflow"][1], atol=1e-9)
    np.testing.assert_allclose(results["numba"][2], results["tensorflow"][2], atol=1e-9)


def test_d3_dispersion_is_refused_for_an_embedding(tmp_path):
    """get_calc(..., dispersion=): D3 of the whole QM/MM frame is not the QM region's, so a model with the
    electrostatic embedding is refused by name (not summed with D3 of every atom)."""
    pytest.importorskip("dftd3.ase", reason="dftd3 (pip install 'pinn[d3]') is not installed")
    import pinn
    from pinn.models import get_model
    model = get_model({**params_of(embedding_damping=0.0), "model_dir": str(tmp_path / "model")})
    with pytest.raises(ValueError, match="D3 dispersion with a QM/MM model \\(embedding 'electrostatic'\\)"):
        pinn.get_calc(model, dispersion="d3bj", functional="PBE")
