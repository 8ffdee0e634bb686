"""Training settings shared by the tests of training mechanics.

The mechanics tests (resume, rollback, accumulation, parallel equality…) were written for a
plain schedule, so they pin it: the package defaults (cosine with a warmup and a weight
average, tuned for long runs; docs/training.md) are tested on their own.

They also train without XLA (``MECHANICS``): XLA compiles each new model's step once per
padded batch size, seconds each, and a mechanism does not depend on it.  The compiled step
is tested on its own (test_padded_training.py: the same steps as without XLA) and in the
parallel equality tests.
"""

#: exponential decay, no warmup, no weight average
PLAIN_SCHEDULE = {"lr_schedule": "exponential", "lr_warmup_steps": 0, "ema_decay": None}

#: the plain schedule, and TensorFlow's step without XLA
MECHANICS = {**PLAIN_SCHEDULE, "jit": False}
