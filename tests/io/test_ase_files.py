"""ASE's file I/O is per process (pinn.io.ase_files): every call of pinn's own code goes through it, and on
real MPI ranks with mpi4py imported each rank reads and writes its own files.  The training run on ranks
from files on disk is test_parallel.py's union test (horovodrun, mpirun with Horovod, mpirun with MPI
alone) and test_hpc_launch.py's (srun)."""
import ast
import importlib.util
import json
import os
import shutil
import subprocess
import sys

import pytest
from launching import ENV

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/<stage>/ -> the repository
#: the folders of code that must read and write through pinn.io.ase_files (tests/ check ASE's own behaviour)
CHECKED = ("pinn", "inputs", "benchmarks", "tools", "scripts")
ALLOWED = os.path.join("pinn", "io", "ase_files.py")


def direct_ase_io(source):
    """Lines of ``source`` (Python) that use ASE's file I/O other than through pinn.io.ase_files:
    ``import ase.io`` / ``ase.db``, ``from ase.io[...] import``, ``from ase.db import``,
    ``from ase import io`` / ``db``, and any ``ase.io.…`` / ``ase.db.…`` attribute.

    Returns:
        sorted list of (line, text) of each use.
    """
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[:2] in (["ase", "io"], ["ase", "db"]):
                    found.add((node.lineno, f"import {alias.name}"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            parts = node.module.split(".")
            names = {alias.name for alias in node.names}
            if parts[:2] in (["ase", "io"], ["ase", "db"]) or (node.module == "ase" and names & {"io", "db"}):
                found.add((node.lineno, f"from {node.module} import {', '.join(sorted(names))}"))
        elif isinstance(node, ast.Attribute) and node.attr in ("io", "db") and \
                isinstance(node.value, ast.Name) and node.value.id == "ase":
            found.add((node.lineno, f"ase.{node.attr}"))
    return sorted(found)


def test_the_check_finds_each_form_of_direct_ase_io():
    source = "\n".join(["import ase.io", "import ase", "from ase.io import read", "from ase.io.trajectory import Trajectory",
                        "from ase.db import connect", "from ase import io", "x = ase.io.read('f.xyz', ':')",
                        "with ase.db.connect('a.db') as db: pass", "from ase.build import bulk",
                        "from pinn.io import ase_files", "y = ase_files.read('f.xyz', ':')"])
    assert [line for line, _ in direct_ase_io(source)] == [1, 3, 4, 5, 6, 7, 8]


def test_pinn_inputs_and_benchmarks_use_ase_io_only_through_ase_files():
    """A new ase.io.read/iread/write or ase.db call in pinn's code, the input scripts, the benchmarks or the
    tools fails here: it would take part in ASE's MPI broadcasting (rank 0's frames on every rank)."""
    offenders = []
    for folder in CHECKED:
        for directory, _, names in os.walk(os.path.join(ROOT, folder)):
            for name in names:
                path = os.path.join(directory, name)
                if not name.endswith(".py") or os.path.relpath(path, ROOT) == ALLOWED:
                    continue
                with open(path) as f:
                    offenders += [f"{os.path.relpath(path, ROOT)}:{line}: {text}"
                                  for line, text in direct_ase_io(f.read())]
    assert not offenders, "use pinn.io.ase_files (read, write, connect) instead:\n" + "\n".join(offenders)


def test_per_process_swaps_ase_world_and_puts_it_back(tmp_path):
    import ase.parallel
    from ase.build import bulk

    from pinn.io import ase_files
    world = ase.parallel.world
    before = world.__dict__.get("comm")
    marker = object()
    world.comm = marker
    try:
        with ase_files.per_process():
            assert isinstance(world.comm, ase.parallel.DummyMPI)
            with ase_files.per_process():  # nested: the inner one puts back the outer one's
                pass
            assert isinstance(world.comm, ase.parallel.DummyMPI)
        assert world.comm is marker
        with pytest.raises(ValueError):
            with ase_files.per_process():
                raise ValueError
        assert world.comm is marker
    finally:
        world.comm = before
    atoms = [bulk("Cu", cubic=True), bulk("Au", cubic=True).repeat((2, 1, 1))]
    for name in ("a.xyz", "a.traj"):
        ase_files.write(tmp_path / name, atoms)
        assert [len(a) for a in ase_files.read(tmp_path / name, ":")] == [4, 8]
        assert len(ase_files.read(tmp_path / name)) == 8  # ASE's default index: the last frame


#: run by 2 MPI ranks with mpi4py imported first, and no parallel world of pinn's
RANKS_SCRIPT = r"""
import json, os, sys
from mpi4py import MPI  # ASE's world is MPI's from here on
import ase.io
from pinn.io import ase_files, load_ase, load_mimic, load_tfrecord
rank = MPI.COMM_WORLD.rank
mine = sys.argv[1 + rank]
record = {"ase_read": len(ase.io.read(mine, ":")),  # ASE's MPI-aware read: rank 0's file on every rank
          "ase_files_read": len(ase_files.read(mine, ":")),
          "ase_files_iread": sum(1 for _ in ase_files.iread(mine)),
          "load_ase": sum(1 for _ in load_ase(mine)),
          "load_tfrecord": sum(1 for _ in load_tfrecord(mine[:-len(".xyz")] + ".tfr")),
          "load_mimic": sum(1 for _ in load_mimic(f"mimic{rank}/argon.mpt", f"mimic{rank}/run0.trr",
                                                   f"mimic{rank}/run0.ENERGIES", forces="trr"))}
ase_files.write(f"written{rank}.traj", ase_files.read(mine, ":"))  # every rank writes its own
record["world_before"] = ase_files.make_ase_world_per_process()
record["ase_read_after"] = len(ase.io.read(mine, ":"))  # now this rank's file
ase.io.write(f"plain{rank}.xyz", ase.io.read(mine, ":"))
with open(f"record{rank}.json", "w") as f:  # a file per rank: two ranks' lines on one pipe may interleave
    json.dump(record, f)
"""


@pytest.mark.skipif(not (shutil.which("mpirun") and importlib.util.find_spec("mpi4py")),
                    reason="mpirun and mpi4py are needed")
def test_each_mpi_rank_reads_its_own_file_with_mpi4py_imported(tmp_path):
    """pinn's loaders and ase_files on 2 MPI ranks where ASE's world is MPI's (mpi4py imported, no pinn world):
    each rank reads its own file (3 frames of 4 atoms, 7 of 8) and writes its own; after
    make_ase_world_per_process (what a parallel world does) plain ase.io is per rank too.  The MiMiC
    readers and TFRecords (pinn's own readers and tf.data) read each rank's own files as well."""
    from ase.build import bulk
    from ase.calculators.emt import EMT

    from pinn.demo import make_mimic_demo
    from pinn.io import ase_files, load_ase, write_tfrecord
    lengths = (3, 7)
    files = []
    for rank, n in enumerate(lengths):
        frames = []
        for i in range(n):
            atoms = bulk("Cu", "fcc", a=3.6, cubic=True).repeat((rank + 1, 1, 1))
            atoms.rattle(0.05, seed=i)
            atoms.calc = EMT()
            atoms.get_potential_energy()
            frames.append(atoms)
        files.append(str(tmp_path / f"rank{rank}.xyz"))
        ase_files.write(files[-1], frames)
        write_tfrecord(tmp_path / f"rank{rank}.tfr", load_ase(files[-1]))
        make_mimic_demo(str(tmp_path / f"mimic{rank}"), n_runs=1, n_frames=n, seed=rank)
    (tmp_path / "ranks.py").write_text(RANKS_SCRIPT)
    run = subprocess.run(["mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none", sys.executable,
                          "ranks.py", *files], env=ENV, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    records = {rank: json.loads((tmp_path / f"record{rank}.json").read_text()) for rank in range(2)}
    for rank, record in records.items():
        assert record["ase_read"] == lengths[0]  # ASE's own behaviour, the reason for pinn.io.ase_files
        assert record["ase_files_read"] == record["ase_files_iread"] == record["load_ase"] == record["ase_read_after"] \
            == lengths[rank]
        assert record["load_tfrecord"] == record["load_mimic"] == lengths[rank]
        assert record["world_before"] == 2
        assert len(ase_files.read(tmp_path / f"written{rank}.traj", ":")) == lengths[rank]
        assert len(ase_files.read(tmp_path / f"plain{rank}.xyz", ":")) == lengths[rank]
