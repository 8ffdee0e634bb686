"""D3 dispersion beside a model (`get_calc(..., dispersion=, functional=)`) and taken out of labels
(`pinn convert --subtract-d3`), with the `dftd3` package from PyPI.

The sum is checked against its parts (the model alone, dftd3's own ASE calculator alone) on both
engines, its forces and stress against finite differences of its energy, a committee's deviations
against the committee's; the round trip labels frames with model + D3, takes D3 out with `pinn
convert` and finds the model's own predictions in the written TFRecords.
"""
import subprocess
import sys

import numpy as np
import pytest
from ase.build import molecule

from pinn import get_calc
from pinn.cli import main

dftd3_ase = pytest.importorskip("dftd3.ase", reason="dftd3 (pip install 'pinn[d3]') is not installed")


def _ethanol(periodic, seed=3):
    atoms = molecule("CH3CH2OH")
    atoms.rattle(0.05, seed=seed)
    if periodic:  # a box shorter than two cutoffs: the atoms meet their images
        atoms.cell = [7.0, 7.5, 8.0]
        atoms.pbc = True
        atoms.center()
    return atoms


def _d3_alone(atoms, functional="PBE", damping="d3bj"):
    atoms = atoms.copy()
    atoms.calc = dftd3_ase.DFTD3(method=functional, damping=damping)
    stress = atoms.get_stress() if atoms.pbc.any() else None
    return atoms.get_potential_energy(), atoms.get_forces(), stress


@pytest.mark.parametrize("engine", ["numba", "tensorflow"])
@pytest.mark.parametrize("periodic", [False, True])
def test_the_sum_is_the_model_plus_dftd3(ethanol_model, engine, periodic):
    atoms = _ethanol(periodic)
    alone = atoms.copy()
    alone.calc = get_calc(ethanol_model, engine=engine)
    atoms.calc = calc = get_calc(ethanol_model, engine=engine, dispersion="d3bj", functional="PBE")
    assert calc.engine == engine
    e_d3, f_d3, s_d3 = _d3_alone(atoms)
    assert e_d3 < -0.05 and np.abs(f_d3).max() > 1e-4  # a real dispersion term, not zero
    assert atoms.get_potential_energy() == pytest.approx(alone.get_potential_energy() + e_d3, abs=1e-10)
    np.testing.assert_allclose(atoms.get_forces(), alone.get_forces() + f_d3, rtol=0, atol=1e-10)
    assert calc.results["energy_contributions"][1] == pytest.approx(e_d3, abs=1e-12)
    energies = atoms.get_potential_energies()  # per atom: the model's plus D3's pairwise shares
    assert energies.sum() == pytest.approx(atoms.get_potential_energy(), abs=1e-9)
    d3_energies = energies - alone.get_potential_energies()
    assert d3_energies.sum() == pytest.approx(e_d3, abs=1e-10) and np.all(d3_energies < 0)
    if periodic:
        np.testing.assert_allclose(atoms.get_stress(), alone.get_stress() + s_d3, rtol=0, atol=1e-10)


def test_forces_and_stress_of_the_sum_are_its_energy_derivatives(ethanol_model):
    """Central differences of the summed energy (float64 model): forces, and the stress as the energy's
    derivative with respect to a strain of cell and positions over the volume."""
    atoms = _ethanol(True)
    atoms.calc = get_calc(ethanol_model, dispersion="d3bj", functional="PBE", skin=0.0)
    forces, stress = atoms.get_forces(), atoms.get_stress(voigt=False)
    h = 1e-5
    for i, k in ((0, 0), (2, 1), (8, 2)):
        moved = []
        for sign in (1, -1):
            probe = atoms.copy()
            probe.calc = atoms.calc
            probe.positions[i, k] += sign * h
            moved.append(probe.get_potential_energy())
        assert -(moved[0] - moved[1]) / (2 * h) == pytest.approx(forces[i, k], abs=1e-6)
    for a, b in ((0, 0), (1, 2), (2, 2)):
        strained = []
        for sign in (1, -1):
            probe = atoms.copy()
            probe.calc = atoms.calc
            strain = np.eye(3)
            strain[a, b] += sign * h
            probe.set_cell(atoms.cell.array @ strain, scale_atoms=True)
            strained.append(probe.get_potential_energy())
        assert (strained[0] - strained[1]) / (2 * h) / atoms.get_volume() == pytest.approx(stress[a, b], abs=1e-7)


def test_a_committee_keeps_its_deviations_and_each_member_gets_d3(committee_dir, alloy_xyz):
    from ase.io import read
    members = [str(committee_dir / f"member-{k}") for k in range(3)]
    atoms = read(alloy_xyz, index=5)
    plain = atoms.copy()
    plain.calc = committee = get_calc(members)
    atoms.calc = calc = get_calc(members, dispersion="d3bj", functional="PBE")
    e_d3, f_d3, s_d3 = _d3_alone(atoms)
    assert calc.get_property("max_forces_deviation", atoms) == committee.get_property("max_forces_deviation", plain)
    np.testing.assert_array_equal(calc.get_property("forces_deviation", atoms),
                                  committee.get_property("forces_deviation", plain))
    np.testing.assert_allclose(calc.get_property("member_energies", atoms),
                               committee.get_property("member_energies", plain) + e_d3, rtol=0, atol=1e-10)
    np.testing.assert_allclose(calc.get_property("member_forces", atoms),
                               committee.get_property("member_forces", plain) + f_d3, rtol=0, atol=1e-10)
    np.testing.assert_allclose(calc.get_property("member_stresses", atoms),
                               committee.get_property("member_stresses", plain) + s_d3, rtol=0, atol=1e-10)
    assert atoms.get_potential_energy() == pytest.approx(plain.get_potential_energy() + e_d3, abs=1e-9)


def test_pinn_md_runs_the_model_with_d3(ethanol_model, tmp_path):
    """`pinn md MODEL X.xyz --dispersion d3bj --functional PBE`: the log's first potential energy is the sum's."""
    from ase.io import write
    start = _ethanol(False)
    write(tmp_path / "start.xyz", start)
    log = tmp_path / "md.log"
    assert main(["md", ethanol_model, str(tmp_path / "start.xyz"), "--steps", "3", "--log", str(log),
                 "--dispersion", "d3bj", "--functional", "PBE"]) == 0
    rows = np.loadtxt(log, comments="#", ndmin=2)
    start.calc = get_calc(ethanol_model, dispersion="d3bj", functional="PBE")
    assert rows[:, 0].tolist() == [0, 1, 2, 3]
    assert rows[0, 3] == pytest.approx(start.get_potential_energy(), abs=1e-5)


@pytest.mark.parametrize("periodic", [False, True])
def test_convert_subtract_d3_gives_back_the_model_alone(ethanol_model, tmp_path, periodic, capsys):
    """Labels of model + D3 (energy, forces, and stress when periodic) in an extxyz file; `pinn convert
    --subtract-d3 PBE` writes the model's own predictions (float32 labels: to their rounding)."""
    from ase.calculators.singlepoint import SinglePointCalculator
    from ase.io import write

    from pinn.io import load_tfrecord
    summed, model_alone = get_calc(ethanol_model, dispersion="d3bj", functional="PBE"), get_calc(ethanol_model)
    frames, expected = [], []
    for seed in range(4):
        atoms = _ethanol(periodic, seed=seed)
        atoms.calc = summed
        results = {"energy": atoms.get_potential_energy(), "forces": atoms.get_forces()}
        if periodic:
            results["stress"] = atoms.get_stress()
        labelled = atoms.copy()
        labelled.calc = SinglePointCalculator(labelled, **results)
        frames.append(labelled)
        atoms.calc = model_alone
        expected.append((atoms.get_potential_energy(), atoms.get_forces(),
                         atoms.get_stress(voigt=False) if periodic else None))
    write(tmp_path / "labels.xyz", frames)
    out = tmp_path / "without-d3"
    assert main(["convert", str(tmp_path / "labels.xyz"), "-o", str(out), "--no-shuffle", "--subtract-d3", "PBE",
                 "--precision", "float64"]) == 0
    written = list(load_tfrecord(f"{out}.tfr"))
    assert len(written) == 4
    for structure, (energy, forces, stress) in zip(written, expected):
        assert float(structure["e_data"]) == pytest.approx(energy, abs=1e-4)  # float32 of ~ -300 eV
        np.testing.assert_allclose(structure["f_data"].numpy(), forces, rtol=0, atol=1e-5)
        if periodic:
            np.testing.assert_allclose(structure["s_data"].numpy(), stress, rtol=0, atol=1e-6)
        else:
            assert "s_data" not in structure


def test_bad_d3_arguments_are_refused_by_name(ethanol_model, tmp_path, capsys):
    with pytest.raises(ValueError, match="needs functional="):
        get_calc(ethanol_model, dispersion="d3bj")
    with pytest.raises(ValueError, match="give dispersion="):
        get_calc(ethanol_model, functional="PBE")
    with pytest.raises(ValueError, match="dispersion must be one of d3bj"):
        get_calc(ethanol_model, dispersion="d4", functional="PBE")
    with pytest.raises(ValueError, match="no parameters for functional 'NOT-A-FUNCTIONAL'"):
        get_calc(ethanol_model, dispersion="d3bj", functional="NOT-A-FUNCTIONAL")
    data = tmp_path / "x.xyz"
    from ase.io import write
    atoms = _ethanol(False)
    write(data, atoms)
    assert main(["convert", str(data), "-o", str(tmp_path / "x"), "--subtract-d3", "NOPE"]) == 1
    assert "no parameters for functional 'NOPE'" in capsys.readouterr().err
    assert main(["convert", str(data), "-o", str(tmp_path / "x"), "-f", "qm9", "--subtract-d3", "PBE"]) == 1
    assert "not in eV" in capsys.readouterr().err
    assert main(["convert", str(data), "-o", str(tmp_path / "x"), "--d3-damping", "d3zero"]) == 1
    assert "goes with --subtract-d3" in capsys.readouterr().err
    assert main(["convert", str(data), "-o", str(tmp_path / "x"), "--subtract-d3", "PBE"]) == 1  # no labels
    assert "no energy, forces or stress labels" in capsys.readouterr().err


def test_elements_without_d3_parameters_are_refused_by_name(ethanol_model, tmp_path, capsys):
    """dftd3 covers H to Lr (Z 1-103) and above gives 0 (Z 104), NaN (106) or takes the process down (118): a structure
    with such an element is refused by the D3 term, and a model that knows one before it loads (its params.yml
    alone: no checkpoint is read)."""
    import shutil

    import yaml
    from ase import Atoms

    from pinn.dispersion import D3Term
    for z, name in ((104, "Rf"), (106, "Sg"), (118, "Og")):
        atoms = Atoms(numbers=[z, 6], positions=[[0, 0, 0], [0, 0, 2.5]])
        atoms.calc = D3Term("d3bj", "PBE")
        with pytest.raises(ValueError, match=rf"element\(s\) {name} \({z}\), which dftd3 has no parameters for"):
            atoms.get_potential_energy()
    model = tmp_path / "heavy"
    model.mkdir()
    params = yaml.safe_load(open(f"{ethanol_model}/params.yml"))
    params["network"]["params"]["atom_types"] = [1, 6, 8, 118]
    (model / "params.yml").write_text(yaml.safe_dump(params))  # no checkpoint: loading would fail otherwise
    with pytest.raises(ValueError, match=rf"^D3 dispersion: {model} \(its atom_types\) hold\(s\) element\(s\) Og"):
        get_calc(str(model), dispersion="d3bj", functional="PBE")
    shutil.copytree(model, tmp_path / "members" / "member-0")
    shutil.copytree(ethanol_model, tmp_path / "members" / "member-1", ignore=shutil.ignore_patterns(".pinn.lock"))
    capsys.readouterr()
    assert main(["md", str(tmp_path / "members"), str(_written(tmp_path, _ethanol(False))), "--steps", "1",
                 "--dispersion", "d3bj", "--functional", "PBE", "--log", str(tmp_path / "md.log")]) == 1
    err = capsys.readouterr().err
    assert "member-0 (its atom_types) hold(s) element(s) Og (118)" in err and "Traceback" not in err


def _written(directory, atoms):
    from ase.io import write
    path = directory / "start.xyz"
    write(path, atoms)
    return path


def test_the_sum_follows_the_qmmm_inputs_as_the_model_does(ethanol_model):
    """The D3 sum's record of the last structure counts the region's charge and the QM mask, as the model's
    calculator does (ASE's own check ignores both)."""
    atoms = _ethanol(False)
    atoms.calc = calc = get_calc(ethanol_model, dispersion="d3bj", functional="PBE")
    atoms.get_potential_energy()
    changed = atoms.copy()
    changed.info["charge"] = -1
    assert calc.check_state(changed) == ["charge"]
    changed = atoms.copy()
    changed.arrays["qm"] = np.ones(len(atoms), bool)
    assert calc.check_state(changed) == ["qm"]
    assert calc.check_state(atoms.copy()) == []


def test_without_dftd3_the_error_says_how_to_install_it(ethanol_model):
    """In a process where the dftd3 package cannot be imported, get_calc(dispersion=) says what to install."""
    code = ("import sys; sys.modules['dftd3'] = None\n"
            "from pinn import get_calc\n"
            "try:\n"
            f"    get_calc({ethanol_model!r}, dispersion='d3bj', functional='PBE')\n"
            "except ImportError as error:\n"
            "    print('ImportError:', error)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "ImportError: D3 dispersion needs the dftd3 package" in done.stdout, done.stderr[-2000:]
    assert "pip install dftd3" in done.stdout
