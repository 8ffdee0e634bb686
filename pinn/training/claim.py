"""A run's claim on its model directory, made before anything is written there.

:func:`claim_model_dir` is the first part :func:`~pinn.training.parts.assemble` builds for a Trainer: rank 0
takes the directory's lock (:mod:`pinn.files.lock`: one writer per directory) and compares the
given params with the stored ``params.yml``; every rank learns the outcome (one sum over the
ranks), so that a refusal ends every rank alike; only then does the run's log (``train.log``)
open.  ``params.yml`` itself is written once the checkpoint is restored
(:meth:`~pinn.training.state.TrainingState.restore_on_chief`), so that a refused run leaves the
directory as it found it.

The lock lasts as long as the Trainer: it is released by ``Trainer.close()`` (:meth:`Claim.release`),
when the Trainer is garbage-collected, or when the process ends (also by a stop signal's exit status
75; the ``os._exit`` of the stall watchdog and of a parallel rank's uncaught exception release it
first).  Trainers of one process share its lock.
"""
import contextlib
import logging
import os
import weakref

import numpy as np

from pinn.files.lock import ModelDirLocked, lock_model_dir
from pinn.networks.layers import precision_dtypes
from pinn.params import ParamsError, read_params
from pinn.runtime.logs import setup_logging
from pinn.training.warm_start import network_differences

log = logging.getLogger("pinn")


class Claim:
    """A Trainer's hold on its model directory.

    Args:
        lock: the :class:`~pinn.files.lock.DirLock` (rank 0), or ``None`` (the other ranks).
        model_dir: the directory (for messages).

    The lock is held until :meth:`release`, or until the object it follows (:meth:`follow`: the Trainer) is
    garbage-collected, or the process ends.
    """

    def __init__(self, lock, model_dir):
        self.lock = lock
        self.model_dir = model_dir
        self.closed = False
        self._finalizer = None

    def follow(self, owner):
        """Hold the directory as long as ``owner`` lives (the lock is released when it is garbage-collected),
        instead of the previous owner."""
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        if self.lock is not None and self.lock.held and not self.closed:
            self._finalizer = weakref.finalize(owner, self.lock.release)

    def release(self):
        """Give the directory back (on every rank): the Trainer evaluates and predicts, but no longer
        trains or saves."""
        self.closed = True
        if self._finalizer is not None:
            self._finalizer()
        elif self.lock is not None and self.lock.held:
            self.lock.release()

    def require(self, action):
        """Refuse ``action`` ('train', 'save') once released.

        Raises:
            RuntimeError: naming the action.
        """
        if self.closed:
            raise RuntimeError(f"{action}: this model was closed (its model_dir {self.model_dir} released); build "
                               f"it again to {action}")

    @contextlib.contextmanager
    def released_on_error(self):
        """Within this block an exception releases the directory (a Trainer that is not built holds nothing)."""
        try:
            yield
        except BaseException:
            self.release()
            raise


def claim_model_dir(params, world):
    """Take ``params['model_dir']`` for a run, then open its log.

    Rank 0 locks the directory and compares ``params`` with its ``params.yml``
    (:func:`check_stored_params`); the other ranks learn whether that failed.

    Args:
        params: the run's resolved params.
        world: the run's world (rank 0 writes).

    Returns:
        the :class:`Claim`.

    Raises:
        ModelDirLocked: another live run holds the directory (rank 0: one line naming it).
        ValueError: the directory holds another model (rank 0: naming the differences); the other ranks
            raise the same type, pointing at rank 0's error.
    """
    model_dir = params["model_dir"]
    lock = None
    error = None
    notes = []
    if world.is_chief:
        try:
            lock = lock_model_dir(model_dir)
            notes = [lock.note] if lock.note else []
            notes += check_stored_params(params)
        except Exception as err:  # noqa: BLE001 (raised below, after every rank has learnt of it)
            if lock is not None:
                lock.release()
            error = err
    if world.is_parallel:
        failed = [float(error is not None), float(isinstance(error, ModelDirLocked))]
        flags = world.allreduce_sum_numpy(np.array(failed))
        if flags[0] and error is None:
            kind = ModelDirLocked if flags[1] else ValueError
            raise kind(f"rank {world.rank}: rank 0 could not take {model_dir} for this run (see its error)")
    if error is not None:
        raise error
    _setup_logging(world, model_dir)
    for note in notes:
        log.warning("%s", note)
    return Claim(lock, model_dir)


def check_stored_params(params):
    """Compare the given params with ``model_dir/params.yml`` (rank 0, before anything is written).

    Returns:
        warnings to log (a damaged ``params.yml``, which the run writes again).

    Raises:
        ValueError: the stored model, network or precision differ (its checkpoints are of another model).
    """
    model_dir = params["model_dir"]
    path = os.path.join(model_dir, "params.yml")
    if not os.path.exists(path):
        return []
    try:
        stored = read_params(model_dir)
    except (ParamsError, ValueError) as err:
        return [f"{path} is damaged ({str(err).splitlines()[0]}); writing it again from the given params"]
    differences = network_differences(stored["network"], params["network"])
    if stored["model"]["name"] != params["model"]["name"]:
        differences.insert(0, f"model {stored['model']['name']} there, {params['model']['name']} here")
    if precision_dtypes(stored["precision"])[0] != precision_dtypes(params["precision"])[0]:  # the weights' dtype
        differences.append(f"precision {stored['precision']} there, {params['precision']} here")
    if differences:
        raise ValueError(f"{path}: model_dir holds another model than the given params ({'; '.join(differences)}); "
                         "use another model_dir or the stored params")
    return []


def _setup_logging(world, model_dir):
    """The ``pinn`` logger of a run: rank 0 (or the one process) at INFO into ``model_dir/train.log``, other
    ranks' warnings to stderr."""
    if world.is_parallel:
        setup_logging(model_dir if world.is_chief else None, level=logging.INFO if world.is_chief else logging.WARNING,
                      rank=world.rank)
    else:
        setup_logging(model_dir)
