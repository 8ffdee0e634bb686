"""The Kalman filters on real ranks, for test_kalman.py: the same batches as one process on their union.

Usage:  horovodrun -np 2 --gloo python kalman_ranks.py WORKDIR     (or mpirun -np 2 ...)

Every step has one "union" batch of EMT Cu/Au structures (periodic, 4 or 8 atoms: energies,
forces and stress), cut into 2 unequal parts; rank r trains on part r, one process on both
(:func:`share`).  Per rank it trains, in model directories under WORKDIR:

- ``ekf``: a tiny PiNet, 6 steps; the batch of step 2 (the third) holds a NaN energy in rank 1's part;
- ``gekf``: the LJ network (2 weights) with ``separate_errors`` (one update per loss term), 3 steps,
  then a new model from the model directory (rank 0 restores the checkpoint, P included, and every
  rank takes its state by broadcast) trains to step 6.

and writes WORKDIR/<optimizer>.rank<r>.npz with its weights, their average, P and step.
test_kalman.py trains one process (no Horovod) on the union batches with :func:`params` and
:func:`train_input` of this file and compares.
"""
import os
import sys

import numpy as np

RC = 4.0
NETWORK = {"name": "PiNet", "params": {"atom_types": [29, 79], "rc": RC, "depth": 1, "pp_nodes": [4],
                                       "pi_nodes": [4], "ii_nodes": [4], "out_nodes": [4], "n_basis": 3}}
LJ = {"name": "LJ", "params": {"atom_types": [29, 79], "rc": RC, "epsilon": 0.05, "sigma": 2.2}}
#: the runs: optimizer → network, model.params of it, steps of each train() call (a new model for each),
#: steps whose batch has a NaN energy in rank 1's part
RUNS = {"ekf": {"network": NETWORK, "params": {"optimizer": "ekf", "learning_rate": 0.05}, "calls": (6,),
                "nan_steps": (2,)},
        "gekf": {"network": LJ, "params": {"optimizer": "gekf", "learning_rate": 0.1, "ekf_epsilon": 0.01,
                                            "separate_errors": True}, "calls": (3, 6), "nan_steps": ()}}


def params(model_dir, optimizer, parallel):
    """Params of the run ``optimizer`` (see :data:`RUNS`) in float64 (the union's sums in another order
    than the ranks' change the 16th digit, not the 7th)."""
    mp = {"use_force": True, "use_stress": True, "f_loss_multiplier": 4.0, "s_loss_multiplier": 9.0,
          "lr_schedule": "exponential", "decay_step": 4, "decay_rate": 0.5, "lr_warmup_steps": 0,
          "ema_decay": 0.9, "jit": False, "log_every_n_steps": 2, "save_checkpoint_steps": 3,
          "tensorboard": False, **RUNS[optimizer]["params"]}
    return {"model_dir": str(model_dir), "network": RUNS[optimizer]["network"], "precision": "float64",
            "parallel": parallel,
            "model": {"name": "potential_model", "params": mp}}


def structure(seed):
    """An EMT-labelled periodic Cu/Au cell of 4 or 8 atoms, strained and rattled."""
    from ase.build import bulk
    from ase.calculators.emt import EMT
    rng = np.random.RandomState(seed)
    atoms = bulk("Cu", "fcc", a=3.7, cubic=True).repeat((1 + seed % 2, 1, 1))
    atoms.numbers[rng.rand(len(atoms)) < 0.3] = 79
    atoms.set_cell(atoms.cell[:] @ (np.eye(3) + 0.02 * rng.randn(3, 3)), scale_atoms=True)
    atoms.rattle(0.1, seed=seed)
    atoms.calc = EMT()
    return atoms, atoms.get_potential_energy(), atoms.get_forces(), atoms.get_stress(voigt=False)


def share(step, rank, size):
    """The structures of ``step`` for ``rank`` of ``size``: part r of the union (parts of 2 and 1, or 1 and 2
    structures), or the whole union for one process."""
    sizes = (2, 1) if step % 2 == 0 else (1, 2)
    seeds = [100 * step + i for i in range(sum(sizes))]
    parts = [seeds[:sizes[0]], seeds[sizes[0]:]]
    return [s for r, part in enumerate(parts) for s in part if size == 1 or r == rank]


def train_input(rank, size, first=0, steps=None, nan_steps=()):
    """The input function of ``rank`` of ``size``: one batch per step from step ``first``, ``steps`` of
    them (``None``: endless); at ``nan_steps`` the last structure of the union (rank 1's) has a NaN energy."""
    import itertools

    import tensorflow as tf

    from pinn import keys as K
    from pinn.io.batch import batch_from_atoms

    def batch(step):
        structures = [structure(s) for s in share(step, rank, size)]
        out = batch_from_atoms([s[0] for s in structures], RC, float_dtype="float64")
        out[K.E_DATA] = np.array([s[1] for s in structures])
        if step in nan_steps and (size == 1 or rank == 1):
            out[K.E_DATA][-1] = np.nan
        out[K.F_DATA] = np.concatenate([s[2] for s in structures])
        out[K.S_DATA] = np.stack([s[3] for s in structures])
        return out

    spec = {k: tf.TensorSpec((None,) + v.shape[1:], tf.as_dtype(v.dtype)) for k, v in batch(first).items()}
    cache = {}

    def gen():
        for step in (itertools.count(first) if steps is None else range(first, first + steps)):
            if step not in cache:
                cache[step] = batch(step)
            yield cache[step]
    return lambda: tf.data.Dataset.from_generator(gen, output_signature=spec)


def evaluation_input(rank, size):
    """Validation (test_kalman.py's one process): the structures of steps 50 and 51 (rank r's parts, or
    their union)."""
    return train_input(rank, size, first=50, steps=2)


def main(workdir):
    from pinn.models import potential_model
    for optimizer, run in RUNS.items():
        model_dir = os.path.join(workdir, optimizer)
        model = potential_model(params(model_dir, optimizer, True))  # starts Horovod
        rank, size = model.world.rank, model.world.size
        for i, steps in enumerate(run["calls"]):
            if i:  # a new model: rank 0 restores, every rank takes its state by broadcast
                model = potential_model(params(model_dir, optimizer, True))
            model.train(train_input(rank, size, nan_steps=run["nan_steps"]), max_steps=steps)
        np.savez(os.path.join(workdir, f"{optimizer}.rank{rank}.npz"),
                 weights=np.concatenate([v.numpy().ravel() for v in model.model.trainable_variables]),
                 average=np.concatenate([v.numpy().ravel() for v in model.ema.shadow]),
                 P=model.kalman.P.numpy(), step=int(model.step), size=size)


if __name__ == "__main__":
    main(sys.argv[1])
