"""The training loop behind ``model.train / evaluate / predict``.

:class:`Trainer` keeps the shape of the ``tf.estimator`` API that PiNN users
script against, in plain TensorFlow 2, for one process or many (Horovod, see
:mod:`pinn.parallel`).  One training step:

1. take ``accumulate_batches`` batches; sum their loss counts (structures,
   force components, ...) over all ranks, together with the "input ended"
   and "stop signal received" flags, so every rank decides alike;
2. per batch, gradients of Σ_term w_t · (penalty sum: squared or Huber) / (global count),
   summed over the batches (``tf.function``, traced once);
3. sum gradients and statistics over ranks, skip the update on every rank if
   anything is non-finite, clip and apply Adam.

The N-rank update therefore equals the 1-rank update on the union of the N
batches.  Checkpoints (``tf.train.Checkpoint``: model, optimizer, step,
learning-rate factor, weight average, early-stopping state) are written by
rank 0 alone, the latest ``keep_checkpoint_max`` in ``model_dir`` and the best
by the validation metric in ``model_dir/best``; resume is exact (step,
optimizer state, weight average, schedule position, energy offsets and, for a
seeded pipeline, the data position).

With an ``eval_fn``, the validation input is evaluated every
``eval_every_n_steps`` (with the averaged weights when ``ema_decay`` is set);
the figures go to the log, ``metrics.jsonl`` and TensorBoard, the
predictions to ``eval_predictions.npz`` (see :mod:`pinn.training.metrics`), and
training stops early after ``early_stopping_patience`` evaluations without
improvement.
"""
import contextlib
import json
import logging
import os
import time

import numpy as np
import tensorflow as tf

from pinn import keys as K
from pinn.training.ema import WeightAverage
from pinn.training.inference import InferenceHandle
from pinn.training.guards import StopSignals, TrainingPreempted, Watchdog
from pinn.io.batch import add_neighbors, split_batch
from pinn.logs import setup_logging
from pinn.training.metrics import MAX_PARITY_ROWS, write_eval_predictions
from pinn.networks import get_network
from pinn.io.padding import pad_to_buckets
from pinn.models.loss_weights import structure_weights
from pinn.parallel.worlds import SerialWorld
from pinn.params import ParamsError, read_params, resolve, write_params
from pinn.training.options import TRAINING_PARAMS
from pinn.training.progress import Meter, ProgressBar, errors_from_sums, scaling_line
from pinn.training.recorder import RunRecorder
from pinn.training.schedule import LearningRate

log = logging.getLogger("pinn")

BEST_DIR = "best"


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
        checkpoint: which checkpoint to restore: ``None`` or ``'last'`` (the
            latest in ``model_dir``), ``'best'`` (the best by the validation
            metric, in ``model_dir/best``) or a checkpoint path.

    ``input_fn`` is a function with no arguments returning a
    ``tf.data.Dataset`` of sparse batches (see :func:`pinn.io.sparse_batch`);
    neighbor lists are added when the batches have none.  In a parallel run
    each rank's ``input_fn`` should give that rank's share of the data
    (:func:`pinn.io.distribute_data`, or ``dataset.shard(size, rank)``).
    """

    def __init__(self, params, model_cls, world=None, checkpoint=None):
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
        self.engine = self._engine_setting()
        self.jit = self._jit_setting()
        self.parts = self._parts_setting()
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        self.lr_factor = tf.Variable(1.0, dtype=tf.float32, trainable=False, name="lr_factor")
        self.best_metric = tf.Variable(np.inf, dtype=tf.float64, trainable=False, name="best_metric")
        self.evals_since_best = tf.Variable(0, dtype=tf.int64, trainable=False, name="evals_since_best")
        self.learning_rate = self._schedule(self.mp["lr_cosine_steps"])
        self._warn_unused_decay()
        self.optimizer = tf.keras.optimizers.Adam(learning_rate=float(self.current_learning_rate()))
        self.optimizer.build(self.model.trainable_variables)  # slots exist before a restore or broadcast
        self.ema = WeightAverage(self.model.trainable_variables, self.mp["ema_decay"]) if self.mp["ema_decay"] \
            else None
        parts = dict(model=self.model, optimizer=self.optimizer, step=self.step, lr_factor=self.lr_factor,
                     best_metric=self.best_metric, evals_since_best=self.evals_since_best)
        if self.ema is not None:
            parts["weight_average"] = self.ema
        self.checkpoint = tf.train.Checkpoint(**parts)
        self.manager = self.best_manager = None
        if self.is_chief:
            self.manager = tf.train.CheckpointManager(self.checkpoint, self.model_dir,
                                                      max_to_keep=self.mp["keep_checkpoint_max"],
                                                      checkpoint_name="ckpt")
            self.best_manager = tf.train.CheckpointManager(self.checkpoint, os.path.join(self.model_dir, BEST_DIR),
                                                           max_to_keep=1, checkpoint_name="ckpt")
        self.restored = self._restore_on_chief(checkpoint)
        self._broadcast_state()
        self._step_fns = None
        self._engine_synced = False  # the numba engine holds the variables' current values
        self._host = None  # the numba engine step's weights and optimizer state (HostOptimizer)
        self._traced_fns = {}
        self._averaged = False  # the trainable variables hold the average (inside averaged_weights)
        self._frozen = False
        self.bar = ProgressBar(enabled=False)
        self.last_validation = None  # metrics of the latest validation during train()

    @classmethod
    def from_model_dir(cls, model_dir, checkpoint=None):
        """The model of ``model_dir`` (its ``params.yml``) in this one process, whatever its stored
        ``parallel`` says, restored from ``checkpoint`` (see the class)."""
        from pinn.models.registry import MODELS
        params = read_params(model_dir)
        return cls(params, MODELS[params["model"]["name"]], None, checkpoint)

    @classmethod
    def load_for_inference(cls, model_dir, checkpoint=None):
        """The :class:`~pinn.training.inference.InferenceHandle` of a model directory's model, with its
        averaged weights put in for good; a ``ValueError`` when the directory holds no checkpoint."""
        trainer = cls.from_model_dir(model_dir, checkpoint)
        if not trainer.restored:
            raise ValueError(f"{os.fspath(model_dir)}: no checkpoint to load (train the model first)")
        trainer.freeze_averaged_weights()
        return trainer.inference()

    def inference(self):
        """An :class:`~pinn.training.inference.InferenceHandle` of this model (what the calculator takes)."""
        return InferenceHandle(self)

    def _engine_setting(self):
        """What computes the gradients (``model.params.engine``): a :class:`pinn.engines.training.TrainingEngine`,
        or None for TensorFlow."""
        choice = self.mp["engine"]
        if choice == "tensorflow":
            return None
        from pinn.engines.lowering import check_supported
        from pinn.engines.training import TrainingEngine
        reason = check_supported(self.model)
        if choice == "numba" and reason:
            raise ParamsError(f"model.params.engine: {reason}")
        if reason or (choice == "auto" and (tf.config.list_physical_devices("GPU") or self.mp["jit"]
                                            or self.mp["batch_parts"] not in (None, 1))):
            return None
        # a rank of a parallel run takes its share of the cores, as TensorFlow does (pinn.parallel)
        threads = tf.config.threading.get_intra_op_parallelism_threads() if self.world.is_parallel else 0
        return TrainingEngine(self.model, threads=threads or None)

    def _jit_setting(self):
        """Whether the training step is XLA-compiled (``model.params.jit``, default: if the network can be)."""
        if self.engine is not None:
            if self.mp["jit"]:
                raise ParamsError("model.params.jit: XLA compiles TensorFlow's training step; the numba engine "
                                  "(model.params.engine) has its own compiled kernels: leave jit unset")
            return False
        supported = bool(getattr(self.network, "JIT_COMPATIBLE", False))
        if self.mp["jit"] is None:
            return supported
        if self.mp["jit"] and not supported:
            raise ParamsError(f"model.params.jit: the {self.params['network']['name']} network cannot be compiled "
                              f"with XLA (its shapes depend on the data); set jit to false or leave it unset")
        return self.mp["jit"]

    def _parts_setting(self):
        """Parts per training batch (``model.params.batch_parts``; default: one per CPU core, at most 4, for an
        XLA-compiled step of one process on CPU, since XLA runs a computation's loops on one core)."""
        if self.engine is not None:
            if self.mp["batch_parts"] not in (None, 1):
                raise ParamsError("model.params.batch_parts: the numba engine (model.params.engine) spreads a batch "
                                  "over the cores itself: leave batch_parts unset")
            return 1
        if self.mp["batch_parts"] is not None:
            return self.mp["batch_parts"]
        if not self.jit or self.world.is_parallel or tf.config.list_physical_devices("GPU"):
            return 1
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        return max(1, min(cores, 4))

    def current_learning_rate(self):
        """The learning rate of the next update (float32 tensor)."""
        return self.learning_rate(self.step) * self.lr_factor

    # ------------------------------------------------------------------ setup
    def _schedule(self, total_steps):
        """The learning-rate schedule of this run; ``total_steps`` (steps of this run) sets a cosine's length."""
        mp, options = self.mp, self.world.options
        steps_per_step = self.world.size if options["lr_scaling"] != "none" else 1
        return LearningRate(mp["learning_rate"], mp["lr_schedule"], mp["decay_step"], mp["decay_rate"],
                            mp["lr_boundaries"], mp["lr_min_factor"],
                            total_steps * steps_per_step if total_steps else None, mp["lr_warmup_steps"],
                            self.world.size, options["lr_scaling"], options["warmup_steps"])

    def _warn_unused_decay(self):
        """Say so when decay_step / decay_rate are set but the schedule does not use them (the default
        schedule was 'exponential' up to version 0.1 and is 'cosine' now)."""
        if self.mp["lr_schedule"] in ("exponential", "step"):
            return
        unused = [key for key in ("decay_step", "decay_rate") if self.mp[key] != TRAINING_PARAMS[key].default]
        if unused and self.is_chief:
            log.warning("model.params: %s %s no effect with lr_schedule '%s' (the default since pinn 0.2); "
                        "set lr_schedule: exponential to decay by them", " and ".join(unused),
                        "has" if len(unused) == 1 else "have", self.mp["lr_schedule"])

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

    def _restore_on_chief(self, which):
        """Check the stored params and restore on rank 0; a failure there raises on every rank (no hang)."""
        error, path = None, None
        if self.is_chief:
            try:
                self._check_stored_params()
                path = self._restore(which)
                self._reset_best_if_metric_changed()
            except ValueError as err:
                error = err
        if self.world.is_parallel and self.world.allreduce_sum_numpy(np.array([float(error is not None)]))[0]:
            if error is None:
                raise ValueError(f"rank 0 could not set up {self.model_dir} (see its error)")
        if error is not None:
            raise error
        return path

    def _reset_best_if_metric_changed(self):
        """A best value of another early_stopping_metric (an earlier run's) does not count."""
        path = os.path.join(self.model_dir, BEST_DIR, "best.json")
        if not os.path.exists(path):
            return
        with open(path) as f:
            stored = json.load(f).get("metric")
        if stored != self.mp["early_stopping_metric"]:
            log.info("early_stopping_metric is now %s (was %s): the best value starts afresh",
                     self.mp["early_stopping_metric"], stored)
            self.best_metric.assign(np.inf)
            self.evals_since_best.assign(0)

    def _restore(self, which):
        """Restore the requested checkpoint (rank 0); returns its path or ``None`` for a fresh model."""
        if which in (None, "last"):
            path = self.manager.latest_checkpoint
        elif which == "best":
            path = self.best_manager.latest_checkpoint
            if path is None:
                raise ValueError(f"{self.model_dir}: no best checkpoint (train with an eval_fn to keep one)")
        else:
            path = os.fspath(which)
            if not tf.io.gfile.exists(path + ".index"):
                raise ValueError(f"{path}: no such checkpoint (expected {path}.index)")
        if path:
            self.checkpoint.restore(path).expect_partial()
            log.info("restored %s (step %d)", path, int(self.step))
            if self.ema is not None and not tf.train.load_checkpoint(path).has_tensor(
                    "weight_average/updates/.ATTRIBUTES/VARIABLE_VALUE"):
                self.ema.reset(self.model.trainable_variables)
                log.info("%s holds no weight average (trained without ema_decay): the average starts at its "
                         "weights", path)
        return path

    def _state_variables(self):
        extra = list(self.ema.variables) if self.ema is not None else []
        return (list(self.model.variables) + list(self.optimizer.variables) + extra
                + [self.step, self.lr_factor, self.best_metric, self.evals_since_best])

    def _broadcast_state(self):
        """Every rank takes rank 0's model, optimizer state, weight average, step and schedule state."""
        self.world.broadcast_variables(self._state_variables())

    @contextlib.contextmanager
    def averaged_weights(self):
        """Within this block the model holds the averaged weights (``ema_decay``; otherwise the raw ones)."""
        if self.ema is None or self._averaged:
            yield
            return
        self.ema.swap(self.model.trainable_variables)
        self._averaged = True
        try:
            yield
        finally:
            self.ema.swap(self.model.trainable_variables)
            self._averaged = False

    def freeze_averaged_weights(self):
        """Put the averaged weights in the model for good (inference only: :meth:`train` then refuses)."""
        if self.ema is not None and not self._averaged:
            self.ema.swap(self.model.trainable_variables)
            self._averaged = True
        self._frozen = True

    @property
    def frozen(self):
        """Whether the weights are fixed for good (:meth:`freeze_averaged_weights`)."""
        return self._frozen

    def _input(self, input_fn, skip=0, pad=False, parts=1):
        """The dataset of ``input_fn`` checked, with neighbor lists, ``skip`` batches skipped, split into
        tuples of ``parts`` sparse batches when ``parts > 1``, padded to bucket sizes when ``pad`` (for the
        XLA-compiled training step) and prefetched."""
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
        if pad:
            # XLA drops assertions: unknown elements are refused here, in the pipeline, before padding
            index = self.network.element_index

            def known_elements(batch):
                with tf.control_dependencies([index(batch[K.ELEMS])]):
                    return {**batch, K.ELEMS: tf.identity(batch[K.ELEMS])}
            dataset = dataset.map(known_elements)
        if parts > 1:
            dataset = dataset.map(lambda batch: split_batch(batch, parts), num_parallel_calls=tf.data.AUTOTUNE,
                                  deterministic=True)
        if pad:
            dataset = dataset.apply(pad_to_buckets(self.rc, self.params["network"]["params"]["atom_types"][0]))
        return dataset.prefetch(tf.data.AUTOTUNE)

    # --------------------------------------------------------------- training
    def _make_step_fns(self, spec):
        """The traced pieces of a step: local loss counts, local gradients, reduce-and-apply, and the
        whole step in one function (used by one process with one batch per step).

        A batch split into parts (a tuple of sparse batches, ``batch_parts``) has its counts and
        gradients summed over the parts; each part's gradients are one compiled function, and the
        parts' calls, independent, run concurrently on TensorFlow's inter-op threads."""
        model, mp, world = self.model, self.mp, self.world
        split = isinstance(spec, tuple)
        part_spec = spec[0] if split else spec
        missing = model.missing_labels(part_spec)
        if missing:
            raise ValueError(f"the model trains on {missing} but the training data have no "
                             f"{[model.LABELS[t] for t in missing]} (see model.params)")
        variables = model.trainable_variables
        terms = model.loss_term_names()
        outputs = model.train_outputs()
        metric_keys = model.metric_keys(part_spec, outputs)
        one_hot_rank = tf.one_hot(world.rank, world.size, dtype=self.dtype)
        schedule_position = self.learning_rate.single_rank_steps

        def counts_of(batch):
            if split:
                return tf.add_n([counts_of_part(part) for part in batch])
            return counts_of_part(batch)

        def counts_of_part(batch):
            counts = model.loss_counts(batch)
            return tf.stack([counts[t] for t in terms])

        def part_gradients(batch, global_counts):
            weights = model.loss_weights(schedule_position(self.step))
            with tf.GradientTape() as tape:
                pred = model.predict(batch, **outputs)
                sums = model.loss_sums(batch, pred)
                loss = tf.add_n([tf.cast(weights[t], self.dtype)
                                 * tf.math.divide_no_nan(sums[t], tf.cast(global_counts[i], self.dtype))
                                 for i, t in enumerate(terms)])
            grads = [tf.convert_to_tensor(g) if g is not None else tf.zeros_like(v)
                     for g, v in zip(tape.gradient(loss, variables), variables)]
            finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads] + [tf.math.is_finite(loss)])
            errors = model.error_sums(batch, pred)
            stats = tf.concat([[loss, tf.reduce_sum(structure_weights(batch, self.dtype))]]
                              + [tf.stack(errors[k]) for k in metric_keys]
                              + [one_hot_rank * tf.cast(tf.logical_not(finite), self.dtype)], axis=0)
            return grads, stats

        if self.engine is not None:  # the numba engine: one call computes the loss and its gradients
            from pinn.engines.training import tensorflow_gradients

            def part_gradients(batch, global_counts):  # noqa: F811
                weights = model.loss_weights(schedule_position(self.step))
                return tensorflow_gradients(self.engine, batch, variables, terms,
                                            tf.stack([tf.cast(weights[t], tf.float64) for t in terms]),
                                            global_counts, metric_keys, one_hot_rank, self.dtype)

        if split:  # one compiled function per part, the parts' calls concurrent in an uncompiled step
            compiled_part = tf.function(part_gradients, jit_compile=self.jit)

            def gradients_of(batch, global_counts):
                results = [compiled_part(part, global_counts) for part in batch]
                grads = [tf.add_n(list(g)) for g in zip(*[r[0] for r in results])]
                return grads, tf.add_n([r[1] for r in results])
        else:
            gradients_of = part_gradients

        @tf.function(jit_compile=True)  # clipping, Adam and the average fused: ~10 % of a small step
        def apply(grads):
            clipped = grads
            if mp["max_grad_norm"]:
                clipped, _ = tf.clip_by_global_norm(grads, mp["max_grad_norm"])
            # Keras keeps a learning rate given as a function as a variable of its first value:
            # the schedule reaches the update only through this assignment
            self.optimizer.learning_rate.assign(self.current_learning_rate())
            self.optimizer.apply_gradients(zip(clipped, variables))
            if self.ema is not None:
                self.ema.update(variables)
            return tf.constant(True)

        def apply_if_finite(grads, stats):
            finite = tf.logical_and(tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads]),
                                    tf.reduce_all(tf.math.is_finite(stats[:2])))
            finite = tf.logical_and(finite, tf.reduce_sum(stats[-world.size:]) == 0)
            applied = tf.cond(finite, lambda: apply(grads), lambda: tf.constant(False))
            self.step.assign_add(1)
            return applied, stats

        local_counts = tf.function(counts_of, input_signature=[spec])
        # XLA (jit): compiled once per bucket of padded batch sizes; the tf.function is traced once
        local_gradients = tf.function(gradients_of, input_signature=[spec, tf.TensorSpec([len(terms)], tf.float64)],
                                      jit_compile=self.jit and not split)
        grad_specs = [tf.TensorSpec(v.shape, v.dtype) for v in variables]
        n_stats = 2 + 3 * len(metric_keys) + world.size

        @tf.function(input_signature=[grad_specs, tf.TensorSpec([n_stats], self.dtype)])
        def reduce_and_apply(grads, stats):
            grads = world.allreduce_sum(grads, compress=True)
            stats = world.allreduce_sum([stats])[0]
            return apply_if_finite(grads, stats)

        @tf.function(input_signature=[spec], jit_compile=self.jit and not split)
        def whole_step(batch):
            """One process, one batch per step: the step in one graph (one call, no host round trips)."""
            grads, stats = gradients_of(batch, counts_of(batch))
            return apply_if_finite(grads, stats)

        def unpack(stats):
            sums = {k: stats[2 + 3 * i: 5 + 3 * i] for i, k in enumerate(metric_keys)}
            return stats[0], stats[1], sums, stats[-world.size:]

        if self.engine is not None:
            whole_step = self._engine_step(variables, terms, metric_keys)

        return local_counts, local_gradients, reduce_and_apply, unpack, whole_step

    def _engine_step(self, variables, terms, metric_keys):
        """The step of one process and one batch with the numba engine: its gradients from the NumPy
        batch, then the update (clipping, Adam, the average) on the host's flat vectors
        (:class:`pinn.engines.host_optimizer.HostOptimizer`), which TensorFlow's variables get when something
        reads them (:meth:`_store_engine_state`)."""
        from pinn.engines.training import BATCH_KEYS, step_stats
        from pinn.engines.host_optimizer import HostOptimizer
        engine, model = self.engine, self.model
        host = self._host = HostOptimizer(variables, self.optimizer, self.ema, self.mp["max_grad_norm"])
        schedule_position = self.learning_rate.single_rank_steps
        this_rank = np.ones(1)  # one process: rank 0 of 1
        fixed_weights = None if model.params["loss_weight_schedule"] else \
            {t: float(w) for t, w in model.loss_weights(0.0).items()}
        block = 256  # learning rates computed per block of steps: one TensorFlow call, not one per step

        @tf.function(input_signature=[tf.TensorSpec([], tf.int64)])
        def rates_from(start):
            steps = start + tf.range(block, dtype=tf.int64)
            return tf.map_fn(self.learning_rate, steps, fn_output_signature=tf.float32) * self.lr_factor

        state = {}  # the step count, e_dress and the learning rates of the current block, read on a sync
        one = tf.constant(1, tf.int64)  # the step counter's increment: no read back, no conversion per step

        def step(batch):
            if not self._engine_synced:  # the variables changed outside this step (start, rollback, TF step)
                host.load()
                engine.set_flat_weights(host.weights)
                state.update(step=int(self.step), dress=model.e_dress.numpy(), rates=None)
                self._engine_synced = True
            if state["rates"] is None or not state["first"] <= state["step"] < state["first"] + block:
                state.update(first=state["step"], rates=rates_from(tf.constant(state["step"], tf.int64)).numpy())
            arrays = {k: batch[k].numpy() for k in BATCH_KEYS if k in batch}
            weights = fixed_weights or {t: float(w) for t, w in
                                        model.loss_weights(schedule_position(state["step"])).items()}
            out = engine(arrays, weights, engine.loss_counts(arrays, terms), state["dress"])
            try:
                if out["finite"]:
                    host.apply(engine.flat_gradient(), state["rates"][state["step"] - state["first"]])
                    engine.set_flat_weights(host.weights)
            finally:  # an interrupt (Ctrl-C) in the update still counts the step with it, as the checkpoint will
                self.step.assign_add(one, read_value=False)
                state["step"] += 1
            return out["finite"], step_stats(out, metric_keys, this_rank, self.dtype.as_numpy_dtype)
        return step

    def _store_engine_state(self):
        """Give TensorFlow's variables the weights, Adam's state and the average that the numba
        engine's step keeps on the host (before anything reads them); the learning rates are read
        again after (a validation may lower them)."""
        if self._host is not None and self._host.ahead:
            self._host.store()
            self._engine_synced = False

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

    def _steps_per_epoch(self, input_fn, k):
        """Steps in one pass over every rank's input (the shortest rank's, in whole steps of ``k`` batches)."""
        dataset = input_fn()
        cardinality = int(dataset.cardinality())
        if cardinality == tf.data.INFINITE_CARDINALITY:
            raise ValueError("max_epochs: input_fn repeats forever; remove .repeat() so that one pass of it is "
                             "an epoch (train repeats it), or give max_steps instead")
        if cardinality < 0:
            log.info("counting the batches of one epoch")
            cardinality = int(dataset.reduce(np.int64(0), lambda n, _: n + 1))
        per_rank = self.world.allgather_numpy(np.array([cardinality]))[:, 0]
        steps = int(per_rank.min()) // k
        if steps == 0:
            raise ValueError(f"max_epochs: an epoch has {int(per_rank.min())} batches on the shortest rank, fewer "
                             f"than accumulate_batches = {k}")
        if per_rank.max() != per_rank.min():
            log.info("ranks hold %d to %d batches per epoch: an epoch is %d steps (the shortest rank's)",
                     per_rank.min(), per_rank.max(), steps)
        return steps

    def train(self, input_fn, max_steps=None, max_epochs=None, eval_fn=None):
        """Train until the global step reaches ``max_steps`` or ``max_epochs`` (or an input ends, or early stopping).

        Args:
            input_fn: function returning the training ``tf.data.Dataset`` of sparse batches.
            max_steps: last global step (counted over resumes).
            max_epochs: train this many passes over ``input_fn`` (which must then be finite; it is
                repeated here).  With both, the smaller limit wins.
            eval_fn: function returning the validation dataset, evaluated every
                ``eval_every_n_steps`` and at the end (best checkpoint, early stopping).

        Returns:
            ``self`` (like the estimator API).

        Raises:
            TrainingPreempted: (a ``SystemExit`` with status 75) after SIGTERM or
                SIGUSR1 on any rank, once rank 0 has written a checkpoint.
            TrainingDiverged: the loss stayed non-finite through ``max_rollbacks`` rollbacks.
            RuntimeError: a collective operation failed (another rank died).
        """
        if self._frozen:
            raise RuntimeError("this model holds averaged weights for inference (freeze_averaged_weights); "
                               "build a new one from model_dir to train")
        if max_steps is None and max_epochs is None:
            raise ValueError("train: give max_steps or max_epochs")
        k = self.mp["accumulate_batches"]
        steps_per_epoch = None
        if max_epochs is not None:
            steps_per_epoch = self._steps_per_epoch(input_fn, k)
            by_epochs = int(round(max_epochs * steps_per_epoch))
            max_steps = by_epochs if max_steps is None else min(max_steps, by_epochs)
            epoch_input, n_batches = input_fn, steps_per_epoch * k
            input_fn = lambda: epoch_input().take(n_batches).repeat()  # noqa: E731
        if eval_fn is None and self.mp["early_stopping_patience"] is not None:
            log.warning("early_stopping_patience is set but train() got no eval_fn: no early stopping")
        if eval_fn is not None and self.mp["early_stopping_metric"] == "loss" and self.mp["loss_weight_schedule"]:
            log.warning("early_stopping_metric 'loss' with a loss_weight_schedule: the loss changes with the weights; "
                        "an error metric such as 'F_RMSE' picks the best checkpoint more reliably")
        start = int(self.step)
        if start >= max_steps:
            log.info("step %d already reaches max_steps %d: nothing to train", start, max_steps)
            return self
        if self.mp["lr_schedule"] == "cosine" and not self.mp["lr_cosine_steps"]:
            self.learning_rate = self._schedule(max_steps)
            self._step_fns = None
        if self.mp.get("fit_e_dress") and not bool(self.model.dress_fitted):
            self._fit_dress(input_fn)
            self._broadcast_state()
        self._engine_synced = False  # the numba engine reads the weights again
        skip = start * k if self.mp["data_resume"] == "skip" else 0
        dataset = self._input(input_fn, skip=skip, pad=self.jit, parts=self.parts)
        if self._step_fns is None or self._step_fns[0] != dataset.element_spec:
            self._step_fns = (dataset.element_spec, self._make_step_fns(dataset.element_spec))
        if self.is_chief and not self.manager.latest_checkpoint:
            self.save()  # something to roll back to
        length = f"{max_steps} ({max_steps / steps_per_epoch:g} epochs of {steps_per_epoch} steps)" \
            if steps_per_epoch else f"{max_steps}"
        log.info("training %s from step %d to %s on %d rank(s); %s%s; gradients by %s; model_dir %s",
                 self.params["network"]["name"], start, length, self.world.size, self.learning_rate.describe(),
                 f"; weight average with decay {self.mp['ema_decay']:g}" if self.ema is not None else "",
                 "TensorFlow" + (" (XLA)" if self.jit else "") if self.engine is None else
                 f"the numba engine ({self.engine.threads} thread(s))",
                 self.model_dir)
        timeout = self.world.options["stall_timeout_s"] if self.world.is_parallel else None
        enabled = {"auto": None, "on": True, "off": False}[self.mp["progress_bar"]]
        self.bar = ProgressBar(enabled=enabled if self.is_chief else False)
        recorder = RunRecorder(self.model_dir, enabled=self.is_chief, tensorboard=self.mp["tensorboard"])
        run = _Run(max_steps, steps_per_epoch, eval_fn, recorder)
        with StopSignals() as signals, Watchdog(timeout, self._last_checkpoint_text) as watchdog:
            try:
                self._loop(iter(dataset), run, k, signals, watchdog)
            except KeyboardInterrupt:
                self.bar.clear()
                log.warning("interrupted at step %d: writing a checkpoint", int(self.step))
                self.save()
                raise
            except (tf.errors.UnknownError, tf.errors.InternalError, tf.errors.AbortedError) as err:
                if not self.world.is_parallel or "Horovod" not in str(err):
                    raise
                raise RuntimeError(f"rank {self.world.rank}: a collective operation failed at step "
                                   f"{int(self.step)}, most likely because another rank died; "
                                   f"{self._last_checkpoint_text()}") from err
            finally:
                self._store_engine_state()
                self.bar.clear()
                recorder.close()
        return self

    def _last_checkpoint_text(self):
        latest = self.manager.latest_checkpoint if self.manager else None
        return f"the last checkpoint is {latest}" if latest else "see rank 0's log for the last checkpoint"

    def _log(self, level, message, *args):
        self.bar.clear()
        log.log(level, message, *args)

    def _split_step(self, batches, k, signals, step, max_steps):
        """A step in pieces: agree on loss counts (and stop flags) over ranks, local gradients over the
        ``k`` batches, then reduce-and-apply (not waited for).  Returns ``(applied, stats, (t2, t3))``
        with the times after the agreement and after the local compute, or ``(None, None, None)``
        when an input ended on any rank."""
        local_counts, local_gradients, reduce_and_apply = self._step_fns[1][:3]
        world = self.world
        counts = sum(local_counts(b).numpy() for b in batches) if batches else \
            np.zeros(len(self.model.loss_term_names()))
        flags = [float(len(batches) < k), float(signals.received is not None)]
        agreed = world.allreduce_sum_numpy(np.concatenate([counts, flags]))
        t2 = time.perf_counter()
        if agreed[-1] > 0:
            self.bar.clear()
            self._preempted(signals.received or "a stop signal on another rank")
        if agreed[-2] > 0:
            self._log(logging.INFO, "an input ended at step %d before max_steps %d", step, max_steps)
            return None, None, None
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
        return applied, stats, (t2, t3)

    def _loop(self, iterator, run, k, signals, watchdog):
        unpack, whole_step = self._step_fns[1][3:]
        world, mp = self.world, self.mp
        every = mp["log_every_n_steps"]
        eval_every = mp["eval_every_n_steps"] or mp["save_checkpoint_steps"]
        max_steps = run.max_steps
        meter = Meter()
        streak = rollbacks = skipped = 0
        step = int(self.step)
        last_eval = None
        while step < max_steps:
            batches = []
            for _ in range(k):
                try:
                    batches.append(next(iterator))
                except StopIteration:
                    break
            t1 = time.perf_counter()
            if not world.is_parallel and k == 1 and batches and signals.received is None:
                applied, stats = whole_step(batches[0])
                counted = step + 1  # a whole step counts one, applied or not
            else:  # also where a single process stops: input ended, or a signal
                self._store_engine_state()
                applied, stats, times = self._split_step(batches, k, signals, step, max_steps)
                if applied is None:
                    break
                counted = int(self.step)
            applied, stats = bool(applied), np.asarray(stats)  # the engine's step gives NumPy already
            comm = 0.0
            if world.is_parallel:  # the agreement on counts and the reduction
                comm = (times[0] - t1) + (time.perf_counter() - times[1])
            watchdog.beat()
            step = counted
            loss, n_struct, sums, bad_ranks = unpack(stats)
            local_struct = sum(_real_structures(b) for b in batches)
            if applied:
                streak = 0
                meter.add(loss, sums, n_struct, local_struct, comm)
            else:
                streak += 1
                skipped += 1
                where = f" (from rank {', '.join(str(r) for r in np.flatnonzero(bad_ranks))})" \
                    if world.is_parallel and bad_ranks.any() else ""
                self._log(logging.WARNING, "step %d: non-finite loss or gradient%s; update skipped on all ranks "
                          "(%d in a row)", step, where, streak)
                if streak >= mp["max_nonfinite_steps"]:
                    rollbacks += 1
                    if rollbacks > mp["max_rollbacks"]:
                        raise TrainingDiverged(f"step {step}: the loss stayed non-finite after {mp['max_rollbacks']} "
                                               f"rollbacks; lower model.params.learning_rate or check the data")
                    self._rollback()
                    streak = 0
            self.bar.update(step, max_steps, f"loss {float(loss):.4g}")
            if step % every == 0 or step >= max_steps:
                self._progress(run, step, meter, skipped)
                meter, skipped = Meter(), 0
            stop = False
            if run.eval_fn is not None and (step % eval_every == 0 or step >= max_steps):
                stop = self._validate(run, step)
                last_eval = step
            if step % mp["save_checkpoint_steps"] == 0:
                self.save()
            if stop:
                break
        if run.eval_fn is not None and last_eval != step and step > 0:
            self._validate(run, step)
        self.save()

    def _progress(self, run, step, meter, skipped):
        figures = self.world.allgather_numpy(meter.rank_figures()) if self.world.is_parallel else None
        lr = float(self.current_learning_rate())
        epoch = run.epoch(step)
        where = f"step {step}/{run.max_steps}" + (f" epoch {epoch:.2f}" if epoch is not None else "")
        line = f"{where} {meter.summary()} lr {lr:.3g}"
        if skipped:
            line += f" ({skipped} non-finite steps skipped)"
        if figures is not None:
            line += "; " + scaling_line(figures, self.world.options["single_rank_throughput"])
        self._log(logging.INFO, line)
        if meter.n_steps:
            run.recorder.record("train", step, {"lr": lr, **meter.figures()}, epoch)

    def _validate(self, run, step):
        """Evaluate the validation input; keep the best checkpoint; return whether to stop early."""
        self._store_engine_state()
        mp = self.mp
        result, arrays = self._evaluate(run.eval_fn, parity=True)
        metric = mp["early_stopping_metric"]
        if metric not in result:
            available = sorted(k for k in result if k != "global_step")
            raise ParamsError(f"model.params.early_stopping_metric: {metric!r} is not measured on the eval input; "
                              f"available: {available}")
        value = result[metric]
        improved = bool(np.isfinite(value) and value < float(self.best_metric) - mp["early_stopping_min_delta"])
        if improved:
            self.best_metric.assign(value)
            self.evals_since_best.assign(0)
        else:
            self.evals_since_best.assign_add(1)
        epoch = run.epoch(step)
        figures = {k: v for k, v in result.items() if k != "global_step"}
        text = " ".join(f"{k} {v:.4g}" for k, v in figures.items())
        self._log(logging.INFO, "evaluation at step %d: %s%s", step, text,
                  " (best so far)" if improved else f" (best {metric} {float(self.best_metric):.4g}, "
                  f"{int(self.evals_since_best)} evaluation(s) ago)")
        run.recorder.record("eval", step, {**figures, "best": improved}, epoch)
        self.last_validation = result
        if self.is_chief:
            if arrays:
                write_eval_predictions(self.model_dir, {"step": np.array(step), **arrays})
            if improved:
                self._save_best(step, metric, value)
        patience = mp["early_stopping_patience"]
        if patience is not None and int(self.evals_since_best) >= patience:
            self._log(logging.INFO, "early stopping at step %d: %s has not improved by more than %g in %d "
                      "evaluations (best %.4g); the best checkpoint is in %s", step, metric,
                      mp["early_stopping_min_delta"], patience, float(self.best_metric),
                      os.path.join(self.model_dir, BEST_DIR))
            return True
        return False

    def _save_best(self, step, metric, value):
        path = self.best_manager.save(checkpoint_number=step)
        info = {"step": int(step), "metric": metric, "value": float(value), "checkpoint": os.path.basename(path)}
        with open(os.path.join(self.model_dir, BEST_DIR, "best.json"), "w") as f:
            json.dump(info, f)

    def _rollback(self):
        """Back to the latest checkpoint's model, optimizer and weight average (step and data position go on),
        with the learning rate multiplied by ``rollback_lr_factor``."""
        factor = float(self.lr_factor) * self.mp["rollback_lr_factor"]
        if self._host is not None:
            self._host.ahead = False  # its diverged weights are dropped
        if self.is_chief:
            path = self.manager.latest_checkpoint
            parts = dict(model=self.model, optimizer=self.optimizer)
            if self.ema is not None:
                parts["weight_average"] = self.ema
            tf.train.Checkpoint(**parts).restore(path).expect_partial()
            self._log(logging.WARNING, "rolled back to %s; learning rate × %g from now on", path, factor)
        self.lr_factor.assign(factor)
        self._broadcast_state()
        self._engine_synced = False

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
        self._store_engine_state()
        if not self.is_chief:
            return None
        if self._averaged:
            raise RuntimeError("save: the model holds its averaged weights (inference only); a checkpoint "
                               "stores the raw weights")
        latest = self.manager.latest_checkpoint
        if latest and latest.endswith(f"-{int(self.step)}"):
            return latest
        path = self.manager.save(checkpoint_number=int(self.step))
        log.info("checkpoint %s", path)
        return path

    # ------------------------------------------------------------- evaluation
    def evaluate(self, input_fn):
        """Errors on a finite input, summed over all ranks' inputs (averaged weights when ``ema_decay`` is set).

        Returns:
            dict with ``loss``, ``global_step`` and, for each quantity with
            labels, ``<Q>_MAE`` and ``<Q>_RMSE``: ``E`` (eV), ``F`` (eV/Å),
            ``S`` (eV/Å³) for the potential model, ``D`` (e·Å), ``Q`` (e) for
            the dipole model.  In a parallel run every rank gets the same
            numbers: sums and counts are added over ranks (each rank's input
            should be its own share of the data).
        """
        return self._evaluate(input_fn)[0]

    def _evaluate(self, input_fn, parity=False):
        """(metrics, parity arrays or ``None``); see :meth:`evaluate` and :mod:`pinn.training.metrics`."""
        dataset = self._input(input_fn)
        spec = dataset.element_spec
        model = self.model
        outputs = model.eval_outputs(spec)
        missing = model.missing_labels(spec)
        terms = [t for t in model.loss_term_names() if t not in missing]  # loss over the labelled terms
        metric_keys = model.metric_keys(spec, outputs)

        eval_step = self._traced("eval", spec, lambda: self._make_eval_step(spec, outputs, terms, metric_keys))
        total = np.zeros(2 * len(terms) + 3 * len(metric_keys))
        collected = {}
        with self.averaged_weights():
            for batch in dataset:
                sums, pred = eval_step(batch)
                total += sums.numpy()
                if parity:
                    batch_np = {k: v.numpy() for k, v in batch.items()}
                    for key, value in model.parity_arrays(batch_np, {k: v.numpy() for k, v in pred.items()}).items():
                        collected.setdefault(key, []).append(value)
        total = self.world.allreduce_sum_numpy(total)
        weights = model.loss_weights(self.learning_rate.single_rank_steps(self.step))
        loss = sum(float(weights[t]) * total[2 * i] / total[2 * i + 1] for i, t in enumerate(terms)
                   if total[2 * i + 1])
        offset = 2 * len(terms)
        result = errors_from_sums({key: total[offset + 3 * i: offset + 3 * i + 3] for i, key in enumerate(metric_keys)})
        result["loss"] = float(loss)
        result["global_step"] = int(self.step)
        return result, (self._gather_parity(collected) if parity else None)

    def _traced(self, kind, spec, make):
        """A traced function of ``kind`` for batches of ``spec``, made once by ``make()`` and reused."""
        key = (kind, repr(spec))
        if key not in self._traced_fns:
            self._traced_fns[key] = make()
        return self._traced_fns[key]

    def _make_eval_step(self, spec, outputs, terms, metric_keys):
        model = self.model

        @tf.function(input_signature=[spec])
        def eval_step(batch):
            pred = model.predict(batch, **outputs)
            loss_terms = model.loss_terms(batch, pred)
            errors = model.error_sums(batch, pred)
            return tf.concat([tf.cast(tf.stack(loss_terms[t]), tf.float64) for t in terms]
                             + [tf.cast(tf.stack(errors[k]), tf.float64) for k in metric_keys], axis=0), pred
        return eval_step

    def _gather_parity(self, collected):
        """Concatenate the parity arrays of every batch and rank (per-atom rows subsampled)."""
        empty = self.world.allreduce_sum_numpy(np.array([float(not collected)]))[0]
        if empty:
            if self.is_chief:
                log.warning("a rank has no validation batches: no eval_predictions.npz this time")
            return None
        arrays = {key: np.concatenate(parts) for key, parts in sorted(collected.items())}
        limit = MAX_PARITY_ROWS // self.world.size
        rng = np.random.default_rng(0)
        for prefix in ("forces", "charges"):
            keys = [key for key in arrays if key.startswith(prefix + "_")]
            if keys and len(arrays[keys[0]]) > limit:
                rows = np.sort(rng.choice(len(arrays[keys[0]]), limit, replace=False))
                for key in keys:
                    arrays[key] = arrays[key][rows]
        return {key: self.world.concat_rows_numpy(value) for key, value in arrays.items()}

    def predict(self, input_fn):
        """Yield one dict per structure of this rank's input (averaged weights when ``ema_decay`` is set).

        The potential model gives ``energy`` (eV), ``forces`` [n_atoms, 3]
        (eV/Å), ``stress`` [3, 3] (eV/Å³, periodic structures) and ``elems``;
        the dipole model ``dipole`` [3] (e·Å), ``charges`` [n_atoms] (e) and ``elems``.
        """
        dataset = self._input(input_fn)
        spec = dataset.element_spec
        predict_step = self._traced("predict", spec,
                                    lambda: tf.function(self.model.predict, input_signature=[spec]))
        for batch in dataset:
            with self.averaged_weights():
                pred = {k: v.numpy() for k, v in predict_step(batch).items()}
            yield from self.model.structure_outputs({k: v.numpy() for k, v in batch.items()}, pred)


class _Run:
    """What one ``train()`` call needs besides the model: its length, epochs, validation input and recorder."""

    def __init__(self, max_steps, steps_per_epoch, eval_fn, recorder):
        self.max_steps = max_steps
        self.steps_per_epoch = steps_per_epoch
        self.eval_fn = eval_fn
        self.recorder = recorder

    def epoch(self, step):
        """Epochs trained at ``step`` (``None`` when training is not counted in epochs)."""
        return step / self.steps_per_epoch if self.steps_per_epoch else None


def _real_structures(batch):
    """Structures in a batch (or in all parts of a split batch), the padding structures not counted."""
    if isinstance(batch, tuple):
        return sum(_real_structures(part) for part in batch)
    return int(np.sum(batch[K.REAL])) if K.REAL in batch else int(batch[K.CELL].shape[0])
