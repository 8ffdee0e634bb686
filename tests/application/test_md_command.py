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


# ---- outputs: nothing opened before the start is evaluated and every option checked (issue 75, item 4) ----

def _failing_emt(at, error=RuntimeError):
    """ASE's EMT (Cu and Au: the alloy's elements; no TensorFlow) that raises ``error`` at its ``at``-th
    evaluation (0: the start's; -1: never)."""
    from ase.calculators.emt import EMT

    class Failing(EMT):
        calls = 0

        def calculate(self, *args, **kwargs):
            if Failing.calls == at:
                raise error(f"evaluation {at} failed")
            Failing.calls += 1
            super().calculate(*args, **kwargs)

    return Failing()


def _error(err):
    """The one error line of `pinn md`'s standard error (its INFO lines aside), and no traceback."""
    lines = [line for line in err.splitlines() if line.startswith("pinn md: error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _files(folder):
    """{name: bytes} of every file in ``folder``."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.fixture
def outputs(tmp_path, monkeypatch):
    """A working directory with an earlier run's log and trajectories, as a user's would be."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "md.log").write_text("# step time_ps\n0 0.0\n")
    (tmp_path / "run.xyz").write_text("an earlier trajectory\n")
    (tmp_path / "run.traj").write_bytes(b"an earlier ASE trajectory")
    return tmp_path


@pytest.mark.parametrize("case", ["element", "suffix", "nve-temperature", "existing-log", "existing-traj",
                                  "existing-stop"])
def test_a_refused_run_keeps_every_existing_file_and_creates_none(members, structure, outputs, case, capsys):
    """A run refused at step 0 (an element the model lacks, a bad --traj suffix, a negative temperature, an
    existing output without --overwrite) leaves the earlier run's files byte for byte and writes no file."""
    start = structure
    if case == "element":
        atoms = read(structure)
        atoms.numbers[0] = 8  # O: the alloy's model knows Cu and Au
        write(outputs / "oxide.xyz", atoms)
        start = str(outputs / "oxide.xyz")
    options = {"element": ["--traj", "run.xyz", "--overwrite"],
               "suffix": ["--traj", "run.dcd", "--overwrite"],
               "nve-temperature": ["--temperature", "-5", "--traj", "run.traj", "--overwrite"],
               "existing-log": [],
               "existing-traj": ["--log", "new.log", "--traj", "run.traj"],
               "existing-stop": ["--log", "new.log", "--stop-deviation", "1", "--stop-file", "run.xyz"]}[case]
    expected = {"element": "['O']", "suffix": "write .traj (ASE) or .xyz", "nve-temperature": "temperature",
                "existing-log": "md.log: exists", "existing-traj": "run.traj: exists",
                "existing-stop": "run.xyz: exists"}[case]
    before = _files(outputs)
    if "--overwrite" in options:  # without it too (refused as existing now, cut at step 0 before)
        main(["md", *members, start, "--steps", "2", *[o for o in options if o != "--overwrite"]])
        assert _files(outputs) == before
        capsys.readouterr()
    assert main(["md", *members, start, "--steps", "2", *options]) == 1
    assert expected in _error(capsys.readouterr().err)
    assert _files(outputs) == before


@pytest.mark.parametrize("output", ["--traj", "--log"])
def test_an_output_naming_the_input_structure_is_refused(members, structure, tmp_path, output, capsys):
    """--traj or --log naming the structure (itself or through a link) is refused, --overwrite or not, with
    both named; the structure is left as it was."""
    link = tmp_path / "link.xyz"
    link.symlink_to(structure)
    before = open(structure, "rb").read()
    for path, overwrite in ((structure, []), (str(link), []), (structure, ["--overwrite"])):
        assert main(["md", *members, structure, "--steps", "2", output, path, *overwrite,
                     *(["--log", str(tmp_path / "md.log")] if output == "--traj" else [])]) == 1
        err = _error(capsys.readouterr().err)
        assert f"{path} is the input {structure}" in err
        assert open(structure, "rb").read() == before
    assert not (tmp_path / "md.log").exists()


@pytest.mark.parametrize("option", ["--stop-file", "--selected", "--log", "--traj"])
def test_an_output_in_a_missing_directory_is_refused_before_step_0(members, structure, tmp_path, monkeypatch,
                                                                   option, capsys):
    """A stop file (or selected file, log, trajectory) in a directory that does not exist is refused before the
    first step, naming it: not found at the stop, with the stop's frames lost."""
    monkeypatch.chdir(tmp_path)
    extra = {"--stop-file": ["--stop-deviation", "1e-9"], "--selected": ["--select", "0:100"]}.get(option, [])
    assert main(["md", *members, structure, "--steps", "3", *extra, option, "missing/out.xyz"]) == 1
    err = _error(capsys.readouterr().err)
    assert "missing/out.xyz" in err and "does not exist" in err
    assert list(tmp_path.iterdir()) == []  # no md.log either


@pytest.mark.parametrize("ensemble", ["nve", "langevin", "nvt"])
def test_a_negative_temperature_is_named(members, structure, tmp_path, ensemble):
    """T < 0 is refused by name in every ensemble (NVE included: its velocities would be NaN); 0 K runs in NVE."""
    with pytest.raises(ValueError, match=r"temperature must be .*-5"):
        run_md(read(structure), get_calc(members[0]), 2, ensemble=ensemble, temperature=-5.0,
               log=str(tmp_path / "md.log"), progress=False)
    assert list(tmp_path.iterdir()) == []
    atoms = read(structure)
    run_md(atoms, get_calc(members[0]), 2, temperature=0.0, log=str(tmp_path / "md.log"), progress=False)
    assert _log(tmp_path / "md.log")[1][0, 5] == 0.0


@pytest.mark.parametrize("suffix", [".xyz", ".traj"])
def test_overwrite_replaces_and_append_extends(structure, tmp_path, suffix):
    """An existing log and trajectory: refused by default (naming the file and both options); --overwrite
    replaces them; --append adds the new run's frames and log lines (no second header, steps from 0 again)."""
    log, traj = str(tmp_path / "md.log"), str(tmp_path / f"run{suffix}")

    def run(steps, **existing):
        run_md(read(structure), _failing_emt(at=-1), steps, dt=1.0, temperature=300, log=log, traj=traj,
               traj_every=1, progress=False, **existing)

    run(2)
    with pytest.raises(ValueError, match=r"md.log: exists.*--overwrite.*--append"):
        run(3)
    run(3, existing="append")
    header, rows = _log(log)
    assert header[:2] == ["step", "time_ps"] and open(log).read().count("#") == 1
    assert rows[:, 0].tolist() == [0, 1, 2, 0, 1, 2, 3]
    frames = read(traj, ":")
    assert len(frames) == 7 and frames[3].info["step"] == 0 and frames[-1].info["step"] == 3
    assert "energy" in frames[1].calc.results  # the earlier frames keep their energies
    run(1, existing="overwrite")
    assert _log(log)[1][:, 0].tolist() == [0, 1] and len(read(traj, ":")) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["md.log", f"run{suffix}"])


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_a_run_failing_midway_keeps_the_steps_done(structure, tmp_path, error):
    """A calculator that fails at step 5 (or an interrupt there): the log and the trajectory hold steps 0-4, in
    place of the earlier files, and no temporary file is left; failing at the start (step 0), the earlier files
    are kept as they were."""
    log, traj = tmp_path / "md.log", tmp_path / "run.xyz"
    log.write_text("earlier\n")
    traj.write_text("earlier\n")
    with pytest.raises(error):
        run_md(read(structure), _failing_emt(at=0, error=error), 20, log=str(log), traj=str(traj),
               traj_every=1, existing="overwrite", progress=False)
    assert log.read_text() == traj.read_text() == "earlier\n" and len(list(tmp_path.iterdir())) == 2
    with pytest.raises(error):
        run_md(read(structure), _failing_emt(at=5, error=error), 20, log=str(log), traj=str(traj),
               traj_every=1, existing="overwrite", progress=False)
    assert _log(log)[1][:, 0].tolist() == [0, 1, 2, 3, 4]
    assert [f.info["step"] for f in read(traj, ":")] == [0, 1, 2, 3, 4]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["md.log", "run.xyz"]


def test_an_interrupted_pinn_md_says_so_in_one_line(structure, tmp_path, monkeypatch, capsys):
    """Ctrl-C in `pinn md`: the steps done in the log, one line (no traceback), exit status 130."""
    import pinn.calculator
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(pinn.calculator, "get_calc", lambda *a, **k: _failing_emt(at=4, error=KeyboardInterrupt))
    assert main(["md", "model", structure, "--steps", "10"]) == 130
    err = capsys.readouterr().err
    assert "pinn md: interrupted after step 3; the steps done in log md.log" in err and "Traceback" not in err
    assert _log("md.log")[1][:, 0].tolist() == [0, 1, 2, 3]


def test_pinn_md_help_says_what_happens_to_existing_files(capsys):
    with pytest.raises(SystemExit):
        main(["md", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--overwrite" in out and "--append" in out and "--stop-file and --selected" in out
