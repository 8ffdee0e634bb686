import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pinn  # noqa: E402,F401  (first, as in users' scripts: its TensorFlow settings precede any TF op)

import numpy as np  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(scope="session")
def alloy_xyz(tmp_path_factory):
    """The quickstart's EMT CuAu dataset (small), written once per test session."""
    from pinn.demo import make_alloy_dataset
    path = tmp_path_factory.mktemp("data") / "alloy.xyz"
    return str(make_alloy_dataset(str(path), n_frames=120, seed=0))


@pytest.fixture
def rng():
    return np.random.RandomState(42)


@pytest.fixture(scope="session")
def trained_alloy_model(alloy_xyz, tmp_path_factory):
    """A small PiNet trained briefly on the alloy data (model directory)."""
    from pinn.io import load_ase, sparse_batch
    from pinn.models import potential_model
    model_dir = tmp_path_factory.mktemp("models") / "alloy"
    net = {"atom_types": [29, 79], "rc": 4.5, "depth": 2, "pp_nodes": [8], "pi_nodes": [8], "ii_nodes": [8],
           "out_nodes": [8]}
    # e_dress fitted on one pass over the 120 frames (15 batches): the default 100 batches of this repeated input
    # fit the same offsets on copies of the frames, 3-4 s more per model; the test files that fit it do the same
    params = {"model_dir": str(model_dir), "network": {"name": "PiNet", "params": net},
              "model": {"params": {"use_force": True, "fit_e_dress": True, "fit_e_dress_batches": 15,
                                   "learning_rate": 3e-3, "f_loss_multiplier": 10.0, "log_every_n_steps": 1000}}}
    model = potential_model(params)
    model.train(lambda: load_ase(alloy_xyz).cache().repeat().shuffle(100, seed=0).apply(sparse_batch(8)), 300)
    return str(model_dir)


@pytest.fixture(scope="session")
def committee_dir(alloy_xyz, tmp_path_factory):
    """A directory of three committee members (member-0 … member-2), seeds 0, 1, 2."""
    from settings import train_alloy_member
    root = tmp_path_factory.mktemp("committee")
    for k in range(3):
        train_alloy_member(root / f"member-{k}", alloy_xyz, seed=k)
    return root


@pytest.fixture(scope="session")
def ethanol_model(tmp_path_factory):
    """A small PiNet (H, C, O; float64) trained 2 steps on 16 rattled ethanol molecules labelled by
    ASE's EMT: a molecule's model for the MD engines' tests (its numbers, not its physics, matter)."""
    from pinn.io import load_ase, sparse_batch
    from pinn.models import potential_model
    from settings import small_net, training_params, write_emt_molecules
    root = tmp_path_factory.mktemp("ethanol")
    data = write_emt_molecules(root / "ethanol.xyz", "CH3CH2OH", 16)
    params = training_params(root / "model", small_net([1, 6, 8], pi_nodes=[8, 8]),
                             {"use_force": True, "fit_e_dress": True, "fit_e_dress_batches": 4},
                             log_every_n_steps=1000)
    params.update(precision="float64")
    potential_model(params).train(lambda: load_ase(data).repeat().apply(sparse_batch(4)), 2)
    return str(root / "model")


@pytest.fixture(scope="session")
def ethanol_pinet2_model(tmp_path_factory):
    """:func:`ethanol_model` with PiNet2 (rank 5, weighted): what runs on the Numba MD engine as PiNet does."""
    from pinn.io import load_ase, sparse_batch
    from pinn.models import potential_model
    from settings import small_net, training_params, write_emt_molecules
    root = tmp_path_factory.mktemp("ethanol-pinet2")
    data = write_emt_molecules(root / "ethanol.xyz", "CH3CH2OH", 16)
    params = training_params(root / "model", small_net([1, 6, 8], pi_nodes=[8, 8], rank=5, weighted=True),
                             {"use_force": True, "fit_e_dress": True, "fit_e_dress_batches": 4},
                             network="PiNet2", log_every_n_steps=1000)
    params.update(precision="float64")
    potential_model(params).train(lambda: load_ase(data).repeat().apply(sparse_batch(4)), 2)
    return str(root / "model")


#: the test files that launch many processes, put first.  pytest-xdist's --dist loadfile (run_tests.sh) then
#: reorders the files by their number of tests (its default --loadscope-reorder), so this order only breaks ties
LONG_FILES = ("test_parallel.py", "test_hpc_launch.py")


def pytest_collection_modifyitems(items):
    items.sort(key=lambda item: item.path.name not in LONG_FILES)  # stable: the order within a file stays
