"""Splitting a loader's items into (nested) subsets by ratio, with a seed: ``split_items``; and the
``split=`` / ``splits=`` argument of the loaders (pinn's and upstream PiNN's names).  NumPy only."""
import numpy as np


def chosen_split(split, splits, who):
    """The split a loader was given as ``split=`` (pinn's name) or ``splits=`` (upstream PiNN's).

    Raises:
        TypeError: both were given, naming ``who`` (the loader).
    """
    if splits is None:
        return split
    if split not in (False, None):
        raise TypeError(f"{who}: split= and splits= are the same argument (splits= is upstream PiNN's name); "
                        "pass one of them")
    return splits


def split_items(items, split, shuffle=True, seed=0):
    """Split ``items`` into a (nested) dict of lists by ratio.

    Args:
        items: a sequence (a NumPy array is split into arrays).
        split: ``False``/``None`` (no split: the items in their order), a positive number
            (upstream PiNN's ``split=1``: one subset of every item, in order), or a dict
            mapping names to positive ratios or to nested dicts of the
            same form, e.g. ``{'train': 8, 'vali': 1, 'test': 1}`` or
            ``{'train': 8, 'eval': {'vali': 1, 'test': 1}}``.  A one-key split
            such as ``{'all': 1}`` gives every item.
        shuffle: shuffle the items before splitting them (as upstream PiNN's ``shuffle``, only used
            when splitting; pinn ≤ 0.17 shuffled without a split too).
        seed: seed of the shuffle; the same seed gives the same subsets.

    Returns:
        A list (no split) or a nested dict of lists with the same structure as
        ``split``.  Sizes are proportional to the ratios (largest remainder
        rounding), every item lands in exactly one subset.
    """
    items = items if isinstance(items, np.ndarray) else list(items)  # an array stays one (frame numbers)
    if not split:
        return items
    if isinstance(split, (int, float)) and not isinstance(split, bool) and split > 0:
        return items  # upstream's split=1: a single subset holding every item
    if shuffle:
        order = np.random.RandomState(seed).permutation(len(items))
        items = items[order] if isinstance(items, np.ndarray) else [items[i] for i in order]
    return _split(items, split, path="split")


def _split(items, split, path):
    if not isinstance(split, dict) or not split:
        raise ValueError(f"{path} must be a non-empty dict of ratios, got {split!r}")
    ratios = {name: _total_ratio({name: value}, path) for name, value in split.items()}
    total = sum(ratios.values())
    exact = {name: len(items) * r / total for name, r in ratios.items()}
    sizes = {name: int(np.floor(x)) for name, x in exact.items()}
    left = len(items) - sum(sizes.values())
    for name in sorted(exact, key=lambda n: sizes[n] - exact[n])[:left]:
        sizes[name] += 1
    out = {}
    start = 0
    for name, value in split.items():
        chunk = items[start:start + sizes[name]]
        start += sizes[name]
        out[name] = _split(chunk, value, f"{path}.{name}") if isinstance(value, dict) else chunk
    return out


def _total_ratio(split, path):
    total = 0.0
    for name, value in split.items():
        if isinstance(value, dict):
            total += _total_ratio(value, f"{path}.{name}")
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            total += value
        else:
            raise ValueError(f"{path}.{name} must be a positive number or a dict, got {value!r}")
    return total
