"""QM/MM frames from MiMiC runs: a synthetic run written in MiMiC's files and units by pinn's own writers (the QM
region by PySCF in the MM point charges, the MM part by OpenMM as MiMiC's GROMACS computes it:
pinn.qmmm_reference.write_water_mimic_run) is read back by load_mimic(..., mm_energies=) as the QM region's
energy and forces in the MM charges' field, exactly (to the float32 of pinn's datasets); what is missing is
named; `pinn train` takes the run through a run file."""
import re

import numpy as np
import pytest

pytest.importorskip("pyscf", reason="PySCF not installed (pip install 'pinn[qmmm]')")
pytest.importorskip("openmm", reason="OpenMM not installed (pip install 'pinn[qmmm]')")

from pinn import keys as K  # noqa: E402
from pinn.io import load_mimic  # noqa: E402
from pinn.io.errors import DataError  # noqa: E402
from pinn.qmmm_reference import write_water_mimic_run  # noqa: E402


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Three frames of 2 QM waters and the waters within 5 Å of them, as MiMiC files on disk."""
    return write_water_mimic_run(str(tmp_path_factory.mktemp("mimic-qmmm")), n_frames=3, seed=2, radius=5.0,
                                 equilibration_fs=200, stride_fs=50)


def _files(run):
    return run["mpt"], run["trr"], run["energies"]


@pytest.mark.parametrize("region", ["overlaps", "qm="])
def test_the_loader_gives_back_the_region_in_its_field(run, region):
    """EKS minus GROMACS's energy is PySCF's energy of the region in the MM charges, FTRAJECTORY minus the trr's
    forces its forces on every atom; the QM region from the CPMD input's OVERLAPS or given; the MM charges from
    the .mpt."""
    qm = None if region == "overlaps" else list(np.flatnonzero(run["qm"]))
    dataset = load_mimic(*_files(run), ftrajectory=run["ftrajectory"], cpmd_input=run["cpmd_input"],
                         mm_energies=run["mm_energies"], qm=qm, shuffle=False)
    frames = list(dataset)
    assert len(frames) == 3
    for k, frame in enumerate(frames):
        energy = np.float32(run["energy"][k])
        assert abs(float(frame[K.E_DATA]) - float(energy)) <= abs(np.spacing(energy))  # float32 rounding of -4137 eV
        np.testing.assert_allclose(frame[K.F_DATA].numpy(), run["forces"][k], atol=2e-6)
        np.testing.assert_array_equal(frame[K.QM].numpy(), run["qm"])
        np.testing.assert_allclose(frame[K.MM_CHARGE].numpy(), np.where(run["qm"], 0, run["charges"]), atol=1e-6)
        assert float(frame[K.QM_CHARGE]) == 0 and not frame[K.PBC].numpy().any()
        assert np.abs(run["forces"][k][~run["qm"]]).max() > 0.01  # the MM atoms feel the region (eV/Å)


def test_energies_only_and_what_is_missing_is_named(run, tmp_path):
    only = next(iter(load_mimic(*_files(run), cpmd_input=run["cpmd_input"], mm_energies=run["mm_energies"],
                                forces="none", shuffle=False)))
    assert K.F_DATA not in only and abs(float(only[K.E_DATA]) - run["energy"][0]) < 1e-3
    common = dict(cpmd_input=run["cpmd_input"], mm_energies=run["mm_energies"])
    cases = [
        (dict(common), "QM/MM frames need CPMD's total forces, ftrajectory=<FTRAJECTORY file(s)>"),
        (dict(qm=[0, 1, 2]), "qm= makes QM/MM frames, whose energy is EKS minus GROMACS's MM energy: give "
                             "mm_energies="),
        (dict(common, forces="none", select=[0, 1, 2]), "QM/MM frames (mm_energies=) keep every atom; select= "
                                                        "cannot be combined with them (the region is qm=)"),
        (dict(common, forces="none", energy_column="EHAM"), "QM/MM frames take EKS minus GROMACS's MM energy, "
                                                            "not 'EHAM'"),
        (dict(mm_energies=run["mm_energies"], forces="none"), "QM/MM frames need the QM region: qm=<selection> "
                                                              "or cpmd_input="),
        # blamed on "run.trr, frame 2" once: the region's charge is checked where it is given
        (dict(common, forces="none", qm_charge="minus one"), "qm_charge (the QM region's total charge) is "
                                                             "'minus one', not a number"),
    ]
    for kwargs, message in cases:
        with pytest.raises(DataError, match="^" + re.escape(f"load_mimic: {message}")):
            load_mimic(*_files(run), **kwargs)
    shifted = tmp_path / "other.xvg"
    shifted.write_text(open(run["mm_energies"]).read().replace("  1.000000000000", "  7.000000000000")
                       .replace("  2.000000000000", "  8.000000000000").replace("  3.000000000000", "  9.000000000000"))
    with pytest.raises(DataError, match=f"^{shifted}: no MM energy at the time of any frame of .*same run"):
        load_mimic(*_files(run), forces="none", cpmd_input=run["cpmd_input"], mm_energies=str(shifted))


@pytest.mark.parametrize("embedding", ["mechanical", "electrostatic"])
def test_pinn_train_on_the_run_through_a_run_file(run, tmp_path, embedding):
    """`pinn train` with data.mimic naming the MM energies: the frames are QM/MM; a mechanical model trains on their
    QM regions (said in the log), an electrostatic one on the whole frames, forces on QM and MM atoms."""
    import yaml
    from pinn.cli import main
    network = {"name": "PiNet", "params": {"atom_types": [1, 8], "rc": 4.0, "depth": 1, "pp_nodes": [4],
                                           "pi_nodes": [4], "ii_nodes": [4], "out_nodes": [4],
                                           "out_units": 1 if embedding == "mechanical" else 2}}
    config = {"model_dir": "model", "network": network,
              "model": {"name": "potential_model", "params": {"progress_bar": "off", "jit": False,
                                                             "embedding": embedding, "use_force": True}},
              "data": {"mimic": {"mpt": run["mpt"], "trr": run["trr"], "energies": run["energies"],
                                 "ftrajectory": run["ftrajectory"], "cpmd_input": run["cpmd_input"],
                                 "mm_energies": run["mm_energies"]},
                       "split": {"train": 2, "eval": 1}, "batch_size": 1},
              "train": {"max_steps": 2}}
    (tmp_path / "run.yml").write_text(yaml.safe_dump(config))
    assert main(["train", str(tmp_path / "run.yml")]) == 0
    assert (tmp_path / "model" / "ckpt-2.index").exists()
    log = (tmp_path / "model" / "train.log").read_text()
    assert ("sees each frame's QM region alone" in log) == (embedding == "mechanical")
