"""The HPC launch path with the real tools: the MiMiC input script under horovodrun and srun,
and the project's Slurm job scripts under a real single-node Slurm started here.

Run on its own with  ./run_tests.sh -m hpc
The Slurm cluster (slurmctld, slurmd and munged from Debian's slurm-wlm and munge) is
private to the test: its own config, key, socket, ports and state directory, stopped by
the pids in its pid files; the recipe is in the fixture below (slurm.conf, munge key, daemons).
"""
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys

import pytest
from launching import ENV, SLURM_COMMON, assert_each_rank_read_its_own_files, horovod_has, wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/<stage>/ -> the repository
INPUT = os.path.join(ROOT, "inputs", "train_mimic_parallel.py")
#: test_parallel.py's training script: its ranks read ASE files on disk
PARALLEL_TRAIN = os.path.join(ROOT, "tests", "parallel", "parallel_train.py")
pytestmark = pytest.mark.hpc


@pytest.fixture(scope="module")
def mimic_data(tmp_path_factory):
    """The argon MiMiC demo data, small: 4 runs of 20 frames."""
    from pinn.demo import make_mimic_demo
    directory = tmp_path_factory.mktemp("mimic")
    make_mimic_demo(str(directory), n_runs=4, n_frames=20)
    return str(directory)


def test_mimic_input_script_on_two_ranks(mimic_data, tmp_path):
    """The script under horovodrun (Gloo); under Slurm's srun (MPI) in
    test_sbatch_of_the_job_script_trains_on_two_ranks, and mpirun's launches in test_parallel.py."""
    if not (shutil.which("horovodrun") and horovod_has("gloo")):
        pytest.skip("horovodrun or Horovod's Gloo controller not installed")
    command = ["horovodrun", "-np", "2", "--gloo"]
    run = subprocess.run(command + [sys.executable, INPUT, mimic_data, str(tmp_path / "model"), "30"], env=ENV,
                         cwd=tmp_path, capture_output=True, text=True, timeout=600)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-4000:]
    assert "parallel training on 2 rank(s)" in output
    assert "validation: E_MAE" in output and "(step 30, 2 rank(s))" in output
    assert "rank 0 of 2 gets 2 of 4 file sets" in output


def test_pinn_train_run_file_with_mimic_data_on_two_ranks(mimic_data, tmp_path):
    """`horovodrun -np 2 pinn train run.yml` with data.mimic and parallel: true: whole runs per rank."""
    if not (shutil.which("horovodrun") and horovod_has("gloo")):
        pytest.skip("horovodrun or Horovod's Gloo controller not installed")
    import yaml
    runs = [os.path.join(mimic_data, f"run{i}") for i in range(4)]
    config = {"model_dir": "model", "parallel": True,
              "network": {"name": "PiNet", "params": {"atom_types": [18], "rc": 6.0, "depth": 2, "pp_nodes": [8],
                                                      "pi_nodes": [8], "ii_nodes": [8], "out_nodes": [8]}},
              "model": {"params": {"use_force": True, "fit_e_dress": True, "eval_every_n_steps": 10,
                                   "log_every_n_steps": 10, "progress_bar": "off"}},
              "data": {"mimic": {"mpt": [os.path.join(mimic_data, "argon.mpt")] * 4, "trr": [r + ".trr" for r in runs],
                                 "energies": [r + ".ENERGIES" for r in runs], "forces": "trr"},
                       "split": {"train": 3, "eval": 1}, "batch_size": 4},
              "train": {"max_steps": 20}}
    (tmp_path / "run.yml").write_text(yaml.safe_dump(config))
    pinn = os.path.join(os.path.dirname(sys.executable), "pinn")
    run = subprocess.run(["horovodrun", "-np", "2", "--gloo", pinn, "train", "run.yml"], env=ENV, cwd=tmp_path,
                         capture_output=True, text=True, timeout=600)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-4000:]
    assert "parallel training on 2 rank(s)" in output and "rank 0 of 2 gets 2 of 4 file sets" in output
    assert output.count("quantity  MAE") == 1  # the final table, printed by rank 0 only
    from pinn.training.metrics import read_metrics
    assert [e["step"] for e in read_metrics(tmp_path / "model", "eval")] == [10, 20]


def test_dipole_input_script_on_two_ranks(tmp_path):
    """inputs/train_dipole.py unchanged on 2 Horovod ranks: it trains in parallel and its closing
    evaluation sums over both ranks.  A few steps: validation during training, the best checkpoint
    and early stopping on ranks are test_parallel.py's (1 process ≡ 2 ranks)."""
    if not (shutil.which("horovodrun") and horovod_has("gloo")):
        pytest.skip("horovodrun or Horovod's Gloo controller not installed")
    from pinn.demo import make_dipole_dataset
    data = make_dipole_dataset(str(tmp_path / "water.xyz"), n_frames=40, seed=0)
    script = os.path.join(ROOT, "inputs", "train_dipole.py")
    # 32 training structures, 16 per rank, batches of 16: 1 step an epoch; 2 epochs: 2 steps (each new batch
    # size an XLA compilation, seconds each)
    run = subprocess.run(["horovodrun", "-np", "2", "--gloo", sys.executable, script, data, "model", "2"], env=ENV,
                         cwd=tmp_path, capture_output=True, text=True, timeout=600)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-4000:]
    assert "parallel training on 2 rank(s)" in output
    assert "validation: D_MAE" in output and "test: D_MAE" in output and "(step 2, 2 rank(s))" in output
    assert (tmp_path / "model" / "checkpoint").exists()


def test_job_script_modules_on_a_cluster_with_a_module_command(tmp_path):
    """A `module` command that knows none of the modules (a stub that fails, like Lmod's for an unknown name):
    with PINN_MODULES unset or empty the job script loads nothing and goes on to srun (before 0.17.0 it loaded
    an example TensorFlow 2.11 stack by default and exited 1 there); a named module that does not load stops
    the job with one line."""
    stubs = tmp_path / "bin"
    stubs.mkdir()
    calls = tmp_path / "calls"
    for name, tail in (("module", 'echo "Lmod has detected the following error: unknown module" >&2; exit 1'),
                       ("srun", "exit 0")):
        (stubs / name).write_text(f'#!/bin/sh\necho "{name} $*" >> "{calls}"\n{tail}\n')
        (stubs / name).chmod(0o755)
    env = {k: v for k, v in ENV.items() if k != "PINN_MODULES"}
    env.update(PATH=f"{stubs}{os.pathsep}{ENV['PATH']}", SLURM_SUBMIT_DIR=ROOT)
    for modules in (None, ""):
        calls.write_text("")
        run = subprocess.run(["bash", "scripts/slurm_train_1node.sh", "train.py", "data"], cwd=ROOT, timeout=60,
                             env=env if modules is None else dict(env, PINN_MODULES=modules),
                             capture_output=True, text=True)
        assert run.returncode == 0 and "pinn: training finished" in run.stderr, run.stderr
        assert calls.read_text().splitlines() == ["srun --mpi=pmix --cpu-bind=cores python train.py data"]
    calls.write_text("")
    run = subprocess.run(["bash", "scripts/slurm_train_1node.sh", "train.py"], cwd=ROOT, timeout=60,
                         env=dict(env, PINN_MODULES="Missing/1.0"), capture_output=True, text=True)
    assert run.returncode == 1 and "pinn: module load Missing/1.0 failed" in run.stderr, run.stderr
    assert calls.read_text().splitlines() == ["module load Missing/1.0"]


# ---------------------------------------------------------------------------------------------- Slurm
SLURM_CONF = """ClusterName=pinntest
SlurmctldHost={host}
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
SlurmdSpoolDir={tmp}/spool
SlurmdPidFile={tmp}/slurmd.pid
SlurmdLogFile={tmp}/slurmd.log
""" + SLURM_COMMON + """NodeName={host} CPUs={cpus} RealMemory=4000 State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A private single-node Slurm: yields the environment for sbatch/squeue/scancel."""
    tools = ("munged", "slurmctld", "slurmd", "sbatch")
    if not all(shutil.which(t) for t in tools) or os.geteuid() != 0:
        pytest.skip("Slurm and munge (Debian slurm-wlm, munge) and root are needed")
    if not (shutil.which("mpirun") and (horovod_has("mpi") or importlib.util.find_spec("mpi4py"))):
        pytest.skip("srun needs Horovod's MPI controller (OpenMPI installed when Horovod was built) or mpi4py "
                    "(parallel training on MPI alone)")
    tmp = tmp_path_factory.mktemp("slurm")
    for sub in ("state", "spool"):
        (tmp / sub).mkdir()
    key = tmp / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    pids = []
    try:
        subprocess.run(["munged", "--force", f"--socket={tmp}/munge.socket", f"--key-file={key}",
                        f"--pid-file={tmp}/munged.pid", f"--log-file={tmp}/munged.log",
                        f"--seed-file={tmp}/munged.seed"], check=True, timeout=30)
        pids.append(tmp / "munged.pid")
        host = socket.gethostname().split(".")[0]
        conf = tmp / "slurm.conf"
        conf.write_text(SLURM_CONF.format(host=host, tmp=tmp, ctld_port=_free_port(), d_port=_free_port(),
                                          cpus=os.cpu_count()))
        env = dict(ENV, SLURM_CONF=str(conf))
        for daemon in ("slurmctld", "slurmd"):
            subprocess.run([daemon, "-f", str(conf)], check=True, env=env, timeout=60)
            pids.append(tmp / f"{daemon}.pid")
        wait_for(lambda: "idle" in subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True,
                                               text=True).stdout, 60, "the Slurm node to be idle")
        yield env
    finally:
        for pid_file in reversed(pids):
            try:
                os.kill(int(pid_file.read_text().split()[0]), signal.SIGTERM)
            except (OSError, ValueError):
                pass


def _sbatch(env, script, *args, sbatch_args=(), wait=False):
    command = ["sbatch", "--parsable", "--ntasks=2", "--ntasks-per-node=2", "--cpus-per-task=1", "--gres=none",
               "--time=20", *sbatch_args] + (["--wait"] if wait else []) + [script, *args]
    run = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
    return run, run.stdout.strip().split(";")[0]


def test_sbatch_of_the_job_script_trains_on_two_ranks(slurm, mimic_data, tmp_path):
    model_dir = tmp_path / "model"
    out = tmp_path / "job-%j.out"
    run, job = _sbatch(slurm, "scripts/slurm_train_1node.sh", INPUT, mimic_data, str(model_dir), "30",
                       sbatch_args=[f"--output={out}"], wait=True)
    log = (tmp_path / f"job-{job}.out").read_text() if job else ""
    assert run.returncode == 0, run.stdout + run.stderr + log[-4000:]
    # Horovod's MPI controller where Horovod is installed (Python 3.11), else MPI alone through mpi4py
    assert "parallel training on 2 rank(s)" in log
    assert ("controller MPI" in log) if horovod_has("mpi") else ("MPI through mpi4py" in log), log[-4000:]
    assert "(step 30, 2 rank(s))" in log and "pinn: training finished" in log
    # the checkpoint drives the ASE calculator
    import ase.io
    import pinn
    atoms = ase.io.read(os.path.join(mimic_data, "argon.xyz"))
    atoms.calc = pinn.get_calc(str(model_dir))
    assert atoms.get_forces().shape == (len(atoms), 3)
    assert abs(atoms.get_potential_energy()) < 100.0
    # and MD through the input script
    md = subprocess.run([sys.executable, os.path.join(ROOT, "inputs", "md_ase.py"), str(model_dir), "100",
                         os.path.join(mimic_data, "argon.xyz"), "60"], env=ENV, capture_output=True, text=True,
                        timeout=300)
    assert md.returncode == 0 and "NVE 100 steps of 108 atoms" in md.stdout, md.stdout + md.stderr[-3000:]


def test_sbatch_ranks_read_their_own_ase_files(slurm, tmp_path):
    """srun of the job script (PMIx; Horovod's MPI controller or MPI alone, both with mpi4py imported): 2 steps
    of test_parallel.py's script, whose ranks take their files with distribute_data and read them with
    load_ase and a plain ase.io.read: each rank reads its own (ASE's MPI-aware reading gave both rank 0's)."""
    import numpy as np
    out = tmp_path / "job-%j.out"
    run, job = _sbatch(slurm, "scripts/slurm_train_1node.sh", PARALLEL_TRAIN, str(tmp_path), "srun", "--steps", "2",
                       "--jit", "off", sbatch_args=[f"--output={out}"], wait=True)
    log = (tmp_path / f"job-{job}.out").read_text() if job else ""
    assert run.returncode == 0, run.stdout + run.stderr + log[-4000:]
    assert "parallel training on 2 rank(s)" in log and "ASE's file I/O is per rank" in log, log[-4000:]
    ranks = [json.loads(str(np.load(tmp_path / f"srun.rank{r}.npz", allow_pickle=True)["read"]))[0] for r in range(2)]
    assert_each_rank_read_its_own_files(ranks, tmp_path / "data-cuau")


def test_restart_chain_resubmits_after_the_walltime_signal(slurm, mimic_data, tmp_path):
    """USR1 (what --signal=USR1@300 sends before the walltime) reaches the tasks of job 1: it checkpoints,
    exits with 75 and resubmits itself; job 2 resumes from the checkpoint and finishes."""
    model_dir = tmp_path / "model"
    out = tmp_path / "chain-%j.out"
    env = dict(slurm, PINN_SBATCH_ARGS=f"--ntasks=2 --ntasks-per-node=2 --cpus-per-task=1 --gres=none "
                                       f"--time=20 --output={out}")
    run, first = _sbatch(env, "scripts/slurm_restart_chain.sh", INPUT, mimic_data, str(model_dir), "200",
                         sbatch_args=[f"--output={out}"])
    assert run.returncode == 0, run.stdout + run.stderr
    train_log = model_dir / "train.log"
    wait_for(lambda: train_log.exists() and "step 100/" in train_log.read_text(), 600, "100 steps of job 1")
    subprocess.run(["scancel", "--signal=USR1", first], env=env, check=True)
    wait_for(lambda: subprocess.run(["squeue", "-h"], env=env, capture_output=True, text=True).stdout.strip() == ""
          and "pinn: training finished" in "".join(p.read_text() for p in tmp_path.glob("chain-*.out")),
          900, "the chain to finish")
    logs = {p.name: p.read_text() for p in tmp_path.glob("chain-*.out")}
    first_log = logs.pop(f"chain-{first}.out")
    assert "stopped by SIGUSR1" in train_log.read_text()
    assert "resubmitted as job 2 of the chain" in first_log, first_log[-3000:]
    (second_log,) = logs.values()
    assert "restart chain, job 2" in second_log and "restored" in second_log
    assert "(step 200, 2 rank(s))" in second_log


def test_sbatch_trains_a_committee_as_a_job_array(slurm, mimic_data, tmp_path):
    """scripts/slurm_train_committee.sh as a job array of 2: member-0 and member-1 of a run file at the same
    time, each `pinn train --committee 2 --member K`; the committee then drives the ASE calculator."""
    import glob

    import yaml
    import pinn
    from pinn.committee import CommitteeCalc
    runs = sorted(glob.glob(os.path.join(mimic_data, "run*.trr")))
    config = {"model_dir": str(tmp_path / "committee"), "seed": 3,
              "network": {"name": "PiNet", "params": {"atom_types": [18], "rc": 4.0, "depth": 2, "pp_nodes": [8],
                                                      "pi_nodes": [8], "ii_nodes": [8], "out_nodes": [8]}},
              "model": {"params": {"use_force": True, "log_every_n_steps": 1000, "progress_bar": "off"}},
              "data": {"mimic": {"mpt": [os.path.join(mimic_data, "argon.mpt")] * len(runs), "trr": runs,
                                 "energies": [r[:-4] + ".ENERGIES" for r in runs]},
                       "split": {"train": 8, "eval": 2}, "batch_size": 8},
              "train": {"max_steps": 3}}
    run_file = tmp_path / "run.yml"
    run_file.write_text(yaml.safe_dump(config))
    out = tmp_path / "committee-%A_%a.out"
    run, job = _sbatch(slurm, "scripts/slurm_train_committee.sh", str(run_file),
                       sbatch_args=["--array=0-1", "--ntasks=1", "--ntasks-per-node=1", f"--output={out}"], wait=True)
    logs = [(tmp_path / f"committee-{job}_{k}.out").read_text() if job else "" for k in range(2)]
    assert run.returncode == 0, run.stdout + run.stderr + "".join(log[-3000:] for log in logs)
    for k, log in enumerate(logs):
        assert f"committee member {k} of 2" in log and "pinn: training finished" in log, log[-3000:]
        assert (tmp_path / "committee" / f"member-{k}" / "ckpt-3.index").exists()
    from pinn.params import read_params
    seeds = [read_params(str(tmp_path / "committee" / f"member-{k}"))["seed"] for k in range(2)]
    assert seeds == [3, 4]
    import ase.io
    atoms = ase.io.read(os.path.join(mimic_data, "argon.xyz"))
    atoms.calc = calc = pinn.get_calc(str(tmp_path / "committee"))
    assert isinstance(calc, CommitteeCalc) and calc.size == 2
    assert atoms.get_forces().shape == (len(atoms), 3) and calc.results["max_forces_deviation"] > 0


def test_max_time_slurm_ends_the_run_before_the_jobs_end(slurm, mimic_data, tmp_path):
    """`pinn train run.yml --max-time slurm` in a job of 2 minutes: the budget is the job's end less 60 s (read
    from SLURM_JOB_END_TIME or squeue), the steps end inside it (max_steps far away) and the job finishes on its
    own, long before Slurm's limit."""
    import glob

    import yaml
    runs = sorted(glob.glob(os.path.join(mimic_data, "run*.trr")))
    config = {"model_dir": str(tmp_path / "model"),
              "network": {"name": "PiNet", "params": {"atom_types": [18], "rc": 4.0, "depth": 2, "pp_nodes": [8],
                                                      "pi_nodes": [8], "ii_nodes": [8], "out_nodes": [8]}},
              "model": {"params": {"use_force": True, "log_every_n_steps": 1000, "progress_bar": "off"}},
              "data": {"mimic": {"mpt": [os.path.join(mimic_data, "argon.mpt")] * len(runs), "trr": runs,
                                 "energies": [r[:-4] + ".ENERGIES" for r in runs]}, "batch_size": 8},
              "train": {"max_steps": 10 ** 7}}
    (tmp_path / "run.yml").write_text(yaml.safe_dump(config))
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/bash\n{sys.executable} -m pinn.cli.commands train {tmp_path / 'run.yml'} "
                      "--max-time slurm\n")
    out = tmp_path / "job-%j.out"
    run = subprocess.run(["sbatch", "--parsable", "--wait", "--ntasks=1", "--cpus-per-task=1", "--gres=none",
                          "--time=2", f"--output={out}", str(script)], env=slurm, cwd=ROOT, capture_output=True,
                         text=True, timeout=400)
    job = run.stdout.strip().split(";")[0]
    log = (tmp_path / f"job-{job}.out").read_text() if job else ""
    assert run.returncode == 0, run.stdout + run.stderr + log[-4000:]
    train_log = (tmp_path / "model" / "train.log").read_text()
    assert "(the Slurm job's end less 60 s; counted since the process started)" in train_log, train_log[-3000:]
    budget = float(train_log.split("to the step its time budget ")[1].split(" s ")[0])
    assert 30 < budget <= 60, budget  # 2 minutes less the margin, less what Slurm took to start the job
    assert "time budget: steps ended at step " in train_log and "CANCELLED" not in log and "TIME LIMIT" not in log
