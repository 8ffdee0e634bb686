"""The error type of every reader and loader (kept free of TensorFlow so readers import fast)."""


class DataError(ValueError):
    """Bad input data; the message names the source (file), the frame and the problem."""
