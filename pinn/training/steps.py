"""The traced pieces of a training step, for batches of one element spec.

One step (see :mod:`pinn.training.trainer`): the loss counts of the batches summed over
ranks (:attr:`StepFunctions.local_counts`, then an allreduce), the gradients of
Σ_term w_t · penalty sum / global count per batch (:attr:`~StepFunctions.local_gradients`,
from the backend), then the sum over ranks and the update, skipped on every rank when
anything is non-finite (:attr:`~StepFunctions.reduce_and_apply`).  One process with one
batch per step runs :attr:`~StepFunctions.whole_step` instead: the same in one call.
"""
import tensorflow as tf


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
        world, backend, model, optimizer, ema, step, lr_factor, learning_rate: the run's, as the
            Trainer holds them (:meth:`current_learning_rate`).
        local_counts: ``batch -> [terms]`` loss counts of this rank's batch.
        local_gradients: ``(batch, global_counts) -> (gradients, stats)``.
        reduce_and_apply: ``(gradients, stats) -> (applied, stats)``, summed over ranks.
        apply_reduced: ``(gradients, finite) -> applied``: the update with gradients summed already.
        whole_step: ``batch -> (applied, stats)`` for one process and one batch per step.
    """

    def __init__(self, spec, state, learning_rate, world, backend, max_grad_norm):
        model = state.model
        self.world, self.backend = world, backend
        self.model, self.optimizer, self.ema = model, state.optimizer, state.ema
        self.learning_rate, self.lr_factor, self.step = learning_rate, state.lr_factor, state.step
        self.schedule_position = self.learning_rate.single_rank_steps
        self.max_grad_norm = max_grad_norm
        self.dtype = model.dtype
        split = isinstance(spec, tuple)
        self.part_spec = part_spec = spec[0] if split else spec
        missing = model.missing_labels(part_spec)
        if missing:
            raise ValueError(f"the model trains on {missing} but the training data have no "
                             f"{[model.LABELS[t] for t in missing]} (see model.params)")
        self.variables = variables = model.trainable_variables
        self.terms = model.loss_term_names()
        self.outputs = model.train_outputs()
        self.metric_keys = model.metric_keys(part_spec, self.outputs)
        self.one_hot_rank = tf.one_hot(world.rank, world.size, dtype=self.dtype)
        self.n_ranks = world.size

        def counts_of(batch):
            if split:
                return tf.add_n([counts_of_part(part) for part in batch])
            return counts_of_part(batch)

        def counts_of_part(batch):
            counts = model.loss_counts(batch)
            return tf.stack([counts[t] for t in self.terms])

        part_gradients = backend.part_gradients(self)
        if split:  # one compiled function per part, the parts' calls concurrent in an uncompiled step
            compiled_part = tf.function(part_gradients, jit_compile=backend.jit, autograph=False)

            def gradients_of(batch, global_counts):
                results = [compiled_part(part, global_counts) for part in batch]
                grads = [tf.add_n(list(g)) for g in zip(*[r[0] for r in results])]
                return grads, tf.add_n([r[1] for r in results])
        else:
            gradients_of = part_gradients

        @tf.function(jit_compile=True, autograph=False)  # clipping, Adam and the average fused: ~10 % of a small step
        def apply(grads):
            clipped = grads
            if self.max_grad_norm:
                clipped, _ = tf.clip_by_global_norm(grads, self.max_grad_norm)
            # the optimizer keeps the rate as a variable: the schedule reaches the update through this assignment
            self.optimizer.learning_rate.assign(self.learning_rate(self.step) * self.lr_factor)
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

        self.local_counts = tf.function(counts_of, input_signature=[spec], autograph=False)
        # XLA (jit): compiled once per bucket of padded batch sizes; the tf.function is traced once
        self.local_gradients = tf.function(
            gradients_of, input_signature=[spec, tf.TensorSpec([len(self.terms)], tf.float64)],
            jit_compile=backend.jit and not split, autograph=False)
        grad_specs = [tf.TensorSpec(v.shape, v.dtype) for v in variables]
        n_stats = 2 + 3 * len(self.metric_keys) + world.size

        @tf.function(input_signature=[grad_specs, tf.TensorSpec([n_stats], self.dtype)], autograph=False)
        def reduce_and_apply(grads, stats):
            grads = world.allreduce_sum(grads, compress=True)
            stats = world.allreduce_sum([stats])[0]
            return apply_if_finite(grads, stats)

        @tf.function(input_signature=[spec], jit_compile=backend.jit and not split, autograph=False)
        def graph_step(batch):
            """One process, one batch per step: the step in one graph (one call, no host round trips)."""
            grads, stats = gradients_of(batch, counts_of(batch))
            return apply_if_finite(grads, stats)

        @tf.function(input_signature=[grad_specs, tf.TensorSpec([], tf.bool)], autograph=False)
        def apply_reduced(grads, finite):
            """The update with gradients already summed over ranks, when ``finite``; the step counted
            (:mod:`pinn.training.exchange`)."""
            applied = tf.cond(finite, lambda: apply(grads), lambda: tf.constant(False))
            self.step.assign_add(1)
            return applied

        self.reduce_and_apply = reduce_and_apply
        self.apply_reduced = apply_reduced
        self.n_stats = n_stats
        #: the traced errors-and-Jacobian function of the Kalman filters, made by them on first use
        #: (:class:`pinn.training.kalman.KalmanSteps`)
        self.kalman_local = None
        self.whole_step = backend.whole_step(self, graph_step)

    def current_learning_rate(self):
        """The learning rate of the next update (float32 tensor)."""
        return self.learning_rate(self.step) * self.lr_factor

    def unpack(self, stats):
        """``(loss, structures, {metric: (Σ|err|, Σerr², count)}, per-rank non-finite flags)`` of a stats vector."""
        sums = {k: stats[2 + 3 * i: 5 + 3 * i] for i, k in enumerate(self.metric_keys)}
        return stats[0], stats[1], sums, stats[-self.n_ranks:]
