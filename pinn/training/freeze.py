"""Frozen variables: parts of the network that training leaves as they are.

``model.params.freeze`` lists patterns (shell-style, :mod:`fnmatch`) over the network's parts,
named by the modules that hold them: for PiNet ``gc_0`` … (the interaction blocks, each with
``pp``, ``pi``, ``pi_out`` and ``ii``), ``out_0`` … (the output nets), ``out_0_units`` …
and ``res_0`` … (residual maps where widths change); a variable is frozen when its path
(e.g. ``gc_1/pp/dense_0/kernel``) or a leading part of it (``gc_1``, ``gc_1/pp``) matches a
pattern.  ``freeze: ['gc_*']`` keeps every interaction block as the warm start
(``init_model``) gave it and trains the output nets alone: fine-tuning on a few new frames.

Every update leaves frozen variables exactly as they are — Adam (TensorFlow's step and the Numba
engine's host update) does not update them, the Kalman filters fit with their columns of the
Jacobian set to zero and do not move them — and gradient clipping measures the other
variables' gradient only.  A frozen variable's weight average follows its (fixed) weight; a warm
start from a run that kept an average sets both to that average, what the source predicted with.
"""
import fnmatch

import numpy as np
import tensorflow as tf

from pinn.schema import ParamsError


def _is_trainable(value):
    return isinstance(value, tf.Variable) and value.trainable


def variable_paths(model):
    """The names of a model's trainable variables, in the order of ``model.trainable_variables``.

    Args:
        model: a model (:class:`tf.Module`) holding its network as ``model.network``.

    Returns:
        list of str: module names from the network down, e.g. ``gc_0/pp/dense_1/kernel``
        (a variable outside the network, e.g. a dipole model's own, is named from the model).
    """
    paths = []
    for path, variable in model._flatten(predicate=_is_trainable, with_path=True):
        names = []
        node = model
        for key in path[:-1]:
            node = node[key] if isinstance(key, int) else getattr(node, key)
            if isinstance(node, tf.Module) and node is not getattr(model, "network", None):
                names.append(node.name)
        names.append(variable.name.split(":")[0])
        paths.append("/".join(names))
    return paths


def _matches(path, pattern):
    parts = path.split("/")
    return any(fnmatch.fnmatchcase("/".join(parts[:k]), pattern) for k in range(1, len(parts) + 1))


def frozen_flags(model, patterns):
    """Which of ``model.trainable_variables`` ``patterns`` freeze.

    Args:
        model: the model.
        patterns: ``model.params.freeze``, a list of str.

    Returns:
        tuple of bool, one per trainable variable.

    Raises:
        ParamsError: a pattern that matches no variable (naming the parts there are), or every
            variable frozen.
    """
    paths = variable_paths(model)
    flags = [False] * len(paths)
    for pattern in patterns:
        hits = [i for i, path in enumerate(paths) if _matches(path, pattern)]
        if not hits:
            parts = sorted({path.split("/")[0] for path in paths})
            raise ParamsError(f"model.params.freeze: {pattern!r} matches none of the network's variables; its parts "
                              f"are {', '.join(parts)} (e.g. {paths[0]})")
        for i in hits:
            flags[i] = True
    if flags and all(flags):
        raise ParamsError(f"model.params.freeze: {list(patterns)} freezes every variable: nothing would train")
    return tuple(flags)


def flat_keep(variables, flags):
    """1.0 for each weight that trains, 0.0 for each frozen one, in the flat order of ``variables``
    (their values flattened and concatenated).

    Returns:
        float64 array [number of weights].
    """
    return np.concatenate([np.full(v.shape.num_elements(), 0.0 if frozen else 1.0)
                           for v, frozen in zip(variables, flags)])


def describe(model, flags):
    """One line for the log: how many variables and weights are frozen, and which parts."""
    paths = variable_paths(model)
    variables = model.trainable_variables
    frozen = [i for i, f in enumerate(flags) if f]
    weights = sum(variables[i].shape.num_elements() for i in frozen)
    total = sum(v.shape.num_elements() for v in variables)
    parts = sorted({"/".join(paths[i].split("/")[:-1]) or paths[i] for i in frozen})
    return (f"model.params.freeze: {len(frozen)} of {len(variables)} variables frozen ({weights} of {total} weights): "
            f"{', '.join(parts)}")
