"""load_ase(stream=True): extended XYZ files and ASE databases read frame by frame.

Streamed and held, the same files give the same structures, splits and order; the frames are read when
the dataset reaches them (a file changed after it was indexed is refused by name); the index pass
finds every frame of files cut at any byte of its chunks, and names the file and frame of what it
cannot read; Python's memory while streaming does not grow with the number of frames.
"""
import gc
import logging
import os
import signal
import time
import tracemalloc

import numpy as np
import pytest
from ase.build import bulk
from ase.calculators.singlepoint import SinglePointCalculator
from ase.io import read, write

from pinn.io import ase_stream, load_ase
from pinn.io.base import DataError

SPLIT = {"train": 5, "eval": {"vali": 2, "test": 1}}


def _frames(n, seed=0, atoms=8):
    rng = np.random.RandomState(seed)
    base = bulk("Cu", "fcc", a=3.61, cubic=True) * ((1, 1, 2) if atoms == 8 else (2, 2, 2))
    out = []
    for k in range(n):
        frame = base.copy()
        frame.positions += rng.normal(scale=0.1, size=frame.positions.shape)
        if k % 3 == 1:
            frame.numbers[0] = 79  # some gold: the elements vary too
        frame.calc = SinglePointCalculator(frame, energy=float(rng.normal(-30, 1)),
                                           forces=rng.normal(size=(len(frame), 3)), stress=rng.normal(size=6) * 0.01)
        out.append(frame)
    return out


def _structures(dataset):
    return [{key: value.numpy() for key, value in s.items()} for s in dataset]


def _same(held, streamed):
    if isinstance(held, dict):
        assert held.keys() == streamed.keys()
        for name in held:
            _same(held[name], streamed[name])
        return
    a, b = _structures(held), _structures(streamed)
    assert len(a) == len(b) > 0
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for key in x:
            np.testing.assert_array_equal(x[key], y[key], err_msg=key)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("stream")
    frames = _frames(30)
    write(root / "a.xyz", frames[:17], format="extxyz")
    write(root / "b.extxyz", frames[17:], format="extxyz")
    paths = {"xyz": [str(root / "a.xyz"), str(root / "b.extxyz")]}
    for suffix in (".db", ".aselmdb"):
        if suffix == ".aselmdb":
            try:
                import ase_db_backends  # noqa: F401
            except ImportError:
                continue
        from ase.db import connect
        with connect(str(root / f"c{suffix}")) as db:
            for frame in frames:
                db.write(frame)
        paths[suffix[1:]] = [str(root / f"c{suffix}")]
    return paths


@pytest.mark.parametrize("kind", ["xyz", "db", "aselmdb"])
@pytest.mark.parametrize("split", [False, SPLIT])
def test_streamed_and_held_give_the_same_structures_splits_and_order(files, kind, split):
    if kind not in files:
        pytest.skip("ase-db-backends (the .aselmdb backend) is not installed")
    paths = files[kind] if len(files[kind]) > 1 else files[kind][0]
    for seed in (0, 5):
        held = load_ase(paths, split=split, seed=seed, stream=False)
        streamed = load_ase(paths, split=split, seed=seed, stream=True)
        _same(held, streamed)
    if split:  # another seed, other subsets
        one = _structures(load_ase(paths, split=split, seed=0, stream=True)["train"])
        other = _structures(load_ase(paths, split=split, seed=5, stream=True)["train"])
        assert [s["e_data"] for s in one] != [s["e_data"] for s in other]


def test_frames_are_read_when_the_dataset_reaches_them(tmp_path):
    """The dataset holds where the frames are, not the frames: a frame that cannot be parsed is found when
    the dataset reaches it (the frames before it are given)."""
    path = tmp_path / "x.xyz"
    write(path, _frames(6), format="extxyz")
    lines = path.read_text().splitlines(keepends=True)
    per_frame = len(lines) // 6
    lines[4 * per_frame + 2] = lines[4 * per_frame + 2].replace(" ", " x", 1)
    path.write_text("".join(lines))
    given = []
    with pytest.raises(Exception, match=r"x.xyz, frame 4: ASE could not read it"):
        for structure in load_ase(str(path), stream=True):
            given.append(float(structure["e_data"]))
    assert len(given) == 4


def _parse_children():
    """The process ids of this process's children that run ``pinn.io.parse_process`` (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                command = f.read()
        except OSError:
            continue
        if parent == os.getpid() and b"pinn.io.parse_process" in command:
            found.append(int(entry))
    return found


def _gone(pid, within=10.0):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if pid not in _parse_children():
            return True
        time.sleep(0.05)
    return False


def test_streamed_xyz_frames_are_parsed_in_a_child_that_ends_with_the_dataset(tmp_path):
    """The frames of a streamed extended XYZ are parsed by a child process (its Python is not the training
    step's), started with the dataset, kept over epochs, and gone when the dataset is."""
    path = tmp_path / "x.xyz"
    write(path, _frames(40), format="extxyz")
    before = set(_parse_children())
    dataset = load_ase(str(path), stream=True)
    children = set(_parse_children()) - before
    assert len(children) == 1, children
    epochs = [_structures(dataset), _structures(dataset)]
    assert set(_parse_children()) - before == children  # the same child for the second epoch
    held = _structures(load_ase(str(path), stream=False))
    for epoch in epochs:
        assert [s["e_data"] for s in epoch] == [s["e_data"] for s in held]
    del dataset
    gc.collect()
    assert _gone(children.pop())


def test_an_empty_streamed_part_starts_no_parse_process(tmp_path):
    """A split part with no frames is an empty dataset; iterating it asks no child for anything."""
    path = tmp_path / "x.xyz"
    write(path, _frames(3), format="extxyz")
    before = set(_parse_children())
    parts = load_ase(str(path), split={"most": 100, "none": 1}, stream=True)
    started = set(_parse_children()) - before
    assert len(started) == 1  # the one started with the datasets
    assert _structures(parts["none"]) == [] and len(_structures(parts["most"])) == 3
    assert set(_parse_children()) - before == started


def test_a_parse_process_that_dies_is_reported(tmp_path):
    """A child killed while the dataset reads from it: iterating raises DataError saying so, with its exit
    status; the dataset is not left waiting."""
    path = tmp_path / "x.xyz"
    write(path, _frames(320), format="extxyz")
    before = set(_parse_children())
    dataset = load_ase(str(path), stream=True)
    iterator = iter(dataset)
    next(iterator)
    (child,) = set(_parse_children()) - before
    os.kill(child, signal.SIGKILL)
    with pytest.raises(Exception, match=r"the process that parses streamed frames ended \(exit status -9\)"):
        for _ in iterator:
            pass


def _rewritten(path, change):
    """``path`` rewritten by ``change`` (text -> text), its modification time surely another."""
    stat = os.stat(path)
    path.write_text(change(path.read_text()))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10 ** 9))


@pytest.mark.parametrize("change", ["same size", "appended"])
def test_a_streamed_file_that_changed_since_it_was_indexed_is_refused(tmp_path, change):
    """Energies rewritten in place (the same number of bytes) or frames appended between two passes: the
    frames would be read at the old offsets, so the next read is refused, naming the file."""
    path = tmp_path / "x.xyz"
    write(path, _frames(6), format="extxyz")
    dataset = load_ase(str(path), stream=True)
    before = [float(s["e_data"]) for s in dataset]
    assert len(before) == 6 and min(before) < 0
    if change == "same size":
        _rewritten(path, lambda text: text.replace("energy=-", "energy=+"))
    else:
        _rewritten(path, lambda text: text + text)
    with pytest.raises(Exception, match=r"x.xyz: changed since it was indexed .*load the data again"):
        _structures(dataset)


def test_a_streamed_database_that_changed_is_refused_by_name(tmp_path):
    """A streamed SQLite database written to after it was indexed: refused by name as an XYZ file is."""
    from ase.db import connect
    path = str(tmp_path / "c.db")
    with connect(path) as db:
        for frame in _frames(4):
            db.write(frame)
    dataset = load_ase(path, stream=True)
    assert len(_structures(dataset)) == 4
    stat = os.stat(path)
    with connect(path) as db:
        db.delete([2])
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10 ** 9))
    with pytest.raises(Exception, match=r"c.db: changed since it was indexed"):
        _structures(dataset)


def test_a_missing_row_of_a_held_database_names_the_file(tmp_path):
    """An .aselmdb database held open by a streamed dataset keeps the rows it found when it opened; a row
    deleted since (by another process) is an error naming the file, for the held and the streamed reader."""
    pytest.importorskip("ase_db_backends")
    import subprocess
    import sys

    from ase.db import connect
    path = str(tmp_path / "c.aselmdb")
    with connect(path) as db:
        for frame in _frames(4):
            db.write(frame)
    streamed = load_ase(path, stream=True)  # holds the database open
    subprocess.run([sys.executable, "-c", f"from ase.db import connect\nwith connect({path!r}) as db: db.delete([3])"],
                   check=True)
    with pytest.raises(DataError, match=r"c.aselmdb: could not read its rows \(after row 2\): KeyError: .*Id 3"):
        load_ase(path, stream=False)
    with pytest.raises(Exception, match=r"c.aselmdb: changed since it was indexed"):
        _structures(streamed)
    del streamed


@pytest.mark.parametrize("chunk", [5, 64, 1000])
def test_the_index_finds_every_frame_whatever_the_chunks(tmp_path, monkeypatch, chunk):
    """Frames with empty comment lines, a last line without its newline and blank lines at the end; scanned
    in chunks that cut lines anywhere, the offsets are where ASE's reader finds each frame."""
    monkeypatch.setattr(ase_stream, "_CHUNK", chunk)
    frames = _frames(7)
    lines = []
    for frame in frames:
        lines += [str(len(frame)), ""] + [f"Cu {x:.6f} {y:.6f} {z:.6f}" for x, y, z in frame.positions]
    for ending in ("\n", "\n\n\n", ""):
        path = tmp_path / f"plain{len(ending)}.xyz"
        path.write_text("\n".join(lines) + ending)
        offsets = ase_stream.xyz_offsets(str(path))
        assert len(offsets) == len(frames) + 1 and offsets[-1] == os.path.getsize(path)
        data = path.read_bytes()
        for k, frame in enumerate(frames):
            piece = data[offsets[k]:offsets[k + 1]].decode()
            assert piece.split("\n", 1)[0] == str(len(frame))
            np.testing.assert_allclose(read(path, index=k).positions, frame.positions, atol=1e-6)


def test_what_cannot_be_indexed_or_read_is_named(tmp_path):
    good = tmp_path / "good.xyz"
    write(good, _frames(4), format="extxyz")
    lines = good.read_text().splitlines(keepends=True)
    per_frame = len(lines) // 4
    cut = tmp_path / "cut.xyz"
    cut.write_text("".join(lines[:-2]))
    with pytest.raises(DataError, match=r"cut.xyz, frame 3: the file ends inside this frame"):
        load_ase(str(cut), stream=True)
    header = tmp_path / "header.xyz"
    header.write_text("".join(lines[:per_frame] + ["eight\n"] + lines[per_frame + 1:]))
    with pytest.raises(DataError, match=r"header.xyz, frame 1: its first line b'eight' is not an atom count"):
        load_ase(str(header), stream=True)
    gap = tmp_path / "gap.xyz"
    gap.write_text("".join(lines[:per_frame] + ["\n"] + lines[per_frame:]))
    with pytest.raises(DataError, match=r"gap.xyz: a blank line \(line 11\) where frame 1 would start"):
        load_ase(str(gap), stream=True)
    bad = tmp_path / "bad.xyz"  # a coordinate of frame 2 that is not a number: found when the dataset reaches it
    broken = list(lines)
    broken[2 * per_frame + 3] = broken[2 * per_frame + 3].replace(" ", " x", 1)
    bad.write_text("".join(broken))
    dataset = load_ase(str(bad), stream=True)
    with pytest.raises(Exception, match=r"bad.xyz, frame 2: ASE could not read it"):
        _structures(dataset)
    with pytest.raises(DataError, match=r"load_ase\(stream=True\): .*x.traj' is not an extended XYZ file"):
        load_ase(str(tmp_path / "x.traj"), stream=True)
    with pytest.raises(ValueError, match="stream must be True, False or None"):
        load_ase(str(good), stream="yes")
    with pytest.raises(DataError, match="missing.xyz: no such file"):
        load_ase([str(good), str(tmp_path / "missing.xyz")], stream=True)


def test_a_frame_without_the_first_frames_labels_is_named(tmp_path):
    frames = _frames(5)
    frames[3].calc = SinglePointCalculator(frames[3], energy=1.0)  # no forces or stress
    path = tmp_path / "labels.xyz"
    write(path, frames, format="extxyz")
    with pytest.raises(Exception, match=r"labels.xyz, frame 3: keys .* differ from the first structure's"):
        _structures(load_ase(str(path), stream=True))


def test_by_default_large_inputs_stream_and_say_so(files, monkeypatch, caplog):
    monkeypatch.setattr(ase_stream, "STREAM_ABOVE_BYTES", 1000)
    with caplog.at_level(logging.INFO, logger="pinn.io.ase_stream"):
        _same(load_ase(files["xyz"], stream=False), load_ase(files["xyz"]))
    assert "load_ase: streaming the frames of 2 file(s)" in caplog.text
    monkeypatch.setattr(ase_stream, "STREAM_ABOVE_BYTES", 10 ** 9)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="pinn.io.ase_stream"):
        load_ase(files["xyz"])
    assert "streaming" not in caplog.text


def _traced_peak(path, stream):
    tracemalloc.start()
    try:
        for _ in load_ase(path, stream=stream):
            pass
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_streamed_memory_does_not_grow_with_the_frames(tmp_path, monkeypatch):
    """Python's peak allocations (tracemalloc) while making and iterating the datasets of 40 and of 320
    frames of 32 atoms: held, they grow with the frames (some 9 kB a frame: the frames and, while reading,
    ASE's Atoms); streamed, by a small fraction of that: the index (16 bytes a frame) and what TensorFlow's
    iterator keeps of the elements it gave (~0.2 kB a frame here, in held datasets as well; it stops
    growing over epochs).  The index pass reads 64 kB at a time here (16 MB by default: more than these files)."""
    monkeypatch.setattr(ase_stream, "_CHUNK", 65536)
    frames = _frames(320, atoms=32)
    small, large = tmp_path / "small.xyz", tmp_path / "large.xyz"
    write(small, frames[:40], format="extxyz")
    write(large, frames, format="extxyz")
    for stream in (True, False):  # first calls: imports, TensorFlow's function caches
        _traced_peak(str(large), stream)
        _traced_peak(str(small), stream)
    def growth(stream):  # the least of three: a lazy cache of TensorFlow's filled in one pass is not the data's
        return min(_traced_peak(str(large), stream) - _traced_peak(str(small), stream) for _ in range(3))
    held, streamed = growth(False), growth(True)
    assert held > 1_500_000, held  # 280 frames more, read and held: megabytes
    assert streamed < held / 8, (streamed, held)


@pytest.mark.parametrize("cache", ["auto", "memory", "none", "file"])
def test_the_run_files_cache_of_streamed_training_data(tmp_path, monkeypatch, caplog, cache):
    """`pinn train`'s data.cache with streamed training files (streamed as large files are): auto and none read
    the files again every epoch (a file rewritten between two epochs is refused by name), memory and a file
    path keep the first epoch's structures (the path: TensorFlow's cache files appear)."""
    import yaml

    from pinn.training.run_file import input_fns, read_config
    from pinn.parallel.serial import SerialWorld
    monkeypatch.setattr(ase_stream, "STREAM_ABOVE_BYTES", 0)
    data = tmp_path / "train.xyz"
    write(data, _frames(8), format="extxyz")
    choice = str(tmp_path / "cache" / "train") if cache == "file" else cache
    os.makedirs(tmp_path / "cache")
    run = tmp_path / "run.yml"
    run.write_text(yaml.safe_dump({"data": {"train": str(data), "batch_size": 4, "shuffle_buffer": 0,
                                            "cache": choice}, "train": {"max_epochs": 1}}))
    _, section_data, section_train = read_config(str(run))
    with caplog.at_level(logging.INFO, logger="pinn"):
        train_fn, _ = input_fns(section_data, section_train, SerialWorld(), rc=4.5)
    dataset = train_fn()
    first = np.concatenate([batch["e_data"].numpy() for batch in dataset])
    _rewritten(data, lambda text: text.replace("energy=-", "energy=+"))
    assert len(first) == 8 and first.max() < 0
    if cache in ("auto", "none"):
        with pytest.raises(Exception, match=r"train.xyz: changed since it was indexed"):
            np.concatenate([batch["e_data"].numpy() for batch in dataset])
    else:
        np.testing.assert_array_equal(np.concatenate([batch["e_data"].numpy() for batch in dataset]), first)
    assert ("data.cache auto: the training files hold" in caplog.text) == (cache == "auto")
    if cache == "file":
        assert any(name.startswith("train") and name.endswith(".index") for name in os.listdir(tmp_path / "cache"))


def test_a_bad_cache_is_refused_by_name(tmp_path):
    import yaml

    from pinn.training.run_file import read_config
    from pinn.schema import ParamsError
    run = tmp_path / "run.yml"
    run.write_text(yaml.safe_dump({"data": {"train": "x.xyz", "cache": " "}, "train": {"max_epochs": 1}}))
    with pytest.raises(ParamsError, match="data.cache: an empty path"):
        read_config(str(run))


def test_a_streamed_files_elements_are_checked_as_read_not_in_a_pass(tmp_path, monkeypatch):
    """A training file large enough to stream is not read whole before training to find its elements (that pass
    cost as much as an epoch: 75 s on 377 MB): each frame is checked when read, and an element the network lacks
    stops the run naming the file and frame.  The datasets know their length, so an epoch is counted without a
    pass either."""
    from pinn.io.ase_stream import FrameIndex
    from pinn.training.epochs import steps_per_epoch_of
    from pinn.training.run_file import input_pipeline, load_structures
    from pinn.parallel.serial import SerialWorld
    frames = _frames(6)
    frames[4].numbers[1] = 47  # silver, in frame 4 only
    path = tmp_path / "train.xyz"
    write(path, frames, format="extxyz")
    reads = []
    read = FrameIndex.read
    monkeypatch.setattr(FrameIndex, "read", lambda index, k: reads.append(k) or read(index, k))
    monkeypatch.setattr(ase_stream, "STREAM_ABOVE_BYTES", 0)
    dataset = load_structures(str(path), atom_types=[29, 79])
    assert reads == [0], reads  # the first frame, for the keys and shapes: no pass
    assert int(dataset.cardinality()) == 6
    assert steps_per_epoch_of(lambda: input_pipeline(dataset, rc=4.0, batch_size=4), 1, SerialWorld()) == 2
    assert reads == [0]
    with pytest.raises(Exception, match=rf"{path}, frame 4: element\(s\) Ag \(47\) not in network.params.atom_types "
                                        r"\[29, 79\]"):
        _structures(dataset)
    assert len(_structures(load_structures(str(path), atom_types=[29, 47, 79]))) == 6
    # held (a small file), the elements are read in a pass before training, as before
    monkeypatch.setattr(ase_stream, "STREAM_ABOVE_BYTES", 10 ** 9)
    with pytest.raises(DataError, match=rf"^{path}: element\(s\) Ag \(47\) not in"):
        load_structures(str(path), atom_types=[29, 79])


def test_elements_checked_as_read_look_at_the_qm_atoms_of_qmmm_frames():
    """The check as read (compared in TensorFlow, Python only for the message) of QM/MM frames: an MM atom's
    element the network lacks passes, a QM atom's stops the run naming the frame."""
    import tensorflow as tf

    from pinn.training.run_file import elements_checked_as_read
    elems = [np.array([8, 1, 1, 11], np.int32), np.array([8, 1, 17, 11], np.int32)]
    qm = [np.array([True, True, True, False]), np.array([True, True, True, False])]
    dataset = tf.data.Dataset.from_tensor_slices({"elems": np.stack(elems), "qm": np.stack(qm)})
    checked = iter(elements_checked_as_read(dataset, [1, 8], "w.xyz"))
    assert next(checked)["elems"].numpy().tolist() == [8, 1, 1, 11]  # Na in the MM region only
    with pytest.raises(Exception, match=r"w.xyz, frame 1: element\(s\) Cl \(17\) not in"):
        next(checked)


def test_a_streamed_split_is_checked_as_read(tmp_path, monkeypatch):
    """data.split of a streamed file: each part's structures are checked as read, the message naming the data
    and the structure's place in its part."""
    from pinn.training.run_file import datasets
    from pinn.parallel.serial import SerialWorld
    frames = _frames(6)
    for frame in frames:
        frame.numbers[1] = 47
    path = tmp_path / "train.xyz"
    write(path, frames, format="extxyz")
    monkeypatch.setattr(ase_stream, "STREAM_ABOVE_BYTES", 0)
    data = {"mimic": None, "split": {"train": 2, "eval": 1}, "train": str(path), "eval": None, "seed": 0}
    train, evaluation = datasets(data, SerialWorld(), atom_types=[29, 79])
    for part, name in ((train, "train"), (evaluation, "eval")):
        with pytest.raises(Exception, match=rf"data.train \({path}\), structure 0 of the {name} part \(in the "
                                            r"split's order\): element\(s\) Ag \(47\)"):
            _structures(part)


def test_held_frames_are_served_without_python_per_structure(tmp_path, monkeypatch):
    """Held (read and checked at load), the frames are sliced out of one array per key in TensorFlow: iterating
    calls no Python per structure (no second check), which in the first epoch would take Python's lock from the
    training step; a split part without frames is an empty dataset."""
    import pinn.io.base as base
    frames = _frames(5)
    path = tmp_path / "held.xyz"
    write(path, frames, format="extxyz")
    parts = load_ase(str(path), stream=False, split={"train": 4, "eval": 1}, seed=1)
    checks = []
    check = base.check_structure
    monkeypatch.setattr(base, "check_structure", lambda *a, **k: checks.append(1) or check(*a, **k))
    train = _structures(parts["train"])
    assert len(train) == 4 and len(_structures(parts["eval"])) == 1 and checks == []
    assert int(parts["train"].cardinality()) == 4
    one = load_ase(str(path), stream=True, split={"train": 4, "eval": 1}, seed=1)
    assert all(np.array_equal(a[k], b[k]) for a, b in zip(train, _structures(one["train"])) for k in a)
    tiny = load_ase([frames[0]], stream=False, split={"train": 9, "eval": 1})
    assert len(_structures(tiny["train"])) == 1 and _structures(tiny["eval"]) == []
