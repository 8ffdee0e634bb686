"""The training loop behind ``model.train / evaluate / predict``.

:class:`Trainer` keeps the shape of the ``tf.estimator`` API that PiNN users
script against, in plain TensorFlow 2, for one process or many (Horovod, see
:mod:`pinn.parallel`).  One training step:

1. take ``accumulate_batches`` batches; sum their loss counts (structures,
   force components, ...) over all ranks, together with the "input ended"
   and "stop signal received" flags, so every rank decides alike;
2. per batch, gradients of Σ_term w_t · (squared-error sum) / (global count),
   summed over the batches (``tf.function``, traced once);
3. sum gradients and statistics over ranks, skip the update on every rank if
   anything is non-finite, clip and apply Adam.

The N-rank update therefore equals the 1-rank update on the union of the N
batches.  Checkpoints (``tf.train.Checkpoint``: model, optimizer, step,
learning-rate factor) are written by rank 0 alone; resume is exact (step,
optimizer state, energy offsets and, for a seeded pipeline, the data position).
"""
import logging
import os
import time

import numpy as np
import tensorflow as tf

from pinn import keys as K
from pinn.guards import StopSignals, TrainingPreempted, Watchdog
from pinn.io.batch import add_neighbors
from pinn.logs import setup_logging
from pinn.networks import get_network
from pinn.parallel import SerialWorld
from pinn.params import Option, positive, read_params, resolve, write_params
from pinn.progress import Meter, errors_from_sums, scaling_line
from pinn.schedule import LearningRate

log = logging.getLogger("pinn")

#: training-loop options shared by all models (``model.params``)
TRAINING_PARAMS = {
    "learning_rate": Option(float, 3e-4, "Adam learning rate (of one rank; see parallel_params.lr_scaling)",
                            check=positive),
    "decay_step": Option(int, 10000, "steps per decay of the learning rate", check=positive),
    "decay_rate": Option(float, 0.96, "factor of the exponential decay per decay_step", check=positive),
    "max_grad_norm": Option((float, None), 10.0, "clip gradients to this global norm (None: no clipping)"),
    "accumulate_batches": Option(int, 1, "batches per step: their gradients are summed (one allreduce in a "
                                 "parallel run) and the loss is normalised over all of them", check=positive),
    "max_nonfinite_steps": Option(int, 5, "after this many consecutive steps with a non-finite loss or "
                                  "gradient (each skipped), roll back to the last checkpoint", check=positive),
    "rollback_lr_factor": Option(float, 0.5, "multiply the learning rate by this at each rollback",
                                 check=lambda v: None if 0 < v <= 1 else "must be in (0, 1]"),
    "max_rollbacks": Option(int, 3, "stop with an error after this many rollbacks in one train() call",
                            check=positive),
    "save_checkpoint_steps": Option(int, 1000, "write a checkpoint every that many steps", check=positive),
    "keep_checkpoint_max": Option(int, 5, "number of checkpoints kept", check=positive),
    "log_every_n_steps": Option(int, 100, "progress line every that many steps", check=positive),
    "data_resume": Option(str, "skip", "on resume, 'skip' the batches already trained on (exact for a "
                          "seeded pipeline) or start the input again ('none')", choices=("skip", "none")),
}


class TrainingDiverged(FloatingPointError):
    """Non-finite losses persisted through ``max_rollbacks`` rollbacks."""


class Trainer:
    """A model with ``train(input_fn, max_steps)``, ``evaluate(input_fn)`` and ``predict(input_fn)``.

    Args:
        params: a params dict (see :mod:`pinn.params`), or a model directory
            holding ``params.yml``.
        model_cls: the model class (e.g. :class:`pinn.models.potential.PotentialModel`).
        world: :class:`pinn.parallel.SerialWorld` (default) or the
            :class:`pinn.parallel.HorovodWorld` from
            :func:`pinn.parallel.parallelize_model`.

    ``input_fn`` is a function with no arguments returning a
    ``tf.data.Dataset`` of sparse batches (see :func:`pinn.io.sparse_batch`);
    neighbor lists are added when the batches have none.  In a parallel run
    each rank's ``input_fn`` should give that rank's share of the data
    (:func:`pinn.io.distribute_data`, or ``dataset.shard(size, rank)``).
    The latest checkpoint in ``model_dir`` is restored on construction.
    """

    def __init__(self, params, model_cls, world=None):
        if isinstance(params, (str, os.PathLike)):
            params = read_params(params)
        self.params = resolve(params)
        self.world = world or SerialWorld()
        self.model_dir = self.params["model_dir"]
        self.mp = self.params["model"]["params"]
        self.is_chief = self.world.is_chief
        self.dtype = tf.as_dtype(self.params["precision"])
        if self.world.is_parallel:
            setup_logging(self.model_dir if self.is_chief else None,
                          level=logging.INFO if self.is_chief else logging.WARNING, rank=self.world.rank)
        else:
            setup_logging(self.model_dir)
        self.world.log_summary()
        self.network = get_network(self.params)
        self.rc = self.params["network"]["params"]["rc"]
        self.model = model_cls(self.network, self.mp, self.params["network"]["params"]["atom_types"], self.dtype)
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        self.lr_factor = tf.Variable(1.0, dtype=tf.float32, trainable=False, name="lr_factor")
        options = self.world.options
        self.learning_rate = LearningRate(self.mp["learning_rate"], self.mp["decay_step"], self.mp["decay_rate"],
                                          self.world.size, options["lr_scaling"], options["warmup_steps"])
        self.optimizer = tf.keras.optimizers.Adam(learning_rate=self.current_learning_rate)
        self.optimizer.build(self.model.trainable_variables)  # slots exist before a restore or broadcast
        self.checkpoint = tf.train.Checkpoint(model=self.model, optimizer=self.optimizer, step=self.step,
                                              lr_factor=self.lr_factor)
        self.manager = tf.train.CheckpointManager(self.checkpoint, self.model_dir,
                                                  max_to_keep=self.mp["keep_checkpoint_max"],
                                                  checkpoint_name="ckpt") if self.is_chief else None
        self._check_stored_params()
        if self.is_chief and self.manager.latest_checkpoint:
            self.checkpoint.restore(self.manager.latest_checkpoint).expect_partial()
            log.info("restored %s (step %d)", self.manager.latest_checkpoint, int(self.step))
        self._broadcast_state()
        self._step_fns = None

    def current_learning_rate(self):
        """The learning rate of the next update (float32 tensor)."""
        return self.learning_rate(self.step) * self.lr_factor

    # ------------------------------------------------------------------ setup
    def _check_stored_params(self):
        if not self.is_chief:
            return
        path = os.path.join(self.model_dir, "params.yml")
        if os.path.exists(path):
            stored = read_params(self.model_dir)
            if stored["network"] != self.params["network"]:
                raise ValueError(f"{path}: the network in model_dir differs from the given params; "
                                 f"use another model_dir or the stored params")
        write_params(self.params, self.model_dir)

    def _state_variables(self):
        return list(self.model.variables) + list(self.optimizer.variables) + [self.step, self.lr_factor]

    def _broadcast_state(self):
        """Every rank takes rank 0's model, optimizer state, step and learning-rate factor."""
        self.world.broadcast_variables(self._state_variables())

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

    def _metric_keys(self, spec, forces, stress):
        keys = ["E"] if K.E_DATA in spec else []
        if forces and K.F_DATA in spec:
            keys.append("F")
        if stress and K.S_DATA in spec:
            keys.append("S")
        return keys

    # --------------------------------------------------------------- training
    def _make_step_fns(self, spec):
        """The three traced pieces of a step: local loss counts, local gradients, reduce-and-apply."""
        model, mp, world = self.model, self.mp, self.world
        variables = model.trainable_variables
        terms = model.loss_term_names()
        weights = model.loss_weights()
        forces, stress = mp["use_force"], mp["use_stress"]
        metric_keys = self._metric_keys(spec, forces, stress)
        one_hot_rank = tf.one_hot(world.rank, world.size, dtype=self.dtype)

        @tf.function(input_signature=[spec])
        def local_counts(batch):
            counts = model.loss_counts(batch)
            return tf.stack([counts[t] for t in terms])

        @tf.function(input_signature=[spec, tf.TensorSpec([len(terms)], tf.float64)])
        def local_gradients(batch, global_counts):
            with tf.GradientTape() as tape:
                pred = model.predict(batch, forces=forces, stress=stress)
                sums = model.loss_sums(batch, pred)
                loss = tf.add_n([weights[t] * tf.math.divide_no_nan(sums[t], tf.cast(global_counts[i], self.dtype))
                                 for i, t in enumerate(terms)])
            grads = [tf.convert_to_tensor(g) if g is not None else tf.zeros_like(v)
                     for g, v in zip(tape.gradient(loss, variables), variables)]
            finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads] + [tf.math.is_finite(loss)])
            errors = model.error_sums(batch, pred)
            stats = tf.concat([[loss, tf.cast(tf.shape(batch[K.CELL])[0], self.dtype)]]
                              + [tf.stack(errors[k]) for k in metric_keys]
                              + [one_hot_rank * tf.cast(tf.logical_not(finite), self.dtype)], axis=0)
            return grads, stats

        grad_specs = [tf.TensorSpec(v.shape, v.dtype) for v in variables]
        n_stats = 2 + 3 * len(metric_keys) + world.size

        @tf.function(input_signature=[grad_specs, tf.TensorSpec([n_stats], self.dtype)])
        def reduce_and_apply(grads, stats):
            grads = world.allreduce_sum(grads, compress=True)
            stats = world.allreduce_sum([stats])[0]
            finite = tf.logical_and(tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads]),
                                    tf.reduce_all(tf.math.is_finite(stats[:2])))
            finite = tf.logical_and(finite, tf.reduce_sum(stats[-world.size:]) == 0)

            def apply():
                clipped = grads
                if mp["max_grad_norm"]:
                    clipped, _ = tf.clip_by_global_norm(grads, mp["max_grad_norm"])
                self.optimizer.apply_gradients(zip(clipped, variables))
                return tf.constant(True)

            applied = tf.cond(finite, apply, lambda: tf.constant(False))
            self.step.assign_add(1)
            return applied, stats

        def unpack(stats):
            sums = {k: stats[2 + 3 * i: 5 + 3 * i] for i, k in enumerate(metric_keys)}
            return stats[0], stats[1], sums, stats[-world.size:]

        return local_counts, local_gradients, reduce_and_apply, unpack

    def _fit_dress(self, input_fn):
        """Fit e_dress to what the freshly initialised network leaves unexplained (over all ranks),
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
        dress = self.model.fit_dress(batches, reduce=self.world.allreduce_sum_numpy)
        n_batches, n_struct = self.world.allreduce_sum_numpy(
            np.array([len(batches), sum(len(b[K.E_DATA]) for b in batches)]))
        log.info("fitted e_dress on %d batches (%d structures, repeats counted): %s", n_batches, n_struct,
                 ", ".join(f"Z={z}: {v:.6f} eV" for z, v in dress.items()))

    def train(self, input_fn, max_steps):
        """Train until the global step reaches ``max_steps`` (or an input ends).

        Returns:
            ``self`` (like the estimator API).

        Raises:
            TrainingPreempted: (a ``SystemExit`` with status 75) after SIGTERM or
                SIGUSR1 on any rank, once rank 0 has written a checkpoint.
            TrainingDiverged: the loss stayed non-finite through ``max_rollbacks`` rollbacks.
            RuntimeError: a collective operation failed (another rank died).
        """
        start = int(self.step)
        if start >= max_steps:
            log.info("step %d already reaches max_steps %d: nothing to train", start, max_steps)
            return self
        if self.mp["fit_e_dress"] and not bool(self.model.dress_fitted):
            self._fit_dress(input_fn)
            self._broadcast_state()
        k = self.mp["accumulate_batches"]
        skip = start * k if self.mp["data_resume"] == "skip" else 0
        dataset = self._input(input_fn, skip=skip)
        if self._step_fns is None or self._step_fns[0] != dataset.element_spec:
            self._step_fns = (dataset.element_spec, self._make_step_fns(dataset.element_spec))
        if self.is_chief and not self.manager.latest_checkpoint:
            self.save()  # something to roll back to
        log.info("training %s from step %d to %d on %d rank(s); %s; model_dir %s", self.params["network"]["name"],
                 start, max_steps, self.world.size, self.learning_rate.describe(), self.model_dir)
        timeout = self.world.options["stall_timeout_s"] if self.world.is_parallel else None
        with StopSignals() as signals, Watchdog(timeout, self._last_checkpoint_text) as watchdog:
            try:
                self._loop(iter(dataset), max_steps, k, signals, watchdog)
            except KeyboardInterrupt:
                log.warning("interrupted at step %d: writing a checkpoint", int(self.step))
                self.save()
                raise
            except (tf.errors.UnknownError, tf.errors.InternalError, tf.errors.AbortedError) as err:
                if not self.world.is_parallel or "Horovod" not in str(err):
                    raise
                raise RuntimeError(f"rank {self.world.rank}: a collective operation failed at step "
                                   f"{int(self.step)}, most likely because another rank died; "
                                   f"{self._last_checkpoint_text()}") from err
        return self

    def _last_checkpoint_text(self):
        latest = self.manager.latest_checkpoint if self.manager else None
        return f"the last checkpoint is {latest}" if latest else "see rank 0's log for the last checkpoint"

    def _loop(self, iterator, max_steps, k, signals, watchdog):
        local_counts, local_gradients, reduce_and_apply, unpack = self._step_fns[1]
        world, mp = self.world, self.mp
        every = mp["log_every_n_steps"]
        meter = Meter()
        streak = rollbacks = skipped = 0
        step = int(self.step)
        while step < max_steps:
            batches = []
            for _ in range(k):
                try:
                    batches.append(next(iterator))
                except StopIteration:
                    break
            t1 = time.perf_counter()
            counts = sum(local_counts(b).numpy() for b in batches) if batches else \
                np.zeros(len(self.model.loss_term_names()))
            flags = [float(len(batches) < k), float(signals.received is not None)]
            agreed = world.allreduce_sum_numpy(np.concatenate([counts, flags]))
            t2 = time.perf_counter()
            if agreed[-1] > 0:
                self._preempted(signals.received or "a stop signal on another rank")
            if agreed[-2] > 0:
                log.info("an input ended at step %d before max_steps %d", step, max_steps)
                break
            global_counts = tf.constant(agreed[:-2])
            grads, stats = local_gradients(batches[0], global_counts)
            for b in batches[1:]:
                more_grads, more_stats = local_gradients(b, global_counts)
                grads = [g + h for g, h in zip(grads, more_grads)]
                stats = stats + more_stats
            if world.is_parallel:
                stats.numpy()  # wait for this rank's compute before timing the communication
            t3 = time.perf_counter()
            applied, stats = reduce_and_apply(grads, stats)
            applied, stats = bool(applied), stats.numpy()
            t4 = time.perf_counter()
            watchdog.beat()
            step = int(self.step)
            loss, n_struct, sums, bad_ranks = unpack(stats)
            local_struct = sum(int(b[K.CELL].shape[0]) for b in batches)
            comm = (t2 - t1) + (t4 - t3) if world.is_parallel else 0.0
            if applied:
                streak = 0
                meter.add(loss, sums, n_struct, local_struct, comm)
            else:
                streak += 1
                skipped += 1
                where = f" (from rank {', '.join(str(r) for r in np.flatnonzero(bad_ranks))})" \
                    if world.is_parallel and bad_ranks.any() else ""
                log.warning("step %d: non-finite loss or gradient%s; update skipped on all ranks (%d in a row)",
                            step, where, streak)
                if streak >= mp["max_nonfinite_steps"]:
                    rollbacks += 1
                    if rollbacks > mp["max_rollbacks"]:
                        raise TrainingDiverged(f"step {step}: the loss stayed non-finite after {mp['max_rollbacks']} "
                                               f"rollbacks; lower model.params.learning_rate or check the data")
                    self._rollback()
                    streak = 0
            if step % every == 0 or step >= max_steps:
                self._progress(step, max_steps, meter, skipped)
                meter, skipped = Meter(), 0
            if step % mp["save_checkpoint_steps"] == 0:
                self.save()
        self.save()

    def _progress(self, step, max_steps, meter, skipped):
        figures = self.world.allgather_numpy(meter.rank_figures()) if self.world.is_parallel else None
        line = f"step {step}/{max_steps} {meter.summary()} lr {float(self.current_learning_rate()):.3g}"
        if skipped:
            line += f" ({skipped} non-finite steps skipped)"
        if figures is not None:
            line += "; " + scaling_line(figures, self.world.options["single_rank_throughput"])
        log.info(line)

    def _rollback(self):
        """Back to the latest checkpoint's model and optimizer state (step and data position go on),
        with the learning rate multiplied by ``rollback_lr_factor``."""
        factor = float(self.lr_factor) * self.mp["rollback_lr_factor"]
        if self.is_chief:
            path = self.manager.latest_checkpoint
            tf.train.Checkpoint(model=self.model, optimizer=self.optimizer).restore(path).expect_partial()
            log.warning("rolled back to %s; learning rate × %g from now on", path, factor)
        self.lr_factor.assign(factor)
        self._broadcast_state()

    def _preempted(self, signal_name):
        step = int(self.step)
        path = self.save()
        # a barrier: no rank exits (and makes the launcher kill the others) before the checkpoint is whole
        self.world.barrier()
        if self.is_chief:
            log.warning("stopped by %s at step %d; checkpoint %s written; launch the same command again to "
                        "resume from it", signal_name, step, path)
        raise TrainingPreempted(signal_name, step)

    def save(self):
        """Write a checkpoint of the current step on rank 0 (unless one exists for it).

        Returns:
            Its path on rank 0, ``None`` elsewhere.
        """
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
        """Errors on a finite input, summed over all ranks' inputs.

        Returns:
            dict with ``E_MAE``, ``E_RMSE`` (eV) and, when labels exist,
            ``F_MAE``, ``F_RMSE`` (eV/Å), ``S_MAE``, ``S_RMSE`` (eV/Å³), plus
            ``loss`` and ``global_step``.  In a parallel run every rank gets the
            same numbers: sums and counts are added over ranks (each rank's
            input should be its own share of the data).
        """
        dataset = self._input(input_fn)
        spec = dataset.element_spec
        want_f, want_s = K.F_DATA in spec, K.S_DATA in spec
        terms = list(self.model.loss_term_names())
        metric_keys = self._metric_keys(spec, want_f, want_s)

        @tf.function(input_signature=[spec])
        def eval_step(batch):
            pred = self.model.predict(batch, forces=want_f, stress=want_s)
            loss_terms = self.model.loss_terms(batch, pred)
            errors = self.model.error_sums(batch, pred)
            return tf.concat([tf.cast(tf.stack(loss_terms[t]), tf.float64) for t in terms]
                             + [tf.cast(tf.stack(errors[k]), tf.float64) for k in metric_keys], axis=0)

        total = np.zeros(2 * len(terms) + 3 * len(metric_keys))
        for batch in dataset:
            total += eval_step(batch).numpy()
        total = self.world.allreduce_sum_numpy(total)
        weights = self.model.loss_weights()
        loss = sum(weights[t] * total[2 * i] / total[2 * i + 1] for i, t in enumerate(terms) if total[2 * i + 1])
        offset = 2 * len(terms)
        result = errors_from_sums({key: total[offset + 3 * i: offset + 3 * i + 3] for i, key in enumerate(metric_keys)})
        result["loss"] = float(loss)
        result["global_step"] = int(self.step)
        return result

    def predict(self, input_fn):
        """Yield one dict per structure of this rank's input: ``energy`` (eV), ``forces``
        [n_atoms, 3] (eV/Å), ``stress`` [3, 3] (eV/Å³, periodic structures) and ``elems``."""
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
