"""Give each parallel rank its share of parallel file lists (whole files per rank)."""
import logging
import os

import numpy as np

from pinn.io.errors import DataError
from pinn.runtime.ranks import launcher_rank

log = logging.getLogger(__name__)


def distribute_data(*file_lists, rank=None, size=None, weights=None, world=None):
    """This rank's share of parallel file lists.

    Position ``i`` of every list belongs together (e.g. the ``.mpt``, ``.trr``
    and ``ENERGIES`` of one run), and whole positions go to one rank.  Shares
    are balanced by frame count: the weight of a position is the number of
    frames of its ``.trr`` file (headers are read, not the frames), or the
    total size of its files when no list holds ``.trr`` files.  Positions are
    assigned heaviest first to the rank with the least weight so far (ties:
    the lower position, the lower rank), so every rank computes the same
    assignment without communicating.  Each rank logs the files it got.

    Args:
        *file_lists: lists of file names of equal length (a single name is a
            list of one).
        rank, size: this process's rank and the number of ranks (give both, or ``world``, or
            neither).
        weights: optional weight per position, instead of frame counts.
        world: the run's world (:func:`pinn.parallel.init`): its rank and size.  With neither
            it nor ``rank``/``size``: the rank and size that the launcher (horovodrun, mpirun,
            srun) announced to this process, the same as its world's, so the data may be shared
            out before the world starts or the model is built; ``0, 1`` (the whole lists) for a
            process started alone.

    Returns:
        A list with, for each input list, the sub-list this rank gets, in the
        original order: ``mpt, trr, ener = distribute_data(mpts, trrs, eners)``.

    Raises:
        DataError: no lists, lists of different lengths, fewer files than
            ranks, or a trr file that cannot be indexed.
    """
    if not file_lists:
        raise DataError("distribute_data: give at least one list of files")
    lists = [[value] if isinstance(value, (str, os.PathLike)) else list(value) for value in file_lists]
    lengths = [len(files) for files in lists]
    if len(set(lengths)) != 1:
        raise DataError(f"distribute_data: the file lists must have equal lengths (one entry per run), got {lengths}")
    n = lengths[0]
    if world is not None:
        if rank is not None or size is not None:
            raise ValueError("distribute_data: give world= or rank= and size=, not both")
        rank, size = int(world.rank), int(world.size)
    elif rank is None and size is None:
        rank, size = launcher_rank()
    elif rank is None or size is None:
        raise ValueError("distribute_data: give rank= and size= together")
    if not 0 <= rank < size:
        raise DataError(f"distribute_data: rank {rank} is not in 0..{size - 1}")
    if n < size:
        raise DataError(f"distribute_data: {n} files per list for {size} ranks; every rank needs at least one "
                        "file (split the data into more files, or run fewer ranks)")
    if weights is None:
        weights, unit = _weights(lists)
    else:
        unit = "weight"
        weights = np.asarray(weights, dtype=float).reshape(-1)
        if len(weights) != n or np.any(weights < 0):
            raise DataError(f"distribute_data: weights must be {n} non-negative numbers, one per position")
    owner = balance(weights, size)
    mine = [i for i in range(n) if owner[i] == rank]
    share = [[files[i] for i in mine] for files in lists]
    named = _trr_files(lists) or lists[0]
    names = ", ".join(os.path.basename(os.fspath(named[i])) for i in mine)
    log.info("distribute_data: rank %d of %d gets %d of %d file sets (%g of %g %s): %s", rank, size, len(mine), n,
             float(np.sum(weights[mine])), float(np.sum(weights)), unit, names)
    return share


def balance(weights, size):
    """Assign positions to ``size`` ranks, heaviest first to the least loaded rank.

    Args:
        weights: weight of each position (at least ``size`` of them).
        size: number of ranks.

    Returns:
        int array: the rank of each position.  Every rank gets at least one
        position; the result depends only on the weights.
    """
    weights = np.asarray(weights, dtype=float)
    order = sorted(range(len(weights)), key=lambda i: (-weights[i], i))
    load = np.zeros(size)
    count = np.zeros(size, dtype=int)
    owner = np.empty(len(weights), dtype=int)
    for k, i in enumerate(order):
        left = len(order) - k
        empty = np.flatnonzero(count == 0)
        # once as many positions are left as ranks without one, those ranks must get them
        candidates = empty if len(empty) >= left else np.arange(size)
        r = int(candidates[np.argmin(load[candidates])])
        owner[i] = r
        load[r] += weights[i]
        count[r] += 1
    return owner


def _trr_files(lists):
    """The list whose files are all ``.trr`` files, or None."""
    for files in lists:
        if all(os.fspath(f).endswith(".trr") for f in files):
            return files
    return None


def _weights(lists):
    """Frames per position from the trr list if there is one, else bytes."""
    from pinn.io.readers.trr import TRRFile
    trr_files = _trr_files(lists)
    if trr_files is not None:
        counts = []
        for path in trr_files:
            with TRRFile(path, allow_truncated=True) as trr:
                counts.append(len(trr))
        return np.asarray(counts, dtype=float), "frames"
    sizes = []
    for i in range(len(lists[0])):
        total = 0
        for files in lists:
            path = os.fspath(files[i])
            if not os.path.exists(path):
                raise DataError(f"{path}: no such file")
            total += os.path.getsize(path)
        sizes.append(total)
    return np.asarray(sizes, dtype=float), "bytes"
