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

The Trainer is a facade over parts with one job each: a run's plan and its execution
(:mod:`pinn.training.run`), the gradient backend
(:mod:`pinn.training.backends`), the step functions (:mod:`pinn.training.steps`), the
loop (:mod:`pinn.training.loop`), the checkpoints (:mod:`pinn.training.checkpoints`),
early stopping (:mod:`pinn.training.early_stopping`), evaluation
(:mod:`pinn.training.evaluation`), the learning rate (:mod:`pinn.training.schedule`)
and the weight average (:mod:`pinn.training.ema`).
"""
import contextlib
import logging
import os


from pinn.networks import get_network
from pinn.networks.layers import precision_dtypes
from pinn.parallel.worlds import SerialWorld
from pinn.params import ResolvedParams, read_params
from pinn.params.training_options import notes
from pinn.runtime.py_funcs import held_by
from pinn.training.backends import choose_backend
from pinn.training.claim import claim_model_dir
from pinn.training.evaluation import Evaluation, Evaluator
from pinn.training.guards import TrainingDiverged
from pinn.training.inputs import prepared_input
from pinn.training.metrics import with_upstream_names
from pinn.training.progress import ProgressBar
from pinn.training.run import Execution, RunParts, plan_run
from pinn.training.schedule import learning_rate_of
from pinn.training.state import TrainingState
from pinn.training.steps import StepFunctions

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
        params: resolved params (:func:`pinn.params.resolve`, which checks them once), or a model
            directory holding ``params.yml``.
        model_cls: the model class (e.g. :class:`pinn.physics.potential.PotentialModel`).
        world: :class:`pinn.parallel.serial.SerialWorld` (default) or the world that
            :func:`pinn.parallel.worlds.parallelize_model` (or :func:`pinn.parallel.init`) returns:
            :class:`~pinn.parallel.worlds.HorovodWorld`, :class:`~pinn.parallel.mpi_world.MpiWorld`
            or :class:`~pinn.parallel.mirrored.MirroredWorld`.
        checkpoint: which checkpoint to restore: ``None`` or ``'last'`` (the
            latest in ``model_dir``), ``'best'`` (the best by the validation
            metric, in ``model_dir/best``) or a checkpoint path.
        defer_params: write ``model_dir/params.yml`` when :meth:`train` has its input (read, planned,
            e_dress fitted) and starts its steps, or at the first :meth:`save`, instead of now: a run
            refused before then (by its data) leaves the stored params as they were (``pinn train``).

    ``input_fn`` is a function with no arguments returning a
    ``tf.data.Dataset`` of sparse batches (see :func:`pinn.io.sparse_batch`);
    neighbor lists are added when the batches have none.  In a parallel run
    each rank's ``input_fn`` should give that rank's share of the data
    (:func:`pinn.io.distribute_data`, or ``dataset.shard(size, rank)``).
    """

    def __init__(self, params, model_cls, world=None, checkpoint=None, defer_params=False):
        if isinstance(params, (str, os.PathLike)):
            params = read_params(params)
        if not isinstance(params, ResolvedParams):
            raise TypeError("Trainer: takes resolved params (pinn.params.resolve) or a model directory; build "
                            "models with pinn.models.potential_model(params) or get_model(params)")
        self.params = params
        self.world = world or SerialWorld()
        self.model_dir = self.params["model_dir"]
        self.mp = mp = self.params["model"]["params"]
        self.is_chief = self.world.is_chief
        self.dtype = precision_dtypes(self.params["precision"])[0]
        self.claim = claim_model_dir(self.params, self.world, self)  # lock, params check: before any write there
        self.world.log_summary()
        with self.world.variable_scope():  # a mirrored world's: each variable copied onto every device
            self.network = get_network(self.params)
            self.rc = self.params["network"]["params"]["rc"]
            self.model = model_cls(self.network, mp, self.network.atom_types, self.dtype)
            self.backend = choose_backend(self.params, self.model, self.world)
            self.learning_rate = learning_rate_of(mp, self.world, mp["lr_cosine_steps"])
            if self.is_chief:
                for level, message in notes(self.params):
                    log.log(level, message)
            self.state = state = TrainingState(self.model, mp, self.world, self.backend, self.model_dir,
                                               self.learning_rate)
        with self.claim.released_on_error():
            self.restored = state.restore_on_chief(checkpoint, self.params, defer_params=defer_params)
        self.step_functions = None  # StepFunctions of the training input's spec (_steps_spec)
        self._steps_spec = None
        self.evaluator = Evaluator(self.model, self.world, self.averaged_weights)
        #: errors and predictions on inputs (evaluate, predict, a run's validation)
        self.evaluation = Evaluation(self.evaluator, self.network, self.backend, self.step,
                                     self.learning_rate.single_rank_steps)
        self._frozen = False
        self.bar = ProgressBar(enabled=False)
        self._execution = None  # the Execution of the latest train()

    @classmethod
    def from_model_dir(cls, model_dir, checkpoint=None):
        """The model of ``model_dir`` (its ``params.yml``) in this one process, whatever its stored
        ``parallel`` says, restored from ``checkpoint`` (see the class)."""
        from pinn.physics.registry import model_class
        params = read_params(model_dir)
        return cls(params, model_class(params), None, checkpoint)

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


    @contextlib.contextmanager
    def averaged_weights(self):
        """Within this block the model holds the averaged weights (``ema_decay``; otherwise the raw ones)."""
        if self.ema is None:
            yield
            return
        with self.ema.swapped_in(self.model.trainable_variables):
            yield

    def freeze_averaged_weights(self):
        """Put the averaged weights in the model for good (inference only: :meth:`train` then refuses)."""
        if self.ema is not None:
            self.ema.swap_in_for_good(self.model.trainable_variables)
        self._frozen = True

    @property
    def frozen(self):
        """Whether the weights are fixed for good (:meth:`freeze_averaged_weights`)."""
        return self._frozen

    def _input(self, input_fn, skip=0, pad=False, parts=1):
        """The dataset of ``input_fn`` ready for this model (:func:`pinn.training.inputs.prepared_input`)."""
        return prepared_input(input_fn, self.network, skip=skip, pad=pad, parts=parts)

    # --------------------------------------------------------------- training
    def save(self):
        """Write a checkpoint of the current step on rank 0 (unless one exists for it).

        Returns:
            Its path on rank 0, ``None`` elsewhere.
        """
        self.claim.require("save")
        return self.state.save()  # the store writes on rank 0 alone

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
            TrainingDiverged: the loss stayed non-finite, or jumped again, through ``max_rollbacks``
                rollbacks (after a jump the model holds the state from before it).
            RuntimeError: a collective operation failed (another rank died).
        """
        with held_by(self):  # TensorFlow's callbacks of its inputs and steps go with the model (runtime.py_funcs)
            return self._train(input_fn, max_steps, max_epochs, eval_fn)

    def _train(self, input_fn, max_steps, max_epochs, eval_fn):
        """:meth:`train`: the plan of the run, the model and the input prepared, then its execution."""
        if self._frozen:
            raise RuntimeError("this model holds averaged weights for inference (freeze_averaged_weights); "
                               "build a new one from model_dir to train")
        self.claim.require("train")
        plan = plan_run(self.mp, self.world, int(self.step.numpy()), input_fn, max_steps, max_epochs, eval_fn,
                        self.learning_rate)
        if plan is None:
            return self
        if plan.learning_rate is not self.learning_rate:  # a cosine of unknown length spans this run
            self.learning_rate = plan.learning_rate
            self.step_functions = None
        if self.model.prepare_training(plan.input_fn, self.world.allreduce_sum_numpy, self.world.local_replicas):
            self.state.broadcast()
        self.backend.reload()
        skip = plan.start * plan.batches_per_step if self.mp["data_resume"] == "skip" else 0
        dataset = self._input(plan.input_fn, skip=skip, pad=self.backend.jit, parts=self.backend.parts)
        if self.step_functions is None or self._steps_spec != dataset.element_spec:
            self.step_functions = StepFunctions(dataset.element_spec, self.state, self.learning_rate, self.world,
                                                self.backend, self.mp["max_grad_norm"])
            self._steps_spec = dataset.element_spec
        self.state.write_params()  # the input is accepted: params.yml, if pending (every rank in step)
        if self.is_chief and not self.store.latest:
            self.save()  # something to roll back to
        self._log_start(plan)
        self._execution = Execution(plan, RunParts(self.state, self.step_functions, self.evaluation, self.world,
                                                   self.mp, self.model_dir))
        self.bar = self._execution.bar
        self._execution(dataset)
        return self

    def _log_start(self, plan):
        mp = self.mp
        if self.world.local_replicas > 1:
            where = f"{self.world.local_replicas} devices of one process"
        else:
            where = f"{self.world.size} rank(s)"
        average = f"; weight average with decay {mp['ema_decay']:g}" if self.ema is not None else ""
        kalman = f"{self.kalman.describe()}; " if self.kalman is not None else ""
        log.info("training %s from step %d to %s on %s; %s%s; %sgradients by %s; model_dir %s",
                 self.params["network"]["name"], plan.start, plan.describe(), where, self.learning_rate.describe(),
                 average, kalman, self.backend.describe(), self.model_dir)

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
