"""`pinn md` and pinn.md.ase_md.run_md: MD with a log, a trajectory, and the committee's trigger.

The committee is the session's three alloy members (small PiNets of different seeds); the
structure a frame of the alloy data, written to a file as a user's would be.  The trigger's
threshold is chosen from a first run's own log, so that the step where it must stop is known.
"""
import io

import numpy as np
import pytest
from ase.io import read, write

from pinn import get_calc
from pinn.cli import main
from pinn.md.ase_md import run_md

STEPS = 40


@pytest.fixture(scope="module")
def structure(alloy_xyz, tmp_path_factory):
    path = tmp_path_factory.mktemp("md") / "start.xyz"
    atoms = read(alloy_xyz, index=11)
    atoms.calc = None
    write(path, atoms)
    return str(path)


@pytest.fixture(scope="module")
def members(committee_dir):
    return [str(committee_dir / f"member-{k}") for k in range(3)]


def _log(path):
    rows = np.loadtxt(path, comments="#", ndmin=2)
    with open(path) as handle:
        header = handle.readline().lstrip("# ").split()
    return header, rows


@pytest.fixture(scope="module")
def free_run(members, structure, tmp_path_factory):
    """A committee run of STEPS NVE steps without a stop, hot enough that the deviation rises and falls: its log
    (the deviation of every step)."""
    log = tmp_path_factory.mktemp("free") / "md.log"
    atoms = read(structure)
    outcome = run_md(atoms, get_calc(members), STEPS, dt=2.0, temperature=1000, seed=3, log=str(log), progress=False)
    assert outcome.steps == STEPS and outcome.stopped_at is None
    header, rows = _log(log)
    assert header == ["step", "time_ps", "Etot_eV", "Epot_eV", "Ekin_eV", "T_K", "max_devi_f_eV/A"]
    assert rows[:, 0].tolist() == list(range(STEPS + 1))
    return rows


def _threshold(deviation, earliest=6):
    """A threshold between the running maximum before step k and step k, for the first k >= earliest that
    sets a new maximum: the run must stop exactly at k."""
    for k in range(earliest, len(deviation)):
        before = deviation[:k].max()
        if deviation[k] > before * 1.001:
            return k, (before + deviation[k]) / 2
    pytest.skip("the deviation never rose above its running maximum in this run")


def test_the_trigger_stops_at_the_first_step_over_the_threshold(members, structure, free_run, tmp_path):
    k, threshold = _threshold(free_run[:, -1])
    atoms = read(structure)
    stop = tmp_path / "stop.xyz"
    outcome = run_md(atoms, get_calc(members), STEPS, dt=2.0, temperature=1000, seed=3, log=str(tmp_path / "md.log"),
                     stop_deviation=threshold, keep=4, stop_file=str(stop), progress=False)
    assert outcome.stopped_at == k and outcome.steps == k
    assert outcome.deviation == pytest.approx(free_run[k, -1], rel=1e-5)  # the same trajectory: NVE, one seed
    frames = read(stop, ":")
    assert [f.info["step"] for f in frames] == list(range(k - 4, k + 1))
    assert frames[-1].info["max_devi_f"] > threshold >= max(f.info["max_devi_f"] for f in frames[:-1])
    _, rows = _log(tmp_path / "md.log")
    assert rows[-1, 0] == k and np.all(rows[:-1, -1] <= threshold)
    np.testing.assert_allclose(frames[-1].get_forces(), atoms.get_forces(), atol=1e-7)  # the mean's; 8 decimals


def test_pinn_md_on_the_command_line(members, structure, free_run, tmp_path, capsys, monkeypatch):
    """The user's path: exit 3 and the stop file at the threshold, exit 0 and the selected band without it; the
    log, the trajectory and the summary line."""
    monkeypatch.chdir(tmp_path)
    k, threshold = _threshold(free_run[:, -1])
    options = ["--steps", str(STEPS), "--dt", "2", "--temperature", "1000", "--seed", "3"]
    assert main(["md", *members, structure, *options, "--stop-deviation", str(threshold)]) == 3
    out = capsys.readouterr().out
    assert f"stopped at step {k}" in out and "stop.xyz" in out
    assert read("stop.xyz", -1).info["step"] == k
    ordered = np.sort(free_run[:, -1])  # band edges between two logged values: no value near an edge
    low, high = (ordered[12] + ordered[13]) / 2, (ordered[28] + ordered[29]) / 2
    assert main(["md", *members, structure, *options, "--select", f"{low}:{high}", "--traj", "run.xyz",
                 "--traj-every", "10", "--log", "free.log"]) == 0
    out = capsys.readouterr().out
    expected = [int(s) for s, d in zip(free_run[:, 0], free_run[:, -1]) if low <= d < high]
    assert f"{STEPS} steps (nve, 2 fs)" in out and f"{len(expected)} selected frames in selected.xyz" in out
    assert [f.info["step"] for f in read("selected.xyz", ":")] == expected
    assert [f.info["step"] for f in read("run.xyz", ":")] == [0, 10, 20, 30, 40]
    _, rows = _log("free.log")
    np.testing.assert_allclose(rows, free_run, rtol=1e-6, atol=1e-8)
    for bad, message in ((["md", members[0], structure, "--stop-deviation", "0.1"], "need a committee"),
                         (["md", members[0], "missing.xyz"], "missing.xyz: no such structure file"),
                         (["md", members[0], structure, "--ensemble", "npt", "--dt", "-1"], "dt must be a positive"),
                         (["md", members[0], structure, "--traj", "run.dcd"], "write .traj (ASE) or .xyz")):
        assert main(bad) == 1
        assert message in capsys.readouterr().err


@pytest.mark.parametrize("ensemble", ["nve", "langevin", "nvt", "npt"])
def test_each_ensemble_runs_and_holds_what_it_should(members, structure, ensemble, tmp_path):
    """NVE conserves the total energy; the thermostats keep the temperature near their target; NPT moves the
    volume (the cell's shape kept)."""
    atoms = read(structure)
    cell = atoms.cell[:].copy()
    steps = 200 if ensemble != "nve" else 100
    progress = io.StringIO()  # not a terminal: whole lines, the last at the end
    run_md(atoms, get_calc(members[0]), steps, dt=1.0, ensemble=ensemble, temperature=300, friction=50.0, tau=20.0,
           pressure=1e4, barostat_tau=200.0, seed=1, log=str(tmp_path / "md.log"), progress=progress,
           traj=str(tmp_path / "md.traj"), traj_every=50)
    assert [len(f) for f in read(tmp_path / "md.traj", ":")] == [len(atoms)] * (steps // 50 + 1)  # ASE's format
    assert progress.getvalue().splitlines()[-1].startswith(f"pinn md: step {steps}/{steps} (100 %), ")
    _, rows = _log(tmp_path / "md.log")
    total, temperature = rows[:, 2], rows[:, 5]
    if ensemble == "nve":
        assert np.ptp(total) / len(atoms) < 1e-3  # eV per atom, 1 fs steps
    else:
        assert 100 < temperature[steps // 2:].mean() < 600
    if ensemble == "npt":
        assert not np.isclose(atoms.get_volume(), abs(np.linalg.det(cell)), rtol=1e-4)
        shape = atoms.cell[:] / np.cbrt(atoms.get_volume())
        np.testing.assert_allclose(shape, cell / np.cbrt(abs(np.linalg.det(cell))), atol=1e-8)
    else:
        np.testing.assert_array_equal(atoms.cell[:], cell)
