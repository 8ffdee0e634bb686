"""Upstream PiNN's Kalman-filter optimizers, EKF and gEKF (``model.params.optimizer: ekf | gekf``).

Both fit the weights w (n of them) to the errors of a batch instead of minimising a scalar
loss.  The error vector e (m values, training units) holds every value of every loss term,
each multiplied by √(term weight × data weight) (so the multipliers and ``e_weight`` /
``f_weight`` weigh the errors as they weigh the loss; values with weight 0, padding among
them, are left out), with err = prediction − label (:meth:`pinn.physics.base.Model.residuals`).
H = ∂e/∂w (m × n).  λ is the learning rate of the step (its schedule, ``lr_factor`` after a
rollback), at most ``ekf_max_learning_rate``; Q = q·I with
q = max(``ekf_q_0`` · exp(−t/``ekf_q_tau``), ``ekf_q_min``) at step t.

**EKF** (one Kalman update)::

    A = I/λ + H P Hᵀ                 (m × m, solved, not inverted)
    K = P Hᵀ A⁻¹                     (n × m)
    w ← w − K e
    P ← P − K H P + Q

**gEKF** (upstream's cheaper rank-1 form) from the gradients g₁ = ∇ mean|e| and
g₂ = ∇ mean e²::

    k = P g₁ / (1/λ + g₁ᵀ P g₁)
    w ← w − λ/2 · (P g₂ − k · g₁ᵀ P g₂)
    P ← P − k (P g₁)ᵀ + Q

P starts as ``ekf_epsilon`` · I, is kept in float64 whatever the model's precision, made
symmetric after each update, checkpointed with the model and broadcast from rank 0 like
Adam's state.  ``ekf_solve_dtype`` is the dtype of the solve (EKF) or the division (gEKF),
upstream's ``inv_dtype`` / ``div_dtype``.  ``max_grad_norm`` clips the update K e to that
global norm.  With ``separate_errors`` every loss term (energies, then forces, then
stress) makes its own update in turn, each from the errors and Jacobian at the weights the
previous one left.

**N ranks.** Every rank needs the union batch's e and H (EKF) or its g₁, g₂ (gEKF); then
every rank applies the identical update and P stays equal on all ranks.  EKF: each rank's
rows [e | H] (m_r × (n + 1), float64) are gathered in rank order
(:meth:`~pinn.parallel.worlds.SerialWorld.concat_rows_numpy`): every rank receives
Σm_r·(n + 1) values, the same bytes as an allreduce of the rows placed in a zero matrix,
without the zeros' arithmetic; the update then costs O(m n² + m³) on every rank.  The
information form (allreduce of HᵀH and Hᵀe, then a solve with an n × n matrix) would send
n² values and cost O(n³) per step: more than the rows wherever m < n, which is the case of
EKF batches (a few structures; m is 10²–10³, n 10³–10⁴).  gEKF: the sums of ∇Σ|e| and
∇Σe² and the number of errors (2n + 1 values) are summed over ranks and divided by the
global number of errors, so both gradients are means over the union batch.  A step's loss
counts and stop flags are agreed first (one small allreduce, as for Adam), the step's
statistics and weight checksums travel in one more.
"""
import logging
import math
import time
import weakref

import numpy as np
import tensorflow as tf

from pinn.params.training_options import KALMAN_NAMES
from pinn.schema import ParamsError
from pinn.training.exchange import WeightsDiffer, take
from pinn.training.freeze import flat_keep
from pinn.training.memory import OOM_ERRORS, inject, report, skipped_stats

log = logging.getLogger("pinn")

#: model.params.optimizer values of the Kalman filters
KINDS = ("ekf", "gekf")


def weight_count(variables):
    """Number of weights n in ``variables``."""
    return int(sum(v.shape.num_elements() for v in variables))


class KalmanFilter(tf.Module):
    """The state and the update of EKF or gEKF: P (n × n, float64) over the trainable ``variables``.

    Args:
        variables: the model's trainable variables (updated in place; not tracked here, so a
            checkpoint of this module holds P alone).
        mp: resolved ``model.params`` (``optimizer``, the ``ekf_*`` keys, ``max_grad_norm``).
        ema: the :class:`~pinn.training.ema.WeightAverage` updated after each applied step, or ``None``.

    Raises:
        ParamsError: P would take more than ``ekf_max_memory_gb`` (naming n and the bytes).
    """

    def __init__(self, variables, mp, name="kalman", frozen=()):
        super().__init__(name=name)
        self.kind = mp["optimizer"]
        n = weight_count(variables)
        size = 8.0 * n * n
        limit = mp["ekf_max_memory_gb"] * 1e9
        if size > limit:
            raise ParamsError(f"model.params.optimizer: the {KALMAN_NAMES[self.kind]} keeps a {n} × {n} matrix P "
                              f"for the {n} weights of this network, {size / 1e9:.3g} GB in float64 (about 3 times "
                              "that at the peak of an update, and 2 copies more for loss_jump_factor), above "
                              f"model.params.ekf_max_memory_gb {mp['ekf_max_memory_gb']:g}; use a smaller network, "
                              "optimizer: adam, or raise ekf_max_memory_gb")
        self.n = n
        self.epsilon = float(mp["ekf_epsilon"])
        self.max_rate = mp["ekf_max_learning_rate"]
        self.q_0 = float(mp["ekf_q_0"])
        self.q_min = float(mp["ekf_q_min"])
        self.q_tau = float(mp["ekf_q_tau"])
        self.solve_dtype = tf.as_dtype(mp["ekf_solve_dtype"])
        self.jacobian_rows = mp["ekf_jacobian_rows"]
        self.max_norm = mp["max_grad_norm"]
        self.P = tf.Variable(tf.eye(n, dtype=tf.float64) * self.epsilon, trainable=False, name="P")
        # frozen weights (model.params.freeze): their Jacobian columns and their steps are zero
        self.keep = tf.constant(flat_keep(variables, frozen), tf.float64) if any(frozen) else None
        # the weights, kept out of tf.Module's tracking (the model's checkpoint holds them)
        object.__setattr__(self, "_weights", list(variables))
        f64 = tf.float64
        self.ekf_update = tf.function(self._ekf, autograph=False, input_signature=[
            tf.TensorSpec([None], f64), tf.TensorSpec([None, n], f64), tf.TensorSpec([], f64), tf.TensorSpec([], f64)])
        self.gekf_update = tf.function(self._gekf, autograph=False, input_signature=[
            tf.TensorSpec([n], f64), tf.TensorSpec([n], f64), tf.TensorSpec([], f64), tf.TensorSpec([], f64)])

    def describe(self):
        """The optimizer, for the log line at the start of training."""
        cap = f" (at most {self.max_rate:g})" if self.max_rate is not None else ""
        return (f"{KALMAN_NAMES[self.kind]} on {self.n} weights (P {self.n} × {self.n}, ε {self.epsilon:g}; "
                f"λ: the learning rate{cap}; Q from {self.q_0:g}, τ {self.q_tau:g}, at least {self.q_min:g})")

    def reset(self):
        """P back to its start, ``ekf_epsilon`` · I (a checkpoint of an Adam run holds no P)."""
        self.P.assign(tf.eye(self.n, dtype=tf.float64) * self.epsilon)

    def rate(self, learning_rate):
        """λ of a step: ``learning_rate`` (the schedule's, a float) capped by ``ekf_max_learning_rate``."""
        rate = float(learning_rate)
        return rate if self.max_rate is None else min(rate, float(self.max_rate))

    def noise(self, step):
        """q of the process noise Q = q·I at global step ``step`` (an int)."""
        return max(self.q_0 * math.exp(-step / self.q_tau), self.q_min)

    def update(self, payload, rate, noise):
        """One update from the exchanged data of the union batch.

        Args:
            payload: EKF: [m, n + 1] float64 rows [e | H]; gEKF: [2n] float64, g₁ then g₂ (means).
            rate: λ (float).
            noise: q (float).

        Returns:
            whether it was applied (``False``: its update was not finite; nothing changed).
        """
        rate, noise = tf.constant(rate, tf.float64), tf.constant(noise, tf.float64)
        if self.kind == "ekf":
            if payload.shape[0] == 0:
                return True  # no errors: nothing to fit
            return bool(self.ekf_update(tf.constant(payload[:, 0]), tf.constant(payload[:, 1:]), rate, noise))
        return bool(self.gekf_update(tf.constant(payload[:self.n]), tf.constant(payload[self.n:]), rate, noise))

    # the traced updates (float64)
    def _ekf(self, e, H, rate, noise):
        P = self.P
        if self.keep is not None:
            H = H * self.keep[None, :]
        PHt = tf.matmul(P, H, transpose_b=True)  # n × m
        m = tf.shape(H)[0]
        A = tf.eye(m, dtype=tf.float64) / rate + tf.matmul(H, PHt)  # I/λ + H P Hᵀ
        dt = self.solve_dtype
        X = tf.cast(tf.linalg.solve(tf.cast(A, dt), tf.cast(tf.transpose(PHt), dt)), tf.float64)  # A⁻¹ H P = Kᵀ
        step = tf.linalg.matvec(X, e, transpose_a=True)  # K e
        finite = tf.logical_and(tf.reduce_all(tf.math.is_finite(step)), tf.reduce_all(tf.math.is_finite(X)))
        return tf.cond(finite, lambda: self._apply(step, lambda: tf.matmul(PHt, X), noise),
                       lambda: tf.constant(False))

    def _gekf(self, g1, g2, rate, noise):
        P = self.P
        if self.keep is not None:
            g1, g2 = g1 * self.keep, g2 * self.keep
        Pg1, Pg2 = tf.linalg.matvec(P, g1), tf.linalg.matvec(P, g2)
        g1Pg1, g1Pg2 = tf.reduce_sum(g1 * Pg1), tf.reduce_sum(g1 * Pg2)
        dt = self.solve_dtype
        k = tf.cast(tf.cast(Pg1, dt) / tf.cast(1.0 / rate + g1Pg1, dt), tf.float64)
        step = rate / 2.0 * (Pg2 - k * g1Pg2)
        finite = tf.logical_and(tf.reduce_all(tf.math.is_finite(step)), tf.reduce_all(tf.math.is_finite(k)))
        return tf.cond(finite, lambda: self._apply(step, lambda: k[:, None] * Pg1[None, :], noise),
                       lambda: tf.constant(False))

    def _apply(self, step, decrease, noise):
        """w ← w − step (clipped to ``max_grad_norm``), P ← sym(P − decrease() + noise·I); returns True."""
        if self.keep is not None:
            step = step * self.keep  # exact, whatever P couples (a resumed run that freezes anew)
        if self.max_norm:
            step = tf.clip_by_norm(step, self.max_norm)
        start = 0
        for v in self._weights:
            size = v.shape.num_elements()
            v.assign_sub(tf.cast(tf.reshape(step[start:start + size], v.shape), v.dtype))
            start += size
        P = self.P
        P.assign_sub(decrease())
        P.assign(tf.linalg.set_diag(0.5 * (P + tf.transpose(P)), tf.linalg.diag_part(P) + noise))
        return tf.constant(True)


class KalmanSteps:
    """The steps of a run with EKF or gEKF, in one process or on N ranks (the loop's exchange).

    The interface of :class:`pinn.training.exchange.FusedExchange`: :meth:`start` takes a step's
    batches and agrees on their loss counts and the stop flags; :meth:`step` computes, exchanges
    and applies the step.  Every step starts with :meth:`start` (the loop calls it while
    :attr:`batches` is ``None``).

    Args:
        steps: the run's :class:`~pinn.training.steps.StepFunctions` (world, loss, weight average,
            step and learning rate).
        kalman: the :class:`KalmanFilter`.
        k: batches per step (``accumulate_batches``).
        check_every: compare the ranks' weight and P checksums every this many steps.
        separate_errors: one update per loss term (``model.params.separate_errors``).
    """

    def __init__(self, steps, kalman, k, check_every, separate_errors=False):
        self.k = k
        self.check_every = max(1, int(check_every))
        self.steps = steps
        self.world = steps.world
        self.filter = kalman
        terms = list(steps.terms)
        # which terms each update fits: all at once, or one at a time (1 for the term's errors, 0 for the others)
        self.groups = [np.eye(len(terms))[i] for i in range(len(terms))] if separate_errors \
            else [np.ones(len(terms))]
        self.n = self.filter.n
        self.coefficients = np.random.RandomState(7).uniform(0.5, 1.5, self.n)
        self.local = traced_local_function(steps, self.filter.kind, self.filter.jacobian_rows)
        self.batches = None  # the step's batches, taken by start()
        self.counts = None  # all ranks' loss counts of them
        self._taken = 0.0  # seconds in start()
        #: this rank's batches of the latest step ran out of memory: their (structures, atoms, pairs)
        self.out_of_memory = None

    def start(self, iterator, signals):
        """Take the next step's batches and agree on their counts, whether an input ended and whether a
        stop signal came (one small allreduce).

        Returns:
            ``(input_ended, stop_signal)``: on any rank.
        """
        t0 = time.perf_counter()
        self.batches = take(iterator, self.k)
        flags = [float(len(self.batches) < self.k), float(signals.received is not None)]
        counts = self.steps.count(self.batches)
        agreed = self.world.allreduce_sum_numpy(np.concatenate([counts, flags]))
        self.counts = agreed[:len(self.steps.terms)]
        self._taken = time.perf_counter() - t0
        return bool(agreed[-2] > 0), bool(agreed[-1] > 0)

    def step(self, iterator, signals, step):
        """One step on the batches of :meth:`start`: per group of loss terms (all, or one at a time with
        ``separate_errors``), this rank's errors and Jacobian (or gEKF's gradients), the exchange, the
        update on every rank.

        Args:
            iterator, signals: unused (the interface of FusedExchange; :meth:`start` takes the batches).
            step: the global step before this one.

        Returns:
            ``(batches, applied, stats, phases, False, False)``: the batches trained on, whether every
            update of the step was applied (all finite on all ranks), the stats summed over ranks
            (:meth:`pinn.training.steps.StepFunctions.unpack`), this rank's seconds in (compute,
            exchange, update); the news of the next step come from the next :meth:`start`.

        Raises:
            WeightsDiffer: at a checked step, the ranks' weights or P differ.
        """
        steps = self.steps
        world = self.world
        size = self.world.size
        batches, self.batches = self.batches, None
        counts = tf.constant(self.counts, tf.float64)
        rate = self.filter.rate(steps.current_learning_rate())
        noise = self.filter.noise(step)
        phases = np.array([self._taken, 0.0, 0.0])
        stats = None
        applied = True
        changed = False
        self.out_of_memory = None
        for i, group in enumerate(self.groups):
            t0 = time.perf_counter()
            try:
                inject(world.rank, step + 1)
                payload, part_stats = self._local(batches, counts, tf.constant(group, tf.float64))
            except OOM_ERRORS as err:  # a non-finite payload: every rank skips the step; the flag says why
                self.out_of_memory = report(err, batches, world.rank, step + 1)
                payload = np.full((1, self.n + 1) if self.filter.kind == "ekf" else 2 * self.n + 1, np.nan)
                part_stats = skipped_stats(steps.n_stats, world.rank, size)
            t1 = time.perf_counter()
            if self.filter.kind == "ekf":
                rows = world.concat_rows_numpy(payload.reshape(-1, self.n + 1))
                finite = bool(np.isfinite(rows).all())
                data = rows
            else:
                summed = world.allreduce_sum_numpy(payload)
                finite = bool(np.isfinite(summed).all())
                total = summed[-1]  # errors of the union batch
                data = summed[:-1] / total if total > 0 else None
            if i == 0:
                stats = self._agree_on_stats(part_stats, step)
                finite = finite and bool(np.isfinite(stats[:2]).all() and stats[-size:].sum() == 0)
            t2 = time.perf_counter()
            phases += [t1 - t0, t2 - t1, 0.0]
            if not finite:
                applied = False
                break
            if data is not None:
                if not self.filter.update(data, rate, noise):
                    applied = False
                    break
                changed = True
            phases[2] += time.perf_counter() - t2
        t3 = time.perf_counter()
        if changed and steps.update.ema is not None:
            steps.update.ema.update(steps.variables)
        steps.step.assign_add(1)
        phases[2] += time.perf_counter() - t3
        return batches, applied, stats, phases, False, False

    def _local(self, batches, counts, group):
        """This rank's flat payload (EKF: its rows [e | H]; gEKF: [Σ∇|e| | Σ∇e² | m]) over ``batches`` (and
        their parts) for the terms of ``group`` (1 for a term fitted) and its stats."""
        payloads = []
        stats = None
        for batch in batches:
            for part in (batch if isinstance(batch, tuple) else (batch,)):
                payload, part_stats = self.local(part, counts, group)
                payloads.append(payload.numpy())
                stats = part_stats.numpy() if stats is None else stats + part_stats.numpy()
        if self.filter.kind == "ekf":
            return np.concatenate([p.reshape(-1, self.n + 1) for p in payloads]), stats
        return np.sum(payloads, axis=0), stats

    def _agree_on_stats(self, stats, step):
        """The step's stats summed over ranks, with the weights' and P's checksums compared at a checked step.

        Raises:
            WeightsDiffer: the checksums differ between ranks.
        """
        world = self.world
        size = self.world.size
        checked = world.is_parallel and (step + 1) % self.check_every == 0
        sums = np.zeros(2 * size)
        if checked:
            weights = np.concatenate([np.asarray(v.numpy(), np.float64).ravel() for v in self.steps.variables])
            sums[world.rank] = float(np.dot(weights, self.coefficients))
            sums[size + world.rank] = float(tf.reduce_sum(self.filter.P))
        summed = world.allreduce_sum_numpy(np.concatenate([stats, sums]))
        if checked:
            for what, values in (("weights", summed[-2 * size:-size]), ("Kalman filters' P", summed[-size:])):
                if np.any(values != values[0]):
                    raise WeightsDiffer(f"step {step + 1}: the {what} differ between ranks (checksums "
                                        f"{', '.join(f'{c:.17g}' for c in values)}); they must stay bitwise equal")
        return summed[:-2 * size]


#: the traced errors-and-Jacobian functions, per StepFunctions (the train() calls of one input spec)
_TRACED = weakref.WeakKeyDictionary()


def traced_local_function(steps, kind, jacobian_rows=None):
    """The traced errors-and-Jacobian function of ``steps`` (a :class:`~pinn.training.steps.StepFunctions`)
    for the filter ``kind``, traced on first use and kept as long as the step functions are."""
    functions = _TRACED.setdefault(steps, {})
    key = (kind, jacobian_rows)
    if key not in functions:
        functions[key] = _local_function(steps, kind, jacobian_rows)
    return functions[key]


def _local_function(steps, kind, jacobian_rows=None):
    """The traced function ``(part, global_counts, group) -> (payload, stats)`` of one sparse batch.

    ``group`` [terms] is 1 for the loss terms whose errors enter the payload, 0 for the others.  EKF: H's rows
    come ``jacobian_rows`` at a time from a loop of backward passes (None: all from one vectorized pass).
    ``payload``: EKF: [m_r · (n + 1)] float64, the rows [e | ∂e/∂w] of the batch's errors with a
    weight (each × √weight); gEKF: [2n + 1] float64, ∇Σ|e|, ∇Σe² and m_r.  ``stats``: the step
    statistics of :class:`~pinn.training.steps.StepFunctions` (the loss of all terms normalised by
    ``global_counts``, structures, error sums, this rank's non-finite flag).
    """
    from pinn.physics.loss_weights import structure_weights
    spec = steps.part_spec
    loss_of_step = steps.loss
    model = loss_of_step.model
    variables = loss_of_step.variables
    dtype = loss_of_step.dtype
    terms = loss_of_step.terms
    outputs = loss_of_step.outputs

    def local(batch, global_counts, group):
        weights = loss_of_step.weights_at(loss_of_step.step)
        with tf.GradientTape(persistent=kind == "gekf") as tape:
            pred = model.predict(batch, **outputs)
            residuals = model.residuals(batch, pred)
            chosen = [(i, t) for i, t in enumerate(terms) if t in residuals]
            if chosen:
                err = tf.concat([residuals[t][0] for _, t in chosen], 0)
                weight = tf.concat([residuals[t][1] * tf.cast(weights[t] * group[i], dtype) for i, t in chosen], 0)
            else:
                err = weight = tf.zeros([0], dtype)
            keep = tf.where(weight > 0)[:, 0]
            e = tf.gather(err, keep) * tf.sqrt(tf.gather(weight, keep))
            if kind == "gekf":
                l1, l2 = tf.reduce_sum(tf.abs(e)), tf.reduce_sum(e ** 2)
        if kind == "ekf":
            jac = tape.jacobian(e, variables, unconnected_gradients=tf.UnconnectedGradients.ZERO,
                                parallel_iterations=jacobian_rows, experimental_use_pfor=jacobian_rows is None)
            m = tf.shape(e)[0]
            H = tf.concat([tf.reshape(tf.cast(j, tf.float64), [m, -1]) for j in jac], 1)
            payload = tf.reshape(tf.concat([tf.cast(e, tf.float64)[:, None], H], 1), [-1])
        else:
            flat = [tf.concat([tf.reshape(tf.cast(g, tf.float64), [-1]) for g in
                               tape.gradient(loss, variables, unconnected_gradients=tf.UnconnectedGradients.ZERO)], 0)
                    for loss in (l1, l2)]
            payload = tf.concat(flat + [tf.cast(tf.size(e), tf.float64)[None]], 0)
        sums = model.loss_sums(batch, pred)
        loss = tf.add_n([tf.constant(0.0, dtype)]
                        + [tf.cast(weights[t], dtype) * tf.math.divide_no_nan(sums[t], tf.cast(global_counts[i], dtype))
                           for i, t in enumerate(terms) if t in sums])
        finite = tf.logical_and(tf.reduce_all(tf.math.is_finite(payload)), tf.math.is_finite(loss))
        errors = model.error_sums(batch, pred)
        stats = tf.concat([[loss, tf.reduce_sum(structure_weights(batch, dtype))]]
                          + [tf.stack(errors[k]) for k in loss_of_step.metric_keys]
                          + [loss_of_step.one_hot_rank * tf.cast(tf.logical_not(finite), dtype)], axis=0)
        return payload, stats

    return tf.function(local, input_signature=[spec, tf.TensorSpec([len(terms)], tf.float64),
                                               tf.TensorSpec([len(terms)], tf.float64)], autograph=False)
