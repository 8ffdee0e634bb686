"""The numba training engine (pinn.engines.gradients) against TensorFlow's gradient tapes.

The engine computes the training loss and its gradient with respect to every weight by hand
(a forward pass with tangents and one reverse pass, see its module docstring); TensorFlow
differentiates the same loss twice with nested tapes.  float64: the same numbers to
rounding (~1e-12 relative), for several architectures, loss types and batches of mixed
structures, padding included; float32: to float32 rounding.
"""
import numpy as np
import pytest

from pinn import keys as K
from pinn.engines.lowering import check_supported
from pinn.engines.numba.md_kernels import TILE
from pinn.engines.numba.train_kernels import balanced_tiles, pair_slots
from pinn.engines.gradients import TrainingEngine

from physics import compare_training_gradients as _compare
from physics import make_model, training_batch as _batch, training_structures as _structures
from physics import tensorflow_loss_gradients as _tensorflow

RC = 4.5
BASE = {"atom_types": [1, 6, 8, 29], "rc": RC, "depth": 3}
ARCHITECTURES = {
    "reference": {},
    "deep nets, residual maps, odd widths": {"pp_nodes": [12, 7], "pi_nodes": [8, 10, 6], "ii_nodes": [6, 9],
                                             "out_nodes": [5, 7]},
    "gaussian basis, f2, one PP layer": {"basis_type": "gaussian", "n_basis": 5, "cutoff_type": "f2", "gamma": 2.0,
                                         "pp_nodes": [9]},
}
LOSSES = {
    "mse": {},
    # δ exact in float32: TensorFlow's side rounds δ through float32
    "huber, energy per atom": {"loss_type": "huber", "huber_delta": {"energy": 0.0625, "forces": 0.125},
                               "use_e_per_atom": True},
}


def _model(arch, precision, loss="mse", use_force=True):
    model = make_model("PiNet", {**BASE, **ARCHITECTURES[arch]}, precision)
    model.e_dress.assign(np.array([-0.5, -1.0, -2.0, -3.0]))
    model.params.update(LOSSES[loss], use_force=use_force)
    rng = np.random.RandomState(0)
    for v in model.trainable_variables:  # away from the initial weights (zero biases)
        v.assign(v.numpy() + 0.1 * rng.randn(*v.shape))
    return model


@pytest.mark.parametrize("arch", list(ARCHITECTURES))
@pytest.mark.parametrize("loss", list(LOSSES))
def test_gradients_equal_tensorflows_float64(arch, loss):
    _compare(_model(arch, "float64", loss), _batch("float64", padding=loss != "mse"), rtol=1e-10)


def test_gradients_without_forces_in_the_loss():
    _compare(_model("reference", "float64", use_force=False), _batch("float64"), rtol=1e-10)


def test_force_term_alone_is_the_second_derivative():
    """Energy weight 0: the whole gradient is the force loss's, the part TensorFlow gets by
    differentiating the forces a second time."""
    _compare(_model("deep nets, residual maps, odd widths", "float64"), _batch("float64"), rtol=1e-10,
             weights={"energy": 0.0, "forces": 1.0})


def test_gradients_float32():
    _compare(_model("reference", "float32"), _batch("float32"), rtol=2e-4)


def test_pairs_in_any_order():
    """The kernels add each pair to its atoms' rows wherever it is in the list: a shuffled pair list
    gives TensorFlow's numbers too."""
    batch = _batch("float64")
    order = np.random.RandomState(2).permutation(len(batch[K.IND_2]))
    assert np.any(np.diff(batch[K.IND_2][order, 0]) < 0)
    batch[K.IND_2], batch[K.SHIFT] = batch[K.IND_2][order], batch[K.SHIFT][order]
    _compare(_model("reference", "float64"), batch, rtol=1e-10)


def test_atoms_not_divisible_by_the_threads():
    """The per-atom work is dealt to the threads in equal runs of atoms; with 41 atoms (a prime) the
    last run is short, its columns padding (and with more than 14 threads some runs are empty):
    TensorFlow's numbers still."""
    import numba
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("needs at least 2 Numba threads")
    batch = _batch("float64", structures=_structures()[:2])
    assert len(batch[K.ELEMS]) == 41
    out = _compare(_model("deep nets, residual maps, odd widths", "float64", "huber, energy per atom"), batch,
                   rtol=1e-10)
    assert len(out["energy"]) == 2


def test_weights_follow_set_weights():
    model = _model("reference", "float64")
    batch = _batch("float64")
    engine = TrainingEngine(model)
    counts = {"energy": 4.0, "forces": 3.0 * len(batch[K.ELEMS])}
    weights = {"energy": 1.0, "forces": 10.0}
    engine.set_weights([v.numpy() for v in model.trainable_variables])
    before = engine(batch, weights, counts)["loss"]
    for v in model.trainable_variables:
        v.assign(v * 0.9)
    engine.set_weights([v.numpy() for v in model.trainable_variables])
    after = engine(batch, weights, counts)
    assert after["loss"] != pytest.approx(before, rel=1e-6)
    assert after["loss"] == pytest.approx(_tensorflow(model, batch, weights, counts)[0], rel=1e-10)


def test_one_thread_gives_the_same_gradients():
    """The pair tiles split over threads (per-thread sums added afterwards) or not: the same numbers."""
    import numba
    model = _model("deep nets, residual maps, odd widths", "float64")
    batch = _batch("float64")
    counts = {"energy": 4.0, "forces": 3.0 * len(batch[K.ELEMS])}
    weights = {"energy": 1.0, "forces": 10.0}
    results = []
    for threads in (1, numba.config.NUMBA_NUM_THREADS):
        engine = TrainingEngine(model, threads=threads)
        engine.set_weights([v.numpy() for v in model.trainable_variables])
        out = engine(batch, weights, counts)
        results.append((out["loss"], engine.flat_gradient()))
    assert results[0][0] == pytest.approx(results[1][0], rel=1e-13)
    np.testing.assert_allclose(results[0][1], results[1][1], rtol=0, atol=1e-12 * np.abs(results[1][1]).max())
    with pytest.raises(ValueError, match="threads must be in 1.."):
        TrainingEngine(model, threads=numba.config.NUMBA_NUM_THREADS + 1)


@pytest.mark.parametrize("threads", [1, 2, 3, 8])
def test_balanced_tiles(threads):
    """Tiles of at most TILE pairs, a multiple of 16, covering the pairs with less than one tile to
    spare, as many per thread where more than one tile is needed; within pair_slots."""
    for n_pairs in list(range(1, 3000)) + list(range(100_000, 140_000, 997)):
        tile, n_tiles = balanced_tiles(n_pairs, threads)
        assert 16 <= tile <= TILE and tile % 16 == 0
        assert (n_tiles - 1) * tile < n_pairs <= n_tiles * tile <= pair_slots(n_pairs, threads)
        if n_pairs > TILE * threads:
            slowest = max(-(-n_tiles // threads), 1) * tile
            assert slowest <= -(-n_pairs // threads) + 16 * -(-n_tiles // threads), (n_pairs, tile, n_tiles)
    # 32 ethanol molecules, two threads: 10 tiles of 240 (5 each), not 9 of 256 (5 and 4)
    assert balanced_tiles(2304, 2) == (240, 10)


@pytest.mark.parametrize("tile", [16, 112, 256])
def test_any_tiling_gives_tensorflows_numbers(monkeypatch, tile):
    """Each call cuts its pairs into tiles (:func:`~pinn.engines.numba.train_kernels.balanced_tiles`, views of the
    workspace); whatever the tile size, with the last tile partly padding, TensorFlow's numbers, and
    a call with another tiling on the same workspace after it too."""
    import pinn.engines.gradients as fast_train
    monkeypatch.setattr(fast_train, "balanced_tiles", lambda n_pairs, threads: (tile, -(-n_pairs // tile)))
    batch = _batch("float64")
    assert len(batch[K.IND_2]) % tile
    model = _model("reference", "float64")
    _compare(model, batch, rtol=1e-10)
    engine = TrainingEngine(model)
    engine.set_weights([v.numpy() for v in model.trainable_variables])
    counts = {"energy": 4.0, "forces": 3.0 * len(batch[K.ELEMS])}
    weights = {"energy": 1.0, "forces": 10.0}
    engine(batch, weights, counts)
    first = engine.flat_gradient().copy()
    monkeypatch.setattr(fast_train, "balanced_tiles", lambda n_pairs, threads: (48, -(-n_pairs // 48)))
    engine(batch, weights, counts)
    np.testing.assert_allclose(engine.flat_gradient(), first, rtol=0, atol=1e-12 * np.abs(first).max())


@pytest.mark.parametrize("net, model_params, message", [
    ({"act": "ssp"}, {}, "network.params.act"),
    ({"pi_nodes": [8]}, {}, "network.params.pi_nodes"),
    ({}, {"use_stress": True}, "model.params.use_stress"),
])
def test_refuses_what_it_does_not_support(net, model_params, message):
    model = make_model("PiNet", {**BASE, **net}, "float64")
    model.params.update(model_params)
    assert message in check_supported(model)
    with pytest.raises(ValueError, match=message):
        TrainingEngine(model)
    lj = make_model("LJ", {"atom_types": [18], "rc": 5.0})
    assert "PiNet" in check_supported(lj)


# ------------------------------------------------------------------ in the trainer
def _trainer_params(model_dir, net=None, **model_params):
    return {"model_dir": str(model_dir), "precision": "float64", "seed": 3,
            "network": {"name": "PiNet", "params": {"atom_types": [29, 79], "rc": 4.5, "depth": 2, "pp_nodes": [8],
                                                    "pi_nodes": [8, 8], "ii_nodes": [8], "out_nodes": [8],
                                                    **(net or {})}},
            "model": {"name": "potential_model",
                      "params": {"use_force": True, "learning_rate": 3e-3, "lr_warmup_steps": 2, "ema_decay": 0.9,
                                 "max_grad_norm": 0.5, "fit_e_dress": True, "fit_e_dress_batches": 2,
                                 "log_every_n_steps": 1, "tensorboard": False, **model_params}}}


def test_engine_choice(tmp_path):
    from pinn.models import potential_model
    from pinn.params import ParamsError

    def trainer(net=None, **model_params):
        return potential_model(_trainer_params(tmp_path / str(len(list(tmp_path.iterdir()))), net, **model_params))
    assert trainer().engine is not None  # auto: a PiNet with tanh, energies and forces
    assert trainer(engine="numba").engine is not None
    for net, model_params in [({}, {"engine": "tensorflow"}), ({}, {"jit": True}), ({}, {"batch_parts": 2}),
                              ({}, {"use_stress": True}), ({"act": "ssp"}, {})]:
        assert trainer(net, **model_params).engine is None, (net, model_params)
    with pytest.raises(ParamsError, match=r"model.params.engine: network.params.act"):
        trainer({"act": "ssp"}, engine="numba")
    with pytest.raises(ParamsError, match="model.params.jit"):
        trainer(engine="numba", jit=True)
    with pytest.raises(ParamsError, match="model.params.batch_parts"):
        trainer(engine="numba", batch_parts=2)


@pytest.mark.parametrize("accumulate", [1, 2])
def test_training_with_the_numba_engine_equals_tensorflow(alloy_xyz, tmp_path, accumulate):
    """Six steps from the same start (offsets fitted, warmup, clipping, Adam, the weight average): the
    same weights, averages and logged losses with either engine.  One batch per step is the numba
    engine's own step (its host update, here with a weight decay of the kernels); two (accumulated) go
    through its TensorFlow op, as in a parallel run."""
    from pinn.io import load_ase, sparse_batch
    from pinn.training.metrics import read_metrics
    from pinn.models import potential_model
    data = load_ase(alloy_xyz).take(40).cache()
    runs = {}
    for engine in ("numba", "tensorflow"):
        trainer = potential_model(_trainer_params(tmp_path / engine, engine=engine, jit=False if engine ==
                                                  "tensorflow" else None, accumulate_batches=accumulate,
                                                  eval_every_n_steps=2, save_checkpoint_steps=3,
                                                  weight_decay=0.5 if accumulate == 1 else 0.0))
        assert (trainer.engine is not None) == (engine == "numba")
        decayed = [v.name.startswith("kernel") for v in trainer.model.trainable_variables]
        assert trainer.optimizer.decayed == tuple(decayed if accumulate == 1 else [False] * len(decayed))
        assert any(decayed) and not all(decayed)  # kernels, not biases
        # validations and checkpoints mid-run: the engine's host-side state is written out for them
        trainer.train(lambda: data.apply(sparse_batch(5)).repeat(), max_steps=6,
                      eval_fn=lambda: data.take(10).apply(sparse_batch(5)))
        with trainer.averaged_weights():
            averaged = [v.numpy() for v in trainer.model.trainable_variables]
        runs[engine] = ([v.numpy() for v in trainer.model.trainable_variables], averaged,
                        [r["loss"] for r in read_metrics(tmp_path / engine, "train")],
                        [v.numpy() for v in trainer.optimizer.variables],
                        [r["F_MAE"] for r in read_metrics(tmp_path / engine, "eval")])
    numba_run, tensorflow_run = runs["numba"], runs["tensorflow"]
    assert len(numba_run[2]) == 6 and len(numba_run[4]) == 3
    np.testing.assert_allclose(numba_run[2], tensorflow_run[2], rtol=1e-9)
    np.testing.assert_allclose(numba_run[4], tensorflow_run[4], rtol=1e-9)
    assert numba_run[3][0] == tensorflow_run[3][0] == 6  # Adam's step count
    for mine, theirs in zip(numba_run[0] + numba_run[1] + numba_run[3], tensorflow_run[0] + tensorflow_run[1]
                            + tensorflow_run[3]):  # weights, averages, Adam's moments and learning rate
        np.testing.assert_allclose(mine, theirs, rtol=1e-9, atol=1e-12)
    initial = potential_model(_trainer_params(tmp_path / "initial"))
    assert max(np.abs(a - b).max() for a, b in zip(numba_run[0], [v.numpy() for v in
                                                                  initial.model.trainable_variables])) > 1e-4


def test_numba_engine_run_resumed_from_a_checkpoint_equals_one_run(alloy_xyz, tmp_path):
    """Three steps, a new trainer on the same model_dir, three more: the same weights, averages and
    Adam state as six steps in one run (the engine's host-side state reaches the checkpoint)."""
    from pinn.io import load_ase, sparse_batch
    from pinn.models import potential_model
    data = load_ase(alloy_xyz).take(40).cache()
    train = lambda: data.apply(sparse_batch(5)).repeat()  # noqa: E731
    params = dict(engine="numba", data_resume="skip")
    whole = potential_model(_trainer_params(tmp_path / "whole", **params)).train(train, max_steps=6)
    potential_model(_trainer_params(tmp_path / "resumed", **params)).train(train, max_steps=3)
    resumed = potential_model(_trainer_params(tmp_path / "resumed", **params))
    assert int(resumed.step) == 3 and int(resumed.optimizer.iterations) == 3
    resumed.train(train, max_steps=6)

    def state(trainer):
        return [v.numpy() for v in list(trainer.model.trainable_variables) + list(trainer.ema.shadow)
                + list(trainer.optimizer.variables)]
    for mine, theirs in zip(state(resumed), state(whole)):
        np.testing.assert_allclose(mine, theirs, rtol=1e-9, atol=1e-12)
