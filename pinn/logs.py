"""Logging set-up: the ``pinn`` logger writes to stderr and to ``model_dir/train.log``."""
import logging
import os
import sys

_FORMAT = "%(asctime)s pinn %(levelname)s %(message)s"


def setup_logging(model_dir=None, level=logging.INFO):
    """Attach a stderr handler (once) and a file handler for ``model_dir`` (once per directory).

    Returns:
        The ``pinn`` logger.
    """
    logger = logging.getLogger("pinn")
    logger.setLevel(level)
    logger.propagate = False
    if not any(getattr(h, "_pinn_stream", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(_FORMAT, "%H:%M:%S"))
        handler._pinn_stream = True
        logger.addHandler(handler)
    if model_dir:
        os.makedirs(model_dir, exist_ok=True)
        path = os.path.abspath(os.path.join(model_dir, "train.log"))
        if not any(getattr(h, "baseFilename", None) == path for h in logger.handlers):
            handler = logging.FileHandler(path)
            handler.setFormatter(logging.Formatter(_FORMAT))
            logger.addHandler(handler)
    return logger
