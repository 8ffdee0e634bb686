"""What computes a training step's gradients: TensorFlow, or the numba engine.

A backend answers three things for :class:`pinn.training.steps.StepFunctions`: how the
input is shaped (padded to buckets for XLA, split into parts), the gradients of one part
of a batch, and the whole step of one process (one call per step).  The numba backend
also owns the host copy of the weights, Adam's state and the average
(:class:`pinn.engines.host_optimizer.HostOptimizer`): :meth:`NumbaBackend.store` gives
TensorFlow's variables the current values before anything reads them, and
:meth:`NumbaBackend.reload` makes the next step read the variables again after something
else changed them.  Nothing outside this module branches on the engine.
"""
import logging
import os

import numpy as np
import tensorflow as tf

from pinn.params.schema import ParamsError
from pinn.training.options import KALMAN_NAMES

log = logging.getLogger("pinn")


def choose_backend(params, model, world):
    """The backend of ``model.params.engine`` (with ``jit`` and ``batch_parts``) for this run.

    Args:
        params: resolved params.
        model: the model (its network decides what the numba engine and XLA support).
        world: the run's world (a rank of a parallel run takes its share of the cores).

    Returns:
        :class:`TensorFlowBackend` or :class:`NumbaBackend`.

    Raises:
        ParamsError: naming the setting that cannot hold.
    """
    mp = params["model"]["params"]
    choice = mp["engine"]
    if mp["optimizer"] != "adam":
        return _kalman_backend(mp, choice, world)
    if choice != "tensorflow":
        from pinn.engines.lowering import refusal
        reason = refusal(model, "training")
        if choice == "numba" and reason:
            raise ParamsError(f"model.params.engine: {reason}")
        if reason and world.is_chief:
            log.info("model.params.engine 'auto': gradients by TensorFlow, since %s", reason)
        if not reason and not (choice == "auto" and (tf.config.list_physical_devices("GPU") or mp["jit"]
                                                     or mp["batch_parts"] not in (None, 1))):
            threads = tf.config.threading.get_intra_op_parallelism_threads() if world.is_parallel else 0
            return NumbaBackend(model, threads or None)
    jit = _jit_setting(params, model.network)
    return TensorFlowBackend(jit, _parts_setting(mp, jit, world))


def _kalman_backend(mp, choice, world):
    """The backend of a run with the Kalman filters (:mod:`pinn.training.kalman`): TensorFlow without XLA
    (their Jacobians have as many rows as the batch has errors, a shape XLA would compile anew for
    every batch; ``engine: numba`` and ``jit: true`` are refused when the params are resolved)."""
    if choice == "auto" and world.is_chief:
        log.info("model.params.engine 'auto': gradients by TensorFlow, since model.params.optimizer %r (the "
                 "%s) needs TensorFlow's Jacobians", mp["optimizer"], KALMAN_NAMES[mp["optimizer"]])
    return TensorFlowBackend(False, _parts_setting(mp, False, world))


def _jit_setting(params, network):
    """Whether the TensorFlow step is XLA-compiled (``model.params.jit``; default: if the model and the
    network can be; a ``jit: true`` they cannot follow is refused when the params are resolved)."""
    from pinn.models.registry import MODELS
    requested = params["model"]["params"]["jit"]
    if requested is not None:
        return requested
    return bool(getattr(MODELS[params["model"]["name"]], "JIT_COMPATIBLE", True)
                and getattr(network, "JIT_COMPATIBLE", False))


def _parts_setting(mp, jit, world):
    """Parts per training batch (``batch_parts``; default: one per CPU core, at most 4, for an
    XLA-compiled step of one process on CPU, since XLA runs a computation's loops on one core)."""
    if mp["batch_parts"] is not None:
        return mp["batch_parts"]
    if not jit or world.is_parallel or tf.config.list_physical_devices("GPU"):
        return 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cores, 4))


class TensorFlowBackend:
    """Gradients by TensorFlow's tapes, the step in one graph (XLA-compiled when ``jit``).

    Args:
        jit: compile the step with XLA, on batches padded to bucket sizes.
        parts: split each batch into this many parts whose gradients run concurrently.
    """

    name = "tensorflow"

    def __init__(self, jit, parts):
        self.jit, self.parts = jit, parts

    def describe(self):
        """The backend, for the log line at the start of training."""
        return "TensorFlow" + (" (XLA)" if self.jit else "")

    def part_gradients(self, steps):
        """A function ``(batch, global_counts) -> (gradients, stats)`` for one sparse batch; ``steps``
        is the :class:`~pinn.training.steps.StepFunctions` that asks (model, terms, dtype, ...)."""
        model, variables, terms, dtype = steps.model, steps.variables, steps.terms, steps.dtype
        from pinn.models.loss_weights import structure_weights

        def part_gradients(batch, global_counts):
            weights = model.loss_weights(steps.schedule_position(steps.step))
            with tf.GradientTape() as tape:
                pred = model.predict(batch, **steps.outputs)
                sums = model.loss_sums(batch, pred)
                loss = tf.add_n([tf.cast(weights[t], dtype)
                                 * tf.math.divide_no_nan(sums[t], tf.cast(global_counts[i], dtype))
                                 for i, t in enumerate(terms)])
            grads = [tf.convert_to_tensor(g) if g is not None else tf.zeros_like(v)
                     for g, v in zip(tape.gradient(loss, variables), variables)]
            finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads] + [tf.math.is_finite(loss)])
            errors = model.error_sums(batch, pred)
            return grads, tf.concat([[loss, tf.reduce_sum(structure_weights(batch, dtype))]]
                                    + [tf.stack(errors[k]) for k in steps.metric_keys]
                                    + [steps.one_hot_rank * tf.cast(tf.logical_not(finite), dtype)], axis=0)
        return part_gradients

    def whole_step(self, steps, graph_step):
        """The step of one process and one batch: here the graph step ``graph_step`` itself."""
        return graph_step

    # one exchange per step (pinn.training.exchange)
    def local_counts(self, steps, batch, keep=False):
        """This rank's loss counts of one batch, per term of ``steps`` (float64 array); ``keep``: the batch's
        gradients follow through :meth:`local_flat` (a backend may keep what it made of the batch)."""
        return np.asarray(steps.local_counts(batch), np.float64)

    def local_flat(self, steps, batches, global_counts):
        """This rank's gradient summed over ``batches`` as one flat float64 vector (the order of the
        trainable variables) and its stats, with the loss normalised by ``global_counts``."""
        counts = tf.constant(global_counts, tf.float64)
        total = stats = None
        for batch in batches:
            grads, part = steps.local_gradients(batch, counts)
            flat = np.concatenate([np.asarray(g, np.float64).ravel() for g in grads])
            total = flat if total is None else total + flat
            stats = part.numpy() if stats is None else stats + part.numpy()
        return total, stats

    def apply_flat(self, steps, flat, finite):
        """The update with the summed gradient ``flat`` (when ``finite``); the step counted."""
        grads, start = [], 0
        for v in steps.variables:
            size = v.shape.num_elements()
            grads.append(tf.constant(flat[start:start + size].reshape(v.shape), v.dtype))
            start += size
        return bool(steps.apply_reduced(grads, tf.constant(bool(finite))))

    def flat_weights(self, steps):
        """The current weights as one float64 vector."""
        return np.concatenate([np.asarray(v.numpy(), np.float64).ravel() for v in steps.variables])

    def store(self):
        """Give TensorFlow's variables the current state (here they always hold it)."""

    def reload(self, diverged=False):
        """The variables changed outside the step (here nothing to do)."""


class NumbaBackend(TensorFlowBackend):
    """Gradients by the numba engine (:class:`pinn.engines.gradients.TrainingEngine`); the update of a
    one-process step on the host (:class:`pinn.engines.host_optimizer.HostOptimizer`).

    Args:
        model: a PiNet potential model (see :func:`pinn.engines.lowering.capability`).
        threads: the engine's threads (``None``: Numba's).
    """

    name = "numba"

    def __init__(self, model, threads=None):
        from pinn.engines.gradients import TrainingEngine
        super().__init__(jit=False, parts=1)
        self.engine = TrainingEngine(model, threads=threads)
        self.host = None  # the weights, Adam's state and the average of the host step
        self.synced = False  # the engine holds the variables' current values
        self._converted = {}  # id(batch) -> (batch, its NumPy arrays): batches counted before their step

    def describe(self):
        return f"the numba engine ({self.engine.threads} thread(s))"

    def part_gradients(self, steps):
        from pinn.engines.gradients import tensorflow_gradients
        model, terms, engine = steps.model, steps.terms, self.engine

        def part_gradients(batch, global_counts):
            weights = model.loss_weights(steps.schedule_position(steps.step))
            return tensorflow_gradients(engine, batch, steps.variables, terms,
                                        tf.stack([tf.cast(weights[t], tf.float64) for t in terms]),
                                        global_counts, steps.metric_keys, steps.one_hot_rank, steps.dtype)
        return part_gradients

    def whole_step(self, steps, graph_step):
        """The step of one process and one batch: the engine's gradients from the NumPy batch, then the
        update (clipping, Adam, the average) on the host's flat vectors, which TensorFlow's variables
        get when something reads them (:meth:`store`)."""
        self._prepare(steps)

        def step(batch):
            self._sync()
            rate = self._rate()
            out = self._call(batch, None)
            try:
                if out["finite"]:
                    self.host.apply(self.engine.flat_gradient(), rate)
                    self.engine.set_flat_weights(self.host.weights)
            finally:  # an interrupt (Ctrl-C) in the update still counts the step with it, as the checkpoint will
                self._count_step()
            return out["finite"], self._stats(out)
        return step

    def _prepare(self, steps):
        """The host optimizer and the per-run state of the steps of ``steps`` (a StepFunctions)."""
        from pinn.engines.host_optimizer import HostOptimizer
        model = steps.model
        self.steps = steps
        self._converted = {}  # batches counted by an earlier train() call that ended before their step
        self.host = HostOptimizer(steps.variables, steps.optimizer, steps.ema, steps.max_grad_norm)
        self.one_hot_rank = steps.one_hot_rank.numpy()
        self.fixed_weights = None if model.params["loss_weight_schedule"] else \
            {t: float(w) for t, w in model.loss_weights(0.0).items()}
        block = self.RATE_BLOCK
        learning_rate, lr_factor = steps.learning_rate, steps.lr_factor

        @tf.function(input_signature=[tf.TensorSpec([], tf.int64)], autograph=False)
        def rates_from(start):
            positions = start + tf.range(block, dtype=tf.int64)
            return tf.map_fn(learning_rate, positions, fn_output_signature=tf.float32) * lr_factor

        self.rates_from = rates_from
        self.state = {}  # the step count, e_dress and the learning rates of the current block, read on a sync
        self.one = tf.constant(1, tf.int64)  # the step counter's increment: no read back, no conversion per step
        self.synced = False

    #: learning rates are computed per block of steps: one TensorFlow call, not one per step
    RATE_BLOCK = 256

    def _sync(self):
        """Read the variables when they changed outside the engine's steps (start, rollback, a TF step)."""
        if not self.synced:
            self.host.load()
            self.engine.set_flat_weights(self.host.weights)
            self.state.update(step=int(self.steps.step), dress=self.steps.model.e_dress.numpy(), rates=None)
            self.synced = True

    def _rate(self):
        """The learning rate of the current step (float32 value)."""
        state = self.state
        if state["rates"] is None or not state["first"] <= state["step"] < state["first"] + self.RATE_BLOCK:
            state.update(first=state["step"], rates=self.rates_from(tf.constant(state["step"], tf.int64)).numpy())
        return state["rates"][state["step"] - state["first"]]

    def _call(self, batch, counts):
        """The engine on one batch (tensors) at the current step; ``counts``: the loss counts per term
        (``None``: this batch's own)."""
        steps, engine = self.steps, self.engine
        arrays = self._arrays(batch, keep=False)
        weights = self.fixed_weights or {t: float(w) for t, w in steps.model.loss_weights(
            steps.learning_rate.single_rank_steps(self.state["step"])).items()}
        counts = engine.loss_counts(arrays, steps.terms) if counts is None else counts
        return engine(arrays, weights, counts, self.state["dress"])

    def _stats(self, out):
        from pinn.engines.gradients import step_stats
        return step_stats(out, self.steps.metric_keys, self.one_hot_rank, self.steps.dtype.as_numpy_dtype)

    def _count_step(self):
        self.steps.step.assign_add(self.one, read_value=False)
        self.state["step"] += 1

    def _arrays(self, batch, keep):
        """The NumPy arrays of a batch (tensors), converted once; ``keep``: hold them for the batch's
        step (its loss counts are taken one step before its gradients)."""
        from pinn.engines.gradients import BATCH_KEYS
        held = self._converted.pop(id(batch), None)
        if held is None or held[0] is not batch:
            held = (batch, {k: batch[k].numpy() for k in BATCH_KEYS if k in batch})
        if keep:
            self._converted[id(batch)] = held
        return held[1]

    # one exchange per step (pinn.training.exchange): the host update on every rank
    def local_counts(self, steps, batch, keep=False):
        """This rank's loss counts of one batch, per term of ``steps`` (float64 array), from its NumPy
        arrays (a traced TensorFlow function cost 0.3-0.7 ms per call in matching its arguments);
        ``keep``: hold the arrays for the batch's :meth:`local_flat`."""
        counts = self.engine.loss_counts(self._arrays(batch, keep=keep), steps.terms)
        return np.array([counts[t] for t in steps.terms], np.float64)

    def local_flat(self, steps, batches, global_counts):
        """This rank's gradient summed over ``batches`` (one flat float64 vector, the order of the
        trainable variables) and its stats, with the loss normalised by ``global_counts`` (all
        ranks', per loss term)."""
        self._sync()
        counts = dict(zip(steps.terms, (float(c) for c in global_counts)))
        total = stats = None
        for batch in batches:
            out = self._call(batch, counts)
            grad = np.asarray(self.engine.flat_gradient(), np.float64)
            total = grad if total is None else total + grad
            stats = self._stats(out) if stats is None else stats + self._stats(out)
        return total, stats

    def apply_flat(self, steps, flat, finite):
        """The update with the summed gradient ``flat`` (when ``finite``) on the host; the step counted."""
        rate = self._rate()
        try:
            if finite:
                self.host.apply(flat, rate)
                self.engine.set_flat_weights(self.host.weights)
        finally:
            self._count_step()
        return finite

    def flat_weights(self, steps):
        """The current weights as one float64 vector (the host's copy)."""
        self._sync()
        return np.asarray(self.host.weights, np.float64)

    def store(self):
        """Give TensorFlow's variables the weights, Adam's state and the average that the host step
        keeps (before anything reads them); the learning rates are read again after (a validation may
        lower them)."""
        if self.host is not None and self.host.ahead:
            self.host.store()
            self.synced = False

    def reload(self, diverged=False):
        """Read the variables again at the next step; ``diverged``: the host's values are dropped (a
        rollback)."""
        if diverged and self.host is not None:
            self.host.ahead = False
        self.synced = False
