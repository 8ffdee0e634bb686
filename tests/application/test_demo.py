"""pinn.demo writes its data anywhere: the folder of the file (or the directory) is created when missing."""
import ase.io

from pinn.demo import make_alloy_dataset, make_dipole_dataset, make_mimic_demo


def test_make_functions_create_missing_folders(tmp_path, monkeypatch):
    alloy = make_alloy_dataset(str(tmp_path / "new" / "dir" / "x.xyz"), n_frames=2, seed=0)
    assert alloy == str(tmp_path / "new" / "dir" / "x.xyz") and len(ase.io.read(alloy, ":")) == 2
    dipole = make_dipole_dataset(tmp_path / "other" / "water.xyz", n_frames=2, seed=0)  # os.PathLike too
    assert len(ase.io.read(dipole, ":")) == 2
    mimic = make_mimic_demo(str(tmp_path / "deep" / "mimic"), n_runs=1, n_frames=2, stride=1)
    assert [len(mimic[k]) for k in ("mpt", "trr", "energies")] == [1, 1, 1]
    monkeypatch.chdir(tmp_path)  # a bare file name: the current directory, nothing to create
    assert len(ase.io.read(make_alloy_dataset("here.xyz", n_frames=1), ":")) == 1
