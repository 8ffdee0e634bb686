"""Training settings shared by the tests of training mechanics.

The mechanics tests (resume, rollback, accumulation, parallel equality…) were written for a
plain schedule, so they pin it: the package defaults (cosine with a warmup and a weight
average, tuned for long runs; docs/training.md) are tested on their own.
"""

#: exponential decay, no warmup, no weight average
PLAIN_SCHEDULE = {"lr_schedule": "exponential", "lr_warmup_steps": 0, "ema_decay": None}
