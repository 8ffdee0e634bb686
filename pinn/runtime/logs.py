"""Logging set-up: the ``pinn`` logger writes to stderr and to ``model_dir/train.log``.

In a parallel run rank 0 alone writes ``train.log``; every rank's stderr
lines carry its rank (``pinn[rank 1]``), and ranks other than 0 print only
warnings and errors so the job's output is not N copies of one log.
"""
import logging
import os
import sys


def _format(rank):
    tag = "pinn" if rank is None else f"pinn[rank {rank}]"
    return f"%(asctime)s {tag} %(levelname)s %(message)s"


class _CurrentStderr(logging.StreamHandler):
    """A stream handler that writes to whatever ``sys.stderr`` is when a line is logged (a notebook's or a
    test's capture made after the handler), never to a stream that was replaced and closed since."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):  # logging.StreamHandler sets it; the current sys.stderr is always used
        pass


def setup_logging(model_dir=None, level=logging.INFO, rank=None):
    """Attach a stderr handler (once) and a file handler for ``model_dir``, in place of another
    directory's (the model made last logs to its own ``train.log``; no file stays open per run).

    Args:
        model_dir: directory for ``train.log``; ``None``: stderr only.
        level: level of the ``pinn`` logger.
        rank: rank shown in stderr lines of a parallel run (``None``: no tag).

    Returns:
        The ``pinn`` logger.
    """
    logger = logging.getLogger("pinn")
    logger.setLevel(level)
    logger.propagate = False
    stream = [h for h in logger.handlers if getattr(h, "_pinn_stream", False)]
    if not stream:
        handler = _CurrentStderr()
        handler._pinn_stream = True
        logger.addHandler(handler)
        stream = [handler]
    stream[0].setFormatter(logging.Formatter(_format(rank), "%H:%M:%S"))
    if model_dir:
        os.makedirs(model_dir, exist_ok=True)
        path = os.path.abspath(os.path.join(model_dir, "train.log"))
        for handler in [h for h in logger.handlers if getattr(h, "_pinn_run_log", None) not in (None, path)]:
            logger.removeHandler(handler)  # another run's train.log: a process logs to one at a time
            handler.close()
        if not any(getattr(h, "_pinn_run_log", None) == path for h in logger.handlers):
            handler = logging.FileHandler(path)
            handler._pinn_run_log = path
            handler.setFormatter(logging.Formatter(_format(None)))
            logger.addHandler(handler)
    return logger
