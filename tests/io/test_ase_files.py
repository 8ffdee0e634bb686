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


# -- what no model can evaluate is refused where structures are loaded (pinn.io.geometry) ----------------

def _frames_with(path, change, frame=4, count=6):
    """``count`` rattled 32-atom CuAu cells labelled by ASE's EMT written to ``path``, frame ``frame``
    changed in place by ``change(atoms)`` after its labels were computed."""
    import ase.io
    from ase.build import bulk
    from ase.calculators.emt import EMT
    from ase.calculators.singlepoint import SinglePointCalculator
    frames = []
    for k in range(count):
        atoms = bulk("Cu", "fcc", a=3.7, cubic=True).repeat(2)
        atoms.numbers[::3] = 79
        atoms.rattle(0.05, seed=k)
        atoms.calc = EMT()
        results = {"energy": atoms.get_potential_energy(), "forces": atoms.get_forces()}
        if k == frame:
            change(atoms)
        atoms.calc = SinglePointCalculator(atoms, **results)
        frames.append(atoms)
    ase.io.write(path, frames)
    return str(path)


def test_coincident_atoms_and_non_finite_positions_are_refused_at_load(tmp_path):
    """load_ase names the file, the frame and the atoms of two atoms at one place (also through a periodic
    image) or of a non-finite position or cell; the frames of list_loader's loaders are checked as they are read,
    and the error inside tf.data keeps the line."""
    import numpy as np
    import tensorflow as tf
    from pinn.io import DataError, list_loader, load_ase
    from pinn.io.errors import op_error_line

    def same(atoms):
        atoms.positions[7] = atoms.positions[2]

    def image(atoms):  # 0.003 Å from atom 2's image one cell vector away
        atoms.positions[7] = atoms.positions[2] + atoms.cell[0] + [0.003, 0, 0]

    def nan(atoms):
        atoms.positions[1, 2] = np.nan

    def cell(atoms):
        atoms.cell[1, 1] = np.inf

    cases = [(same, r"atoms 2 and 7 are at the same position \(0 Å apart, closer than 0.01 Å\) at \["),
             (image, r"atoms 2 and 7 are at the same position \(0.003 Å apart"),
             (nan, r"atom 1 has a non-finite position \[.*, nan\] Å"),
             (cell, r"non-finite values in 'cell'")]
    for change, message in cases:
        path = _frames_with(tmp_path / f"{change.__name__}.xyz", change)
        with pytest.raises(DataError, match=f"^{path}, frame 4: {message}"):
            load_ase(path)
    assert len(list(load_ase(_frames_with(tmp_path / "fine.xyz", lambda atoms: None)))) == 6

    @list_loader
    def frames(k):
        coord = np.array([[0.0, 0, 0], [1.0, 0, 0], [0, 1.0, 0]])
        if k == 3:
            coord[2] = coord[0]
        return {"elems": np.array([8, 1, 1]), "coord": coord, "e_data": 0.0}
    with pytest.raises(tf.errors.InvalidArgumentError) as err:
        list(frames(range(5), shuffle=False))
    assert op_error_line(err.value) == "DataError: 3: atoms 0 and 2 are at the same position (0 Å apart, closer than " \
                                       "0.01 Å) at [0, 0, 0] Å"


def test_coincident_pairs_are_those_of_a_search_over_every_image():
    """pinn.io.neighbors.coincident_pair (the compiled neighbor list at MIN_DISTANCE) finds
    the pair a brute-force search over the 27 images finds, in triclinic, slab and open cells: two atoms at one
    place, two only through a periodic image (across a face), and none."""
    import itertools

    import numpy as np
    from pinn.io.geometry import MIN_DISTANCE
    from pinn.io.neighbors import coincident_pair
    rng = np.random.RandomState(0)
    images = np.array(list(itertools.product((-1, 0, 1), repeat=3)))
    kinds = {"direct": 0, "image": 0, "none": 0}
    for trial in range(36):
        n = (5, 40, 200)[trial % 3]
        kind = ("direct", "image", "none")[(trial // 3) % 3]
        cell = np.diag([6.0, 7.0, 8.0]) + rng.uniform(-1.5, 1.5, (3, 3)) * (trial % 2)
        pbc = rng.rand(3) < 0.6
        pbc[0] = kind == "image" or pbc[0]
        frac = rng.rand(n, 3)
        a, b = rng.choice(n, 2, replace=False)
        if kind == "direct":
            frac[b] = frac[a] + rng.uniform(-3e-4, 3e-4, 3)
        elif kind == "image":  # a and b 0.0005 apart in fractions of a, across the face at a = 0
            frac[b] = frac[a]
            frac[a, 0], frac[b, 0] = 0.0002, 0.9997
        coord = frac @ cell
        shifts = images[~np.any(images[:, ~pbc] != 0, axis=1)] @ cell
        d = np.linalg.norm(coord[None, :, None] + shifts[None, None] - coord[:, None, None], axis=-1).min(axis=-1)
        d[np.arange(n), np.arange(n)] = np.inf
        found = coincident_pair(coord, cell, pbc)
        if d.min() < MIN_DISTANCE:
            kinds[kind] += 1
            close = np.argwhere(np.triu(d < MIN_DISTANCE))[0]  # the first pair (i < j) in order
            assert found is not None and found[:2] == tuple(close), (trial, kind, found, close)
            assert found[2] == pytest.approx(d[close[0], close[1]], abs=1e-12)
            assert np.linalg.norm(coord[close[0]] - coord[close[1]]) > MIN_DISTANCE or kind != "image"
        else:
            assert found is None, (trial, kind, found, d.min())
    assert kinds["direct"] == kinds["image"] == 12, kinds


def test_the_neighbor_list_refuses_what_no_model_can_evaluate():
    """neighbor_list (the calculator's rebuilds, add_neighbors in any tf.data pipeline) refuses two atoms at
    one place and a non-finite position, naming the atoms (and, for a batch, the structure)."""
    import numpy as np
    import tensorflow as tf
    from pinn.io import add_neighbors
    from pinn.io.errors import op_error_line
    from pinn.io.neighbors import batch_neighbor_list, neighbor_list
    coord = np.array([[0.0, 0, 0], [1.5, 0, 0], [0, 1.5, 0], [1.5, 0, 0]])
    with pytest.raises(ValueError, match=r"^atoms 1 and 3 are at the same position \(0 Å apart"):
        neighbor_list(coord, np.zeros((3, 3)), [False] * 3, 4.0)
    coord[3] = [np.nan, 0, 0]
    with pytest.raises(ValueError, match=r"^atom 3 has a non-finite position \[nan, 0.0, 0.0\] Å"):
        neighbor_list(coord, np.zeros((3, 3)), [False] * 3, 4.0)
    coord[3] = [0, 0, 1.5]
    both = np.concatenate([coord, coord[[0, 1, 1]]])
    with pytest.raises(ValueError, match=r"^structure 1 of the batch: atoms 1 and 2 are at the same position"):
        batch_neighbor_list(both, np.zeros((2, 3, 3)), np.zeros((2, 3), bool), np.repeat([0, 1], [4, 3]), 4.0)
    dataset = tf.data.Dataset.from_tensor_slices({"elems": np.ones((2, 3), np.int32),
                                                  "coord": np.stack([coord[:3], coord[[0, 1, 1]]]).astype("float32")})
    with pytest.raises(tf.errors.InvalidArgumentError) as err:
        list(dataset.apply(add_neighbors(4.0)))
    assert op_error_line(err.value).startswith("ValueError: atoms 1 and 2 are at the same position (0 Å apart")


def test_tfrecord_files_are_read_whole_when_loaded(tmp_path):
    """load_tfrecord reads the file once: a truncated file, fewer records than the spec says, a spec that is not
    YAML or not a spec, and a record with two atoms at one place are refused naming the file (and the record);
    verify=False leaves them to the iteration."""
    import numpy as np
    import tensorflow as tf
    import yaml
    from pinn.io import DataError, load_tfrecord, sparse_batch, write_tfrecord
    rng = np.random.RandomState(0)
    coord = rng.rand(6, 3, 3).astype("float32") * 3
    structures = {"elems": np.tile(np.array([8, 1, 1], np.int32), (6, 1)), "coord": coord,
                  "e_data": rng.rand(6).astype("float32")}
    good = tmp_path / "good.tfr"
    assert write_tfrecord(str(good), tf.data.Dataset.from_tensor_slices(structures)) == 6
    assert len(list(load_tfrecord(str(good)))) == 6
    truncated = tmp_path / "cut.tfr"
    truncated.write_bytes(good.read_bytes()[:-30])
    shutil.copy(tmp_path / "good.yml", tmp_path / "cut.yml")
    with pytest.raises(DataError, match=rf"^{truncated}: damaged TFRecord file after 5 intact records \(truncated "
                       r"record at \d+"):
        load_tfrecord(str(truncated))
    assert len(list(load_tfrecord(str(truncated), verify=False).take(5))) == 5  # read lazily: unchecked
    spec = yaml.safe_load((tmp_path / "good.yml").read_text())
    spec["info"]["n_sample"] = 7
    shutil.copy(good, tmp_path / "more.tfr")
    (tmp_path / "more.yml").write_text(yaml.safe_dump(spec))
    with pytest.raises(DataError, match=rf"^{tmp_path}/more.tfr: 6 records, but its spec declares 7 \(info.n_sample\)"):
        load_tfrecord(str(tmp_path / "more.tfr"))
    shutil.copy(good, tmp_path / "noyaml.tfr")
    (tmp_path / "noyaml.yml").write_text("format: {coord: [\n")
    with pytest.raises(DataError, match=rf"^{tmp_path}/noyaml.yml: a TFRecord spec that is not YAML \(.*line 2"):
        load_tfrecord(str(tmp_path / "noyaml.tfr"))
    (tmp_path / "noyaml.yml").write_text(yaml.safe_dump({"format": {**spec["format"], "coord": "float32"}}))
    with pytest.raises(DataError, match=rf"^{tmp_path}/noyaml.yml: key 'coord' is not \{{dtype: NAME, shape:"):
        load_tfrecord(str(tmp_path / "noyaml.tfr"))
    coord[4, 2] = coord[4, 0]
    write_tfrecord(str(tmp_path / "same.tfr"), tf.data.Dataset.from_tensor_slices(structures))
    with pytest.raises(DataError, match=rf"^{tmp_path}/same.tfr, record 4: atoms 0 and 2 are at the same position"):
        load_tfrecord(str(tmp_path / "same.tfr"))
    write_tfrecord(str(tmp_path / "batches.tfr"), tf.data.Dataset.from_tensor_slices(structures).apply(sparse_batch(4)))
    with pytest.raises(DataError, match=rf"^{tmp_path}/batches.tfr, record 1: structure 0 of the batch: atoms 0 and 2 "):
        load_tfrecord(str(tmp_path / "batches.tfr"))


def test_a_datasets_python_callbacks_go_with_it(alloy_xyz):
    """load_ase's generator and add_neighbors' neighbour-list function (Python callbacks of TensorFlow) are held by
    the dataset: an iterator whose dataset is no longer named still runs, and once both are gone the frames they
    read are freed (TensorFlow keeps such callbacks on the process-wide graph for the process's life otherwise)."""
    import gc
    import weakref

    from pinn.io import add_neighbors, load_ase, sparse_batch
    from pinn.runtime.py_funcs import _process_list

    kept = len(_process_list())
    dataset = load_ase(alloy_xyz).apply(add_neighbors(4.5)).apply(sparse_batch(4))
    assert len(_process_list()) == kept
    generators = [f for f in dataset._input_dataset._input_dataset._pinn_py_funcs]
    assert generators, "load_ase's dataset holds no callbacks"
    iterator = iter(dataset)
    del dataset
    gc.collect()
    assert "ind_2" in next(iterator)
    watched = [weakref.ref(f) for f in generators]
    del generators, iterator
    gc.collect()
    assert not any(ref() is not None for ref in watched), "a dataset's callbacks outlived it"
