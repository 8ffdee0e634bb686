"""Upstream PiNN's ``load_ds``: one loader for every format, by name or guessed from the file name.

==========  =====================================================================
``fmt``     loader
==========  =====================================================================
``auto``    ``X.yml`` / ``X.tfr``: :func:`~pinn.io.tfrecord.load_tfrecord`; ``X.data``:
            :func:`~pinn.io.runner.load_runner`; anything else: :func:`~pinn.io.ase_data.load_ase`
``tfr``     :func:`~pinn.io.tfrecord.load_tfrecord` (upstream also calls it ``pinn``)
``ase``     :func:`~pinn.io.ase_data.load_ase`
``runner``  :func:`~pinn.io.runner.load_runner`
``qm9``     :func:`~pinn.io.qm9.load_qm9`
``ani``     :func:`~pinn.io.ani.load_ani`
``cp2k``    :func:`~pinn.io.cp2k.load_cp2k`
``deepmd``  :func:`~pinn.io.deepmd.load_deepmd`
``qm7b``    :func:`~pinn.io.qm7b.load_qm7b`
==========  =====================================================================
"""
import importlib
import logging

log = logging.getLogger(__name__)

#: format name → (module, loader) of pinn.io
LOADERS = {"tfr": ("pinn.io.tfrecord", "load_tfrecord"), "pinn": ("pinn.io.tfrecord", "load_tfrecord"),
           "ase": ("pinn.io.ase_data", "load_ase"), "runner": ("pinn.io.runner", "load_runner"),
           "qm9": ("pinn.io.qm9", "load_qm9"), "ani": ("pinn.io.ani", "load_ani"),
           "cp2k": ("pinn.io.cp2k", "load_cp2k"), "deepmd": ("pinn.io.deepmd", "load_deepmd"),
           "qm7b": ("pinn.io.qm7b", "load_qm7b")}


def format_of(dataset):
    """The format ``load_ds(dataset, fmt='auto')`` reads ``dataset`` as (a file name or a list of them)."""
    name = str(dataset if isinstance(dataset, (str, bytes)) or not hasattr(dataset, "__iter__")
               else next(iter(dataset), ""))
    if name.endswith((".yml", ".yaml", ".tfr")):
        return "tfr"
    if name.endswith(".data"):
        return "runner"
    return "ase"


def load_ds(dataset, fmt="auto", splits=None, shuffle=True, seed=0, **kwargs):
    """Load ``dataset`` with the loader of ``fmt`` (upstream PiNN's ``pinn.io.load_ds``).

    Args:
        dataset: what the loader takes (a file name, a list of them, a folder, ...).
        fmt: a name of the module's table, or ``'auto'`` (guessed from the file name).
        splits: ``{name: ratio}``: a dict of datasets, split after shuffling (``None``: one dataset).
        shuffle: shuffle the structures (before splitting); a TFRecord cache is read in the order
            it was written (a logged line says so).
        seed: seed of the shuffle.
        **kwargs: further arguments of that loader.

    Returns:
        a ``tf.data.Dataset`` of structures, or a dict of them with ``splits``.

    Raises:
        ValueError: an unknown format, or ``splits`` for TFRecords (split when written).
    """
    name = format_of(dataset) if fmt == "auto" else fmt
    if name not in LOADERS:
        raise ValueError(f"load_ds: unknown format {fmt!r}; formats: auto, {', '.join(sorted(LOADERS))}")
    module, function = LOADERS[name]
    loader = getattr(importlib.import_module(module), function)
    if name in ("tfr", "pinn"):
        if splits:
            raise ValueError(f"load_ds: {dataset}: a TFRecord dataset is split when written (pinn convert -o "
                             "'train:8,eval:2'); load its parts instead")
        if kwargs:
            raise TypeError(f"load_ds: load_tfrecord takes no {sorted(kwargs)}")
        if shuffle:  # upstream's default: said, not silently dropped
            log.info("load_ds: %s: a TFRecord cache is read in the order it was written, so shuffle and seed "
                     "(%s) do not apply; shuffle when writing it (pinn convert --shuffle) or with "
                     "dataset.shuffle(buffer)", dataset, seed)
        return loader(dataset)
    return loader(dataset, splits=splits, shuffle=shuffle, seed=seed, **kwargs)
