"""The training loop behind ``model.train / evaluate / predict``.

:class:`Trainer` keeps the shape of the ``tf.estimator`` API that PiNN users
script against, in plain TensorFlow 2: a ``tf.function`` step with a fixed
input signature (traced once), Adam with exponential decay and gradient
clipping, ``tf.train.Checkpoint`` checkpoints in ``model_dir`` and exact
resume (step, optimizer state, energy offsets and, for a seeded pipeline, the
position in the data).
"""
import logging
import os
import time

import numpy as np
import tensorflow as tf

from pinn import keys as K
from pinn.io.batch import add_neighbors
from pinn.logs import setup_logging
from pinn.networks import get_network
from pinn.params import read_params, resolve, write_params

log = logging.getLogger("pinn")


class Trainer:
    """A model with ``train(input_fn, max_steps)``, ``evaluate(input_fn)`` and ``predict(input_fn)``.

    Args:
        params: a params dict (see :mod:`pinn.params`), or a model directory
            holding ``params.yml``.
        model_cls: the model class (e.g. :class:`pinn.models.potential.PotentialModel`).

    ``input_fn`` is a function with no arguments returning a
    ``tf.data.Dataset`` of sparse batches (see :func:`pinn.io.sparse_batch`);
    neighbor lists are added when the batches have none.  The latest
    checkpoint in ``model_dir`` is restored on construction.
    """

    def __init__(self, params, model_cls):
        if isinstance(params, (str, os.PathLike)):
            params = read_params(params)
        self.params = resolve(params)
        self.model_dir = self.params["model_dir"]
        self.mp = self.params["model"]["params"]
        self.is_chief = True
        self.dtype = tf.as_dtype(self.params["precision"])
        setup_logging(self.model_dir if self.is_chief else None)
        self.network = get_network(self.params)
        self.rc = self.params["network"]["params"]["rc"]
        self.model = model_cls(self.network, self.mp, self.params["network"]["params"]["atom_types"], self.dtype)
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        self.schedule = tf.keras.optimizers.schedules.ExponentialDecay(
            self.mp["learning_rate"], self.mp["decay_step"], self.mp["decay_rate"])
        self.optimizer = tf.keras.optimizers.Adam(learning_rate=lambda: self.schedule(self.step))
        self.checkpoint = tf.train.Checkpoint(model=self.model, optimizer=self.optimizer, step=self.step)
        self.manager = tf.train.CheckpointManager(self.checkpoint, self.model_dir,
                                                  max_to_keep=self.mp["keep_checkpoint_max"], checkpoint_name="ckpt")
        self._check_stored_params()
        if self.manager.latest_checkpoint:
            # optimizer slots are restored when first used; an inference-only
            # model never creates them, hence expect_partial
            self.checkpoint.restore(self.manager.latest_checkpoint).expect_partial()
            log.info("restored %s (step %d)", self.manager.latest_checkpoint, int(self.step))
        self._step_fn = None
        self._eval_fn = None

    # ------------------------------------------------------------------ setup
    def _check_stored_params(self):
        path = os.path.join(self.model_dir, "params.yml")
        if os.path.exists(path):
            stored = read_params(self.model_dir)
            if stored["network"] != self.params["network"]:
                raise ValueError(f"{path}: the network in model_dir differs from the given params; "
                                 f"use another model_dir or the stored params")
        if self.is_chief:
            write_params(self.params, self.model_dir)

    def _input(self, input_fn, skip=0):
        dataset = input_fn()
        if not isinstance(dataset, tf.data.Dataset):
            raise TypeError(f"input_fn must return a tf.data.Dataset, got {type(dataset).__name__}")
        spec = dataset.element_spec
        if not isinstance(spec, dict) or K.IND_1 not in spec:
            raise ValueError("input_fn must return sparse batches: apply pinn.io.sparse_batch(batch_size)")
        if skip:
            dataset = dataset.skip(skip)
        if K.IND_2 not in spec:
            dataset = dataset.apply(add_neighbors(self.rc))
        return dataset.prefetch(tf.data.AUTOTUNE)

    # --------------------------------------------------------------- training
    def _make_step_fn(self, spec):
        mp = self.mp
        variables = self.model.trainable_variables

        @tf.function(input_signature=[spec])
        def train_step(batch):
            with tf.GradientTape() as tape:
                pred = self.model.predict(batch, forces=mp["use_force"], stress=mp["use_stress"])
                loss = self.model.combine_loss(self.model.loss_terms(batch, pred))
            grads = tape.gradient(loss, variables)
            if mp["max_grad_norm"]:
                grads, _ = tf.clip_by_global_norm(grads, mp["max_grad_norm"])
            self.optimizer.apply_gradients(zip(grads, variables))
            self.step.assign_add(1)
            return loss, self.model.error_sums(batch, pred), tf.shape(batch[K.CELL])[0]
        return train_step

    def _fit_dress(self, input_fn):
        """Fit e_dress to what the freshly initialised network leaves unexplained,
        so that training starts from a small energy error."""
        n = self.mp["fit_e_dress_batches"]
        self.model.e_dress.assign(tf.zeros_like(self.model.e_dress))
        dataset = input_fn().take(n)
        if K.IND_2 not in dataset.element_spec:
            dataset = dataset.apply(add_neighbors(self.rc))
        predict = tf.function(lambda b: self.model.predict(b, forces=False, stress=False)["energy"],
                              input_signature=[dataset.element_spec])
        batches = []
        for b in dataset:
            residual = {k: v.numpy() for k, v in b.items()}
            residual[K.E_DATA] = residual[K.E_DATA] - predict(b).numpy()
            batches.append(residual)
        dress = self.model.fit_dress(batches)
        n_struct = sum(len(b[K.E_DATA]) for b in batches)
        log.info("fitted e_dress on %d structures: %s", n_struct,
                 ", ".join(f"Z={z}: {v:.6f} eV" for z, v in dress.items()))

    def train(self, input_fn, max_steps):
        """Train until the global step reaches ``max_steps`` (or the input ends).

        Returns:
            ``self`` (like the estimator API).
        """
        start = int(self.step)
        if start >= max_steps:
            log.info("step %d already reaches max_steps %d: nothing to train", start, max_steps)
            return self
        if self.mp["fit_e_dress"] and not bool(self.model.dress_fitted):
            self._fit_dress(input_fn)
        skip = start if self.mp["data_resume"] == "skip" else 0
        dataset = self._input(input_fn, skip=skip)
        if self._step_fn is None:
            self._step_fn = self._make_step_fn(dataset.element_spec)
        log.info("training %s from step %d to %d; model_dir %s", self.params["network"]["name"], start,
                 max_steps, self.model_dir)
        every = self.mp["log_every_n_steps"]
        meter = _Meter()
        step = start
        try:
            for batch in dataset:
                loss, sums, n_struct = self._step_fn(batch)
                step = int(self.step)
                meter.add(float(loss), sums, int(n_struct))
                if step % every == 0 or step == max_steps:
                    log.info("step %d/%d %s lr %.3g", step, max_steps, meter.summary(),
                             float(self.schedule(self.step)))
                    meter = _Meter()
                if step % self.mp["save_checkpoint_steps"] == 0:
                    self.save()
                if step >= max_steps:
                    break
            else:
                log.info("input ended at step %d before max_steps %d", step, max_steps)
        except KeyboardInterrupt:
            log.warning("interrupted at step %d: writing a checkpoint", int(self.step))
            self.save()
            raise
        self.save()
        return self

    def save(self):
        """Write a checkpoint of the current step (unless one exists for it)."""
        if not self.is_chief:
            return None
        latest = self.manager.latest_checkpoint
        if latest and latest.endswith(f"-{int(self.step)}"):
            return latest
        path = self.manager.save(checkpoint_number=int(self.step))
        log.info("checkpoint %s", path)
        return path

    # ------------------------------------------------------------- evaluation
    def evaluate(self, input_fn):
        """Errors on a finite input: dict with ``E_MAE``, ``E_RMSE`` (eV) and, when
        labels exist, ``F_MAE``, ``F_RMSE`` (eV/Å), ``S_MAE``, ``S_RMSE`` (eV/Å³),
        plus ``loss`` and ``global_step``."""
        dataset = self._input(input_fn)
        spec = dataset.element_spec
        want_f, want_s = K.F_DATA in spec, K.S_DATA in spec

        @tf.function(input_signature=[spec])
        def eval_step(batch):
            pred = self.model.predict(batch, forces=want_f, stress=want_s)
            return self.model.loss_terms(batch, pred), self.model.error_sums(batch, pred)

        loss_sums, metric = {}, _Meter()
        for batch in dataset:
            terms, sums = eval_step(batch)
            for t, (s, c) in terms.items():
                prev = loss_sums.get(t, (0.0, 0.0))
                loss_sums[t] = (prev[0] + float(s), prev[1] + float(c))
            metric.add(0.0, sums, 0)
        result = metric.errors()
        weights = {"energy": self.mp["e_loss_multiplier"], "forces": self.mp["f_loss_multiplier"],
                   "stress": self.mp["s_loss_multiplier"]}
        result["loss"] = sum(weights[t] * s / c for t, (s, c) in loss_sums.items() if c)
        result["global_step"] = int(self.step)
        return result

    def predict(self, input_fn):
        """Yield one dict per structure: ``energy`` (eV), ``forces`` [n_atoms, 3]
        (eV/Å), ``stress`` [3, 3] (eV/Å³, periodic structures) and ``elems``."""
        dataset = self._input(input_fn)

        @tf.function(input_signature=[dataset.element_spec])
        def predict_step(batch):
            return self.model.predict(batch)

        for batch in dataset:
            pred = {k: v.numpy() for k, v in predict_step(batch).items()}
            ind_1 = batch[K.IND_1].numpy()[:, 0]
            pbc = batch[K.PBC].numpy()
            elems = batch[K.ELEMS].numpy()
            for s in range(len(pred["energy"])):
                atoms = ind_1 == s
                out = {"energy": pred["energy"][s], "forces": pred["forces"][atoms], "elems": elems[atoms]}
                if pbc[s].any():
                    out["stress"] = pred["stress"][s]
                yield out


class _Meter:
    """Accumulates loss, error sums and throughput between progress lines."""

    UNITS = {"E": "eV", "F": "eV/Å", "S": "eV/Å³"}

    def __init__(self):
        self.t0 = time.perf_counter()
        self.loss, self.n_steps, self.n_struct = 0.0, 0, 0
        self.sums = {}

    def add(self, loss, sums, n_struct):
        self.loss += loss
        self.n_steps += 1
        self.n_struct += n_struct
        for key, values in sums.items():
            prev = self.sums.get(key, np.zeros(3))
            self.sums[key] = prev + np.array([float(v) for v in values])

    def errors(self):
        out = {}
        for key, (abs_sum, sq_sum, count) in self.sums.items():
            if count:
                out[f"{key}_MAE"] = abs_sum / count
                out[f"{key}_RMSE"] = float(np.sqrt(sq_sum / count))
        return out

    def summary(self):
        elapsed = time.perf_counter() - self.t0
        parts = [f"loss {self.loss / max(self.n_steps, 1):.4g}"]
        parts += [f"{k} {v:.4g} {self.UNITS[k[0]]}" for k, v in self.errors().items() if k.endswith("RMSE")]
        parts.append(f"{self.n_struct / elapsed:.0f} structures/s")
        return " ".join(parts)
