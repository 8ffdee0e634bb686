"""load_mimic and distribute_data: units, step pairing, force sources, selections, errors, real ranks, training."""
import json
import logging
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from pinn import keys as K
from pinn.io import DataError, distribute_data, load_mimic, sparse_batch
from pinn.io.distribute import balance
from pinn.parallel.worlds import SerialWorld

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")  # tests/data
MIMIC = os.path.join(DATA, "mimic")
GMX = os.path.join(DATA, "gromacs")
ACETONE_MPT = os.path.join(MIMIC, "acetone_water.mpt")

# the conversion factors, written out from CODATA 2018 (not taken from pinn.units)
HARTREE_EV = 27.211386246
KJMOLNM_EVA = 1.036426966e-3
HARTREE_BOHR_EVA = 51.42206748
BOHR_A = 0.529177210903


def write_trr(path, frames):
    """Write a single-precision trr with MDAnalysis (an independent writer): frames of step, x, f (nm, kJ/mol/nm), box."""
    import MDAnalysis as mda
    from MDAnalysis.coordinates.TRR import TRRWriter
    from MDAnalysis.lib.mdamath import triclinic_box
    n = len(frames[0]["x"])
    with_forces = frames[0].get("f") is not None
    u = mda.Universe.empty(n, trajectory=True, forces=with_forces)
    # MDAnalysis 2.11 cannot write with convert_units=False: hand it Å and kJ/mol/Å, it writes nm and kJ/mol/nm
    with TRRWriter(str(path), n) as writer:
        for frame in frames:
            ts = u.trajectory.ts
            ts.positions = np.asarray(frame["x"], np.float64) * 10
            if with_forces:
                ts.forces = np.asarray(frame["f"], np.float64) / 10
            ts.dimensions = triclinic_box(*(np.asarray(frame["box"], np.float64) * 10))
            ts.data["step"] = frame["step"]
            ts.time = float(frame["step"])
            writer.write(u)
    return str(path)


def write_energies(path, nfi, eks):
    """An 8-column CPMD ENERGIES file (CPMD's Fortran format) with the given steps and EKS (Hartree)."""
    with open(path, "w") as f:
        for n, e in zip(nfi, eks):
            f.write(f"{n:10d}{3e-5:12.8f}{300.0:9.3f}{e:18.10f}{e + 0.1:18.10f}{e + 0.1:18.10f}{1e-4:15.6E}{0.1:9.2f}\n")
    return str(path)


def random_frames(steps, natoms, rng, box=2.4873):
    return [{"step": s, "x": rng.uniform(0, box, size=(natoms, 3)).astype(np.float32),
             "f": rng.normal(scale=500, size=(natoms, 3)).astype(np.float32),
             "box": np.diag([box, box, box])} for s in steps]


@pytest.fixture
def acetone_run(tmp_path):
    """A triple of known values: the real 1528-atom .mpt, a trr with steps 0..4, ENERGIES with NFI 1..3."""
    rng = np.random.RandomState(1)
    frames = random_frames(range(5), 1528, rng)
    trr = write_trr(tmp_path / "run.trr", frames)
    eks = [-44.4971086445, -44.4971622405, -44.5]
    ener = write_energies(tmp_path / "ENERGIES", [1, 2, 3], eks)
    return trr, ener, frames, eks


def _items(dataset):
    return list(dataset.as_numpy_iterator())


def _log_of(caplog):
    logger = logging.getLogger("pinn")
    logger.addHandler(caplog.handler)
    caplog.set_level(logging.INFO, logger="pinn")
    return lambda: logger.removeHandler(caplog.handler)


def test_units_and_step_pairing(acetone_run, caplog):
    trr, ener, frames, eks = acetone_run
    done = _log_of(caplog)
    try:
        got = _items(load_mimic(ACETONE_MPT, trr, ener, shuffle=False))
    finally:
        done()
    # trr step s pairs with NFI s: steps 1, 2, 3; step 0 (no ENERGIES line) and step 4 are skipped and counted
    assert len(got) == 3
    assert "3 frames from 1 run(s)" in caplog.text and "2 without an energy line" in caplog.text
    assert "(MM force-field) forces only" in caplog.text
    for item, frame, e in zip(got, frames[1:4], eks):
        assert set(item) == {K.ELEMS, K.COORD, K.CELL, K.PBC, K.E_DATA, K.F_DATA}
        assert item[K.E_DATA] == pytest.approx(e * HARTREE_EV, rel=1e-7)
        np.testing.assert_allclose(item[K.COORD], frame["x"] * 10, rtol=1e-6)
        np.testing.assert_allclose(item[K.F_DATA], frame["f"] * KJMOLNM_EVA, rtol=1e-6)
        np.testing.assert_allclose(item[K.CELL], frame["box"] * 10, rtol=1e-6)
        assert item[K.PBC].all()
        assert item[K.ELEMS].tolist()[:13] == [6, 6, 6, 8, 1, 1, 1, 1, 1, 1, 8, 1, 1]
    # another convention: the frame at step s takes NFI s - 1
    shifted = _items(load_mimic(ACETONE_MPT, trr, ener, shuffle=False, nfi_offset=-1))
    assert [x[K.E_DATA] for x in shifted] == pytest.approx([e * HARTREE_EV for e in eks], rel=1e-7)
    np.testing.assert_allclose(shifted[0][K.COORD], frames[2]["x"] * 10, rtol=1e-6)
    # energy-only, another column, split
    energy_only = _items(load_mimic(ACETONE_MPT, trr, ener, forces="none", energy_column="ECLASSIC", shuffle=False))
    assert K.F_DATA not in energy_only[0] and energy_only[0][K.E_DATA] == pytest.approx((eks[0] + 0.1) * HARTREE_EV)
    split = load_mimic([ACETONE_MPT], [trr], [ener], split={"train": 2, "test": 1})
    assert len(_items(split["train"])) == 2 and len(_items(split["test"])) == 1


def test_trr_forces_warn_only_when_not_asked_for(acetone_run, caplog):
    """The MM-only warning is for trr forces taken by default (forces='auto' without FTRAJECTORY);
    forces='trr' is the caller's choice (the argon demo's trr forces are exact) and loads them silently."""
    trr, ener, frames, _ = acetone_run
    warning = "(MM force-field) forces only"
    for forces, warned in (("auto", True), ("trr", False)):
        caplog.clear()
        done = _log_of(caplog)
        try:
            got = _items(load_mimic(ACETONE_MPT, trr, ener, shuffle=False, forces=forces))
        finally:
            done()
        assert (warning in caplog.text) is warned, (forces, caplog.text)
        assert "forces: trr (kJ/mol/nm -> eV/Å)" in caplog.text  # the summary still names the source
        np.testing.assert_allclose(got[0][K.F_DATA], frames[1]["f"] * KJMOLNM_EVA, rtol=1e-6)
        if not warned:  # no other warning either
            assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_several_runs(tmp_path):
    rng = np.random.RandomState(2)
    runs = []
    for k, steps in enumerate((range(0, 6), range(6, 9))):
        frames = random_frames(steps, 1528, rng)
        trr = write_trr(tmp_path / f"r{k}.trr", frames)
        runs.append((trr, frames))
    ener = write_energies(tmp_path / "ENERGIES", range(1, 10), -40.0 - np.arange(1, 10))
    data = load_mimic([ACETONE_MPT, ACETONE_MPT], [runs[0][0], runs[1][0]], [ener, ener], shuffle=False)
    got = _items(data)
    assert len(got) == 5 + 3  # step 0 has no energy line
    expected = [f for _, frames in runs for f in frames if f["step"] > 0]
    for item, frame in zip(got, expected):
        assert item[K.E_DATA] == pytest.approx((-40.0 - frame["step"]) * HARTREE_EV, rel=1e-7)
        np.testing.assert_allclose(item[K.COORD], frame["x"] * 10, rtol=1e-6)


def test_selection(acetone_run):
    trr, ener, frames, _ = acetone_run
    # the group as a tuple, or as the list a YAML run file gives
    for select in ((os.path.join(MIMIC, "index.ndx"), "QMatoms"), [os.path.join(MIMIC, "index.ndx"), "QMatoms"],
                   {"resname": "ACT"}, list(range(10))):
        item = _items(load_mimic(ACETONE_MPT, trr, ener, shuffle=False, select=select))[0]
        assert item[K.ELEMS].tolist() == [6, 6, 6, 8] + [1] * 6
        np.testing.assert_allclose(item[K.COORD], frames[1]["x"][:10] * 10, rtol=1e-6)
        np.testing.assert_allclose(item[K.F_DATA], frames[1]["f"][:10] * KJMOLNM_EVA, rtol=1e-6)
    item = _items(load_mimic(ACETONE_MPT, trr, ener, shuffle=False, select=[12, 3, 0]))[0]
    np.testing.assert_allclose(item[K.COORD], frames[1]["x"][[0, 3, 12]] * 10, rtol=1e-6)
    with pytest.raises(DataError, match="no group \\[ QM \\]"):
        load_mimic(ACETONE_MPT, trr, ener, select=(os.path.join(MIMIC, "index.ndx"), "QM"))
    with pytest.raises(DataError, match="refers to atom index 5000"):
        load_mimic(ACETONE_MPT, trr, ener, select=[1, 5000])
    with pytest.raises(DataError, match="matches no atom"):
        load_mimic(ACETONE_MPT, trr, ener, select={"resname": "XYZ"})


def _write_ftrajectory(path, steps, gmx_positions_a, gmx_forces, order, shift_bohr):
    """FTRAJECTORY in CPMD order and atomic units: NFI, x y z (bohr, translated), v, f (Hartree/bohr)."""
    with open(path, "w") as f:
        for step, pos, force in zip(steps, gmx_positions_a, gmx_forces):
            cpmd_pos = np.empty_like(pos)
            cpmd_force = np.empty_like(force)
            cpmd_pos[order] = pos / BOHR_A + shift_bohr
            cpmd_force[order] = force
            for p, fc in zip(cpmd_pos, cpmd_force):
                f.write(f"{step:7d}" + "".join(f"  {v:22.14f}" for v in (*p, 0.0, 0.0, 0.0, *fc)) + "\n")
    return str(path)


def test_forces_from_ftrajectory(acetone_run, tmp_path):
    trr, ener, frames, eks = acetone_run
    order = np.array([json.load(open(os.path.join(MIMIC, "gmx_to_cpmd_atom_indices.json")))[str(i)]
                      for i in range(1528)])
    rng = np.random.RandomState(3)
    total_forces = [rng.normal(scale=0.05, size=(1528, 3)) for _ in range(2)]
    # FTRAJECTORY at NFI 1 and 2 (TRAJECTORY FORCES 1 for two steps), positions shifted as CPMD does
    ftraj = _write_ftrajectory(tmp_path / "FTRAJECTORY", [1, 2],
                               [frames[1]["x"].astype(float) * 10, frames[2]["x"].astype(float) * 10],
                               total_forces, order, shift_bohr=np.array([3.0, -1.5, 7.25]))
    got = _items(load_mimic(ACETONE_MPT, trr, ener, ftrajectory=ftraj, cpmd_input=os.path.join(MIMIC, "cpmd.inp"),
                            shuffle=False))
    assert len(got) == 2  # step 3 has an energy but no FTRAJECTORY entry
    for item, forces, e in zip(got, total_forces, eks):
        np.testing.assert_allclose(item[K.F_DATA], forces * HARTREE_BOHR_EVA, rtol=1e-6, atol=1e-6)
        assert item[K.E_DATA] == pytest.approx(e * HARTREE_EV, rel=1e-7)
    # an explicit order gives the same; a wrong one is caught by the position check
    same = _items(load_mimic(ACETONE_MPT, trr, ener, ftrajectory=ftraj, cpmd_order=order, shuffle=False))
    np.testing.assert_array_equal(same[0][K.F_DATA], got[0][K.F_DATA])
    with pytest.raises(Exception, match="positions differ by up to .*atom mapping"):
        _items(load_mimic(ACETONE_MPT, trr, ener, ftrajectory=ftraj, cpmd_order=np.arange(1528), shuffle=False))
    with pytest.raises(DataError, match="need cpmd_input"):
        load_mimic(ACETONE_MPT, trr, ener, ftrajectory=ftraj)


def test_real_gromacs_double_precision_mixed_blocks(tmp_path):
    """GROMACS-written double-precision trr with x every 2 and f every 3 steps, and its mimicpy-written .mpt."""
    from pinn.io.readers.trr import TRRFile
    mpt, trr = os.path.join(GMX, "water.mpt"), os.path.join(GMX, "water_double_mixed.trr")
    ener = write_energies(tmp_path / "ENERGIES", range(1, 20), -10.0 - np.arange(1, 20))
    with pytest.raises(DataError, match=r"water_double_mixed.trr: frame 3 \(step 15\) has no positions.*1 of 5"):
        load_mimic(mpt, trr, ener)
    got = _items(load_mimic(mpt, trr, ener, skip_incomplete=True, shuffle=False))
    assert len(got) == 1  # only step 12 has both x and f
    with TRRFile(trr) as t:
        frame = t[1]
    assert frame["step"] == 12 and frame["double"]
    np.testing.assert_allclose(got[0][K.COORD], frame["x"] * 10, rtol=1e-6)
    np.testing.assert_allclose(got[0][K.F_DATA], frame["f"] * KJMOLNM_EVA, rtol=1e-6)
    assert got[0][K.E_DATA] == pytest.approx(-22.0 * HARTREE_EV, rel=1e-7)
    assert got[0][K.ELEMS].tolist()[:5] == [11, 17, 8, 1, 1]
    # energy-only needs positions but not forces: 4 frames have x
    assert len(_items(load_mimic(mpt, trr, ener, forces="none", skip_incomplete=True))) == 4


def test_bad_input_names_file_and_frame(acetone_run, tmp_path):
    trr, ener, frames, _ = acetone_run
    with pytest.raises(DataError, match=r"run.trr: frame 0 \(step 0\) has 1528 atoms, but .*mixed.mpt has 45"):
        load_mimic(os.path.join(MIMIC, "mixed.mpt"), trr, ener)
    with pytest.raises(DataError, match=r"equilibrated-forces-gromacs-only.trr: frame 0 \(step 0\) has no positions"):
        load_mimic(ACETONE_MPT, os.path.join(MIMIC, "equilibrated-forces-gromacs-only.trr"), ener)
    no_f = write_trr(tmp_path / "no_f.trr", [dict(f, f=None) for f in frames])
    with pytest.raises(DataError, match=r"no_f.trr: frame 0 \(step 0\) has no forces \(f\); 5 of 5 frames"):
        load_mimic(ACETONE_MPT, no_f, ener)
    assert len(_items(load_mimic(ACETONE_MPT, no_f, ener, forces="none"))) == 3
    late = write_energies(tmp_path / "late", [100, 101], [-1.0, -2.0])
    with pytest.raises(DataError, match=r"late: no energy line for any frame of .*run.trr: trr steps 0..4 .*NFI 100..101"):
        load_mimic(ACETONE_MPT, trr, late)
    with pytest.raises(DataError, match="equal lengths"):
        load_mimic([ACETONE_MPT, ACETONE_MPT], [trr, trr], [ener])
    bad = tmp_path / "bad.trr"
    bad.write_bytes(b"\0\0\0\1" + open(trr, "rb").read()[4:])
    with pytest.raises(DataError, match=r"bad.trr: frame 0 .*magic number 1, expected 1993"):
        load_mimic(ACETONE_MPT, str(bad), ener)
    with pytest.raises(DataError, match="ENERGIES: no column 'EPOT'"):
        load_mimic(ACETONE_MPT, trr, ener, energy_column="EPOT")
    with pytest.raises(DataError, match="forces='trr '"):
        load_mimic(ACETONE_MPT, trr, ener, forces="trr ")


def test_distribute_data_balances_by_frames(tmp_path, monkeypatch):
    rng = np.random.RandomState(4)
    counts = [8, 1, 3, 5, 2, 6]
    trrs = [write_trr(tmp_path / f"{i}.trr", random_frames(range(n), 3, rng)) for i, n in enumerate(counts)]
    eners = [str(tmp_path / f"E{i}") for i in range(len(counts))]
    shares = [distribute_data(trrs, eners, rank=r, size=3) for r in range(3)]
    got_trr = [s[0] for s in shares]
    assert sorted(sum(got_trr, [])) == sorted(trrs)  # every file once
    for trr_share, ener_share in shares:  # positions stay together, in order
        assert [os.path.basename(e)[1:] for e in ener_share] == [os.path.basename(t)[:-4] for t in trr_share]
    frames = [sum(counts[trrs.index(t)] for t in share) for share in got_trr]
    assert sorted(frames) == [8, 8, 9]  # 25 frames over 3 ranks, as even as whole files allow
    assert shares == [distribute_data(trrs, eners, rank=r, size=3) for r in range(3)]  # deterministic
    for var in ("HOROVOD_RANK", "HOROVOD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK",
                "PMI_SIZE", "SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(var, raising=False)
    assert distribute_data(trrs, eners) == [trrs, eners]  # a process started alone: everything
    # the rank the launcher announced (before any world starts), or the world's
    for rank_var, size_var in (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS")):
        with monkeypatch.context() as env:
            env.setenv(rank_var, "2")
            env.setenv(size_var, "3")
            assert distribute_data(trrs, eners) == shares[2]
    assert distribute_data(trrs, eners, world=SerialWorld()) == [trrs, eners]
    with pytest.raises(ValueError, match="world= or rank= and size=, not both"):
        distribute_data(trrs, eners, rank=0, size=1, world=SerialWorld())
    with pytest.raises(DataError, match="6 files per list for 7 ranks"):
        distribute_data(trrs, eners, rank=0, size=7)
    with pytest.raises(DataError, match="equal lengths.*\\[6, 5\\]"):
        distribute_data(trrs, eners[:5])
    # zero weights still give every rank a file
    owner = balance([0, 0, 0, 0], 3)
    assert sorted(set(owner.tolist())) == [0, 1, 2]


@pytest.mark.skipif(shutil.which("horovodrun") is None, reason="Horovod not installed")
def test_distribute_data_on_real_horovod_ranks(tmp_path):
    rng = np.random.RandomState(5)
    counts = [4, 4, 1, 2, 7]
    trrs = [write_trr(tmp_path / f"{i}.trr", random_frames(range(n), 3, rng)) for i, n in enumerate(counts)]
    script = tmp_path / "share.py"
    script.write_text(
        "import json, sys\n"
        "import horovod.tensorflow as hvd\n"
        "from pinn.runtime.logs import setup_logging\n"
        "from pinn.io import distribute_data\n"
        "setup_logging()\n"
        f"trr, = distribute_data({trrs!r})\n"  # before the world starts: the launcher's rank
        "hvd.init()\n"
        f"json.dump({{'rank': hvd.rank(), 'size': hvd.size(), 'trr': trr}}, open('{tmp_path}/rank%d.json' % hvd.rank(), 'w'))\n")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    run = subprocess.run(["horovodrun", "-np", "2", "--gloo", sys.executable, str(script)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    shares = [json.load(open(tmp_path / f"rank{r}.json")) for r in range(2)]
    assert [s["size"] for s in shares] == [2, 2]
    assert sorted(shares[0]["trr"] + shares[1]["trr"]) == sorted(trrs)
    assert not set(shares[0]["trr"]) & set(shares[1]["trr"])
    frames = sorted(sum(counts[trrs.index(t)] for t in s["trr"]) for s in shares)
    assert frames == [9, 9]
    assert "rank 1 of 2 gets" in run.stdout + run.stderr


def test_training_on_mimic_format_recovers_lj_parameters(tmp_path):
    """LJ argon written as MiMiC output (nm, kJ/mol/nm, Hartree; trr every 10 steps, ENERGIES every step):
    fitting the LJ network through load_mimic finds the true epsilon (eV) and sigma (Å)."""
    from ase.build import bulk
    from ase.calculators.lj import LennardJones
    from pinn.models import potential_model
    frames, energies = [], {}
    for k in range(1, 25):
        a = bulk("Ar", "fcc", a=5.3, cubic=True)
        a.rattle(0.15, seed=k)
        a.calc = LennardJones(sigma=3.4, epsilon=0.0104, rc=7.0, smooth=False)
        frames.append({"step": 10 * k, "x": a.positions / 10, "f": a.get_forces() / KJMOLNM_EVA,
                       "box": a.cell[:] / 10})
        energies[10 * k] = a.get_potential_energy() / HARTREE_EV
    trr = write_trr(tmp_path / "argon.trr", frames)
    nfi = np.arange(1, 241)
    ener = write_energies(tmp_path / "ENERGIES", nfi, [energies.get(n, 0.0) for n in nfi])
    dataset = lambda: load_mimic(os.path.join(MIMIC, "argon.mpt"), trr, ener, split={"train": 1})
    assert len(_items(dataset()["train"])) == 24
    params = {"model_dir": str(tmp_path / "lj"),
              "network": {"name": "LJ", "params": {"atom_types": [18], "rc": 7.0, "epsilon": 0.015, "sigma": 3.2}},
              "model": {"params": {"use_force": True, "learning_rate": 1e-2, "f_loss_multiplier": 100.0}}}
    model = potential_model(params)
    model.train(lambda: dataset()["train"].cache().repeat().apply(sparse_batch(8)), max_steps=600)
    assert float(model.network.epsilon) == pytest.approx(0.0104, rel=0.05)
    assert float(model.network.sigma) == pytest.approx(3.4, rel=0.01)
