"""A training run described by one YAML file: the model params plus ``data`` and ``train`` sections.

``pinn train params.yml`` reads such a file.  Every key an input script puts
in its ``params`` dict is allowed at the top level (``model_dir``,
``network``, ``model``, ``parallel``, ...); two more sections say what to
train on and for how long::

    data:
      train: water.xyz            # ASE-readable file(s), or TFRecord caches (.tfr) from `pinn convert`
      split: {train: 8, eval: 2}  # optional: cut `train` into the training and validation parts
      eval: vali.tfr              # optional, instead of split
      batch_size: 16
    train:
      max_steps: 5000             # or max_epochs, or max_time: 15m (a time budget; with either, the first ends)

MiMiC data go under ``data.mimic`` (``mpt``, ``trr``, ``energies`` and any
other :func:`pinn.io.load_mimic` option) instead of ``data.train``.  With
``parallel: true`` every rank takes its share: whole MiMiC runs through
:func:`pinn.io.distribute_data`, other data by ``Dataset.shard``.

The input pipeline of both forms of ``pinn train`` is one function, :func:`input_pipeline`: a run
file's (:func:`input_fns`) and upstream PiNN's params file trained on ``-t``/``-e`` data
(:mod:`pinn.cli.upstream_train`).  The ``pinn`` command parses its arguments and calls what is
here; a script calls :func:`run_training` as ``pinn train run.yml`` does.
"""
import logging
import os

import yaml

from pinn.params import TOP_LEVEL
from pinn.physics.embedding_kinds import MECHANICAL, embedding_of
from pinn.schema import Option, ParamsError, did_you_mean, non_negative, positive, validate_section

log = logging.getLogger("pinn")

DATA_PARAMS = {
    "train": Option((str, list, None), None, "training data: a file ASE reads, a TFRecord cache (.tfr) written by "
                    "pinn convert, or a list of them"),
    "eval": Option((str, list, None), None, "validation data (same forms as train)"),
    "mimic": Option((dict, None), None, "MiMiC QM/MM files instead of train: {mpt, trr, energies} (files or "
                    "parallel lists) and any other load_mimic option"),
    "split": Option((dict, None), None, "cut the data into parts by ratio, e.g. {train: 8, eval: 2}; the part "
                    "named train is trained on, the part named eval validates"),
    "batch_size": Option(int, 16, "structures per batch (per rank; per device with parallel_params.backend "
                         "mirrored)", check=positive),
    "shuffle_buffer": Option(int, 1000, "size of the shuffle buffer of the training data (0: no shuffle)",
                             check=non_negative),
    "seed": Option(int, 0, "seed of the split and of the shuffle"),
    "cache": Option(str, "auto", "where the training structures (with their neighbor lists) are kept after the "
                    "first epoch: memory, none (read again every epoch), a file path (TensorFlow's cache on "
                    "disk, relative to the run file; rebuilt when the data, rc, elements, split or seed differ "
                    "from what it was made from), or auto: memory, unless the training files hold more than "
                    "256 MiB (load_ase streams such files: data larger than memory, docs/data.md), then none",
                    check=lambda value: _cache_problem(value)),
}
TRAIN_PARAMS = {
    "max_steps": Option((int, None), None, "train until this global step", check=positive),
    "max_epochs": Option((float, None), None, "train this many passes over the training data", check=positive),
    "max_time": Option((str, int, float, None), None, "a time budget: seconds, or 90s, 15m, 1.5h, or slurm (the "
                       "job's end): the run ends inside it, its cosine laid over it (with max_steps or max_epochs, "
                       "whichever comes first; docs/training.md#a-time-budget)", check=lambda v: _time_problem(v)),
}
SECTIONS = {"data": DATA_PARAMS, "train": TRAIN_PARAMS}
#: the top-level keys of a run file: the params of an input script (upstream PiNN's flat form too) and SECTIONS
RUN_FILE_KEYS = [*TOP_LEVEL, "network_params", "model_params", *SECTIONS]


def _time_problem(value):
    from pinn.training.budget import parse_max_time
    try:
        parse_max_time(value, "max_time")
    except ParamsError as err:
        return str(err).split(": ", 1)[1]
    return None


def _cache_problem(value):
    return None if value.strip() else "an empty path; give memory, none, auto or a file path"


def read_config(path):
    """Read a run file.

    Args:
        path: YAML file.

    Returns:
        (params, data, train): the model params dict (validated when the model
        is built) and the resolved ``data`` and ``train`` sections.

    Raises:
        ParamsError: naming the file and the bad key.
    """
    if not os.path.exists(path):
        raise ParamsError(f"{path}: no such file")
    with open(path) as f:
        try:
            config = yaml.safe_load(f)
        except yaml.YAMLError as err:
            raise ParamsError(f"{path}: not valid YAML ({err})".replace("\n", " ")) from err
    if not isinstance(config, dict):
        raise ParamsError(f"{path}: expected a mapping of params at the top level")
    unknown = [key for key in config if key not in RUN_FILE_KEYS]
    if unknown:
        raise ParamsError(f"{path}: {unknown[0]}: unknown top-level key;{did_you_mean(unknown[0], RUN_FILE_KEYS)} "
                          f"allowed keys: {RUN_FILE_KEYS}")
    sections = {}
    for name, schema in SECTIONS.items():
        try:
            sections[name] = validate_section(config.pop(name, None), schema, name)
        except ParamsError as err:
            raise ParamsError(f"{path}: {err}") from None
    data = sections["data"]
    train = sections["train"]
    if (data["train"] is None) == (data["mimic"] is None):
        raise ParamsError(f"{path}: data: give either data.train (files) or data.mimic (MiMiC files)")
    split = data["split"]
    if split is not None and ("train" not in split or set(split) - {"train", "eval"}):
        odd = sorted(set(split) - {"train", "eval"}, key=str)
        hint = did_you_mean(odd[0], ["train", "eval"] if "train" not in split else ["eval"]) if odd else ""
        raise ParamsError(f"{path}: data.split: parts must be train and, optionally, eval (got {sorted(split)});"
                          f"{hint}".rstrip(";"))
    if data["mimic"] is not None:
        _check_mimic_keys(data["mimic"], path)
    if data["eval"] is not None and (split is not None or data["mimic"] is not None):
        raise ParamsError(f"{path}: data.eval: give validation data as data.eval (with data.train) or as the eval "
                          f"part of data.split, not both; MiMiC validation data come from data.split")
    if train["max_steps"] is None and train["max_epochs"] is None and train["max_time"] is None:
        raise ParamsError(f"{path}: train: give max_steps, max_epochs or max_time")
    base = os.path.dirname(os.path.abspath(path))
    return _relative_to(config, base), _data_relative_to(data, base), train


#: the file names of data.mimic (relative to the run file)
MIMIC_FILES = ("mpt", "trr", "energies", "ftrajectory", "cpmd_input", "mm_energies")
#: the data.mimic keys that may list one file per run, besides mpt, trr and energies
MIMIC_RUN_FILES = ("ftrajectory", "cpmd_input", "mm_energies")


def _check_mimic_keys(mimic, path):
    """data.mimic holds load_mimic's arguments, less split and seed (data.split, data.seed)."""
    import inspect

    from pinn.io import load_mimic
    allowed = [name for name in inspect.signature(load_mimic).parameters if name not in ("split", "seed")]
    for key in mimic:
        if key not in allowed:
            where = {"split": "data.split", "seed": "data.seed"}.get(key)
            hint = f" give it as {where};" if where else did_you_mean(key, allowed)
            raise ParamsError(f"{path}: data.mimic.{key}: unknown key;{hint} allowed keys: {allowed}")


def _relative_to(params, base):
    if isinstance(params.get("model_dir"), str) and not os.path.isabs(params["model_dir"]):
        params["model_dir"] = os.path.normpath(os.path.join(base, params["model_dir"]))
    return params


#: the values of data.cache that name no file
CACHE_CHOICES = ("memory", "none", "auto")


def _data_relative_to(data, base):
    """File names in the data section (data.cache's path too) are relative to the run file's directory."""
    def fix(value):
        if isinstance(value, str):
            return value if os.path.isabs(value) else os.path.normpath(os.path.join(base, value))
        if isinstance(value, list):
            return [fix(v) for v in value]
        return value
    data = dict(data)
    for key in ("train", "eval"):
        data[key] = fix(data[key])
    if data["mimic"]:
        data["mimic"] = {k: (fix(v) if k in MIMIC_FILES else v) for k, v in data["mimic"].items()}
    if data["cache"] not in CACHE_CHOICES:
        data["cache"] = fix(data["cache"])
    return data


def check_elements(dataset, atom_types, source):
    """Refuse a dataset of structures with elements the network does not know, naming them and ``source``
    (one pass over the structures, before training; in training the network's check would stop a step
    without saying which element or file).

    Args:
        dataset: ``tf.data.Dataset`` of structures (``elems``).
        atom_types: the network's atomic numbers.
        source: what to name in the message (a file, or the run file's key).

    Raises:
        DataError: naming ``source``, the unknown elements and ``network.params.atom_types``.
    """
    import numpy as np
    import tensorflow as tf

    from pinn import keys as K
    from pinn.io.errors import DataError
    seen = set()
    qm = K.QM in dataset.element_spec  # QM/MM frames: the network sees the QM atoms alone
    for elems in dataset.map(lambda s: tf.boolean_mask(s[K.ELEMS], s[K.QM]) if qm else s[K.ELEMS]).as_numpy_iterator():
        seen.update(np.unique(elems).tolist())
    unknown = sorted(seen - set(int(z) for z in atom_types))
    if unknown:
        raise DataError(f"{source}: {_not_known(unknown, atom_types)}")


def _not_known(unknown, atom_types):
    """The message's end for the atomic numbers ``unknown`` that ``atom_types`` lacks."""
    from ase.data import chemical_symbols
    names = ", ".join(f"{chemical_symbols[z] if 0 < z < len(chemical_symbols) else '?'} ({z})" for z in unknown)
    return f"element(s) {names} not in network.params.atom_types {list(atom_types)}"


def elements_checked_as_read(dataset, atom_types, source, numbered="frame {}"):
    """``dataset`` with each structure's elements checked when the structure is read, not in a pass before
    training (:func:`check_elements`): for files larger than :data:`pinn.io.ase_stream.STREAM_ABOVE_BYTES`,
    which are read from disk every epoch and whose pass would cost as much as an epoch.

    Args:
        dataset: ``tf.data.Dataset`` of structures (of one file, in the file's order, for ``numbered``'s
            default).
        atom_types: the network's atomic numbers.
        source: the file (or data key), named in the message.
        numbered: how the message names the structure from its place in ``dataset`` (from 0).

    Returns:
        the dataset (the same structures).  Iterating it raises DataError (inside TensorFlow's error)
        naming ``source``, the frame and the unknown elements.
    """
    import numpy as np
    import tensorflow as tf

    from pinn import keys as K
    from pinn.io.errors import DataError
    from pinn.runtime.py_funcs import dataset_holding_callbacks
    allowed = np.array(sorted(int(z) for z in atom_types))
    qm = K.QM in dataset.element_spec  # QM/MM frames: the network sees the QM atoms alone

    def check(k, elems, seen):
        unknown = np.setdiff1d(elems[seen], allowed)
        if unknown.size:
            raise DataError(f"{source}, {numbered.format(int(k))}: {_not_known(unknown.tolist(), atom_types)}")
        return elems

    known = tf.constant(allowed)

    @tf.autograph.experimental.do_not_convert
    def checked(k, structure):
        elems = structure[K.ELEMS]
        seen = structure[K.QM] if qm else tf.ones_like(elems, tf.bool)
        # compared in TensorFlow; Python (its lock, which the training step needs too) is called only to
        # word the error of a structure with an unknown element
        fine = tf.reduce_all(tf.reduce_any(tf.equal(tf.cast(elems, known.dtype)[:, None], known[None, :]), axis=1)
                             | tf.logical_not(seen))
        out = dict(structure)
        out[K.ELEMS] = tf.cond(fine, lambda: elems, lambda: tf.ensure_shape(
            tf.numpy_function(check, [k, elems, seen], elems.dtype, stateful=False), elems.shape))
        return out

    return dataset_holding_callbacks(lambda: dataset.enumerate().map(checked))


def load_structures(source, atom_types=None):
    """A dataset from a file name or list: TFRecord caches (``X.tfr``, or their spec ``X.yml`` as upstream
    PiNN names them) or anything ASE reads; with ``atom_types``, each file is checked to hold only
    those elements: in a pass before training (:func:`check_elements`), or as its frames are read for a file
    larger than :data:`pinn.io.ase_stream.STREAM_ABOVE_BYTES` (:func:`elements_checked_as_read`)."""
    from pinn.io import load_ase, load_tfrecord
    from pinn.io.ase_stream import STREAM_ABOVE_BYTES, bytes_on_disk
    files = [source] if isinstance(source, (str, os.PathLike)) else list(source)
    if not files:
        raise ParamsError("data: an empty list of files")
    datasets = [load_tfrecord(f) if _is_tfrecord(f) else load_ase(f, shuffle=False) for f in files]
    if atom_types is not None:
        for k, (path, dataset) in enumerate(zip(files, datasets)):
            if bytes_on_disk([_data_file(path)]) > STREAM_ABOVE_BYTES:
                datasets[k] = elements_checked_as_read(dataset, atom_types, os.fspath(path))
            else:
                check_elements(dataset, atom_types, os.fspath(path))
    dataset = datasets[0]
    for more in datasets[1:]:
        dataset = dataset.concatenate(more)
    return dataset


def _is_tfrecord(path):
    return os.fspath(path).endswith((".tfr", ".yml", ".yaml"))


def _data_file(path):
    """The file that holds the structures: a TFRecord cache's records for its spec ``X.yml``."""
    from pinn.io.tfrecord import tfrecord_paths
    return tfrecord_paths(path)[0] if _is_tfrecord(path) else os.fspath(path)


def region_for_model(dataset, source, world=None, embedding=MECHANICAL):
    """``dataset`` as the model takes it: for a model with mechanical embedding, QM/MM frames (``qm`` in the
    data) cut to their QM region (:func:`pinn.io.qm_region`), said once in the log naming ``source``; other
    data, and any data for a model with another ``embedding`` (``model.params.embedding``), as they are."""
    from pinn.io.qmmm import is_qmmm, qm_region
    if dataset is None or not is_qmmm(dataset.element_spec) or embedding_of(embedding).sees_environment:
        return dataset
    if world is None or world.is_chief:
        log.info("%s: QM/MM frames: the model (mechanical embedding) sees each frame's QM region alone, "
                 "against the region's energy in its environment; the MM atoms' forces are not learned "
                 "(docs/qmmm.md)", source)
    return dataset.apply(qm_region())


def datasets(data, world, atom_types=None, embedding=MECHANICAL):
    """(train, eval or ``None``) datasets of structures for this rank; with ``atom_types``, checked to hold
    only those elements (:func:`check_elements`); QM/MM frames as a model of ``embedding`` takes them
    (:func:`region_for_model`)."""
    from pinn.io import distribute_data, load_ase, load_mimic
    from pinn.io.ase_stream import STREAM_ABOVE_BYTES, bytes_on_disk
    split = data["split"]
    if data["mimic"] is not None:
        mimic = dict(data["mimic"])
        missing = [k for k in ("mpt", "trr", "energies") if k not in mimic]
        if missing:
            raise ParamsError(f"data.mimic: missing {missing}")
        files = [mimic.pop(k) for k in ("mpt", "trr", "energies")]
        if world.is_parallel:  # whole runs per rank: every list with one entry per run goes along
            n_runs = len(files[1]) if isinstance(files[1], list) else 1
            per_run = [k for k in MIMIC_RUN_FILES if isinstance(mimic.get(k), list) and len(mimic[k]) == n_runs > 1]
            shares = distribute_data(*files, *(mimic[k] for k in per_run), rank=world.rank, size=world.size)
            files = shares[:3]
            mimic.update(zip(per_run, shares[3:]))
        parts = load_mimic(*files, split=split or False, seed=data["seed"], **mimic)
        source = f"data.mimic ({', '.join(os.fspath(f) for f in files[1])})"
        sharded = False
    elif split is not None:
        sources = data["train"]
        if any(os.fspath(f).endswith(".tfr") for f in ([sources] if isinstance(sources, str) else sources)):
            raise ParamsError("data.split: a TFRecord cache is split when written (pinn convert --split); give "
                              "data.train and data.eval instead")
        parts = load_ase(sources, split=split, seed=data["seed"])  # a file or a list of files
        source = f"data.train ({sources if isinstance(sources, str) else ', '.join(map(os.fspath, sources))})"
        sharded = world.is_parallel
    else:
        parts = {"train": load_structures(data["train"], atom_types),
                 "eval": load_structures(data["eval"], atom_types) if data["eval"] is not None else None}
        source = None  # checked file by file
        sharded = world.is_parallel
    if not isinstance(parts, dict):
        parts = {"train": parts}
    train = parts["train"]
    evaluation = parts.get("eval")
    if atom_types is not None and source is not None:
        as_read = split is not None and bytes_on_disk(_listed(data["train"])) > STREAM_ABOVE_BYTES
        for name, part in (("train", train), ("eval", evaluation)):
            if part is None:
                continue
            if as_read:  # streamed: checked as read, not in a pass that costs an epoch
                parts[name] = elements_checked_as_read(part, atom_types, source,
                                                       f"structure {{}} of the {name} part (in the split's order)")
            else:
                check_elements(part, atom_types, source)
        train, evaluation = parts["train"], parts.get("eval")
    train = region_for_model(train, "data", world, embedding)
    evaluation = region_for_model(evaluation, "data (evaluation)", world, embedding)
    if sharded:
        train = train.shard(world.size, world.rank)
        evaluation = evaluation.shard(world.size, world.rank) if evaluation is not None else None
    return train, evaluation


def input_fns(data, train_section, world, rc, atom_types=None, member=0, embedding=MECHANICAL):
    """(train_fn, eval_fn or ``None``): input functions of sparse batches for :meth:`Trainer.train`.

    The training structures get their neighbor lists (cutoff ``rc``, Å) before the cache, so
    each list is computed once, not at every epoch.  ``member``: a committee member's number; the
    members share the split and shuffle the training data each in their own order.  ``embedding``: the
    model's (``model.params.embedding``; QM/MM frames are cut to their region for a mechanical one).
    A cache file (``data.cache: PATH``) is this rank's (:func:`_file_cache`), checked against what it
    was made from before the data are read.
    """
    cache = _cache_of(data)
    if cache:
        cache = _file_cache(cache, data, world, rc, atom_types, embedding)
    train, evaluation = datasets(data, world, atom_types, embedding)
    size = data["batch_size"]
    buffer = data["shuffle_buffer"]
    seed = data["seed"]
    by_epochs = train_section["max_epochs"] is not None

    def train_fn():
        return input_pipeline(train, rc=rc, cache=cache, repeat=not by_epochs, shuffle_buffer=buffer,
                              seed=seed + world.rank + MEMBER_SEED_STRIDE * member, batch_size=size)

    eval_fn = (lambda: input_pipeline(evaluation, batch_size=size)) if evaluation is not None else None
    return train_fn, eval_fn


def input_pipeline(dataset, rc=None, cache=None, repeat=False, shuffle_buffer=0, seed=None, batch_size=None,
                   take=None):
    """The input pipeline of ``pinn train``, a run file's (:func:`input_fns`) and upstream PiNN's params file
    trained on ``-t``/``-e`` (:mod:`pinn.cli.upstream_train`): each step in this order, where asked for.

    Args:
        dataset: ``tf.data.Dataset`` of structures, or of sparse batches (upstream's form batches first).
        rc: neighbor lists at this cutoff (Å; :func:`pinn.io.add_neighbors`), before the cache so that each
            is computed once; ``None``: none.
        cache: the argument of ``dataset.cache`` (``''``: memory; a path: a file); ``None``: no cache.
        repeat: repeat the data without end (a run by steps).
        shuffle_buffer: shuffle the elements in a buffer of this many (``0``: no shuffle), with ``seed``.
        batch_size: sparse batches of this many structures (:func:`pinn.io.sparse_batch`); ``None``: the
            elements are batches already.
        take: only the first ``take`` elements (``None``: all).

    Returns:
        the ``tf.data.Dataset``.
    """
    from pinn.io import add_neighbors, sparse_batch
    if rc is not None:
        dataset = dataset.apply(add_neighbors(rc))
    if cache is not None:
        dataset = dataset.cache(cache)
    if repeat:
        dataset = dataset.repeat()
    if shuffle_buffer:
        dataset = dataset.shuffle(shuffle_buffer, seed=seed)
    if batch_size is not None:
        dataset = dataset.apply(sparse_batch(batch_size))
    if take:
        dataset = dataset.take(take)
    return dataset


def _cache_of(data):
    """The argument of ``dataset.cache`` for ``data.cache`` (``''``: memory, a path: a file), or ``None``: none.

    ``auto``: memory, unless the training files (``data.train``, or ``data.mimic``'s trajectories) hold more
    than :data:`pinn.io.ase_stream.STREAM_ABOVE_BYTES` on disk (above which ``load_ase`` streams): then none.
    """
    from pinn.io.ase_stream import STREAM_ABOVE_BYTES, bytes_on_disk
    choice = data["cache"]
    if choice != "auto":
        return {"memory": "", "none": None}.get(choice, choice)
    sources = data["train"] if data["mimic"] is None else data["mimic"].get("trr")
    files = [sources] if isinstance(sources, (str, os.PathLike)) else list(sources or [])
    size = bytes_on_disk(files)
    if size <= STREAM_ABOVE_BYTES:
        return ""
    log.info("data.cache auto: the training files hold %.0f MiB (> %.0f MiB), so the structures are read again "
             "every epoch instead of cached in memory (data.cache: memory, or a file path to cache them on disk)",
             size / 2 ** 20, STREAM_ABOVE_BYTES / 2 ** 20)
    return None


def _file_cache(path, data, world, rc, atom_types, embedding):
    """This rank's cache file of ``data.cache: PATH`` (``PATH``, or ``PATH-rankN`` for rank N > 0 of a parallel
    run: each rank caches its own share), ready for ``dataset.cache``: a complete cache of the same training
    files (sizes and modification times), ``rc``, elements, split, seed, MiMiC options, embedding and ranks
    is reused, anything else there removed and cached again in the first epoch
    (:func:`pinn.io.cache_stamp.prepare_cache`, which logs which and why).  Call it before the data are read.
    """
    from pinn.io.cache_stamp import made_from, prepare_cache, rank_path
    rank, ranks = (world.rank, world.size) if world.is_parallel else (0, 1)
    if data["mimic"] is None:
        files = _listed(data["train"])
        options = None
    else:
        files = [f for key in MIMIC_FILES for f in _listed(data["mimic"].get(key))]
        options = {k: v for k, v in data["mimic"].items() if k not in MIMIC_FILES}
    path = rank_path(path, rank)
    prepare_cache(path, made_from(files, rc, atom_types, data["split"], data["seed"], options,
                                  embedding_of(embedding).name, rank, ranks))
    return path


def _listed(value):
    """A file name or a list of them (or ``None``) as a list."""
    if value is None:
        return []
    return [value] if isinstance(value, (str, os.PathLike)) else list(value)


#: the shuffle seeds of committee members lie this far apart (beyond any rank's offset)
MEMBER_SEED_STRIDE = 100003


def run_training(path, model_dir=None, max_steps=None, init_model=None, member=None, max_time=None):
    """Train the model a run file describes (see the module docstring).

    Args:
        path: YAML run file.
        model_dir: overrides ``model_dir`` of the file.
        max_steps: overrides ``train.max_steps`` of the file.
        max_time: overrides ``train.max_time`` of the file (a time budget: :mod:`pinn.training.budget`).
        init_model: overrides ``model.params.init_model`` (a warm start: :mod:`pinn.training.warm_start`).
        member: train committee member K (``pinn train --committee``): into ``MODEL_DIR/member-K`` with
            ``seed + K`` (initial weights) and its own data order (the same split); with ``init_model`` a
            directory of members, from its ``member-K``.

    Returns:
        (model, metrics): the trained :class:`pinn.training.trainer.Trainer`, closed (its model directory
        released: it evaluates and predicts), and the final validation metrics (``None`` without
        validation data).
    """
    from pinn.networks import atom_types_of
    from pinn.parallel import init
    from pinn.params import resolve
    from pinn.physics.registry import model_class
    from pinn.training.parts import assemble
    from pinn.training.trainer import Trainer
    params, data, train_section = read_config(path)
    if model_dir is not None:
        params["model_dir"] = model_dir
    if max_steps is not None:
        train_section = {**train_section, "max_steps": max_steps}
    if max_time is not None:
        train_section = {**train_section, "max_time": max_time}
    if "model_dir" not in params:
        raise ParamsError(f"{path}: params.model_dir: required key is missing (or give --model-dir)")
    if member is not None:
        from pinn.files.committee_dir import MEMBER_PREFIX, is_committee_directory
        params["model_dir"] = os.path.join(params["model_dir"], f"{MEMBER_PREFIX}{member}")
        params["seed"] = int(params.get("seed", 0)) + member
        if init_model is not None and is_committee_directory(init_model):
            init_model = os.path.join(init_model, f"{MEMBER_PREFIX}{member}")
    if init_model is not None:
        model_section = params.setdefault("model", {})
        model_section["params"] = {**(model_section.get("params") or {}), "init_model": init_model}
    params = resolve(params)
    # the world where the program starts; the model, which opens train.log in model_dir; the data from
    # the params alone (their notes go to that log); params.yml once train() has its data (a run refused by
    # them leaves the model directory's params.yml as it was)
    world = init(params)
    model = Trainer(assemble(params, model_class(params), world, defer_params=True))
    try:
        # potential models have an embedding (docs/qmmm.md), dipole models none
        embedding = embedding_of(params["model"]["params"])
        train_fn, eval_fn = input_fns(data, train_section, world, params["network"]["params"]["rc"],
                                      atom_types_of(params), member=member or 0, embedding=embedding)
        model.train(train_fn, max_steps=train_section["max_steps"], max_epochs=train_section["max_epochs"],
                    eval_fn=eval_fn, max_time=train_section["max_time"])
        if eval_fn is None:
            return model, None
        last = model.last_validation  # the validation at the last step has just been done
        return model, (last if last and last["global_step"] == int(model.step.numpy()) else model.evaluate(eval_fn))
    finally:
        model.close()  # the run is over, or failed: its model directory is free for the next


__all__ = ["read_config", "run_training", "input_fns", "input_pipeline", "load_structures", "check_elements",
           "region_for_model", "DATA_PARAMS", "TRAIN_PARAMS"]
