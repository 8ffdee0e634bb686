"""``pinn train params.yml -d DIR -t train.yml -e eval.yml -b 30 --train-steps N``: upstream PiNN's form.

A params file without a ``data`` section (upstream PiNN's ``params.yml``: ``model_dir``,
``network``, ``model``, ``optimizer``) is trained on TFRecord datasets named by ``-t`` and ``-e``
(``pinn convert -o 'train:8,eval:2'`` writes ``train.yml``/``train.tfr`` and ``eval.yml``/
``eval.tfr``), with upstream's options and defaults:

=====================  ==========  ============================================================
option                 default     meaning
=====================  ==========  ============================================================
``-d, --model-dir``    params'     the model directory (overrides ``model_dir``; ``model`` if neither)
``-t, --train-ds``     train.yml   training data (a TFRecord spec or records, or ASE-readable files)
``-e, --eval-ds``      eval.yml    validation data, evaluated at each checkpoint
``-b, --batch``        none        structures per batch (none: the data are batches already)
``--(no-)cache``       cache       keep the prepared batches in memory (or in ``--scratch-dir``)
``--(no-)preprocess``  preprocess  neighbor lists in the input pipeline, before the cache
``--scratch-dir``      none        cache on disk in a temporary folder there, removed at the end
``--train-steps``      1000000     the last global step
``--eval-steps``       all         batches per evaluation
``--shuffle-buffer``   100         batches in the shuffle buffer of the training input
``--log-every``        1000        steps between progress records (``log_every_n_steps``)
``--ckpt-every``       10000       steps between checkpoints and evaluations (``save_checkpoint_steps``)
``--max-ckpts``        1           checkpoints kept (``keep_checkpoint_max``)
``--early-stop``       none        ``METRIC:STEPS``: stop when METRIC has not decreased for STEPS steps
``--(no-)init``        no-init     fit ``e_dress`` (and a BPNN's ``fp_range`` with ``fp_scale``) to the
                                   training data first, written into the params
=====================  ==========  ============================================================

As upstream, the training input is batched, prepared, cached, repeated and then shuffled (whole
batches), by the pipeline of a run file (:func:`pinn.training.run_file.input_pipeline`) in
upstream's order; the params file's own ``model.params`` keys win over the defaults of
``--log-every``, ``--ckpt-every`` and ``--max-ckpts`` (an option given on the command line wins
over both).
"""
import logging
import math
import os
import shutil
import tempfile

from pinn.cli.arguments import non_negative_int, positive_int
from pinn.schema import ParamsError

log = logging.getLogger("pinn")

#: upstream PiNN's defaults of the options that are model.params keys in pinn: option → (key, default)
RUN_CONFIG = {"log_every": ("log_every_n_steps", 1000), "ckpt_every": ("save_checkpoint_steps", 10000),
              "max_ckpts": ("keep_checkpoint_max", 1)}
#: upstream PiNN's defaults of the data options
DEFAULTS = {"train_ds": "train.yml", "eval_ds": "eval.yml", "cache": True, "preprocess": True,
            "train_steps": 1000000, "shuffle_buffer": 100, "init": False}
#: the options that say where the data come from and how they are prepared (not for a run file)
DATA_OPTIONS = ("train_ds", "eval_ds", "batch", "cache", "preprocess", "scratch_dir", "eval_steps",
                "shuffle_buffer", "init")


def add_options(parser):
    """Add upstream PiNN's ``pinn train`` options to ``parser`` (every default None: unset)."""
    group = parser.add_argument_group("upstream PiNN's options (for a params file without a data section)")
    group.add_argument("-t", "--train-ds", help="training data: a TFRecord spec (X.yml) or records (X.tfr), or "
                       "ASE-readable files (default train.yml)")
    group.add_argument("-e", "--eval-ds", help="validation data (default eval.yml)")
    group.add_argument("-b", "--batch", type=positive_int, help="structures per batch (default: the data are batches)")
    group.add_argument("--cache", dest="cache", action="store_true", default=None,
                       help="keep the prepared batches in memory (the default)")
    group.add_argument("--no-cache", dest="cache", action="store_false")
    group.add_argument("--preprocess", dest="preprocess", action="store_true", default=None,
                       help="neighbor lists in the input pipeline (the default)")
    group.add_argument("--no-preprocess", dest="preprocess", action="store_false")
    group.add_argument("--scratch-dir", help="cache on disk in a temporary folder there (removed at the end)")
    group.add_argument("--train-steps", type=positive_int, help="the last global step (default 1000000; "
                       "--max-steps is the same)")
    group.add_argument("--eval-steps", type=positive_int, help="batches per evaluation (default: all)")
    group.add_argument("--shuffle-buffer", type=non_negative_int, help="batches in the shuffle buffer (default 100)")
    group.add_argument("--log-every", type=positive_int, help="steps between progress records (default 1000)")
    group.add_argument("--ckpt-every", type=positive_int, help="steps between checkpoints and evaluations "
                       "(default 10000)")
    group.add_argument("--max-ckpts", type=positive_int, help="checkpoints kept (default 1)")
    group.add_argument("--early-stop", help="METRIC:STEPS, e.g. METRICS/F_RMSE:5000")
    group.add_argument("--init", dest="init", action="store_true", default=None,
                       help="fit e_dress (and a BPNN's fp_range) to the training data first")
    group.add_argument("--no-init", dest="init", action="store_false")


def given_data_options(args):
    """The data options given on the command line (``--train-ds``, ...), as they were spelled."""
    return ["--" + name.replace("_", "-") for name in DATA_OPTIONS if getattr(args, name, None) is not None]


def apply_run_config(params, args):
    """``params`` with ``--log-every``, ``--ckpt-every``, ``--max-ckpts`` and ``--early-stop`` as
    ``model.params`` keys: an option given wins, then the params' own key, then upstream's default.

    Returns:
        a new params dict (nested form).
    """
    from pinn.params import legacy
    params = legacy(params)
    model = dict(params.get("model") or {})
    options = dict(model.get("params") or {})
    for option, (key, default) in RUN_CONFIG.items():
        value = getattr(args, option, None)
        if value is not None:
            options[key] = value
        else:
            options.setdefault(key, default)
    if args.early_stop:
        metric, steps = _early_stop(args.early_stop)
        options["early_stopping_metric"] = metric
        options["early_stopping_patience"] = max(1, math.ceil(steps / options["save_checkpoint_steps"]))
    model["params"] = options
    return dict(params, model=model)


def _early_stop(text):
    """(metric, steps) of upstream's ``--early-stop METRIC:STEPS`` (one metric: pinn stops on one)."""
    parts = [p for p in text.split(",") if p.strip()]
    if len(parts) != 1 or ":" not in parts[0]:
        raise ParamsError(f"--early-stop {text!r}: expected one METRIC:STEPS, e.g. METRICS/F_RMSE:5000 (pinn "
                          "stops on one metric)")
    metric, steps = parts[0].rsplit(":", 1)
    try:
        steps = float(steps)
    except ValueError:
        steps = 0
    if steps <= 0:
        raise ParamsError(f"--early-stop {text!r}: STEPS must be a positive number")
    metric = metric.strip()
    return (metric[len("METRICS/"):] if metric.startswith("METRICS/") else metric), steps


def run(path, args):
    """Train the params file ``path`` on the data ``args`` name (upstream PiNN's ``pinn train``).

    Returns:
        (model, metrics): the trained model, closed (its model directory released: it evaluates and
        predicts), and its last validation metrics.
    """
    from pinn.models import get_model
    from pinn.parallel import init
    from pinn.params import read_params_file, resolve
    from pinn.training.run_file import input_pipeline
    opts = {k: (getattr(args, k, None) if getattr(args, k, None) is not None else v) for k, v in DEFAULTS.items()}
    params = apply_run_config(read_params_file(path), args)
    if args.model_dir is not None:
        params["model_dir"] = args.model_dir
    if getattr(args, "init_model", None) is not None:
        model_section = params.setdefault("model", {})
        model_section["params"] = {**(model_section.get("params") or {}), "init_model": args.init_model}
    params.setdefault("model_dir", "model")  # upstream's default when neither the file nor -d names one
    params = resolve(params)  # a bad or not-yet-supported params file is refused before any data are read
    max_steps = args.max_steps if args.max_steps is not None else opts["train_steps"]
    world = init(params)  # the world where the program starts, then the data, then the model
    train = _structures_or_batches(opts["train_ds"], args.batch, "-t")
    evaluation = _structures_or_batches(opts["eval_ds"], args.batch, "-e")
    if opts["init"]:
        params = initial_params(params, train)
    if world.is_parallel:  # each rank its share of the batches
        train = train.shard(world.size, world.rank)
        evaluation = evaluation.shard(world.size, world.rank)
    rc = params["network"]["params"]["rc"] if opts["preprocess"] else None
    model = get_model(params, world=world)
    scratch = tempfile.mkdtemp(prefix="pinn", dir=args.scratch_dir) if args.scratch_dir else None

    def cache(name):
        return (os.path.join(scratch, name) if scratch else "") if opts["cache"] else None

    try:
        # upstream's order (pinn.training.run_file.input_pipeline): batches, neighbor lists, cache, repeat, shuffle
        def train_fn():
            return input_pipeline(train, rc=rc, cache=cache("train"), repeat=True,
                                  shuffle_buffer=max(opts["shuffle_buffer"], 1))

        def eval_fn():
            return input_pipeline(evaluation, rc=rc, cache=cache("eval"), take=args.eval_steps)

        model.train(train_fn, max_steps=max_steps, eval_fn=eval_fn, max_time=args.max_time)
        last = model.last_validation
        metrics = last if last and last["global_step"] == int(model.step.numpy()) else model.evaluate(eval_fn)
    finally:
        model.close()  # the run is over, or failed: its model directory is free for the next
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    return model, metrics


def _structures_or_batches(source, batch, flag):
    """The dataset of ``source``, batched by ``batch`` when it holds single structures."""
    from pinn import keys as K
    from pinn.io import sparse_batch
    from pinn.training.run_file import load_structures
    files = [source] if isinstance(source, str) else list(source)
    for name in files:
        if not os.path.exists(name):
            raise FileNotFoundError(f"{name}: no such file ({flag}; `pinn convert data -o 'train:8,eval:2'` writes "
                                    "train.yml and eval.yml)")
    dataset = load_structures(source)
    batched = K.IND_1 in dataset.element_spec
    if batched and batch:
        raise ParamsError(f"{flag} {source}: the data are batches already; leave out -b")
    if not batched and not batch:
        raise ParamsError(f"{flag} {source}: the data are single structures; give the batch size with -b N")
    return dataset if batched else dataset.apply(sparse_batch(batch))


def initial_params(params, batches):
    """Upstream's ``--init``: params with ``e_dress`` fitted to the training energies (least squares on the
    element counts, :func:`pinn.physics.energy_offsets.fit_offsets`) and, for a BPNN with ``fp_scale``,
    ``fp_range`` from the training structures (:meth:`pinn.networks.BPNN.fingerprint_range`).

    Args:
        params: the resolved params.
        batches: the training dataset of sparse batches (every rank's: the fit is the same on every rank).

    Returns:
        resolved params with the fitted values.
    """
    import numpy as np

    from pinn import keys as K
    from pinn.networks import get_network
    from pinn.params import resolve
    from pinn.physics.energy_offsets import fit_offsets
    params = {**params, "model": dict(params["model"]), "network": dict(params["network"])}
    options = dict(params["model"]["params"])
    if params["model"]["name"] == "potential_model":
        present = set()
        for b in batches.as_numpy_iterator():
            present.update(np.unique(b[K.ELEMS]).tolist())
        given = options.get("e_dress") or {}
        elements = sorted(int(z) for z in given) if given else sorted(present)
        # every element of the data in the fit (those not asked for too: their energy is theirs, not the others')
        fitted = sorted(set(elements) | present)
        dress = fit_offsets(batches.as_numpy_iterator(), fitted)
        options["e_dress"] = {z: float(dress[fitted.index(z)]) for z in elements}
        log.info("--init: e_dress fitted to the training structures (%s)",
                 ", ".join(f"Z={z}: {v:.6f} eV" for z, v in options["e_dress"].items()))
    params["model"]["params"] = options
    network_options = dict(params["network"]["params"])
    if params["network"]["name"] == "BPNN" and network_options["fp_scale"]:
        raw = {**params, "network": {**params["network"], "params": dict(network_options, fp_scale=False)}}
        network_options["fp_range"] = get_network(raw).fingerprint_range(batches)
        log.info("--init: fp_range of the %d symmetry-function entries from the training structures",
                 len(network_options["fp_range"]))
    params["network"]["params"] = network_options
    return resolve({key: value for key, value in params.items()})
