import numpy as np
import pytest
import tensorflow as tf
from ase.build import bulk
from ase.calculators.singlepoint import SinglePointCalculator

from pinn import keys as K
from pinn.io import (DataError, add_neighbors, load_ase, load_numpy, load_tfrecord, sparse_batch, split_items,
                     write_tfrecord)
from pinn.io.neighbors import neighbor_list


def _frames(n, rng, with_stress=True):
    frames = []
    for i in range(n):
        a = bulk("Cu", "fcc", a=3.6, cubic=True)
        if i % 2:
            a = a * (1, 1, 2)
        a.rattle(0.05, seed=i)
        res = {"energy": float(rng.normal()), "forces": rng.normal(size=(len(a), 3))}
        if with_stress:
            res["stress"] = rng.normal(size=6)
        a.calc = SinglePointCalculator(a, **res)
        frames.append(a)
    return frames


def test_split_sizes_seed_and_nesting():
    items = list(range(103))
    s = split_items(items, {"train": 8, "vali": 1, "test": 1}, seed=3)
    assert [len(s[k]) for k in ("train", "vali", "test")] == [82, 10, 11] or \
        sum(len(v) for v in s.values()) == 103
    assert sorted(s["train"] + s["vali"] + s["test"]) == items
    assert split_items(items, {"train": 8, "vali": 1, "test": 1}, seed=3) == s
    assert split_items(items, {"train": 8, "vali": 1, "test": 1}, seed=4) != s
    nested = split_items(items, {"train": 8, "eval": {"vali": 1, "test": 1}}, seed=0)
    assert set(nested["eval"]) == {"vali", "test"}
    assert sum(map(len, [nested["train"], nested["eval"]["vali"], nested["eval"]["test"]])) == 103
    assert sorted(split_items(items, {"all": 1})["all"]) == items
    with pytest.raises(ValueError, match="split.train"):
        split_items(items, {"train": -1})


def test_load_ase_file_list_and_db(tmp_path, rng):
    frames = _frames(6, rng)
    import ase.db
    import ase.io
    ase.io.write(tmp_path / "f.xyz", frames)
    with ase.db.connect(str(tmp_path / "f.db")) as db:
        for a in frames:
            db.write(a)
    for source in (str(tmp_path / "f.xyz"), frames, str(tmp_path / "f.db"), ase.db.connect(str(tmp_path / "f.db"))):
        ds = load_ase(source, shuffle=False)
        got = list(ds.as_numpy_iterator())
        assert len(got) == 6
        np.testing.assert_allclose(got[1][K.COORD], frames[1].positions, rtol=1e-6)
        np.testing.assert_allclose(got[1][K.F_DATA], frames[1].get_forces(), rtol=1e-5, atol=1e-6)
        assert got[1][K.E_DATA] == pytest.approx(frames[1].get_potential_energy(), rel=1e-6)
        assert got[1][K.S_DATA].shape == (3, 3)
        assert got[1][K.PBC].all()


def test_load_ase_list_of_files(tmp_path, rng):
    """A list of file names (what distribute_data returns) gives the frames of every file, in order."""
    import ase.io
    from pinn.io import distribute_data
    frames = _frames(5, rng)
    ase.io.write(tmp_path / "a.xyz", frames[:2])
    ase.io.write(tmp_path / "b.xyz", frames[2:])
    files = [str(tmp_path / "a.xyz"), tmp_path / "b.xyz"]  # str and os.PathLike
    got = list(load_ase(files, shuffle=False).as_numpy_iterator())
    assert len(got) == 5
    for item, atoms in zip(got, frames):
        np.testing.assert_allclose(item[K.COORD], atoms.positions, rtol=1e-6, atol=1e-6)
        assert item[K.E_DATA] == pytest.approx(atoms.get_potential_energy(), rel=1e-6)
    (share,) = distribute_data(files, rank=0, size=1)
    assert len(list(load_ase(share, shuffle=False))) == 5
    split = load_ase(files, split={"train": 4, "test": 1}, seed=0)
    assert sum(len(list(split[k])) for k in ("train", "test")) == 5
    with pytest.raises(DataError, match=r"missing.xyz: no such file"):
        load_ase([files[0], str(tmp_path / "missing.xyz")])
    with pytest.raises(DataError, match=r"mixes file names and Atoms \(item 0 is a file name, item 1 an Atoms\)"):
        load_ase([files[0], frames[0]])
    with pytest.raises(DataError, match=r"item 1 of the list is a int, not a file name or ase.Atoms"):
        load_ase([frames[0], 3])


def test_load_ase_errors(tmp_path, rng):
    empty = tmp_path / "empty.xyz"
    empty.write_text("")
    with pytest.raises(DataError, match="empty.xyz: file is empty"):
        load_ase(str(empty))
    with pytest.raises(DataError, match="no such file"):
        load_ase(str(tmp_path / "missing.xyz"))
    frames = _frames(3, rng)
    frames[2].calc.results["forces"][1, 0] = np.nan
    with pytest.raises(DataError, match=r"Atoms 2: non-finite values in 'f_data'"):
        list(load_ase(frames, shuffle=False))
    garbage = tmp_path / "bad.xyz"
    garbage.write_text("3\nnot really\nX 0 0\n")
    with pytest.raises(DataError, match="bad.xyz"):
        load_ase(str(garbage))
    # labels of the wrong shape: the structure is named
    from ase.calculators.singlepoint import SinglePointCalculator
    bad = _frames(2, rng)
    bad[1].calc = SinglePointCalculator(bad[1], energy=0.0, forces=np.zeros((len(bad[1]) + 1, 3)))
    with pytest.raises(DataError, match=rf"Atoms 1: forces of shape \({len(bad[1]) + 1}, 3\) for {len(bad[1])} atoms"):
        load_ase(bad)
    bad[1].calc = SinglePointCalculator(bad[1], energy=0.0, stress=np.zeros(4))
    with pytest.raises(DataError, match=r"Atoms 1: stress of shape \(4,\); expected 6 Voigt components or 3x3"):
        load_ase(bad)


def test_load_ds_says_that_a_tfrecord_is_not_shuffled(tmp_path, rng, caplog):
    from pinn.io import load_ds, write_tfrecord
    write_tfrecord(str(tmp_path / "c.tfr"), load_ase(_frames(3, rng)))
    with caplog.at_level("INFO", logger="pinn"):
        assert len(list(load_ds(str(tmp_path / "c.tfr")))) == 3
    assert "a TFRecord cache is read in the order it was written, so shuffle and seed (0) do not apply" in caplog.text


def test_sparse_batch_and_neighbors(rng):
    frames = _frames(5, rng)
    ds = load_ase(frames, shuffle=False)
    batches = list(ds.apply(add_neighbors(3.0)).apply(sparse_batch(3)).as_numpy_iterator())
    assert [len(b[K.E_DATA]) for b in batches] == [3, 2]
    b = batches[0]
    sizes = [len(a) for a in frames[:3]]
    np.testing.assert_array_equal(b[K.IND_1][:, 0], np.repeat(np.arange(3), sizes))
    np.testing.assert_allclose(b[K.COORD], np.concatenate([a.positions for a in frames[:3]]), rtol=1e-6)
    assert b[K.CELL].shape == (3, 3, 3)
    # pairs are offset into the batch and match each structure's own list
    expected, offset = [], 0
    for a in frames[:3]:
        p, _ = neighbor_list(a.positions, a.cell[:], a.pbc, 3.0)
        expected.append(p + offset)
        offset += len(a)
    np.testing.assert_array_equal(b[K.IND_2], np.concatenate(expected))
    # neighbor lists on a batch equal those computed per structure
    late = next(ds.apply(sparse_batch(3)).apply(add_neighbors(3.0)).as_numpy_iterator())
    np.testing.assert_array_equal(late[K.IND_2], b[K.IND_2])
    np.testing.assert_allclose(late[K.SHIFT], b[K.SHIFT])


def _structure(n_atoms, n_pairs, rng, extra=None):
    out = {K.ELEMS: rng.randint(1, 9, n_atoms).astype(np.int32), K.COORD: rng.normal(size=(n_atoms, 3)),
           K.CELL: rng.normal(size=(3, 3)), K.PBC: np.array([True, False, True]), K.E_DATA: rng.normal(),
           K.F_DATA: rng.normal(size=(n_atoms, 3)), K.Q_DATA: rng.normal(size=n_atoms),
           K.IND_2: rng.randint(0, n_atoms, (n_pairs, 2)).astype(np.int32), K.SHIFT: rng.normal(size=(n_pairs, 3))}
    out = {k: np.asarray(v, np.float32) if np.asarray(v).dtype == np.float64 else v for k, v in out.items()}
    return {**out, **(extra or {})}


def _as_dataset(structures):
    spec = {k: tf.TensorSpec(K.SHAPES.get(k, [None] * np.ndim(v)), tf.as_dtype(np.asarray(v).dtype))
            for k, v in structures[0].items()}
    return tf.data.Dataset.from_generator(lambda: iter(structures), output_signature=spec)


def test_sparse_batch_by_padding_equals_ragged_batching(rng):
    """Padded batching with the padding dropped gives the batch of ragged batching, every key, dtype and
    value; a structure without pairs and the short last batch included."""
    from pinn.io.batch import _flatten_ragged
    sizes = [(5, 12), (9, 40), (1, 0), (7, 3), (2, 2), (6, 30), (3, 5)]
    dataset = _as_dataset([_structure(a, p, rng) for a, p in sizes])
    padded = list(dataset.apply(sparse_batch(3)).as_numpy_iterator())
    ragged = list(dataset.ragged_batch(3).map(_flatten_ragged).as_numpy_iterator())
    assert len(padded) == len(ragged) == 3
    for got, expected in zip(padded, ragged):
        assert set(got) == set(expected) == set(dataset.element_spec) | {K.IND_1}
        for key in got:
            assert got[key].dtype == expected[key].dtype and got[key].shape == expected[key].shape, key
            np.testing.assert_array_equal(got[key], expected[key], err_msg=key)
    np.testing.assert_array_equal(padded[0][K.IND_1][:, 0], np.repeat([0, 1, 2], [5, 9, 1]))
    assert padded[0][K.IND_2].shape == (52, 2) and padded[0][K.IND_2][12:].min() >= 5  # second structure's pairs
    # a key of variable shape that pinn does not know stays ragged (ragged batching)
    odd = _as_dataset([_structure(a, p, rng, {"labels": np.arange(a, dtype=np.int32)}) for a, p in sizes])
    first = next(iter(odd.apply(sparse_batch(3))))
    assert isinstance(first["labels"], tf.RaggedTensor) and first["labels"].shape[0] == 3


def test_load_numpy_and_tfrecord(tmp_path, rng):
    data = {K.COORD: rng.normal(size=(7, 4, 3)), K.ELEMS: [1, 1, 8, 6], K.E_DATA: rng.normal(size=7),
            K.F_DATA: rng.normal(size=(7, 4, 3))}
    ds = load_numpy(data, split=False, shuffle=False)
    first = next(ds.as_numpy_iterator())
    np.testing.assert_allclose(first[K.COORD], data[K.COORD][0], rtol=1e-6)
    assert set(first) == set(data)  # the keys given, nothing added (no cell: an open structure)
    n = write_tfrecord(str(tmp_path / "c.tfr"), ds)
    assert n == 7
    back = list(load_tfrecord(str(tmp_path / "c.tfr")).as_numpy_iterator())
    for x, y in zip(back, ds.as_numpy_iterator()):
        assert set(x) == set(y)
        for k in x:
            np.testing.assert_array_equal(x[k], y[k])
    with pytest.raises(DataError, match="e_data' has 3 frames"):
        load_numpy({**data, K.E_DATA: np.zeros(3)})
    with pytest.raises(DataError, match="atomic numbers"):
        list(load_numpy({**data, K.ELEMS: [0, 1, 1, 1]}, split=False))
