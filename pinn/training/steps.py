"""The traced pieces of a training step, for batches of one element spec.

One step (see :mod:`pinn.training.trainer`): the loss counts of the batches summed over
ranks (:meth:`StepFunctions.count`, then an allreduce), the gradients of
Σ_term w_t · penalty sum / global count per batch (:attr:`~StepFunctions.local_gradients`,
from the backend), then the sum over ranks and the update, skipped on every rank when
anything is non-finite (:attr:`~StepFunctions.reduce_and_apply`).  One process with one
batch per step runs :attr:`~StepFunctions.whole_step` instead: the same in one call.

A gradient backend (:mod:`pinn.training.backends`) is given what it needs and no more: the
loss of a step (:class:`StepLoss`) and the update (:class:`StepUpdate`).
"""
import dataclasses
from typing import Any, Callable

import numpy as np
import tensorflow as tf

from pinn.training.loss_scale import overflowed


@dataclasses.dataclass(frozen=True)
class StepLoss:
    """The loss of a training step, as a gradient backend computes it.

    Attributes:
        model: the model (``predict``, ``loss_sums``, ``error_sums``, ``loss_weights``).
        variables: its trainable variables, in the order of a flat gradient.
        terms: the loss terms, in the order of the loss counts.
        outputs: the keyword arguments of ``model.predict`` in training.
        metric_keys: the errors summed into the step's statistics.
        one_hot_rank: this rank's slot among the non-finite flags (length: the ranks).
        dtype: the model's float dtype.
        step: the global step (int64 variable).
        position: global step -> position in the loss-weight schedule (one rank's steps).
        loss_scale: the :class:`~pinn.training.loss_scale.LossScale` of ``mixed_float16``, or ``None``.
        rank: this rank.
    """
    model: Any
    variables: list
    terms: list
    outputs: dict
    metric_keys: list
    one_hot_rank: tf.Tensor
    dtype: tf.DType
    step: tf.Variable
    position: Callable
    loss_scale: Any = None
    rank: int = 0

    def weights_at(self, step):
        """The loss weights per term at global step ``step`` (tensor or int)."""
        return self.model.loss_weights(self.position(step))


@dataclasses.dataclass(frozen=True)
class StepUpdate:
    """The update of a training step.

    Attributes:
        optimizer: the run's Adam.
        ema: the weight average, or ``None``.
        max_grad_norm: clip the gradients to this global norm (``None``: no clipping).
        learning_rate: the schedule (global step -> float32 rate).
        lr_factor: the factor on it (float32 variable; a validation may lower it).
        frozen: per trainable variable, whether ``model.params.freeze`` keeps it as it is
            (:mod:`pinn.training.freeze`).
    """
    optimizer: Any
    ema: Any
    max_grad_norm: Any
    learning_rate: Callable
    lr_factor: tf.Variable
    frozen: tuple = ()


def apply_update(update, variables, grads, rate):
    """The update of a step, the one definition (the numba engine's host update,
    :class:`pinn.engines.host_optimizer.HostOptimizer`, is tested against it): the gradients of the
    variables ``model.params.freeze`` leaves alone dropped, the rest clipped to ``update.max_grad_norm``
    (global norm), the optimizer's step at learning rate ``rate``, then the weight average.

    Args:
        update: the :class:`StepUpdate`.
        variables: the trainable variables, in the order of ``grads``.
        grads: their gradients (tensors).
        rate: the learning rate of this step (float32).
    """
    trained = [(g, v) for g, v, frozen in zip(grads, variables, update.frozen or [False] * len(grads))
               if not frozen]  # frozen variables (model.params.freeze) are left as they are
    clipped = [g for g, _ in trained]
    if update.max_grad_norm:
        clipped, _ = tf.clip_by_global_norm(clipped, update.max_grad_norm)
    # the optimizer keeps the rate as a variable: the schedule reaches the update through this assignment
    update.optimizer.learning_rate.assign(rate)
    update.optimizer.apply_gradients(zip(clipped, [v for _, v in trained]))
    if update.ema is not None:
        update.ema.update(variables)


class GraphSteps:
    """The steps on host arrays through TensorFlow's traced functions (:class:`StepFunctions`): what a
    parallel run's exchange (:mod:`pinn.training.exchange`) and the Kalman filters call, with the same
    methods as the numba engine's :class:`pinn.training.backends.HostSteps`; one of the two is chosen
    once per :class:`StepFunctions`.

    Args:
        steps: the :class:`StepFunctions` whose traced functions run.
    """

    def __init__(self, steps):
        self.steps = steps
        self.whole_step = steps.graph_step

    def count(self, batch, keep=False):
        """This rank's loss counts of one batch, per term (float64 array); ``keep`` is the host steps'
        (TensorFlow keeps nothing between a batch's counts and its gradients)."""
        return np.asarray(self.steps.local_counts(batch), np.float64)

    def flat_gradient(self, batches, global_counts):
        """This rank's gradient summed over ``batches`` (one flat float64 vector, the order of the
        trainable variables) and its stats, the loss normalised by ``global_counts``."""
        counts = tf.constant(global_counts, tf.float64)
        total = stats = None
        for batch in batches:
            grads, part = self.steps.local_gradients(batch, counts)
            flat = np.concatenate([np.asarray(g, np.float64).ravel() for g in grads])
            total = flat if total is None else total + flat
            stats = part.numpy() if stats is None else stats + part.numpy()
        return total, stats

    def apply_flat(self, flat, finite, overflow=False):
        """The update with the summed gradient ``flat`` (when ``finite``); the step counted; ``overflow``:
        a rank's scaled gradients overflowed (the loss scale halves)."""
        grads = []
        start = 0
        for v in self.steps.variables:
            size = v.shape.num_elements()
            grads.append(tf.constant(flat[start:start + size].reshape(v.shape), v.dtype))
            start += size
        return bool(self.steps.apply_reduced(grads, tf.constant(bool(finite)), tf.constant(bool(overflow))))

    def store(self):
        """Nothing to give: TensorFlow's variables are the weights."""

    def flat_weights(self):
        """The current weights as one float64 vector."""
        return np.concatenate([np.asarray(v.numpy(), np.float64).ravel() for v in self.steps.variables])


class StepFunctions:
    """The functions of a step for batches of ``spec``.

    Args:
        spec: the element spec of the training input (a sparse batch, or a tuple of parts).
        state: the run's :class:`~pinn.training.state.TrainingState` (model, optimizer, weight
            average, step and learning-rate factor).
        learning_rate: the run's :class:`~pinn.training.schedule.LearningRate`.
        world: the run's world.
        backend: the gradient backend (:mod:`pinn.training.backends`).
        max_grad_norm: clip the gradients to this global norm (``None``: no clipping).

    Attributes:
        world, model, step, learning_rate, lr_factor, loss (:class:`StepLoss`), update (:class:`StepUpdate`): the run's.
        terms, variables, metric_keys: the loss's.
        local_counts: ``batch -> [terms]`` loss counts of this rank's batch (traced).
        local_gradients: ``(batch, global_counts) -> (gradients, stats)``.
        reduce_and_apply: ``(gradients, stats) -> (applied, stats)``, summed over ranks.
        apply_reduced: ``(gradients, finite) -> applied``: the update with gradients summed already.
        whole_step: ``batch -> (applied, stats)`` for one process and one batch per step.
        replica_gradients: ``(batches, global_counts) -> (gradients, stats)`` summed over one batch per device
            (a mirrored world, :meth:`_replica_gradients`), else ``None``.
        arrays: the steps on host arrays (:meth:`count`, ``flat_gradient``, ``apply_flat``, ``store``,
            ``flat_weights``, ``whole_step``): the numba engine's :class:`~pinn.training.backends.HostSteps`,
            else :class:`GraphSteps`, chosen once.
    """

    def __init__(self, spec, state, learning_rate, world, backend, max_grad_norm):
        model = state.model
        self.world = world
        self.model = model
        self.step = state.step
        self.learning_rate = learning_rate
        self.lr_factor = state.lr_factor
        self.dtype = model.dtype
        split = isinstance(spec, tuple)
        self.part_spec = part_spec = spec[0] if split else spec
        model.check_frames(part_spec, "training batches")
        missing = model.missing_labels(part_spec)
        if missing:
            raise ValueError(f"the model trains on {missing} but the training data have no "
                             f"{[model.LABELS[t] for t in missing]} (see model.params)")
        outputs = model.train_outputs()
        self.loss = loss = StepLoss(model, model.trainable_variables, model.loss_term_names(), outputs,
                                    model.metric_keys(part_spec, outputs),
                                    tf.one_hot(world.rank, world.size, dtype=self.dtype), self.dtype,
                                    state.step, learning_rate.single_rank_steps, state.loss_scale, world.rank)
        self.update = update = StepUpdate(state.optimizer, state.ema, max_grad_norm, learning_rate, state.lr_factor,
                                          state.frozen)
        self.terms = loss.terms
        self.variables = loss.variables
        self.metric_keys = loss.metric_keys
        self.n_ranks = world.size
        self.n_stats = n_stats = 2 + 3 * len(self.metric_keys) + world.size
        self._trace(spec, split, backend)
        #: the steps on host arrays, chosen once: the backend's (the numba engine's) or TensorFlow's traced ones
        self.arrays = backend.host_steps(loss, update) or GraphSteps(self)
        self.whole_step = self.arrays.whole_step
        self.flat_gradient = self.arrays.flat_gradient
        self.apply_flat = self.arrays.apply_flat
        self.store = self.arrays.store
        self.flat_weights = self.arrays.flat_weights

    def _trace(self, spec, split, backend):
        """The traced functions of the step (see the class's attributes)."""
        loss = self.loss
        update = self.update
        world = self.world
        variables = self.loss.variables

        def counts_of(batch):
            if split:
                return tf.add_n([counts_of_part(part) for part in batch])
            return counts_of_part(batch)

        def counts_of_part(batch):
            counts = loss.model.loss_counts(batch)
            return tf.stack([counts[t] for t in loss.terms])

        part_gradients = backend.part_gradients(loss)
        if split:  # one compiled function per part, the parts' calls concurrent in an uncompiled step
            compiled_part = tf.function(part_gradients, jit_compile=backend.jit, autograph=False)

            def gradients_of(batch, global_counts):
                results = [compiled_part(part, global_counts) for part in batch]
                grads = [tf.add_n(list(g)) for g in zip(*[r[0] for r in results])]
                return grads, tf.add_n([r[1] for r in results])
        else:
            gradients_of = part_gradients

        # clipping, Adam and the average fused by XLA with jit: ~10 % of a small step (not where the variables are
        # mirrored on several devices, whose copies XLA cannot update from one device).  Not without jit: TensorFlow
        # keeps every XLA compilation for the process's life, so each model trained in one process would add its
        # own (~35 MB for a default PiNet; benchmarks/bench_memory.py)
        @tf.function(jit_compile=backend.jit and world.local_replicas == 1, autograph=False)
        def apply(grads):
            apply_update(update, variables, grads, update.learning_rate(loss.step) * update.lr_factor)
            return tf.constant(True)

        def apply_if_finite(grads, stats):
            finite = tf.logical_and(tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads]),
                                    tf.reduce_all(tf.math.is_finite(stats[:2])))
            finite = tf.logical_and(finite, tf.reduce_sum(stats[-world.size:]) == 0)
            applied = tf.cond(finite, lambda: apply(grads), lambda: tf.constant(False))
            if loss.loss_scale is not None:
                loss.loss_scale.update(applied, overflowed(tf.cast(stats[-world.size:], tf.float32)))
            loss.step.assign_add(1)
            return applied, stats

        self.local_counts = tf.function(counts_of, input_signature=[spec], autograph=False)
        # XLA (jit): compiled once per bucket of padded batch sizes; the tf.function is traced once
        self.local_gradients = tf.function(
            gradients_of, input_signature=[spec, tf.TensorSpec([len(loss.terms)], tf.float64)],
            jit_compile=backend.jit and not split, autograph=False)
        grad_specs = [tf.TensorSpec(v.shape, v.dtype) for v in variables]
        self.replica_gradients = self._replica_gradients(spec) if world.local_replicas > 1 else None

        @tf.function(input_signature=[grad_specs, tf.TensorSpec([self.n_stats], self.dtype)], autograph=False)
        def reduce_and_apply(grads, stats):
            grads = world.allreduce_sum(grads, compress=True)
            stats = world.allreduce_sum([stats])[0]
            return apply_if_finite(grads, stats)

        @tf.function(input_signature=[spec], jit_compile=backend.jit and not split, autograph=False)
        def graph_step(batch):
            """One process, one batch per step: the step in one graph (one call, no host round trips)."""
            grads, stats = gradients_of(batch, counts_of(batch))
            return apply_if_finite(grads, stats)

        @tf.function(input_signature=[grad_specs, tf.TensorSpec([], tf.bool), tf.TensorSpec([], tf.bool)],
                     autograph=False)
        def apply_reduced(grads, finite, overflow):
            """The update with gradients already summed over ranks, when ``finite``; the step counted
            (:mod:`pinn.training.exchange`); ``overflow``: a rank's scaled gradients overflowed."""
            applied = tf.cond(finite, lambda: apply(grads), lambda: tf.constant(False))
            if loss.loss_scale is not None:
                loss.loss_scale.update(applied, overflow)
            loss.step.assign_add(1)
            return applied

        self.reduce_and_apply = reduce_and_apply
        self.apply_reduced = apply_reduced
        self.graph_step = graph_step

    def _replica_gradients(self, spec):
        """``(batches, global_counts) -> (gradients, stats)`` of a mirrored world: batch i's gradients and stats
        on device i (:attr:`local_gradients`, in the strategy's replica context), summed across the devices."""
        strategy = self.world.strategy
        n = self.world.local_replicas

        def on_device(batch, global_counts):
            grads, stats = self.local_gradients(batch, global_counts)
            return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, [*grads, stats])

        @tf.function(input_signature=[[spec] * n, tf.TensorSpec([len(self.terms)], tf.float64)], autograph=False)
        def replica_gradients(batches, global_counts):
            per_device = strategy.experimental_distribute_values_from_function(
                lambda context: batches[context.replica_id_in_sync_group])
            summed = strategy.run(on_device, args=(per_device, global_counts))
            summed = [strategy.experimental_local_results(t)[0] for t in summed]
            return summed[:-1], summed[-1]
        return replica_gradients

    # the steps on host arrays of a parallel run's exchange (pinn.training.exchange) and the Kalman filters:
    # flat_gradient, apply_flat, store and flat_weights are the chosen implementation's (GraphSteps, HostSteps)
    def count(self, batches, keep=False):
        """This rank's loss counts of ``batches`` summed, per term (float64 array; zeros for none);
        ``keep``: their gradients follow through :meth:`flat_gradient` (the backend may keep what it made
        of them)."""
        return sum((self.arrays.count(b, keep) for b in batches), np.zeros(len(self.terms)))

    def current_learning_rate(self):
        """The learning rate of the next update (float32 tensor)."""
        return self.learning_rate(self.step) * self.lr_factor

    def unpack(self, stats):
        """``(loss, structures, {metric: (Σ|err|, Σerr², count)}, per-rank non-finite flags)`` of a stats vector."""
        sums = {k: stats[2 + 3 * i: 5 + 3 * i] for i, k in enumerate(self.metric_keys)}
        return stats[0], stats[1], sums, stats[-self.n_ranks:]
