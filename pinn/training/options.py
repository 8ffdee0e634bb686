"""The training loop's options (``model.params``, beside each model's own): learning rate
and its schedule, weight average, engine, checkpoints, validation and early stopping,
progress.  :func:`pinn.params.model_schema` joins them with the model's options."""
import re

from pinn.schema import Option, non_negative, positive

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
                     "jit), 'numba' (pinn.engines.training: hand-written derivatives in compiled CPU kernels; PiNet with "
                     "tanh, energy and force losses) or 'auto' (numba where it applies, no GPU is visible and "
                     "neither jit nor batch_parts asks for the TensorFlow step)",
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
    "ekf_max_memory_gb": Option(float, 4.0, "ekf / gekf: refuse a network whose P (n × n float64) takes more than "
                                "this many GB (an update needs about 3 times P at its peak)", check=positive),
    "accumulate_batches": Option(int, 1, "batches per step: their gradients are summed (one allreduce in a "
                                 "parallel run) and the loss is normalised over all of them", check=positive),
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
