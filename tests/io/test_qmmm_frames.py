"""QM/MM frames (docs/qmmm.md): the reference of real codes (PySCF's RHF in the TIP3P charges of OpenMM's water
MD, pinn.qmmm_reference) written to extxyz, read back by load_ase in pinn's convention, kept whole through
TFRecord caches, cut to the QM region for a model with mechanical embedding, and refused whole by such a
model; bad QM/MM frames named in one line."""
import logging
import re

import numpy as np
import pytest

pytest.importorskip("pyscf", reason="PySCF not installed (pip install 'pinn[qmmm]')")
pytest.importorskip("openmm", reason="OpenMM not installed (pip install 'pinn[qmmm]')")

from ase import Atoms  # noqa: E402
from ase.calculators.singlepoint import SinglePointCalculator  # noqa: E402

from pinn import keys as K  # noqa: E402
from pinn.io import ase_files, load_ase, qm_region  # noqa: E402
from pinn.io.errors import DataError  # noqa: E402
from pinn.qmmm_reference import embedded_qm, make_water_qmmm_dataset  # noqa: E402


@pytest.fixture(scope="module")
def qmmm_file(tmp_path_factory):
    """Four QM/MM frames of water (2 QM waters, MM waters within 6 Å) on disk, as a user writes them."""
    path = tmp_path_factory.mktemp("qmmm") / "water-qmmm.xyz"
    return str(make_water_qmmm_dataset(str(path), n_frames=4, seed=3, radius=6.0, equilibration_fs=200,
                                       stride_fs=100))


def test_reference_forces_are_the_gradient_of_its_energy(qmmm_file):
    """The reference's forces on a QM atom and on an MM atom equal central differences of its energy, and the
    MM charges change the QM atoms' forces (what a mechanical model misses)."""
    atoms = ase_files.read(qmmm_file, index=0)
    qm, charges = atoms.arrays["qm"], atoms.get_initial_charges()
    energy, forces = embedded_qm(atoms.numbers, atoms.positions, qm, charges)
    assert energy == pytest.approx(atoms.get_potential_energy(), abs=1e-6)
    mm_atom = int(np.flatnonzero(~qm)[0])
    h = 1e-3
    for atom in (1, mm_atom):
        shifted = []
        for sign in (1, -1):
            positions = atoms.positions.copy()
            positions[atom, 2] += sign * h
            shifted.append(embedded_qm(atoms.numbers, positions, qm, charges)[0])
        assert -(shifted[0] - shifted[1]) / (2 * h) == pytest.approx(forces[atom, 2], abs=2e-5)
    _, vacuum = embedded_qm(atoms.numbers, atoms.positions, qm, charges, embedded=False)
    assert np.abs(vacuum[~qm]).max() == 0
    assert np.linalg.norm(forces[qm] - vacuum[qm], axis=1).mean() > 0.05  # eV/Å


def test_load_ase_reads_the_convention_and_tfrecords_keep_it(qmmm_file, tmp_path):
    """From the file on disk: the QM mask, the MM charges (0 on the QM atoms), the region's charge, energy and
    forces on every atom; a TFRecord cache of the frames holds the same; qm_region keeps the QM atoms' rows."""
    from pinn.io import load_tfrecord, write_tfrecord
    frames = ase_files.read(qmmm_file, index=":")
    dataset = load_ase(qmmm_file, shuffle=False)
    assert dataset.element_spec[K.QM].dtype.name == "bool"
    write_tfrecord(str(tmp_path / "cache.tfr"), dataset)
    cached = load_tfrecord(str(tmp_path / "cache.tfr"))
    sizes = set()
    for atoms, structure, again, cut in zip(frames, dataset, cached, dataset.apply(qm_region())):
        qm = atoms.arrays["qm"]
        sizes.add(len(atoms))
        assert qm.sum() == 6 and (~qm).sum() % 3 == 0
        np.testing.assert_array_equal(structure[K.QM].numpy(), qm)
        np.testing.assert_allclose(structure[K.MM_CHARGE].numpy(), np.where(qm, 0, atoms.get_initial_charges()))
        assert structure[K.MM_CHARGE].numpy().sum() == pytest.approx(0, abs=1e-5)  # whole TIP3P waters
        assert float(structure[K.QM_CHARGE]) == 0
        assert float(structure[K.E_DATA]) == pytest.approx(atoms.get_potential_energy(), rel=1e-7)
        np.testing.assert_allclose(structure[K.F_DATA].numpy(), atoms.get_forces(), rtol=1e-6, atol=1e-6)
        for key, value in structure.items():
            np.testing.assert_array_equal(again[key].numpy(), value.numpy(), err_msg=key)
        assert not set(K.QMMM_KEYS) & set(cut)
        np.testing.assert_array_equal(cut[K.ELEMS].numpy(), atoms.numbers[qm])
        np.testing.assert_array_equal(cut[K.F_DATA].numpy(), structure[K.F_DATA].numpy()[qm])
        assert float(cut[K.E_DATA]) == float(structure[K.E_DATA])
    assert len(sizes) > 1  # frames of different sizes


def _frame(**arrays):
    atoms = Atoms("OH2OH2", positions=np.arange(18.0).reshape(6, 3) * 0.7)
    for name, value in arrays.items():
        atoms.new_array(name, np.asarray(value))
    atoms.calc = SinglePointCalculator(atoms, energy=-1.0, forces=np.zeros((6, 3)))
    return atoms


@pytest.mark.parametrize("case, message", [
    ("no charges", "frame 0: 3 MM atom(s) (qm False) but no point charges: give the MM charges (e) as the "
                   "frame's initial_charges"),
    ("no QM atom", "frame 0: its 'qm' array marks no atom as QM"),
    ("charge text", "frame 0: info['charge'] (the QM region's total charge) is 'minus one', not a number"),
    ("qm of ints", "frame 0: the per-atom array 'qm' must be one bool (or 0/1) per atom, got dtype int"),
])
def test_bad_qmmm_frames_are_named(tmp_path, case, message):
    atoms = _frame(qm=[True, True, True, False, False, False])
    if case == "no QM atom":
        atoms.arrays["qm"][:] = False
        atoms.set_initial_charges([0, 0, 0, -0.8, 0.4, 0.4])
    elif case == "charge text":
        atoms.set_initial_charges([0, 0, 0, -0.8, 0.4, 0.4])
        atoms.info["charge"] = "minus one"
    elif case == "qm of ints":
        atoms.arrays["qm"] = np.array([1, 1, 2, 0, 0, 0])
    path = tmp_path / "bad.xyz"
    ase_files.write(str(path), [atoms], format="extxyz")
    with pytest.raises(DataError, match="^" + re.escape(f"{path}, {message}")):
        load_ase(str(path))


def test_a_mechanical_model_takes_the_qm_region_and_refuses_whole_frames(qmmm_file, tmp_path):
    """`pinn train` on the QM/MM file trains on the QM regions (said in the log) and `pinn eval` evaluates them;
    the same frames given whole to a model through the API are refused, naming qm_region."""
    import yaml
    from pinn.cli import main
    from pinn.io import add_neighbors, sparse_batch
    from pinn.models import potential_model
    network = {"name": "PiNet", "params": {"atom_types": [1, 8], "rc": 4.0, "depth": 1, "pp_nodes": [4],
                                           "pi_nodes": [4], "ii_nodes": [4], "out_nodes": [4]}}
    run = {"model_dir": str(tmp_path / "model"), "network": network,
           "model": {"name": "potential_model", "params": {"progress_bar": "off", "jit": False,
                                                           "engine": "tensorflow"}},
           "data": {"train": qmmm_file, "split": {"train": 3, "eval": 1}, "batch_size": 2},
           "train": {"max_steps": 2}}
    (tmp_path / "run.yml").write_text(yaml.safe_dump(run))
    said = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())
    logging.getLogger("pinn").addHandler(handler)
    try:
        assert main(["train", str(tmp_path / "run.yml")]) == 0
        assert main(["eval", str(tmp_path / "model"), qmmm_file]) == 0
    finally:
        logging.getLogger("pinn").removeHandler(handler)
    said = [line for line in said if "QM/MM frames" in line]
    assert len(said) == 3 and all("sees each frame's QM region alone" in line for line in said), said
    from pinn import get_calc
    frame = ase_files.read(qmmm_file, index=0)
    frame.calc = get_calc(str(tmp_path / "model"))
    with pytest.raises(ValueError, match=r"a QM/MM frame .* atoms\[atoms\.arrays\['qm'\]\]"):
        frame.get_potential_energy()
    region = frame[frame.arrays["qm"]]
    region.calc = get_calc(str(tmp_path / "model"))
    assert np.isfinite(region.get_forces()).all() and len(region) == 6
    model = potential_model({"model_dir": str(tmp_path / "api"), "network": network,
                             "model": {"name": "potential_model", "params": {"jit": False}}})
    whole = load_ase(qmmm_file).apply(add_neighbors(4.0)).repeat()
    with pytest.raises(ValueError, match=r"the training batches are QM/MM frames .*pinn\.io\.qm_region\(\)"):
        model.train(input_fn=lambda: whole.apply(sparse_batch(2)), max_steps=1)
