"""Training settings and small-params factories shared by the tests (``small_net``, ``training_params``,
``model_of``: one way to make a small network, a training run's params and a model).

The mechanics tests (resume, rollback, accumulation, parallel equality…) were written for a
plain schedule, so they pin it: the package defaults (cosine with a warmup and a weight
average, tuned for long runs; docs/training.md) are tested on their own.

They also train without XLA (``MECHANICS``): XLA compiles each new model's step once per
padded batch size, seconds each, and a mechanism does not depend on it.  The compiled step
is tested on its own (test_padded_training.py: the same steps as without XLA) and in the
parallel equality tests.
"""

#: exponential decay, no warmup, no weight average
PLAIN_SCHEDULE = {"lr_schedule": "exponential", "lr_warmup_steps": 0, "ema_decay": None}

#: the plain schedule, and TensorFlow's step without XLA
MECHANICS = {**PLAIN_SCHEDULE, "jit": False}


def small_net(atom_types, rc=4.5, depth=2, width=8, **changes):
    """A small PiNet (or PiNet2) network section: ``depth`` blocks, one layer of ``width`` nodes per net."""
    return {"atom_types": list(atom_types), "rc": rc, "depth": depth, "pp_nodes": [width], "pi_nodes": [width],
            "ii_nodes": [width], "out_nodes": [width], **changes}


def training_params(model_dir, net, defaults, network="PiNet", model="potential_model", **changes):
    """Params of a test's training run: ``defaults`` (the test file's), then :data:`MECHANICS`, then ``changes``."""
    return {"model_dir": str(model_dir), "network": {"name": network, "params": net},
            "model": {"name": model, "params": {**defaults, **MECHANICS, **changes}}}


def model_of(model, net, network="PiNet", precision="float64", seed=0, **options):
    """The model ``model`` on the network ``net`` (resolved params, one process), with ``options`` as its
    ``model.params``."""
    from pinn.params import resolve
    from pinn.physics.registry import build_model
    return build_model(resolve({"model_dir": "unused", "precision": precision, "seed": seed,
                                "network": {"name": network, "params": net},
                                "model": {"name": model, "params": options}}))


def train_alloy_member(model_dir, alloy_xyz, seed, steps=6, **net_changes):
    """A small float64 PiNet (rc 4.5 Å) trained ``steps`` steps on the alloy data from ``seed``: a
    committee member (members of different seeds differ).  Returns the model directory (str)."""
    from pinn.io import load_ase, sparse_batch
    from pinn.models import potential_model
    params = training_params(model_dir, small_net([29, 79], **{"rc": 4.5, **net_changes}),
                             {"use_force": True, "learning_rate": 1e-2, "fit_e_dress": True,
                              "fit_e_dress_batches": 15},  # one pass over the 120 frames
                             log_every_n_steps=1000)
    params.update(seed=seed, precision="float64")
    potential_model(params).train(lambda: load_ase(alloy_xyz).repeat().shuffle(50, seed=seed).apply(sparse_batch(8)),
                                  steps)
    return str(model_dir)


def write_emt_molecules(path, formula, n_frames, scale=0.05):
    """``n_frames`` copies of ASE's molecule ``formula``, rattled (σ ``scale`` Å, seeds 0, 1, …) and
    labelled by ASE's EMT (H, C, N, O among its elements), written to ``path``: data for tiny
    molecular models whose numbers, not physics, a test needs.  Returns ``path`` (str)."""
    from ase.build import molecule
    from ase.calculators.emt import EMT
    from pinn.io.ase_files import write
    frames = []
    for seed in range(n_frames):
        atoms = molecule(formula)
        atoms.rattle(scale, seed=seed)
        atoms.calc = EMT()
        atoms.get_forces()
        frames.append(atoms)
    write(str(path), frames)
    return str(path)


def qmmm_frame(seed):
    """A QM/MM frame in pinn's convention (docs/qmmm.md): 1 to 3 QM water molecules (pinn.demo's distorted
    clusters) among 6 to 14 MM atoms (O, H, Na: Na is no element of a water network) 4 to 7 Å from the region's
    centre with point charges in [−0.8, 0.8] e, the region's charge 0 (even seeds) or −1, open; energy and
    forces on every atom drawn at random (for mechanisms, not physics)."""
    import numpy as np
    from ase import Atoms
    from ase.calculators.singlepoint import SinglePointCalculator
    from pinn.demo import water_dipole_frames
    rng = np.random.RandomState(seed)
    region = water_dipole_frames(1, seed=seed, max_molecules=3)[0]
    n_mm = 6 + seed % 9
    directions = rng.randn(n_mm, 3)
    mm_positions = directions / np.linalg.norm(directions, axis=1)[:, None] * rng.uniform(4.0, 7.0, (n_mm, 1))
    atoms = Atoms(numbers=list(region.numbers) + list(rng.choice([1, 8, 11], n_mm)),
                  positions=np.vstack([region.positions - region.positions.mean(axis=0), mm_positions]))
    qm = np.arange(len(atoms)) < len(region)
    atoms.arrays["qm"] = qm
    atoms.set_initial_charges(np.where(qm, 0.0, rng.uniform(-0.8, 0.8, len(atoms))))
    atoms.info["charge"] = -float(seed % 2)
    atoms.calc = SinglePointCalculator(atoms, energy=-3.0 * len(region) + 0.2 * rng.randn(),
                                       forces=0.3 * rng.randn(len(atoms), 3))
    return atoms
