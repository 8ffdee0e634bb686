"""MD on ASE's integrators with a model or a committee: a log, a trajectory, and a stop where the members disagree.

:func:`run_md` is what ``pinn md`` runs (:mod:`pinn.cli.md_command`), for scripts: NVE (velocity
Verlet), Langevin, NVT (Nosé–Hoover chain) or NPT (Langevin–Hoover, BAOAB) from a structure, its
velocities drawn at a temperature, logging energies and temperature (and, for a committee, the max
force deviation) per step.  With a committee, ``stop_deviation`` ends the run at the first step whose
max force deviation exceeds it — the on-the-fly trigger of an active-learning loop — and writes that
frame and the ``keep`` before it; ``select=(lo, hi)`` writes every frame whose deviation lies in
[lo, hi) (DeePMD-kit's trust levels), and the run goes on.

Nothing is written before the run can start: every option is checked and the start structure evaluated
(energy, forces and, for a committee, the deviation) before an output is opened, and an output that
exists, or that names an input, is refused (``existing``, ``inputs``).  The log, the trajectory and the
selected frames are written under a temporary name beside each (``NAME.tmp-PID``) and moved into place
when the run ends, stops, fails or is interrupted: a run that dies at step 500 leaves its 500 steps; a
run refused at step 0 leaves every file as it was and creates none.

Units: time step and thermostat/barostat times in fs, temperature in K, pressure in bar, friction in
1/ps, energies in eV, deviations in eV/Å.
"""
import collections
import dataclasses
import os
import shutil
import sys
import time

import numpy as np

#: the ensembles of ``pinn md --ensemble``
ENSEMBLES = ("nve", "langevin", "nvt", "npt")
#: the columns of the log, after ``step`` (``max_devi_f`` with a committee)
LOG_COLUMNS = ("time_ps", "Etot_eV", "Epot_eV", "Ekin_eV", "T_K")
#: what :func:`run_md` does with an output file that exists (``pinn md``: refuse, ``--overwrite``, ``--append``)
EXISTING = ("refuse", "overwrite", "append")
#: the trajectory's formats, by suffix: ASE's own, or extended XYZ
TRAJECTORY_SUFFIXES = (".traj", ".xyz", ".extxyz")


@dataclasses.dataclass
class MDOutcome:
    """What :func:`run_md` did.

    Attributes:
        steps: the steps integrated.
        stopped_at: the step whose max force deviation exceeded ``stop_deviation`` (the run ended
            there), or ``None``.
        deviation: that step's max force deviation (eV/Å), or ``None``.
        selected: the frames written for ``select``.
        ms_per_step: wall time per step (ms), the loop after the start's evaluation.
    """

    steps: int
    stopped_at: int = None
    deviation: float = None
    selected: int = 0
    ms_per_step: float = 0.0


class MDInterrupted(KeyboardInterrupt):
    """An interrupt (Ctrl-C) during :func:`run_md`'s steps, after its outputs were moved into place.

    Attributes:
        outcome: the :class:`MDOutcome` of the steps done (``outcome.steps``), which the log and the
            trajectory hold.
    """

    def __init__(self, outcome):
        super().__init__(f"MD interrupted after step {outcome.steps}")
        self.outcome = outcome


def integrator(atoms, ensemble, dt, temperature=300.0, friction=10.0, tau=100.0, pressure=1.01325, barostat_tau=1000.0,
               seed=0):
    """ASE's integrator of ``ensemble`` for ``atoms``.

    Args:
        atoms: ``ase.Atoms`` with a calculator.
        ensemble: one of :data:`ENSEMBLES`.
        dt: time step, fs.
        temperature: K (langevin, nvt, npt).
        friction: Langevin friction, 1/ps (langevin; npt's thermostat takes ``tau``).
        tau: thermostat time (nvt, npt), fs.
        pressure: bar (npt, hydrostatic: the cell keeps its shape; periodic in all three directions).
        barostat_tau: the barostat's time (npt), fs.
        seed: the random stream of the stochastic integrators.

    Returns:
        an ``ase.md.md.MolecularDynamics``.

    Raises:
        ValueError: an unknown ensemble, a non-positive dt, temperature, friction, tau or barostat_tau
            where used, NPT without a periodic cell.
    """
    from ase import units
    if ensemble not in ENSEMBLES:
        raise ValueError(f"ensemble must be one of {ENSEMBLES}, got {ensemble!r}")
    _positive(dt=dt)
    step = dt * units.fs
    rng = np.random.default_rng(seed)
    if ensemble == "nve":
        from ase.md.verlet import VelocityVerlet
        return VelocityVerlet(atoms, step)
    _positive(temperature=temperature)
    if ensemble == "langevin":
        from ase.md.langevin import Langevin
        _positive(friction=friction)
        # fixcm=False: ASE's fixed centre of mass does not sample NVT exactly (deprecated in ASE 3.28)
        return Langevin(atoms, step, temperature_K=temperature, friction=friction / (1000 * units.fs), fixcm=False,
                        rng=rng)
    _positive(tau=tau)
    if ensemble == "nvt":
        from ase.md.nose_hoover_chain import NoseHooverChainNVT
        return NoseHooverChainNVT(atoms, step, temperature_K=temperature, tdamp=tau * units.fs)
    if not np.all(atoms.pbc):
        raise ValueError(f"ensemble 'npt' needs a cell periodic in a, b and c; the structure's pbc is "
                         f"{atoms.pbc.tolist()}")
    from ase.md.langevinbaoab import LangevinBAOAB
    _positive(barostat_tau=barostat_tau)
    # ASE's stress is the negative of the pressure
    return LangevinBAOAB(atoms, step, temperature_K=temperature, externalstress=-pressure * units.bar,
                         hydrostatic=True, T_tau=tau * units.fs, P_tau=barostat_tau * units.fs, rng=rng)


def _positive(**values):
    for name, value in values.items():
        if not (isinstance(value, (int, float)) and np.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a positive number, got {value!r}")


def run_md(atoms, calc, steps, dt=0.5, ensemble="nve", temperature=300.0, friction=10.0, tau=100.0,
           pressure=1.01325, barostat_tau=1000.0, seed=0, velocities=True, traj=None, traj_every=1, log=None,
           log_every=1, stop_deviation=None, keep=10, stop_file="stop.xyz", select=None,
           selected_file="selected.xyz", progress=True, existing="refuse", inputs=()):
    """Run MD from ``atoms`` with ``calc``, logging each step and stopping where a committee's members disagree.

    Args:
        atoms: ``ase.Atoms``, moved in place.
        calc: the calculator (:func:`pinn.get_calc`; a committee's for ``stop_deviation`` and ``select``).
        steps: steps to integrate (at most).
        dt, ensemble, temperature, friction, tau, pressure, barostat_tau, seed: see :func:`integrator`.
        velocities: draw the initial velocities at ``temperature`` (Maxwell–Boltzmann, ``seed``); False:
            keep the structure's momenta.
        traj: path of a trajectory (``.traj``: ASE's format; ``.xyz``/``.extxyz``: extended XYZ with
            the energy, forces and deviation), every ``traj_every`` steps; ``None``: none.
        log: path of the log (a ``#`` header, then ``step`` and :data:`LOG_COLUMNS`, and ``max_devi_f``
            for a committee), every ``log_every`` steps and at a stop; ``None``: none.
        stop_deviation: eV/Å; the run ends after the first step (the start included) whose max force
            deviation exceeds it, and writes that frame and the ``keep`` frames before it to
            ``stop_file`` (extended XYZ, oldest first, each with ``step`` and ``max_devi_f`` in its info).
        select: ``(lo, hi)`` eV/Å: every frame whose max force deviation lies in [lo, hi) is written to
            ``selected_file`` (extended XYZ).
        progress: a progress line on standard error (True), on this stream, or none (False or ``None``):
            on a terminal one line updated every second, else a line every 10 s; and at the end.
        existing: what to do with an output that exists: ``"refuse"`` (a ``ValueError`` naming it, before
            anything runs), ``"overwrite"`` (replace it), ``"append"`` (extend the log and the trajectory:
            the log gets no second header and its steps count from 0 again — its header must be this
            run's —, the trajectory this run's frames after the earlier ones).  The stop file and the
            selected file (the frames a loop reads) are replaced with ``"overwrite"`` and refused otherwise.
        inputs: paths that no output may be (the structure file, the models): such an output is refused.

    Each output is written under ``PATH.tmp-PID`` beside it and moved into place (``os.replace``) when
    the run ends — also when it stops, fails or is interrupted after its start (the steps done stay);
    nothing is opened before the options are checked and the start structure is evaluated, so a run
    refused there leaves every file as it was.

    Returns:
        :class:`MDOutcome`.

    Raises:
        MDInterrupted: a ``KeyboardInterrupt`` during the steps (its ``outcome``: the steps done and written).
        ValueError: ``stop_deviation`` or ``select`` without a committee, bad values (named), an output
            that exists (with ``existing="refuse"``), names an input or another output, or lies in a
            directory that does not exist or is not writable; the calculator's error for a start
            structure it cannot evaluate (an element the model lacks, …).
    """
    from pinn.md.velocities import thermalize
    committee = "max_forces_deviation" in calc.implemented_properties  # a committee's (with D3 or not)
    if (stop_deviation is not None or select is not None) and not committee:
        raise ValueError("stop_deviation and select need a committee (several model directories, or a directory "
                         "of member-K/), whose members' disagreement they read")
    if stop_deviation is not None:
        _positive(stop_deviation=stop_deviation)
    if select is not None and not (len(select) == 2 and 0 <= select[0] < select[1]):
        raise ValueError(f"select must be (lo, hi) with 0 <= lo < hi (eV/Å), got {select!r}")
    if not isinstance(steps, (int, np.integer)) or steps < 0:
        raise ValueError(f"steps must be a whole number >= 0, got {steps!r}")
    for name, value in (("keep", keep), ("traj_every", traj_every), ("log_every", log_every)):
        if not isinstance(value, (int, np.integer)) or value < (0 if name == "keep" else 1):
            raise ValueError(f"{name} must be a whole number >= {0 if name == 'keep' else 1}, got {value!r}")
    if existing not in EXISTING:
        raise ValueError(f"existing must be one of {EXISTING}, got {existing!r}")
    if not (isinstance(temperature, (int, float, np.number)) and np.isfinite(temperature) and temperature >= 0):
        raise ValueError(f"temperature must be a number >= 0 K, got {temperature!r}")
    progress = sys.stderr if progress is True else (progress or None)
    terminal = progress is not None and hasattr(progress, "isatty") and progress.isatty()
    interval = 1.0 if terminal else 10.0  # a line updated in place, or a line every 10 s in a file
    atoms.calc = calc
    dyn = integrator(atoms, ensemble, dt, temperature, friction, tau, pressure, barostat_tau, seed)
    if traj and os.path.splitext(traj)[1].lower() not in TRAJECTORY_SUFFIXES:
        raise ValueError(f"trajectory {traj}: write .traj (ASE) or .xyz/.extxyz (extended XYZ)")
    outputs = {"log": log, "trajectory": traj, "stop file": stop_file if stop_deviation is not None else None,
               "selected file": selected_file if select is not None else None}
    _check_outputs({what: path for what, path in outputs.items() if path}, inputs, existing)
    if velocities:
        thermalize(atoms, temperature, rng=np.random.RandomState(seed))
    _evaluate_start(atoms, calc, committee)  # the model's refusals (an element it lacks, ...) before any output
    outcome = MDOutcome(steps=0)
    recent = collections.deque(maxlen=keep + 1)
    try:
        with _Outputs(log, committee, traj, outputs["selected file"], append=existing == "append") as out:
            start = shown = None  # the clock starts after the start's evaluation (which may compile kernels)
            for step in range(steps + 1):
                if step:
                    dyn.run(1)
                    outcome.steps = step
                deviation = calc.get_property("max_forces_deviation", atoms) if committee else None
                over = stop_deviation is not None and deviation > stop_deviation
                frame = _frame(atoms, step, deviation) if (stop_deviation is not None or select is not None
                                                           or (traj and step % traj_every == 0)) else None
                if step % log_every == 0 or over:
                    out.log_line(step, step * dt / 1000, atoms, deviation)
                if traj and step % traj_every == 0:
                    out.trajectory(frame)
                if select is not None and select[0] <= deviation < select[1]:
                    out.selected(frame)
                    outcome.selected += 1
                if stop_deviation is not None:
                    recent.append(frame)
                now = time.perf_counter()
                if start is None:
                    start = shown = now
                if progress is not None and (now - shown >= interval or over or step == steps):
                    shown = now
                    _progress_line(progress, step, steps, start, now, atoms, deviation, terminal)
                if over:
                    outcome.stopped_at, outcome.deviation = step, float(deviation)
                    _write_frames(stop_file, list(recent))
                    break
            outcome.ms_per_step = 1000 * (time.perf_counter() - start) / max(outcome.steps, 1) if start else 0.0
    except KeyboardInterrupt as err:  # the files are in place (the steps done): say how many
        raise MDInterrupted(outcome) from err
    finally:
        if terminal:
            progress.write("\n")
            progress.flush()
    return outcome


def _check_outputs(outputs, inputs, existing):
    """Refuse, before anything is opened, an output that names an input or another output, lies in a missing
    or read-only directory, is a directory, or exists (unless ``existing`` allows it).

    Args:
        outputs: {what: path} of the run's outputs (``"log"``, ``"trajectory"``, ``"stop file"``,
            ``"selected file"``).
        inputs: the paths no output may be.
        existing: one of :data:`EXISTING`.
    """
    seen = {}
    for what, path in outputs.items():
        real = os.path.realpath(path)
        for given in inputs:
            if real == os.path.realpath(given) or (os.path.exists(path) and os.path.exists(given)
                                                   and os.path.samefile(path, given)):
                raise ValueError(f"the {what} {path} is the input {given}: refused (it would overwrite it)")
        if real in seen:
            raise ValueError(f"the {what} {path} is also the {seen[real][0]} {seen[real][1]}: give each its own file")
        seen[real] = (what, path)
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise ValueError(f"{path}: the {what}'s directory {folder} does not exist")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise ValueError(f"{path}: the {what}'s directory {folder} is not writable")
        if os.path.isdir(path):
            raise ValueError(f"{path}: is a directory, not a file (the {what})")
        if os.path.lexists(path) and not (existing == "overwrite"
                                          or (existing == "append" and what in ("log", "trajectory"))):
            if what in ("log", "trajectory"):
                raise ValueError(f"{path}: exists (the {what}); --overwrite (existing='overwrite') replaces it, "
                                 f"--append (existing='append') extends it")
            raise ValueError(f"{path}: exists (the {what}); --overwrite (existing='overwrite') replaces it")


def _evaluate_start(atoms, calc, committee):
    """The start structure's energy and forces (and a committee's deviation): the model refuses what it cannot
    evaluate here, before any output is opened.  The calculator keeps the results for step 0."""
    energy, forces = atoms.get_potential_energy(), atoms.get_forces()
    if committee:
        calc.get_property("max_forces_deviation", atoms)
    if not (np.isfinite(energy) and np.all(np.isfinite(forces))):
        raise ValueError(f"the model's energy or forces at the start structure are not finite (energy {energy})")


def _frame(atoms, step, deviation):
    """A copy of ``atoms`` with its energy and forces, ``step`` and ``max_devi_f`` in its info."""
    from ase.calculators.singlepoint import SinglePointCalculator
    frame = atoms.copy()
    frame.info["step"] = step
    if deviation is not None:
        frame.info["max_devi_f"] = float(deviation)
    frame.calc = SinglePointCalculator(frame, energy=atoms.get_potential_energy(), forces=atoms.get_forces())
    return frame


def _write_frames(path, frames):
    """Write ``frames`` to ``path`` (extended XYZ) whole: a temporary name beside it, then renamed."""
    from pinn.io.ase_files import write
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        write(tmp, frames, format="extxyz")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _progress_line(stream, step, steps, start, now, atoms, deviation, terminal):
    """One progress line: updated in place on a terminal, else a line of its own."""
    rate = 1000 * (now - start) / max(step, 1)
    text = f"pinn md: step {step}/{steps} ({100 * step // max(steps, 1)} %), {rate:.3g} ms/step, " \
           f"T {atoms.get_temperature():.1f} K"
    if deviation is not None:
        text += f", max force deviation {deviation:.4g} eV/Å"
    stream.write("\r" + text if terminal else text + "\n")
    stream.flush()


class _Outputs:
    """The run's files (the log, the trajectory, the selected frames), each written under ``PATH.tmp-PID`` and
    moved into place when the run ends, fails or is interrupted; with ``append``, the temporary file starts as
    a copy of the existing one (an ASE trajectory: its frames written again)."""

    def __init__(self, log, committee, traj, selected, append=False):
        self._log_path, self._committee, self._traj_path, self._selected_path = log, committee, traj, selected
        self._append = append
        self._log = self._traj = self._selected = None
        self._traj_is_ase = bool(traj) and os.path.splitext(traj)[1].lower() == ".traj"
        self._temporary = {}  # final path: temporary path

    def _open(self, path, keep):
        """The temporary file of ``path``: a copy of ``path`` when ``keep`` and it exists, else empty."""
        tmp = self._temporary[path] = f"{path}.tmp-{os.getpid()}"
        if keep and os.path.exists(path):
            shutil.copyfile(path, tmp)
            return open(tmp, "a")
        return open(tmp, "w")

    def __enter__(self):
        try:
            self._enter()
        except BaseException:
            self._close()
            for tmp in self._temporary.values():
                if os.path.exists(tmp):
                    os.remove(tmp)
            raise
        return self

    def _enter(self):
        if self._log_path:
            header = "# " + " ".join(("step",) + LOG_COLUMNS + (("max_devi_f_eV/A",) if self._committee else ()))
            if self._append and os.path.exists(self._log_path):
                with open(self._log_path) as f:
                    first = f.readline().rstrip("\n")
                if first and first != header:
                    raise ValueError(f"{self._log_path}: its header {first!r} is not this run's {header!r}: "
                                     f"cannot append; --overwrite replaces it")
                self._log = self._open(self._log_path, keep=True)
                if not first:
                    self._log.write(header + "\n")
            else:
                self._log = self._open(self._log_path, keep=False)
                self._log.write(header + "\n")
        if self._traj_path and self._traj_is_ase:
            from pinn.io.ase_files import iread, trajectory_writer
            tmp = self._temporary[self._traj_path] = f"{self._traj_path}.tmp-{os.getpid()}"
            self._traj = trajectory_writer(tmp)
            if self._append and os.path.exists(self._traj_path):
                try:
                    for frame in iread(self._traj_path, ":", format="traj"):
                        self._traj.write(frame)
                except Exception as err:  # noqa: BLE001 - ASE's many errors of a file that is not a trajectory
                    raise ValueError(f"{self._traj_path}: cannot append to it: not an ASE trajectory ({err})") \
                        from err
        elif self._traj_path:
            self._traj = self._open(self._traj_path, keep=self._append)
        if self._selected_path:
            self._selected = self._open(self._selected_path, keep=False)

    def log_line(self, step, time_ps, atoms, deviation):
        if self._log is None:
            return
        epot = atoms.get_potential_energy()
        ekin = atoms.get_kinetic_energy()
        values = [f"{time_ps:.6f}", f"{epot + ekin:.8f}", f"{epot:.8f}", f"{ekin:.8f}",
                  f"{atoms.get_temperature():.3f}"]
        if deviation is not None:
            values.append(f"{deviation:.6g}")
        self._log.write(f"{step} " + " ".join(values) + "\n")

    def trajectory(self, frame):
        from pinn.io.ase_files import write
        if self._traj_is_ase:
            self._traj.write(frame)
        else:
            write(self._traj, frame, format="extxyz")

    def selected(self, frame):
        from pinn.io.ase_files import write
        write(self._selected, frame, format="extxyz")
        self._selected.flush()

    def _close(self):
        for handle in (self._log, self._traj, self._selected):
            if handle is not None:
                handle.close()

    def __exit__(self, *exc):
        """Close the files and move each into place: the steps done, whether the run ended, failed or was
        interrupted."""
        try:
            self._close()
            for path, tmp in self._temporary.items():
                os.replace(tmp, path)
        finally:
            for tmp in self._temporary.values():
                if os.path.exists(tmp):
                    os.remove(tmp)
        return False
