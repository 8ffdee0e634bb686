"""Progress lines of a training run: loss, errors, throughput and the communication share."""
import time

import numpy as np

from pinn.inference.errors import errors_from_sums
from pinn.training.metrics import UNITS


class Meter:
    """Accumulates, between two progress lines, the loss and error sums of all ranks
    (already summed) and this rank's structures, step time and communication time."""

    #: the phases of a parallel step whose times are kept (:meth:`add`)
    PHASES = ("compute", "exchange", "update")

    def __init__(self):
        self.t0 = time.perf_counter()
        self.loss = 0.0
        self.n_steps = 0
        self.n_struct = 0.0
        self.local_struct = 0
        self.comm_s = 0.0
        self.phase_s = np.zeros(len(self.PHASES))
        self.sums = {}

    def add(self, loss, sums, n_struct, local_struct=0, comm_s=0.0, phases=None):
        """One step: global ``loss``, ``sums`` (metric → 3 numbers) and structures, this rank's
        structures and seconds spent communicating; ``phases``: this rank's seconds in each of
        :data:`PHASES` (a parallel step: this rank's gradients, the allreduce, the update)."""
        self.loss += float(loss)
        self.n_steps += 1
        self.n_struct += float(n_struct)
        self.local_struct += int(local_struct)
        self.comm_s += comm_s
        if phases is not None:
            self.phase_s += phases
        for key, values in sums.items():
            self.sums[key] = self.sums.get(key, np.zeros(3)) + np.asarray(values, dtype=np.float64)

    def phase_ms(self):
        """Mean milliseconds per step in each of :data:`PHASES` on this rank (zeros for one process)."""
        return 1e3 * self.phase_s / max(self.n_steps, 1)

    def elapsed(self):
        return time.perf_counter() - self.t0

    def rank_figures(self):
        """[this rank's structures/s, share of the time spent communicating, ms per step in each phase]."""
        elapsed = max(self.elapsed(), 1e-9)
        return np.concatenate([[self.local_struct / elapsed, self.comm_s / elapsed], self.phase_ms()])

    def figures(self):
        """Mean loss, MAE/RMSE of each metric and structures/s (all ranks) since this meter started."""
        elapsed = max(self.elapsed(), 1e-9)
        return {"loss": self.loss / max(self.n_steps, 1), **errors_from_sums(self.sums),
                "structures_per_s": self.n_struct / elapsed}

    def summary(self):
        """``loss … E_RMSE … eV F_RMSE … eV/Å N structures/s`` (all ranks together)."""
        elapsed = max(self.elapsed(), 1e-9)
        parts = [f"loss {self.loss / max(self.n_steps, 1):.4g}"]
        parts += [f"{k} {v:.4g} {UNITS[k.rsplit('_', 1)[0]]}" for k, v in errors_from_sums(self.sums).items()
                  if k.endswith("RMSE")]
        parts.append(f"{self.n_struct / elapsed:.0f} structures/s")
        return " ".join(parts)


def scaling_line(figures, single_rank_throughput=None):
    """The per-rank part of a parallel progress line.

    Args:
        figures: [n_ranks, 2 + …] array of (structures/s, communication share, …) per rank.
        single_rank_throughput: structures/s of a 1-rank run, when known.

    Returns:
        e.g. ``ranks: 512, 498 structures/s; communication 12%, 14%; efficiency 93% of 2 × 543``.
    """
    rates = ", ".join(f"{r:.0f}" for r in figures[:, 0])
    comm = ", ".join(f"{100 * c:.0f}%" for c in figures[:, 1])
    line = f"ranks: {rates} structures/s; communication {comm}"
    if single_rank_throughput:
        n = len(figures)
        efficiency = figures[:, 0].sum() / (n * single_rank_throughput)
        line += f"; efficiency {100 * efficiency:.0f}% of {n} × {single_rank_throughput:g}"
    return line


class ProgressBar:
    """A one-line progress bar redrawn in place on a terminal; silent when output goes to a file.

    Args:
        stream: where to draw (default ``sys.stderr``).
        enabled: ``True``/``False``, or ``None`` to draw only when ``stream`` is a terminal.
        min_interval_s: least time between two redraws.
    """

    def __init__(self, stream=None, enabled=None, min_interval_s=0.2):
        import sys
        self.stream = stream or sys.stderr
        self.enabled = bool(self.stream.isatty()) if enabled is None else enabled
        self.min_interval_s = min_interval_s
        self._last = 0.0
        self._drawn = False
        self._t0 = time.perf_counter()
        self._step0 = None

    def update(self, step, total, text=""):
        """Redraw (at most every ``min_interval_s``): step/total, a bar, the rate, the time left and ``text``."""
        if not self.enabled:
            return
        now = time.perf_counter()
        if self._step0 is None:
            self._step0 = step
            self._t0 = now
        if now - self._last < self.min_interval_s and step < total:
            return
        self._last = now
        done = min(step / total, 1.0) if total else 0.0
        width = 24
        bar = "#" * int(done * width) + "-" * (width - int(done * width))
        rate = (step - self._step0) / max(now - self._t0, 1e-9)
        left = (total - step) / rate if rate > 0 else float("nan")
        eta = time.strftime("%H:%M:%S", time.gmtime(left)) if np.isfinite(left) else "--:--:--"
        self.stream.write(f"\r\x1b[K{step}/{total} [{bar}] {100 * done:3.0f}% {rate:.1f} steps/s "
                          f"left {eta} {text}")
        self.stream.flush()
        self._drawn = True

    def clear(self):
        """Erase the bar (before a log line is printed)."""
        if self._drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._drawn = False
