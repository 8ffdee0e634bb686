"""What computes a training step's gradients: TensorFlow, or the numba engine.

A backend answers three things for :class:`pinn.training.steps.StepFunctions`: how the
input is shaped (padded to buckets for XLA, split into parts), the gradients of one part
of a batch (:meth:`~TensorFlowBackend.part_gradients`, given the step's
:class:`~pinn.training.steps.StepLoss`), and whether the step runs on host arrays
(:meth:`~TensorFlowBackend.host_steps`, given the loss and the
:class:`~pinn.training.steps.StepUpdate`).  The numba backend's :class:`HostSteps` own the
host copy of the weights, Adam's state and the average
(:class:`pinn.engines.host_optimizer.HostOptimizer`): :meth:`NumbaBackend.store` gives
TensorFlow's variables the current values before anything reads them, and
:meth:`NumbaBackend.reload` makes the next step read the variables again after something
else changed them.  Nothing outside this module branches on the engine.
"""
import logging
import os

import numpy as np
import tensorflow as tf

from pinn.params.training_options import KALMAN_NAMES
from pinn.schema import ParamsError
from pinn.training.loss_scale import injected_factor

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
        reason = refusal(model, "training") or ("parallel_params.backend 'mirrored' spreads TensorFlow's step over "
                                                "devices" if world.strategy is not None else None)
        if choice == "numba" and reason:
            raise ParamsError(f"model.params.engine: {reason}")
        if reason and world.is_chief:
            log.info("model.params.engine 'auto': gradients by TensorFlow, since %s", reason)
        if not reason and not (choice == "auto" and (tf.config.list_physical_devices("GPU") or mp["jit"]
                                                     or mp["batch_parts"] not in (None, 1))):
            threads = tf.config.threading.get_intra_op_parallelism_threads() if world.is_parallel else 0
            return NumbaBackend(model, threads or None)
    jit = _jit_setting(params, model)
    if jit:
        _count_xla_model(world)
    return TensorFlowBackend(jit, _parts_setting(mp, jit, world))


class _XlaModels:
    """How many XLA-compiled models this process has built (:func:`_count_xla_model`)."""
    built = 0


def _count_xla_model(world):
    """Count an XLA-compiled model; at the second in one process, say once that TensorFlow keeps every XLA
    compilation for the process's life (its compilation cache has no eviction): ~0.5 GB per default PiNet of the
    TensorFlow engine (benchmarks/bench_memory.py), where the numba engine and ``jit: false`` stay flat."""
    _XlaModels.built += 1
    if _XlaModels.built == 2 and world.is_chief:
        log.warning("a second XLA-compiled model in this process: TensorFlow keeps every model's XLA compilations "
                    "until the process ends (~0.5 GB per default PiNet); for many models in one process use the "
                    "numba engine or jit: false, or one process per model (docs/training.md, 'Many models in one "
                    "process')")


def _kalman_backend(mp, choice, world):
    """The backend of a run with the Kalman filters (:mod:`pinn.training.kalman`): TensorFlow without XLA
    (their Jacobians have as many rows as the batch has errors, a shape XLA would compile anew for
    every batch; ``engine: numba`` and ``jit: true`` are refused when the params are resolved)."""
    if choice == "auto" and world.is_chief:
        log.info("model.params.engine 'auto': gradients by TensorFlow, since model.params.optimizer %r (the "
                 "%s) needs TensorFlow's Jacobians", mp["optimizer"], KALMAN_NAMES[mp["optimizer"]])
    return TensorFlowBackend(False, _parts_setting(mp, False, world))


def _jit_setting(params, model):
    """Whether the TensorFlow step is XLA-compiled (``model.params.jit``; default: if the model, with its
    settings, and its network can be; a ``jit: true`` they cannot follow is refused when the params are
    resolved)."""
    requested = params["model"]["params"]["jit"]
    if requested is not None:
        return requested
    return bool(getattr(model, "JIT_COMPATIBLE", True) and getattr(model, "jit_compatible", True)
                and getattr(model.network, "JIT_COMPATIBLE", False))


def _parts_setting(mp, jit, world):
    """Parts per training batch (``batch_parts``; default: one per CPU core, at most 4, for an
    XLA-compiled step of one process on CPU, since XLA runs a computation's loops on one core)."""
    if mp["batch_parts"] is not None:
        return mp["batch_parts"]
    if not jit or world.is_parallel or world.local_replicas > 1 or tf.config.list_physical_devices("GPU"):
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
        self.jit = jit
        self.parts = parts

    def describe(self):
        """The backend, for the log line at the start of training."""
        return "TensorFlow" + (" (XLA)" if self.jit else "")

    def part_gradients(self, loss):
        """A function ``(batch, global_counts) -> (gradients, stats)`` for one sparse batch.

        Args:
            loss: the step's :class:`~pinn.training.steps.StepLoss`.
        """
        from pinn.physics.loss_weights import structure_weights
        model = loss.model
        variables = loss.variables
        terms = loss.terms
        dtype = loss.dtype

        scale = loss.loss_scale  # mixed_float16: the loss × S, the gradients ÷ S (pinn.training.loss_scale)

        def part_gradients(batch, global_counts):
            weights = loss.weights_at(loss.step)
            with tf.GradientTape() as tape:
                pred = model.predict(batch, **loss.outputs)
                sums = model.loss_sums(batch, pred)
                total = tf.add_n([tf.cast(weights[t], dtype)
                                  * tf.math.divide_no_nan(sums[t], tf.cast(global_counts[i], dtype))
                                  for i, t in enumerate(terms)])
                scaled = total if scale is None else \
                    total * tf.cast(scale.scale * injected_factor(loss.rank, loss.step), dtype)
            grads = [tf.convert_to_tensor(g) if g is not None else tf.zeros_like(v)
                     for g, v in zip(tape.gradient(scaled, variables), variables)]
            if scale is not None:
                grads = [g / tf.cast(scale.scale, g.dtype) for g in grads]
            finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads] + [tf.math.is_finite(total)])
            flag = tf.cast(tf.logical_not(finite), dtype) if scale is None else tf.cast(scale.flag(finite), dtype)
            errors = model.error_sums(batch, pred)
            return grads, tf.concat([[total, tf.reduce_sum(structure_weights(batch, dtype))]]
                                    + [tf.stack(errors[k]) for k in loss.metric_keys]
                                    + [loss.one_hot_rank * flag], axis=0)
        return part_gradients

    def host_steps(self, loss, update):
        """The steps on host arrays for this loss and update, or ``None``: here the traced steps of
        :class:`~pinn.training.steps.StepFunctions` do everything."""
        return None

    def store(self):
        """Give TensorFlow's variables the current state (here they always hold it)."""

    def reload(self, diverged=False):
        """The variables changed outside the step (here nothing to do)."""


class NumbaBackend(TensorFlowBackend):
    """Gradients by the numba engine (:class:`pinn.engines.gradients.TrainingEngine`); the update of a
    one-process step on the host (:class:`HostSteps`).

    Args:
        model: a PiNet potential model (see :func:`pinn.engines.lowering.capability`).
        threads: the engine's threads (``None``: Numba's).
    """

    name = "numba"

    def __init__(self, model, threads=None):
        from pinn.engines.gradients import TrainingEngine
        super().__init__(jit=False, parts=1)
        self.engine = TrainingEngine(model, threads=threads)
        self.current = None  # the HostSteps of the latest StepFunctions

    def describe(self):
        return f"the numba engine ({self.engine.threads} thread(s))"

    def part_gradients(self, loss):
        from pinn.engines.gradients import tensorflow_gradients
        engine = self.engine
        terms = loss.terms

        def part_gradients(batch, global_counts):
            weights = loss.weights_at(loss.step)
            return tensorflow_gradients(engine, batch, loss.variables, terms,
                                        tf.stack([tf.cast(weights[t], tf.float64) for t in terms]),
                                        global_counts, loss.metric_keys, loss.one_hot_rank, loss.dtype)
        return part_gradients

    def host_steps(self, loss, update):
        """The engine's steps on host arrays (:class:`HostSteps`) for this loss and update."""
        self.current = HostSteps(self.engine, loss, update)
        return self.current

    def store(self):
        """Give TensorFlow's variables the weights, Adam's state and the average that the host step
        keeps (before anything reads them)."""
        if self.current is not None:
            self.current.store()

    def reload(self, diverged=False):
        """Read the variables again at the next step; ``diverged``: the host's values are dropped (a
        rollback)."""
        if self.current is not None:
            self.current.reload(diverged)


class HostSteps:
    """The steps of the numba engine on host arrays: the engine's gradients from the NumPy batch, then
    the update (clipping, Adam, the average) on the host's flat vectors
    (:class:`pinn.engines.host_optimizer.HostOptimizer`), which TensorFlow's variables get when
    something reads them (:meth:`store`).

    Args:
        engine: the :class:`pinn.engines.gradients.TrainingEngine`.
        loss: the step's :class:`~pinn.training.steps.StepLoss`.
        update: the step's :class:`~pinn.training.steps.StepUpdate`.
    """

    #: learning rates are computed per block of steps: one TensorFlow call, not one per step
    RATE_BLOCK = 256

    def __init__(self, engine, loss, update):
        from pinn.engines.host_optimizer import HostOptimizer
        self.engine = engine
        self.loss = loss
        self._converted = {}  # id(batch) -> (batch, its NumPy arrays): batches counted before their step
        self.host = HostOptimizer(loss.variables, update.optimizer, update.ema, update.max_grad_norm, update.frozen)
        self.one_hot_rank = loss.one_hot_rank.numpy()
        self.fixed_weights = None if loss.model.params["loss_weight_schedule"] else \
            {t: float(w) for t, w in loss.model.loss_weights(0.0).items()}
        block = self.RATE_BLOCK
        learning_rate = update.learning_rate
        lr_factor = update.lr_factor

        @tf.function(input_signature=[tf.TensorSpec([], tf.int64)], autograph=False)
        def rates_from(start):
            positions = start + tf.range(block, dtype=tf.int64)
            return tf.map_fn(learning_rate, positions, fn_output_signature=tf.float32) * lr_factor

        self.rates_from = rates_from
        self.state = {}  # the step count, e_dress and the learning rates of the current block, read on a sync
        self.one = tf.constant(1, tf.int64)  # the step counter's increment: no read back, no conversion per step
        self.synced = False  # the engine holds the variables' current values

    def whole_step(self, batch):
        """The step of one process and one batch: ``(applied, stats)``."""
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

    def _sync(self):
        """Read the variables when they changed outside the engine's steps (start, rollback, a TF step)."""
        if not self.synced:
            self.host.load()
            self.engine.set_flat_weights(self.host.weights)
            self.state.update(step=int(self.loss.step.numpy()), dress=self.loss.model.e_dress.numpy(), rates=None)
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
        loss = self.loss
        engine = self.engine
        arrays = self._arrays(batch, keep=False)
        weights = self.fixed_weights or {t: float(w) for t, w in loss.weights_at(self.state["step"]).items()}
        counts = engine.loss_counts(arrays, loss.terms) if counts is None else counts
        return engine(arrays, weights, counts, self.state["dress"])

    def _stats(self, out):
        from pinn.engines.gradients import step_stats
        return step_stats(out, self.loss.metric_keys, self.one_hot_rank, self.loss.dtype.as_numpy_dtype)

    def _count_step(self):
        self.loss.step.assign_add(self.one, read_value=False)
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
    def count(self, batch, keep=False):
        """This rank's loss counts of one batch, per term (float64 array), from its NumPy arrays (a
        traced TensorFlow function cost 0.3-0.7 ms per call in matching its arguments); ``keep``: hold
        the arrays for the batch's :meth:`flat_gradient`."""
        counts = self.engine.loss_counts(self._arrays(batch, keep=keep), self.loss.terms)
        return np.array([counts[t] for t in self.loss.terms], np.float64)

    def flat_gradient(self, batches, global_counts):
        """This rank's gradient summed over ``batches`` (one flat float64 vector, the order of the
        trainable variables) and its stats, with the loss normalised by ``global_counts`` (all
        ranks', per loss term)."""
        self._sync()
        counts = dict(zip(self.loss.terms, (float(c) for c in global_counts)))
        total = stats = None
        for batch in batches:
            out = self._call(batch, counts)
            grad = np.asarray(self.engine.flat_gradient(), np.float64)
            total = grad if total is None else total + grad
            stats = self._stats(out) if stats is None else stats + self._stats(out)
        return total, stats

    def apply_flat(self, flat, finite, overflow=False):
        """The update with the summed gradient ``flat`` (when ``finite``) on the host; the step counted.
        ``overflow`` (scaled float16 gradients) cannot happen here: the numba engine computes in float32 or
        float64 without a loss scale; True is refused."""
        if overflow:
            raise ValueError("apply_flat: the numba engine has no loss scale to overflow (mixed_float16 trains "
                             "with TensorFlow)")
        rate = self._rate()
        try:
            if finite:
                self.host.apply(flat, rate)
                self.engine.set_flat_weights(self.host.weights)
        finally:
            self._count_step()
        return finite

    def flat_weights(self):
        """The current weights as one float64 vector (the host's copy)."""
        self._sync()
        return np.asarray(self.host.weights, np.float64)

    def store(self):
        """Give TensorFlow's variables the weights, Adam's state and the average that the host step
        keeps (the learning rates are read again after: a validation may lower them)."""
        if self.host.ahead:
            self.host.store()
            self.synced = False

    def reload(self, diverged=False):
        """Read the variables again at the next step; ``diverged``: the host's values are dropped."""
        if diverged:
            self.host.ahead = False
        self.synced = False
