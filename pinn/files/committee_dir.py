"""A committee's directory: its members' model directories, ``member-0/``, ``member-1/``, … (no TensorFlow).

What ``pinn train --committee N`` writes (:mod:`pinn.training.run_file`), ``pinn export`` packs
(:mod:`pinn.models.export`) and :func:`pinn.get_calc` reads (:mod:`pinn.committee`).
"""
import glob
import os

#: a committee directory holds its members as ``member-0``, ``member-1``, …
MEMBER_PREFIX = "member-"


def member_directories(spec):
    """The model directories of a committee.

    Args:
        spec: a list (or tuple) of model directories, or one directory holding ``member-K/``
            model directories.

    Returns:
        list of str: the members' directories (``member-K`` sorted by K).

    Raises:
        TypeError: a list whose elements are not paths (naming the first that is not).
        ValueError: an empty list, a directory without members, or a member that is no model
            directory (no ``params.yml``).
    """
    if isinstance(spec, (list, tuple)):
        if not spec:
            raise ValueError("get_calc: an empty list; a committee is a list of model directories")
        for k, item in enumerate(spec):
            if not isinstance(item, (str, bytes)) and not hasattr(item, "__fspath__"):
                raise TypeError(f"get_calc: a list is a committee of model directories; element {k} is a "
                                f"{type(item).__name__}, not a path")
        dirs = [os.fsdecode(os.fspath(item)) for item in spec]
    else:
        root = os.fsdecode(os.fspath(spec))
        found = glob.glob(os.path.join(root, MEMBER_PREFIX + "*"))
        dirs = sorted((d for d in found if os.path.basename(d)[len(MEMBER_PREFIX):].isdigit()),
                      key=lambda d: int(os.path.basename(d)[len(MEMBER_PREFIX):]))
        if not dirs:
            raise ValueError(f"get_calc: {root} holds neither params.yml nor {MEMBER_PREFIX}K/ model directories")
    for d in dirs:
        if not os.path.isfile(os.path.join(d, "params.yml")):
            raise ValueError(f"get_calc: committee member {d} is not a model directory (no params.yml)")
    return dirs


def is_committee_directory(path):
    """Whether ``path`` is a directory of members (``member-K/``) rather than one model directory."""
    path = os.fsdecode(os.fspath(path))
    return (os.path.isdir(path) and not os.path.isfile(os.path.join(path, "params.yml"))
            and bool(glob.glob(os.path.join(path, MEMBER_PREFIX + "[0-9]*", "params.yml"))))
