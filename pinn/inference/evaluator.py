"""A model evaluated on finite inputs, with the weights for inference.

:meth:`Evaluator.evaluate` sums every batch's loss terms and errors, then the sums over
all ranks, so every rank gets the same exact figures (no frame counted twice or
dropped); with ``parity`` it also gathers predictions and labels for the parity plots
(:mod:`pinn.training.metrics`).  :meth:`Evaluator.predict` yields one dict per structure.
A model loaded for inference evaluates in one process (:class:`pinn.parallel.serial.SerialWorld`);
a training run's :class:`~pinn.training.evaluation.Evaluation` evaluates in its world.
"""
import logging

import numpy as np
import tensorflow as tf

from pinn.inference.errors import MAX_PARITY_ROWS, errors_from_sums

log = logging.getLogger("pinn")


class Evaluator:
    """Evaluates a model on datasets of sparse batches.

    Args:
        model: the model.
        world: the run's world (sums over ranks).
        weights: a function returning the context in which the model holds the weights for
            inference (:meth:`pinn.training.trainer.Trainer.averaged_weights`).
    """

    def __init__(self, model, world, weights):
        self.model = model
        self.world = world
        self.weights = weights
        self._traced = {}

    def _function(self, kind, spec, make):
        """A traced function of ``kind`` for batches of ``spec``, made once by ``make()`` and reused."""
        key = (kind, repr(spec))
        if key not in self._traced:
            self._traced[key] = make()
        return self._traced[key]

    def evaluate(self, dataset, loss_weights, step, parity=False):
        """Errors and loss on ``dataset``, summed over all ranks.

        Args:
            dataset: this rank's finite ``tf.data.Dataset`` of sparse batches with neighbor lists.
            loss_weights: dict term → weight of the loss (the schedule's at this step).
            step: the global step, reported as ``global_step``.
            parity: also gather the parity arrays of every batch and rank.

        Returns:
            (metrics dict: ``loss``, ``global_step`` and ``<Q>_MAE``/``<Q>_RMSE`` per labelled
            quantity, parity arrays or ``None``).
        """
        spec = dataset.element_spec
        model = self.model
        model.check_frames(spec, "evaluation batches")
        outputs = model.eval_outputs(spec)
        missing = model.missing_labels(spec)
        terms = [t for t in model.loss_term_names() if t not in missing]  # loss over the labelled terms
        metric_keys = model.eval_metric_keys(spec, outputs)
        eval_step = self._function("eval", spec, lambda: self._eval_step(spec, outputs, terms, metric_keys))
        total = np.zeros(2 * len(terms) + 3 * len(metric_keys))
        collected = {}
        with self.weights():
            for batch in dataset:
                sums, pred = eval_step(batch)
                total += sums.numpy()
                if parity:
                    batch_np = {k: v.numpy() for k, v in batch.items()}
                    for key, value in model.parity_arrays(batch_np, {k: v.numpy() for k, v in pred.items()}).items():
                        collected.setdefault(key, []).append(value)
        total = self.world.allreduce_sum_numpy(total)
        loss = sum(float(loss_weights[t]) * total[2 * i] / total[2 * i + 1] for i, t in enumerate(terms)
                   if total[2 * i + 1])
        offset = 2 * len(terms)
        result = errors_from_sums({key: total[offset + 3 * i: offset + 3 * i + 3] for i, key in enumerate(metric_keys)})
        result["loss"] = float(loss)
        result["global_step"] = int(step)
        return result, (self._gather_parity(collected) if parity else None)

    def _eval_step(self, spec, outputs, terms, metric_keys):
        model = self.model

        @tf.function(input_signature=[spec], autograph=False)
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
            if self.world.is_chief:
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

    def predict(self, dataset):
        """Yield one dict per structure of ``dataset`` (see :meth:`pinn.training.trainer.Trainer.predict`)."""
        spec = dataset.element_spec
        predict_step = self._function("predict", spec, lambda: tf.function(self.model.structure_predict,
                                                                        input_signature=[spec], autograph=False))
        for batch in dataset:
            with self.weights():
                pred = {k: v.numpy() for k, v in predict_step(batch).items()}
            yield from self.model.structure_outputs({k: v.numpy() for k, v in batch.items()}, pred)
