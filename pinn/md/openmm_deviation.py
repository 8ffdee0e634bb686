"""A committee's model deviation at every step of an OpenMM run, and the stop at the first step over a threshold.

The pinn force of a committee (``create_mixed_system(..., model=[dir_a, dir_b, ...], monitor=monitor)``, or
:func:`~pinn.md.openmm.pinn_force`) evaluates every member at each step and drives the dynamics with their mean;
its :class:`DeviationMonitor` takes the members' predictions of each step the force evaluates, once per step
(OpenMM evaluates the forces of step n, at its positions, at the start of step n + 1):

- it writes DeePMD-kit's ``model_devi.out`` layout (:mod:`pinn.io.model_devi`) every ``every`` steps: the seven
  columns over the atoms the model sees (the QM region and, with electrostatic embedding, the MM atoms whose
  charges it sees: what ``pinn devi`` computes on the same frames), then ``max_devi_f_qm``, the largest force
  deviation over the QM atoms, and ``max_devi_f_mm``, over the MM atoms the model sees (0 without any), eV/Å;
- with ``frames``, it writes those steps' frames (extended XYZ; QM/MM frames with ``qm``, the MM charges and the
  region's charge, as the model saw them), with the step, the time and the deviations in each frame's info;
- with ``stop_above`` (eV/Å), the first step whose ``max_devi_f_qm`` exceeds it ends the run there: the force
  refuses to go on (OpenMM raises), the context keeps that step's positions, and :meth:`DeviationMonitor.run`
  returns a :class:`DeviationStop` with the step, its deviations and its frame (``stopped`` holds it too).

Nothing is written before the first step; an existing file is refused unless ``overwrite``.  Each line is
flushed when written, so a run that dies keeps the lines of its steps.
"""
import dataclasses
import logging
import math
import os
from typing import Any, Optional

import numpy as np

from pinn.io.model_devi import header, line, row_of

log = logging.getLogger("pinn")

#: the columns after DeePMD-kit's seven
EXTRA_COLUMNS = ("max_devi_f_qm", "max_devi_f_mm")


@dataclasses.dataclass(frozen=True)
class DeviationStop:
    """The step where a run stopped, over the threshold.

    Attributes:
        step: OpenMM's step count (the context holds this step's positions).
        time_ps: its simulated time (ps).
        deviation: :func:`pinn.committee.deviations` of the step, with ``max_devi_f_qm`` and ``max_devi_f_mm``.
        atoms: the frame the committee saw (``ase.Atoms``, positions in Å).
        threshold: the ``stop_above`` it exceeded (eV/Å).
    """
    step: int
    time_ps: float
    deviation: dict
    atoms: Any
    threshold: float

    def __str__(self):
        return (f"step {self.step} ({self.time_ps:g} ps): the committee's largest force deviation on the QM atoms, "
                f"{self.deviation['max_devi_f_qm']:.4g} eV/Å, exceeds stop_above {self.threshold:g} eV/Å")


class DeviationMonitor:
    """The deviation of a committee's members at each step of an OpenMM run (see the module).

    Args:
        path: the ``model_devi.out`` file to write.
        every: write every this many steps (the stop looks at every step).
        stop_above: eV/Å; stop at the first step whose ``max_devi_f_qm`` exceeds it (``None``: never).
        frames: an extended XYZ file for the written steps' frames, or ``None``.
        overwrite: replace existing files (else refused).

    Attributes:
        stopped: the :class:`DeviationStop` of the last run, or ``None``.
        steps_seen: the steps whose deviation was taken.
        last: the latest step's deviations (a dict with ``step``), or ``None``.

    Raises:
        ValueError: ``every`` below 1, or ``stop_above`` not a positive number.
        FileExistsError: ``path`` or ``frames`` exists and ``overwrite`` is false.
    """

    def __init__(self, path, every=1, stop_above=None, frames=None, overwrite=False):
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"DeviationMonitor: every must be a whole number of steps >= 1, got {every!r}")
        if stop_above is not None and not (isinstance(stop_above, (int, float)) and math.isfinite(stop_above)
                                           and stop_above > 0):
            raise ValueError(f"DeviationMonitor: stop_above must be a positive deviation in eV/Å, got {stop_above!r}")
        self.path = os.fspath(path)
        self.frames = None if frames is None else os.fspath(frames)
        for file in (self.path, self.frames):
            if file is not None and os.path.exists(file) and not overwrite:
                raise FileExistsError(f"DeviationMonitor: {file} exists (pass overwrite=True to replace it)")
        self.every = every
        self.stop_above = None if stop_above is None else float(stop_above)
        self.stopped = None
        self.steps_seen = 0
        self.last = None
        self._file = None
        self._frames_started = False
        self._latest_step = None
        self._let_pass = None  # the step a run resumed at after a stop: taken, not stopped at again

    def attach_check(self, calc):
        """Refuse a calculator that is no committee (no deviation to take).

        Raises:
            ValueError: naming what the force was given.
        """
        from pinn.committee import CommitteeCalc
        if not isinstance(calc, CommitteeCalc) or calc.size < 2:
            raise ValueError("DeviationMonitor: a deviation needs a committee of two or more members (give the force "
                             f"a list of model directories or a directory of member-K), not {type(calc).__name__}")

    def record(self, step, time_ps, atoms, results, seen_mm=None):
        """Take the committee's predictions of one evaluation (the pinn force's call).

        Args:
            step: OpenMM's step count of the evaluated positions.
            time_ps: their simulated time (ps).
            atoms: the frame the committee saw (kept only when written or stopped at).
            results: the committee calculator's results (``member_energies``, ``member_forces``).
            seen_mm: [n] bool, the frame's MM atoms (``None``: none; mechanical embedding).

        Raises:
            RuntimeError: the step's ``max_devi_f_qm`` exceeds ``stop_above`` (OpenMM then stops the run).
        """
        if step == self._latest_step:
            return  # another evaluation of the same step (a reporter's getState, a minimizer's first call)
        from pinn.committee import deviations
        self._latest_step = step
        self.steps_seen += 1
        devi = deviations(results["member_energies"], results["member_forces"], len(atoms))
        per_atom = devi["forces_deviation"]
        mm = np.zeros(len(per_atom), bool) if seen_mm is None else np.asarray(seen_mm, bool)
        devi["max_devi_f_qm"] = float(per_atom[~mm].max()) if (~mm).any() else 0.0
        devi["max_devi_f_mm"] = float(per_atom[mm].max()) if mm.any() else 0.0
        self.last = {"step": int(step), **{k: v for k, v in devi.items() if k != "forces_deviation"}}
        over = (self.stop_above is not None and devi["max_devi_f_qm"] > self.stop_above and step != self._let_pass)
        if step % self.every == 0 or over:
            self._write(step, time_ps, atoms, devi)
        if over:
            self.stopped = DeviationStop(int(step), float(time_ps), self.last, _frame(atoms, step, time_ps, devi),
                                         self.stop_above)
            log.warning("%s: the run stops here", self.stopped)
            raise RuntimeError(f"pinn DeviationMonitor: {self.stopped}")

    def _write(self, step, time_ps, atoms, devi):
        if self._file is None:
            self._file = open(self.path, "w")
            self._file.write(header(EXTRA_COLUMNS) + "\n")
        row = row_of(step, devi, [devi[c] for c in EXTRA_COLUMNS])
        self._file.write(line(row[0], row[1:]) + "\n")
        self._file.flush()
        if self.frames is not None:
            from pinn.io.ase_files import write
            write(self.frames, _frame(atoms, step, time_ps, devi), format="extxyz", append=self._frames_started)
            self._frames_started = True

    def run(self, simulation, steps):
        """``simulation.step(steps)``, ended early at the first step over ``stop_above``.

        Args:
            simulation: an ``openmm.app.Simulation`` whose system holds this monitor's pinn force.
            steps: how many steps.

        Returns:
            the :class:`DeviationStop` (the simulation's context at that step), or ``None`` when all steps ran.

        Raises:
            whatever OpenMM raised when the run ended for another reason.
        """
        previous = self.stopped
        self.stopped = None
        if previous is not None:
            self._let_pass = previous.step  # go on from the stop: its step is taken again, not stopped at
        try:
            simulation.step(steps)
        except Exception:  # OpenMM's exception, with the force's message: ours only when stopped is set
            if self.stopped is None:
                raise
        return self.stopped

    def close(self):
        """Close the file (also at garbage collection, also of a monitor whose construction was refused before
        it opened one)."""
        if getattr(self, "_file", None) is not None:
            self._file.close()
            self._file = None

    def __del__(self):
        self.close()

    def __getstate__(self):
        raise TypeError("a DeviationMonitor is not saved with the system: attach a new one where it runs")


def _frame(atoms, step, time_ps, devi):
    """A copy of the frame the committee saw, with the step, time and deviations in its info."""
    frame = atoms.copy()
    frame.calc = None
    frame.info.update(step=int(step), time_ps=float(time_ps), max_devi_f=devi["max_forces_deviation"],
                      max_devi_f_qm=devi["max_devi_f_qm"], max_devi_f_mm=devi["max_devi_f_mm"],
                      devi_e=devi["energy_deviation_per_atom"])
    return frame
