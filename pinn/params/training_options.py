"""The training loop's options (``model.params``, beside each model's own): learning rate
and its schedule, weight average, engine, checkpoints, validation and early stopping,
progress.  :func:`pinn.params.model_schema` joins them with the model's options, and
:func:`check` refuses what contradicts itself across keys and sections, once, when the params
are resolved (:func:`pinn.params.resolve`)."""
import logging
import re

from pinn.schema import Option, ParamsError, non_negative, positive

#: shapes of the learning rate over the steps (:class:`pinn.training.schedule.LearningRate`)
LR_SCHEDULES = ("exponential", "step", "cosine", "constant")


def _fraction(value):
    return None if 0 < value < 1 else "must be in (0, 1)"


def _metric_name(value):
    if value == "loss" or re.fullmatch(r"[EFSDQ]_(MAE|RMSE)", value):
        return None
    return "must be 'loss' or <quantity>_MAE / <quantity>_RMSE with quantity E, F, S, D or Q (e.g. 'F_RMSE')"


def _step_list(value):
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value) or value != sorted(value):
        return "must be a list of increasing positive step numbers"
    return None


TRAINING_PARAMS = {
    "optimizer": Option(str, "adam", "what fits the weights: 'adam' (gradients of the loss), 'ekf' (upstream PiNN's "
                        "extended Kalman filter: the errors and their Jacobian, a covariance P of n × n for n "
                        "weights) or 'gekf' (its rank-1 form from two gradients); see the training page",
                        choices=("adam", "ekf", "gekf")),
    "learning_rate": Option(float, 5e-3, "Adam's learning rate (of one rank; see parallel_params.lr_scaling); with "
                            "ekf / gekf the Kalman filter's λ (A = I/λ + H P Hᵀ), not scaled with the ranks",
                            check=positive),
    "lr_schedule": Option(str, "cosine", "shape of the learning rate over the steps (see the training page)",
                          choices=LR_SCHEDULES),
    "decay_step": Option(int, 10000, "steps per decay of the 'exponential' and 'step' schedules", check=positive),
    "decay_rate": Option(float, 0.96, "factor of the decay per decay_step (or per boundary)", check=positive),
    "lr_boundaries": Option(list, [], "steps at which the 'step' schedule multiplies the rate by decay_rate "
                            "([]: every decay_step)", check=_step_list),
    "lr_cosine_steps": Option((int, None), None, "length of the 'cosine' schedule in steps (None: the max_steps of "
                              "the train() call)", check=positive),
    "lr_min_factor": Option(float, 0.01, "final rate of the 'cosine' schedule as a fraction of learning_rate",
                            check=lambda v: None if 0 <= v <= 1 else "must be in [0, 1]"),
    "lr_warmup_steps": Option(int, 200, "linear warmup of the rate over this many steps (0: none)", check=non_negative),
    "ema_decay": Option((float, None), 0.99, "exponential moving average of the weights with this decay (e.g. "
                        "0.999): evaluation and inference use the average, training goes on from the raw weights "
                        "(None: off)", check=_fraction),
    "engine": Option(str, "auto", "what computes the training gradients: 'tensorflow' (gradient tapes, XLA with "
                     "jit), 'numba' (pinn.engines.gradients: hand-written derivatives in compiled CPU kernels; "
                     "PiNet or PiNet2 with tanh, energy and force losses) or 'auto' (numba where it applies, no GPU "
                     "is visible and neither jit nor batch_parts asks for the TensorFlow step)",
                     choices=("auto", "tensorflow", "numba")),
    "jit": Option((bool, None), None, "the tensorflow engine: compile the training step with XLA, on batches padded "
                  "to a few bucket sizes (pinn.padding; one compile of ~10 s per bucket, then 1.1-1.4x faster training "
                  "on 2 CPU cores); None: for the networks that support it (PiNet, LJ)"),
    "batch_parts": Option((int, None), None, "the tensorflow engine: split each training batch into this many parts "
                          "of consecutive structures whose gradients are computed concurrently and summed (the same "
                          "update: an "
                          "XLA-compiled computation runs on about one CPU core, so one part per core keeps the "
                          "cores busy); None: one part per CPU core, at most 4, for an XLA-compiled step of one "
                          "process without a GPU, else 1", check=positive),
    "weight_decay": Option(float, 0.0, "decoupled weight decay (AdamW): before each Adam step w ← w − lr · "
                           "weight_decay · w for the variables weight_decay_on names (Keras' Adam(weight_decay) and "
                           "AdamW; upstream's optimizer.config.weight_decay sets it); 0: none", check=non_negative),
    "weight_decay_on": Option(str, "kernels", "which variables weight_decay shrinks: 'kernels' (the layers' weight "
                              "matrices; not their biases, nor a network's physical constants such as LJ's epsilon "
                              "and sigma) or 'all' trainable variables (Keras', what upstream's optimizer section "
                              "means)", choices=("kernels", "all")),
    "max_grad_norm": Option((float, None), 10.0, "clip gradients to this global norm (None: no clipping); with "
                            "ekf / gekf the update of the weights"),
    "ekf_max_learning_rate": Option((float, None), 1.0, "ekf / gekf: λ is the learning rate of the step, at most "
                                    "this (upstream's max_learning_rate; None: no cap)", check=positive),
    "ekf_epsilon": Option(float, 1.0, "ekf / gekf: P starts as ekf_epsilon × I (upstream's epsilon)", check=positive),
    "ekf_q_0": Option(float, 0.0, "ekf / gekf: process noise Q = q·I with q = max(ekf_q_0 · exp(−step / "
                      "ekf_q_tau), ekf_q_min) added to P at each update (upstream's q_0)", check=non_negative),
    "ekf_q_min": Option(float, 0.0, "ekf / gekf: the least process noise q (upstream's q_min)", check=non_negative),
    "ekf_q_tau": Option(float, 3000.0, "ekf / gekf: steps over which the process noise falls by e (upstream's "
                        "q_tau)", check=positive),
    "ekf_solve_dtype": Option(str, "float64", "ekf / gekf: dtype of the linear solve (ekf) or the division (gekf); "
                              "P and the rest are float64 (upstream's inv_dtype / div_dtype)",
                              choices=("float64", "float32")),
    "ekf_jacobian_rows": Option((int, None), 64, "ekf: rows of the Jacobian H = ∂e/∂w computed at once, one "
                                "backward pass each, in a loop (memory of that many passes); None: all the batch's "
                                "errors in one vectorized pass (memory grows with the errors; measured on the "
                                "training page)", check=positive),
    "ekf_max_memory_gb": Option(float, 4.0, "ekf / gekf: refuse a network whose P (n × n float64) takes more than "
                                "this many GB (an update needs about 3 times P at its peak)", check=positive),
    "accumulate_batches": Option(int, 1, "batches per step: their gradients are summed (one allreduce in a "
                                 "parallel run) and the loss is normalised over all of them", check=positive),
    "loss_scale_initial": Option(float, 2.0 ** 15, "precision mixed_float16: the first loss scale (a power of two); "
                                 "see pinn.training.loss_scale", check=positive),
    "loss_scale_growth_interval": Option(int, 2000, "precision mixed_float16: the loss scale grows after this many "
                                         "applied steps in a row", check=positive),
    "loss_scale_factor": Option(float, 2.0, "precision mixed_float16: what the loss scale grows by, and shrinks by "
                                "after an overflow", check=lambda v: None if v > 1 else "must be > 1"),
    "max_oom_skips": Option(int, 10, "after this many consecutive steps skipped because a rank ran out of memory "
                            "in its batch's gradients (each logged with the batch's structures, atoms and pairs), "
                            "write the checkpoint and stop (pinn.training.memory)", check=positive),
    "max_nonfinite_steps": Option(int, 5, "after this many consecutive steps with a non-finite loss or "
                                  "gradient (each skipped), roll back to the last checkpoint", check=positive),
    "rollback_lr_factor": Option(float, 0.5, "multiply the learning rate by this at each rollback",
                                 check=lambda v: None if 0 < v <= 1 else "must be in (0, 1]"),
    "max_rollbacks": Option(int, 3, "stop with an error after this many rollbacks for non-finite losses, or "
                            "this many for loss jumps, in one train() call", check=positive),
    "loss_jump_factor": Option((float, None), 10.0, "when the median loss of the last loss_jump_window steps exceeds "
                               "this many times its running level, go back to an in-memory copy of the training "
                               "state from before the jump (taken every 2 × loss_jump_window steps) and multiply "
                               "the learning rate by rollback_lr_factor; None: off (also off with a "
                               "loss_weight_schedule, whose loss changes with the weights: logged)",
                               check=lambda v: None if v > 1 else "must be greater than 1"),
    "loss_jump_window": Option(int, 50, "steps whose median loss loss_jump_factor watches", check=positive),
    "save_checkpoint_steps": Option(int, 1000, "write a checkpoint every that many steps", check=positive),
    "keep_checkpoint_max": Option(int, 5, "number of checkpoints kept", check=positive),
    "init_model": Option((str, None), None, "warm start: a fresh run (no checkpoint of its own yet) begins from this "
                         "model directory's weights, weight average and e_dress, with a fresh optimizer and schedule "
                         "(pinn train --init-model); its model and network must be this run's (a resumed run goes on "
                         "from its own checkpoint)"),
    "init_checkpoint": Option(str, "last", "which checkpoint of init_model: 'last', 'best' or a checkpoint path"),
    "freeze": Option(list, [], "parts of the network that training leaves as they are: shell-style patterns over "
                     "its module names, e.g. ['gc_*'] (PiNet's interaction blocks) to fine-tune the output nets "
                     "after a warm start (pinn.training.freeze)",
                     check=lambda v: None if all(isinstance(p, str) and p for p in v) else "must be a list of "
                     "non-empty strings"),
    "eval_every_n_steps": Option((int, None), None, "evaluate the eval_fn input every that many steps (None: at "
                                 "every checkpoint)", check=positive),
    "early_stopping_metric": Option(str, "loss", "validation figure that picks the best checkpoint and drives early "
                                    "stopping: 'loss' or an error such as 'F_RMSE', 'E_MAE', 'D_RMSE' (with a "
                                    "loss_weight_schedule, pick an error: the loss changes with the weights)",
                                    check=_metric_name),
    "early_stopping_patience": Option((int, None), None, "stop after this many evaluations without improvement "
                                      "(None: never stop early)", check=positive),
    "early_stopping_min_delta": Option(float, 0.0, "an improvement must lower the metric by more than this "
                                       "(units of the metric)", check=non_negative),
    "log_every_n_steps": Option(int, 100, "progress line every that many steps", check=positive),
    "progress_bar": Option(str, "auto", "progress bar on stderr: 'auto' (when stderr is a terminal), 'on', 'off'",
                           choices=("auto", "on", "off")),
    "tensorboard": Option(bool, True, "write TensorBoard summaries to model_dir/tensorboard (rank 0)"),
    "data_resume": Option(str, "skip", "on resume, 'skip' the batches already trained on (exact for a "
                          "seeded pipeline) or start the input again ('none')", choices=("skip", "none")),
}


#: model.params keys of the Kalman filters (refused with Adam unless at their defaults)
KALMAN_KEYS = ("ekf_max_learning_rate", "ekf_epsilon", "ekf_q_0", "ekf_q_min", "ekf_q_tau", "ekf_solve_dtype",
               "ekf_max_memory_gb", "ekf_jacobian_rows")
KALMAN_NAMES = {"ekf": "EKF", "gekf": "gEKF"}


def check(params):
    """Refuse training settings that contradict each other or the network and model (cross-field checks
    of resolved ``params``; :func:`pinn.params.resolve` calls it once).

    Raises:
        ParamsError: naming the key: ``separate_errors`` or an ``ekf_*`` key with Adam, ``ekf_jacobian_rows``
            with gEKF; ``use_l2``,
            ``loss_type`` other than mse, ``engine: numba``, ``jit: true`` or, in a parallel run,
            ``parallel_params.compression`` with EKF / gEKF; ``jit: true`` for a model or network
            that XLA cannot compile; with ``parallel_params.backend: mirrored``, what one process on
            several devices cannot follow (:func:`pinn.parallel.mirrored.check`).
    """
    from pinn.parallel.mirrored import check as check_mirrored
    _check_optimizer(params)
    _check_jit(params)
    _check_engine(params["model"]["params"])
    check_mirrored(params)


def _check_optimizer(params):
    mp = params["model"]["params"]
    kind = mp["optimizer"]
    if kind == "adam":
        if mp.get("separate_errors"):
            raise ParamsError("model.params.separate_errors: one Kalman update per loss term, for optimizer ekf or "
                              "gekf; Adam minimises one loss of all terms (set optimizer: ekf, or leave "
                              "separate_errors false)")
        for key in KALMAN_KEYS:
            if mp[key] != TRAINING_PARAMS[key].default:
                raise ParamsError(f"model.params.{key}: a setting of the Kalman filters (optimizer ekf or gekf); "
                                  "optimizer is adam")
        return
    name = KALMAN_NAMES[kind]
    if kind == "gekf" and mp["ekf_jacobian_rows"] != TRAINING_PARAMS["ekf_jacobian_rows"].default:
        raise ParamsError("model.params.ekf_jacobian_rows: how the EKF computes its Jacobian; the gEKF takes two "
                          "gradients, no Jacobian (leave it out, or use optimizer: ekf)")
    if params["precision"].startswith("mixed"):
        raise ParamsError(f"precision: {params['precision']!r}; the {name} solves with the Jacobian of every error, "
                          "which low precision does not carry: train it in float32 or float64")
    if mp["weight_decay"]:
        raise ParamsError(f"model.params.weight_decay: decoupled weight decay is a step of Adam (AdamW); the {name} "
                          "has no learning-rate step to shrink the weights by (leave weight_decay 0, or use "
                          "optimizer: adam)")
    if mp.get("use_l2"):
        raise ParamsError(f"model.params.use_l2: the {name} fits the errors of the data, not a loss; L2 "
                          "regularisation has no error vector (leave use_l2 false, or use optimizer: adam)")
    if mp["loss_type"] != "mse":
        raise ParamsError(f"model.params.loss_type: {mp['loss_type']!r}; the {name} fits the errors themselves "
                          "(a squared penalty): use loss_type mse, or optimizer: adam")
    if mp["engine"] == "numba":
        raise ParamsError(f"model.params.engine: 'numba' computes Adam's gradients; the {name} "
                          f"(model.params.optimizer {kind!r}) needs TensorFlow's Jacobians: "
                          "set engine to tensorflow or auto")
    if mp["jit"]:
        raise ParamsError(f"model.params.jit: the {name}'s step is not XLA-compiled (its Jacobian has as many "
                          "rows as the batch has errors); leave jit unset or false")
    compression = params["parallel_params"]["compression"]
    if params["parallel"] and compression != "none":
        raise ParamsError(f"parallel_params.compression: {compression!r} compresses Adam's "
                          f"gradients; the {name} exchanges its errors and Jacobian in float64 (set it to none)")


def _check_jit(params):
    from pinn.networks import NETWORKS
    from pinn.physics.registry import MODELS
    if not params["model"]["params"]["jit"]:
        return
    model = params["model"]["name"]
    network = params["network"]["name"]
    if not getattr(MODELS[model], "JIT_COMPATIBLE", True):
        raise ParamsError(f"model.params.jit: the {model} cannot be compiled with XLA (its per-structure "
                          "matrices have sizes that depend on the data); set jit to false or leave it unset")
    if not getattr(NETWORKS[network], "JIT_COMPATIBLE", False):
        raise ParamsError(f"model.params.jit: the {network} network cannot be compiled "
                          f"with XLA (its shapes depend on the data); set jit to false or leave it unset")


def _check_engine(mp):
    if mp["engine"] != "numba":
        return
    if mp["jit"]:
        raise ParamsError("model.params.jit: XLA compiles TensorFlow's training step; the numba engine "
                          "(model.params.engine) has its own compiled kernels: leave jit unset")
    if mp["batch_parts"] not in (None, 1):
        raise ParamsError("model.params.batch_parts: the numba engine (model.params.engine) spreads a "
                          "batch over the cores itself: leave batch_parts unset")


def notes(params):
    """What resolved ``params`` set that has no effect, or less than it may seem: ``[(logging level,
    message)]``, logged by rank 0 when a Trainer is built (the params stay valid)."""
    mp = params["model"]["params"]
    out = []
    if mp["lr_schedule"] not in ("exponential", "step"):
        unused = [key for key in ("decay_step", "decay_rate") if mp[key] != TRAINING_PARAMS[key].default]
        if unused:
            verb = "has" if len(unused) == 1 else "have"
            out.append((logging.WARNING, f"model.params: {' and '.join(unused)} {verb} no effect with lr_schedule "
                        f"'{mp['lr_schedule']}' (the default since pinn 0.2); set lr_schedule: exponential to decay "
                        "by them"))
    if not mp["weight_decay"] and mp["weight_decay_on"] != TRAINING_PARAMS["weight_decay_on"].default:
        out.append((logging.WARNING, "model.params.weight_decay_on: no effect with weight_decay 0"))
    if mp["loss_jump_factor"] is not None and mp["loss_weight_schedule"]:
        out.append((logging.INFO, "loss_jump_factor: not watched with a loss_weight_schedule (the loss changes with "
                    "the weights)"))
    return out
