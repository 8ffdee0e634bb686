"""Helpers of the tests that start real processes: launcher environment, Horovod's build, waiting."""
import functools
import os
import subprocess
import sys
import time

#: environment of launched ranks: quiet TensorFlow, mpirun allowed as root, unbuffered output, this venv first
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           PYTHONUNBUFFERED="1", PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))


def horovod_has(controller):
    """True if Horovod is installed and built with ``controller`` ('mpi' or 'gloo')."""
    return controller in _horovod_controllers()


@functools.lru_cache(maxsize=None)
def _horovod_controllers():
    """The controllers this venv's Horovod was built with (asked once per process: a child imports TensorFlow)."""
    code = "import horovod.tensorflow as h; print(*[c for c in ('mpi', 'gloo') if getattr(h, c + '_built')()])"
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return frozenset()
    lines = out.stdout.strip().splitlines()
    return frozenset(lines[-1].split()) if out.returncode == 0 and lines else frozenset()


def wait_for(predicate, timeout, what):
    """Poll ``predicate`` every 0.5 s; AssertionError naming ``what`` after ``timeout`` s."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def without_modules(tmp_path, *modules):
    """A folder for PYTHONPATH whose sitecustomize makes ``modules`` fail to import (``None`` in
    ``sys.modules``), as on a machine where they are not installed."""
    folder = tmp_path / "without"
    folder.mkdir(exist_ok=True)
    (folder / "sitecustomize.py").write_text("import sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in modules))
    return str(folder)


def checksum(coords):
    """Σ_k (k + 1) · Σ coord_k over frames k (positions as float32, summed in float64): which frames, in which
    order (tests/parallel/parallel_train.py records it for what each rank read)."""
    import numpy as np
    return float(sum((k + 1) * np.asarray(c, np.float32).astype(np.float64).sum() for k, c in enumerate(coords)))


def expected_reads(data_dir):
    """What each rank of a 2-rank tests/parallel/parallel_train.py run must have read from ``data_dir``, found here in
    one process: its share of the training files (distribute_data's assignment), and for the share and for
    each of its files the frame count, the atoms per frame and :func:`checksum` of the positions.

    Returns:
        [rank 0's record, rank 1's record], in the form of the script's ``read`` records.
    """
    import glob

    from pinn.io import ase_files, distribute_data
    files = sorted(glob.glob(os.path.join(data_dir, "train*.xyz")))
    records = []
    for rank in range(2):
        share, = distribute_data(files, rank=rank, size=2)
        per_file = [(os.path.basename(path), ase_files.read(path, ":")) for path in share]
        frames = [atoms for _, file_frames in per_file for atoms in file_frames]
        records.append({"share": [name for name, _ in per_file], "count": len(frames),
                        "atoms": [len(a) for a in frames], "checksum": checksum([a.positions for a in frames]),
                        "plain": [[name, len(ff), [len(a) for a in ff], checksum([a.positions for a in ff])]
                                  for name, ff in per_file]})
    return records


def assert_each_rank_read_its_own_files(ranks_read, data_dir):
    """``ranks_read``: the ``read`` records of ranks 0 and 1 of a 2-rank run: each is its own share (load_ase's
    frames and a plain ``ase.io.read`` of each file), the shares differ and cover every training file."""
    expected = expected_reads(data_dir)
    assert set(expected[0]["share"]).isdisjoint(expected[1]["share"])
    assert expected[0]["count"] != expected[1]["count"]  # the files differ in length: a mix-up cannot hide
    for rank, (got, want) in enumerate(zip(ranks_read, expected)):
        assert got["share"] == want["share"], f"rank {rank}"
        assert (got["count"], got["atoms"]) == (want["count"], want["atoms"]), f"rank {rank}: load_ase's frames"
        assert got["checksum"] == want["checksum"], f"rank {rank}: load_ase's positions"
        assert got["plain"] == want["plain"], f"rank {rank}: ase.io.read after the parallel world started"


#: the settings of the tests' private Slurm clusters (tests/parallel/test_hpc_launch.py, test_multinode.py)
#: after the host and port lines: root daemons, munge on the test's own socket, no cgroups, PMIx
SLURM_COMMON = """SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={tmp}/munge.socket
StateSaveLocation={tmp}/state
SlurmctldPidFile={tmp}/slurmctld.pid
SlurmctldLogFile={tmp}/slurmctld.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=pmix
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
"""
