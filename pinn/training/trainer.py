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

The Trainer is a facade over parts with one job each, handed to it (:mod:`pinn.training.parts`): a run's
plan, its preparation and its execution (:mod:`pinn.training.run`), the gradient backend
(:mod:`pinn.training.backends`), the step functions (:mod:`pinn.training.steps`), the
loop (:mod:`pinn.training.loop`), the checkpoints (:mod:`pinn.training.checkpoints`),
early stopping (:mod:`pinn.training.early_stopping`), evaluation
(:mod:`pinn.training.evaluation` over :mod:`pinn.inference.evaluator`), the learning rate
(:mod:`pinn.training.schedule`) and the weight average (:mod:`pinn.training.ema`).
"""
import logging
import os

from pinn.inference.errors import with_upstream_names
from pinn.networks.layers import precision_dtypes
from pinn.params import read_params
from pinn.runtime.py_funcs import held_by
from pinn.training.guards import TrainingDiverged
from pinn.training.parts import TrainerParts, assemble
from pinn.training.progress import ProgressBar
from pinn.training.run import Execution, StepFunctionsCache, plan_run, prepare_run

__all__ = ["Trainer", "TrainingDiverged"]

log = logging.getLogger("pinn")


class _ModelClass(type):
    """The class of pinn's models: its text says what to call instead of TensorFlow's estimator API
    (``tf.estimator.train_and_evaluate`` names the type it refuses)."""

    def __repr__(cls):
        return (f"<class '{cls.__module__}.{cls.__qualname__}'> (a pinn model, not an estimator: call "
                "pinn.train_and_evaluate(model, train_spec, eval_spec) with the same specs)")


class Trainer(metaclass=_ModelClass):
    """A model with ``train(input_fn, max_steps)``, ``evaluate(input_fn)`` and ``predict(input_fn)``.

    Args:
        parts: the :class:`~pinn.training.parts.TrainerParts`, built where the program starts
            (:func:`pinn.training.parts.assemble`: the claim on the model directory, the network and the model,
            the gradient backend, the schedule, the restored training state, the evaluation).  The Trainer
            builds nothing; it holds the model directory as long as it lives (until :meth:`close`).

    ``pinn.models.potential_model(params)``, ``get_model(params)`` and ``pinn train`` build the parts and the
    Trainer.  ``input_fn`` is a function with no arguments returning a
    ``tf.data.Dataset`` of sparse batches (see :func:`pinn.io.sparse_batch`);
    neighbor lists are added when the batches have none.  In a parallel run
    each rank's ``input_fn`` should give that rank's share of the data
    (:func:`pinn.io.distribute_data`, or ``dataset.shard(size, rank)``).
    """

    def __init__(self, parts):
        if not isinstance(parts, TrainerParts):
            raise TypeError("Trainer: takes its parts (pinn.training.parts.assemble(params, model_cls, world)); "
                            "build models with pinn.models.potential_model(params) or get_model(params)")
        self._given = parts
        parts.claim.follow(self)
        #: the schedule of the latest run (a cosine of unknown length spans the run that gave it)
        self.learning_rate = parts.learning_rate
        self._steps = StepFunctionsCache(parts.state, parts.world, parts.backend, self.mp["max_grad_norm"])
        self._frozen = False
        self.bar = ProgressBar(enabled=False)
        self._execution = None  # the Execution of the latest train()

    @classmethod
    def from_model_dir(cls, model_dir, checkpoint=None):
        """The model of ``model_dir`` (its ``params.yml``) in this one process, whatever its stored
        ``parallel`` says, restored from ``checkpoint`` (see :func:`~pinn.training.parts.assemble`)."""
        from pinn.physics.registry import model_class
        params = read_params(model_dir)
        return cls(assemble(params, model_class(params), None, checkpoint))

    # the parts, as given (read through, never copied)
    @property
    def params(self):
        """The resolved params."""
        return self._given.params

    @property
    def world(self):
        """The run's world."""
        return self._given.world

    @property
    def claim(self):
        """The :class:`~pinn.training.claim.Claim` on the model directory."""
        return self._given.claim

    @property
    def network(self):
        """The network."""
        return self._given.network

    @property
    def model(self):
        """The model (:class:`~pinn.physics.potential.PotentialModel`, …)."""
        return self._given.model

    @property
    def backend(self):
        """The gradient backend (:mod:`pinn.training.backends`)."""
        return self._given.backend

    @property
    def state(self):
        """The :class:`~pinn.training.state.TrainingState`."""
        return self._given.state

    @property
    def restored(self):
        """The path of the checkpoint the model was restored from, or ``None``."""
        return self._given.restored

    @property
    def evaluation(self):
        """The :class:`~pinn.training.evaluation.Evaluation`: errors and predictions on inputs."""
        return self._given.evaluation

    @property
    def evaluator(self):
        """The :class:`~pinn.inference.evaluator.Evaluator` of the evaluation."""
        return self.evaluation.evaluator

    @property
    def model_dir(self):
        """The model directory."""
        return self.params["model_dir"]

    @property
    def mp(self):
        """The resolved ``model.params``."""
        return self.params["model"]["params"]

    @property
    def is_chief(self):
        """Whether this process is rank 0."""
        return self.world.is_chief

    @property
    def dtype(self):
        """The model's ``tf.DType``."""
        return precision_dtypes(self.params["precision"])[0]

    @property
    def rc(self):
        """The network's cutoff, Å."""
        return self.params["network"]["params"]["rc"]

    @property
    def step_functions(self):
        """The :class:`~pinn.training.steps.StepFunctions` of the latest run, or ``None`` before one."""
        return self._steps.current

    @property
    def best_dir(self):
        """The folder of the best checkpoint (the checkpoint store's: ``best`` in the model directory)."""
        return self.store.best_dir

    @property
    def holds_average(self):
        """Whether the model's variables hold the weight average now (inside :meth:`averaged_weights`, or
        for good after :meth:`freeze_averaged_weights`): the average's own account."""
        return self.ema is not None and self.ema.swapped

    # the training state's parts, as the estimator-shaped API shows them (the state owns them)
    @property
    def step(self):
        """The global step (int64 variable)."""
        return self.state.step

    @property
    def lr_factor(self):
        """The factor on the learning rate (float32 variable; a validation may lower it)."""
        return self.state.lr_factor

    @property
    def early_stopping(self):
        """The :class:`~pinn.training.early_stopping.EarlyStopping` of the run."""
        return self.state.early_stopping

    @property
    def optimizer(self):
        """Adam, or the Kalman filter of ``optimizer: ekf | gekf``."""
        return self.state.optimizer

    @property
    def kalman(self):
        """The Kalman filter of ``optimizer: ekf | gekf`` (:mod:`pinn.training.kalman`), else None."""
        return self.state.kalman

    @property
    def ema(self):
        """The :class:`~pinn.training.ema.WeightAverage` of ``ema_decay``, else None."""
        return self.state.ema

    @property
    def store(self):
        """The :class:`~pinn.training.checkpoints.CheckpointStore` of the model directory."""
        return self.state.store

    def close(self):
        """Release the model directory (its lock, :mod:`pinn.training.claim`): another run may write there; this
        model still evaluates and predicts, but no longer trains or saves."""
        self.claim.release()

    @property
    def engine(self):
        """The numba :class:`~pinn.engines.gradients.TrainingEngine` of the run, or ``None`` (TensorFlow)."""
        return getattr(self.backend, "engine", None)

    @property
    def jit(self):
        """Whether the TensorFlow step is XLA-compiled."""
        return self.backend.jit

    @property
    def parts(self):
        """Parts per training batch whose gradients run concurrently (``batch_parts``)."""
        return self.backend.parts

    def current_learning_rate(self):
        """The learning rate of the next update (float32 tensor)."""
        return self.learning_rate(self.step) * self.lr_factor


    def averaged_weights(self):
        """A context in which the model holds the averaged weights (``ema_decay``; otherwise the raw ones)."""
        return self.state.averaged_weights()

    def freeze_averaged_weights(self):
        """Put the averaged weights in the model for good (inference only: :meth:`train` then refuses)."""
        if self.ema is not None:
            self.ema.swap_in_for_good(self.model.trainable_variables)
        self._frozen = True

    @property
    def frozen(self):
        """Whether the weights are fixed for good (:meth:`freeze_averaged_weights`)."""
        return self._frozen

    # --------------------------------------------------------------- training
    def save(self):
        """Write a checkpoint of the current step on rank 0 (unless one exists for it).

        Returns:
            Its path on rank 0, ``None`` elsewhere.
        """
        self.claim.require("save")
        return self.state.save()  # the store writes on rank 0 alone

    def train(self, input_fn, max_steps=None, max_epochs=None, eval_fn=None, max_time=None):
        """Train until the global step reaches ``max_steps`` or ``max_epochs``, or its time budget ``max_time`` is
        spent (or an input ends, or early stopping).

        Args:
            input_fn: function returning the training ``tf.data.Dataset`` of sparse batches.
            max_steps: last global step (counted over resumes).
            max_epochs: train this many passes over ``input_fn`` (which must then be finite; it is
                repeated here).  With both, the smaller limit wins.
            eval_fn: function returning the validation dataset, evaluated every
                ``eval_every_n_steps`` and at the end (best checkpoint, early stopping).
            max_time: a time budget: seconds, a text such as ``'15m'`` (``s``, ``m``, ``h``), or ``'slurm'``
                (the job's end): the run ends inside it, its cosine laid over it, the same step on every rank
                (:mod:`pinn.training.budget`); with ``max_steps`` or ``max_epochs``, whichever comes first.

        Returns:
            ``self`` (like the estimator API).

        Raises:
            TrainingPreempted: (a ``SystemExit`` with status 75) after SIGTERM or
                SIGUSR1 on any rank, once rank 0 has written a checkpoint.
            TrainingDiverged: the loss stayed non-finite, or jumped again, through ``max_rollbacks``
                rollbacks (after a jump the model holds the state from before it).
            RuntimeError: a collective operation failed (another rank died).
        """
        with held_by(self):  # TensorFlow's callbacks of its inputs and steps go with the model (runtime.py_funcs)
            return self._train(input_fn, max_steps, max_epochs, eval_fn, max_time)

    def _train(self, input_fn, max_steps, max_epochs, eval_fn, max_time):
        """:meth:`train`: the plan of the run, made ready (:func:`~pinn.training.run.prepare_run`) and executed."""
        if self._frozen:
            raise RuntimeError("this model holds averaged weights for inference (freeze_averaged_weights); "
                               "build a new one from model_dir to train")
        self.claim.require("train")
        plan = plan_run(self.mp, self.world, int(self.step.numpy()), input_fn, max_steps, max_epochs, eval_fn,
                        self.learning_rate, max_time, self.state.clock)
        if plan is None:
            return self
        self.learning_rate = plan.learning_rate
        dataset, run_parts = prepare_run(plan, self._given, self._steps)
        self._execution = Execution(plan, run_parts)
        self.bar = self._execution.bar
        self._execution(dataset)
        return self

    @property
    def last_validation(self):
        """The metrics of the latest validation during :meth:`train` (``None`` before one)."""
        validation = self._execution.validation if self._execution is not None else None
        return validation.last if validation is not None else None

    # ------------------------------------------------------------- evaluation
    def evaluate(self, input_fn, steps=None):
        """Errors on an input, summed over all ranks' inputs (averaged weights when ``ema_decay`` is set).

        Args:
            input_fn: function returning a ``tf.data.Dataset`` of sparse batches.
            steps: evaluate at most this many batches of this rank's input (upstream PiNN's
                ``steps``); ``None``: until the input ends, which it must (an input that is
                ``repeat()``-ed without ``steps`` is refused rather than evaluated forever).

        Returns:
            dict with ``loss``, ``global_step`` and, for each quantity with
            labels, ``<Q>_MAE`` and ``<Q>_RMSE``: ``E`` (eV), ``F`` (eV/Å),
            ``S`` (eV/Å³) for the potential model, ``D`` (e·Å), ``Q`` (e) for
            the dipole model; the same errors also under upstream PiNN's names
            ``METRICS/<Q>_MAE`` and ``METRICS/<Q>_RMSE`` in upstream's training units (E, F, S
            × ``e_scale``, D × ``d_scale``, as upstream reports them).  In a parallel run every
            rank gets the same numbers: sums and counts are added over ranks (each
            rank's input should be its own share of the data).

        Raises:
            ValueError: ``steps`` is not a positive integer, or the input is infinite and ``steps`` is None.
        """
        return with_upstream_names(self.evaluate_with_parity(input_fn, parity=False, steps=steps)[0],
                                   self.model.upstream_metric_scales())

    def evaluate_with_parity(self, input_fn, parity=True, steps=None):
        """(metrics of :meth:`evaluate` without the upstream names, parity arrays or ``None``); see
        :mod:`pinn.training.metrics`."""
        return self.evaluation.with_parity(input_fn, parity=parity, steps=steps)

    def predict(self, input_fn):
        """Yield one dict per structure of this rank's input (averaged weights when ``ema_decay`` is set).

        The potential model gives ``energy`` (eV), ``forces`` [n_atoms, 3]
        (eV/Å), ``energies`` [n_atoms] (eV per atom; not with an embedding), ``stress`` [3, 3] (eV/Å³,
        periodic structures) and the structure (``elems``, ``coord``, ``cell``, ``pbc``);
        the dipole model ``dipole`` [3] (e·Å), ``charges`` [n_atoms] (e) and ``elems``.
        """
        return self.evaluation.predict(input_fn)
