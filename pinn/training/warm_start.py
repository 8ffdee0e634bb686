"""Warm start: a fresh run that begins from another model directory's weights.

``model.params.init_model: DIR`` (``pinn train --init-model DIR``): when the run's own model
directory holds no checkpoint yet, rank 0 restores from ``DIR``'s checkpoint
(``init_checkpoint``: ``'last'``, ``'best'`` or a path) the model's variables — the network's
weights, ``e_dress`` and whether it was fitted — and the weight average, and every rank takes
them (the usual broadcast).  The step, the optimizer's state and the learning-rate schedule start
afresh.  A new generation of an active-learning loop trains on the old data and the new labels
from where the last generation ended, instead of from random weights.

Weight averages: where both runs keep one (``ema_decay``), the average goes on from ``DIR``'s;
where only this run keeps one, it starts at the restored weights; where only ``DIR`` kept one, the
run starts from that average (the weights ``DIR`` predicts with).  Variables this run freezes
(``model.params.freeze``, :mod:`pinn.training.freeze`) take ``DIR``'s averaged values where it kept
an average, so that they stay what ``DIR`` predicted with.
"""
import logging

from pinn.networks.layers import precision_dtypes
from pinn.params import read_params
from pinn.training.checkpoints import CheckpointStore
from pinn.training.ema import WeightAverage

log = logging.getLogger("pinn")


def network_differences(theirs, ours):
    """The settings in which two network sections differ, as text (empty when they match).

    Args:
        theirs, ours: resolved ``network`` sections (``name`` and ``params``).

    Returns:
        list of str, e.g. ``["depth 4 there, 3 here"]``.
    """
    differences = []
    if theirs["name"] != ours["name"]:
        differences.append(f"network {theirs['name']} there, {ours['name']} here")
    there = theirs["params"]
    here = ours["params"]
    for key in sorted(set(there) | set(here)):
        if there.get(key) != here.get(key):
            differences.append(f"{key} {there.get(key)!r} there, {here.get(key)!r} here")
    return differences


def warm_start(source, checkpoint, params, model, average, frozen=()):
    """Restore ``source``'s model variables (and weight average) into this run's ``model`` (and ``average``).

    Args:
        source: the model directory to start from.
        checkpoint: ``'last'``, ``'best'`` or a checkpoint path of ``source``.
        params: this run's resolved params.
        model: this run's model (its variables are overwritten).
        average: this run's :class:`~pinn.training.ema.WeightAverage`, or ``None``.
        frozen: per trainable variable, whether this run freezes it (:mod:`pinn.training.freeze`):
            where ``source`` kept an average, a frozen variable takes its averaged value (what
            ``source`` predicted with) as its weight, and keeps it.

    Returns:
        the path of the checkpoint the weights came from.

    Raises:
        ValueError: ``source`` holds no checkpoint, or another model, network or precision (naming the
            differences); :class:`~pinn.params.ParamsError`: ``source`` has no valid ``params.yml``.
    """
    stored = read_params(source)
    where = f"model.params.init_model: {source}"
    if stored["model"]["name"] != params["model"]["name"]:
        raise ValueError(f"{where} holds a {stored['model']['name']}; this run trains a {params['model']['name']}")
    differences = network_differences(stored["network"], params["network"])
    if precision_dtypes(stored["precision"])[0] != precision_dtypes(params["precision"])[0]:  # the weights' dtype
        differences.append(f"precision {stored['precision']} there, {params['precision']} here")
    if differences:
        raise ValueError(f"{where}: its network differs from this run's: {'; '.join(differences)}")
    decay = stored["model"]["params"]["ema_decay"]
    theirs = WeightAverage(model.trainable_variables, decay) if decay else None
    parts = dict(model=model, **({"weight_average": theirs} if theirs is not None else {}))
    store = CheckpointStore(source, parts, is_chief=False, keep=stored["model"]["params"]["keep_checkpoint_max"])
    path = store.restore(None if checkpoint == "last" else checkpoint)
    if path is None:
        raise ValueError(f"{where} holds no checkpoint (train it first)")
    held = theirs is not None and store.holds(path, "weight_average")
    if average is not None and held:
        for mine, stored_mean in zip(average.shadow, theirs.shadow):
            mine.assign(stored_mean)
        average.updates.assign(theirs.updates)  # the average goes on, its warm-up (decay_after) past as there
        for variable, stored_mean, is_frozen in zip(model.trainable_variables, theirs.shadow, frozen):
            if is_frozen:
                variable.assign(stored_mean)
        note = "and its weight average"
    elif average is not None:
        average.reset(model.trainable_variables)
        note = "(no weight average there: this run's starts at its weights)"
    elif held:
        for variable, stored_mean in zip(model.trainable_variables, theirs.shadow):
            variable.assign(stored_mean)
        note = "(its weight average, as this run keeps none)"
    else:
        note = ""
    log.info("warm start from %s %s; the optimizer and the schedule start afresh", path, note)
    return path
