"""The explorer of ``pinn learn``: ML/MM MD in OpenMM with the round's committee, a record every ``every`` steps
(:class:`~pinn.md.openmm_deviation.DeviationMonitor`: the deviations and the frames), stopped at the first step
over the band's upper bound, and the state it goes on from.

The MM system comes from a PDB and OpenMM force field files, or from a GROMACS topology and coordinates; a system
without MM (``explorer.start``: a structure ASE reads) runs on ASE's Langevin integrator instead
(:class:`ASEExplorer`).  A round
runs in chunks of ``every`` steps; after each chunk the deviation of the step reached is taken at once, and a
state whose steps all stayed under the upper bound is the last accepted state (positions, velocities, box, step,
time), which the next round starts from.
"""
import dataclasses
import logging
import os
from typing import Any, List, Optional

import numpy as np

log = logging.getLogger("pinn")


@dataclasses.dataclass
class Exploration:
    """What one round of exploration found.

    Attributes:
        steps, deviations: the records' steps and ``max_devi_f_qm`` (eV/Å).
        frames: the records' frames (``ase.Atoms`` as the committee saw them).
        stop: the :class:`~pinn.md.openmm_deviation.DeviationStop` over the upper bound, or ``None``.
        state: the last accepted state (dict of NumPy arrays: positions and velocities in nm and nm/ps, box in
            nm, step, time in ps).
        steps_run: the steps the round ran up to its stop or its end.
    """
    steps: List[int]
    deviations: List[float]
    frames: List[Any]
    stop: Optional[Any]
    state: dict
    steps_run: int


class OpenMMExplorer:
    """ML/MM MD of the run file's ``explorer`` section (see :mod:`pinn.learn.config`).

    Args:
        section: the validated ``explorer`` section.
    """

    def __init__(self, section):
        import openmm
        from openmm import app, unit
        self.section = section
        system = None
        if section["pdb"]:
            pdb = app.PDBFile(section["pdb"])
            self.topology = pdb.topology
            positions = pdb.getPositions(asNumpy=True).value_in_unit(unit.nanometer)
            if section["system"]:
                from pinn.md.openmm_files import read_system_xml
                system = read_system_xml(section["system"], self.topology.getNumAtoms(), "explorer.system")
            else:
                create = app.ForceField(*section["forcefield"]).createSystem
        else:
            gro = app.GromacsGroFile(section["gro"])
            options = {"includeDir": section["include_dir"]} if section["include_dir"] else {}
            top = app.GromacsTopFile(section["top"], periodicBoxVectors=gro.getPeriodicBoxVectors(), **options)
            self.topology = top.topology
            positions = gro.getPositions(asNumpy=True).value_in_unit(unit.nanometer)
            create = top.createSystem
        method = getattr(app, section["nonbonded"])
        options = {} if method is app.NoCutoff else {"nonbondedCutoff": section["cutoff_nm"] * unit.nanometer}
        if system is not None:
            self.mm = system
        else:
            try:
                self.mm = create(self.topology, nonbondedMethod=method, constraints=None, rigidWater=False, **options)
            except TypeError:  # GROMACS topologies take no rigidWater
                self.mm = create(nonbondedMethod=method, constraints=None, **options)
        self.qm = self._qm_atoms(section["qm"])
        elements = [atom.element for atom in self.topology.atoms()]
        missing = [i for i in self.qm if elements[i] is None]
        if missing:
            raise ValueError(f"explorer.qm: atom(s) {missing[:5]} of the system have no element (virtual sites); "
                             "the QM region is real atoms")
        #: the atomic numbers of the atoms the committee sees (the QM region)
        self.elements = sorted({elements[i].atomic_number for i in self.qm})
        box = self.topology.getPeriodicBoxVectors()
        if box is None and self.mm.usesPeriodicBoundaryConditions():  # a PDB without CRYST1, a periodic System
            box = self.mm.getDefaultPeriodicBoxVectors()
        self.initial_state = {"positions": np.asarray(positions, np.float64),
                              "velocities": self._thermal_velocities(positions, box),
                              "box": None if box is None else np.asarray(box.value_in_unit(unit.nanometer)),
                              "step": 0, "time_ps": 0.0}
        self._openmm = openmm

    def mm_frames(self, count, spacing):
        """Frames of the MM system's own MD (the explorer's thermostat, seeded), as a model of the explorer's
        embedding would see them (:class:`~pinn.md.openmm.FrameCutter`): ``count`` frames ``spacing`` steps
        apart, the first after ``spacing`` steps."""
        from openmm import unit

        from pinn.md.openmm import FrameCutter
        section = self.section
        openmm = self._openmm
        cutter = FrameCutter(self.mm, self.topology, self.qm, embedding=section["embedding"])
        integrator = openmm.LangevinMiddleIntegrator(section["temperature_k"] * unit.kelvin,
                                                     section["friction_per_ps"] / unit.picosecond,
                                                     section["timestep_fs"] * unit.femtosecond)
        integrator.setRandomNumberSeed(1 + section["seed"])
        context = openmm.Context(self.mm, integrator, openmm.Platform.getPlatformByName(section["platform"]))
        state = self.initial_state
        if state["box"] is not None:
            context.setPeriodicBoxVectors(*state["box"])
        context.setPositions(state["positions"])
        context.setVelocities(state["velocities"])
        frames = []
        for k in range(count):
            integrator.step(spacing)
            now = context.getState(getPositions=True)
            box = now.getPeriodicBoxVectors(asNumpy=True)
            frame = cutter(now.getPositions(asNumpy=True).value_in_unit(unit.nanometer),
                           None if self.initial_state["box"] is None else box.value_in_unit(unit.nanometer))
            frame.info.update(step=(k + 1) * spacing, time_ps=(k + 1) * spacing * section["timestep_fs"] / 1000)
            frames.append(frame)
        return frames

    def _thermal_velocities(self, positions, box):
        """Velocities at the explorer's temperature (seeded), drawn on the MM system (OpenMM evaluates the forces
        when it draws them: the committee's monitor must not see that)."""
        import openmm
        from openmm import unit
        context = openmm.Context(self.mm, openmm.VerletIntegrator(0.001),
                                 openmm.Platform.getPlatformByName("Reference"))
        if box is not None:
            context.setPeriodicBoxVectors(*box)
        context.setPositions(positions)
        context.setVelocitiesToTemperature(self.section["temperature_k"] * unit.kelvin, self.section["seed"])
        velocities = context.getState(getVelocities=True).getVelocities(asNumpy=True)
        return np.asarray(velocities.value_in_unit(unit.nanometer / unit.picosecond))

    def _qm_atoms(self, selection):
        atoms = list(self.topology.atoms())
        if isinstance(selection, dict):
            names = selection.get("resname")
            names = [names] if isinstance(names, str) else list(names or [])
            chosen = [a.index for a in atoms if a.residue.name in names]
            if not chosen or set(selection) - {"resname"}:
                raise ValueError(f"explorer.qm: {selection!r} selects no atoms (give indices or {{resname: NAME}})")
            return chosen
        chosen = [int(i) for i in selection]
        if not chosen or min(chosen) < 0 or max(chosen) >= len(atoms):
            raise ValueError(f"explorer.qm: indices must lie in 0..{len(atoms) - 1}")
        return chosen

    def explore(self, members, state, high, abort, records_path, frames_path):
        """One round: ML/MM MD with the committee of ``members`` from ``state`` (the last accepted one).

        Args:
            members: the round's model directories.
            state: the state to start from (:attr:`initial_state` or a round's :attr:`Exploration.state`).
            high: eV/Å; the round stops at the first step whose deviation on the QM atoms exceeds it.
            abort: eV/Å; a blow-up (recorded, not labelled).
            records_path, frames_path: the round's ``model_devi.out`` and frames (extended XYZ).

        Returns:
            :class:`Exploration`.
        """
        from openmm import app, unit

        from pinn.md.openmm import DeviationMonitor, create_mixed_system
        section = self.section
        openmm = self._openmm
        every = section["every"]
        monitor = DeviationMonitor(records_path, every=every, stop_above=high, frames=frames_path, overwrite=True)
        system = create_mixed_system(self.mm, self.topology, self.qm, list(members), embedding=section["embedding"],
                                     monitor=monitor)
        integrator = openmm.LangevinMiddleIntegrator(section["temperature_k"] * unit.kelvin,
                                                     section["friction_per_ps"] / unit.picosecond,
                                                     section["timestep_fs"] * unit.femtosecond)
        # OpenMM draws a seed of its own for 0: 1 + the run's seed + the start step, the same in a restarted round
        integrator.setRandomNumberSeed(1 + section["seed"] + int(state["step"]))
        simulation = app.Simulation(self.topology, system, integrator,
                                    openmm.Platform.getPlatformByName(section["platform"]))
        context = simulation.context
        if state["box"] is not None:
            context.setPeriodicBoxVectors(*state["box"])
        context.setPositions(state["positions"])
        context.setVelocities(state["velocities"])
        context.setStepCount(int(state["step"]))
        context.setTime(float(state["time_ps"]))
        accepted = dict(state)
        first = int(state["step"])
        try:
            stop = _checked(context, monitor)
            done = 0
            while stop is None and done < section["steps"]:
                stop = monitor.run(simulation, min(every, section["steps"] - done))
                if stop is None:
                    stop = _checked(context, monitor)
                if stop is None:
                    accepted = _state_of(context)
                    done = accepted["step"] - first
        finally:
            monitor.close()
        steps_run = (stop.step if stop is not None else context.getState().getStepCount()) - first
        steps, deviations, frames = _records(records_path, frames_path)
        if stop is not None and stop.deviation["max_devi_f_qm"] > abort:
            log.warning("round stopped at a blow-up (%.3g eV/Å over the abort bound %g): back to step %d",
                        stop.deviation["max_devi_f_qm"], abort, accepted["step"])
        return Exploration(steps, deviations, frames, stop, accepted, steps_run)


class ASEExplorer:
    """MD of a system without MM on ASE's Langevin integrator with the round's committee (``explorer.start``):
    what ``pinn md`` runs, in rounds.  Its states hold positions in Å and ASE's velocities; the deviation is over
    every atom (all are the model's).

    Args:
        section: the validated ``explorer`` section.
    """

    def __init__(self, section):
        from pinn.io import ase_files
        from pinn.md.velocities import thermalize
        self.section = section
        self.template = ase_files.read(section["start"], index=0)
        #: the atomic numbers of the atoms the committee sees (every atom)
        self.elements = sorted(set(self.template.numbers.tolist()))
        atoms = self.template.copy()
        thermalize(atoms, section["temperature_k"], np.random.RandomState(section["seed"]))
        self.initial_state = {"positions": atoms.positions.copy(), "velocities": atoms.get_velocities(),
                              "box": atoms.cell[:].copy(), "step": 0, "time_ps": 0.0}

    def explore(self, members, state, high, abort, records_path, frames_path):
        """One round (see :meth:`OpenMMExplorer.explore`), the deviation taken at every step."""
        from pinn.calculator import get_calc
        from pinn.md.ase_md import integrator
        from pinn.md.openmm_deviation import DeviationMonitor
        section = self.section
        every = section["every"]
        monitor = DeviationMonitor(records_path, every=every, stop_above=high, frames=frames_path, overwrite=True)
        calc = get_calc(list(members))
        monitor.attach_check(calc)
        atoms = self.template.copy()
        atoms.positions = state["positions"]
        atoms.set_velocities(state["velocities"])
        atoms.cell = state["box"]
        atoms.calc = calc
        first = int(state["step"])
        dynamics = integrator(atoms, "langevin", section["timestep_fs"], temperature=section["temperature_k"],
                              friction=section["friction_per_ps"], seed=1 + section["seed"] + first)
        accepted = dict(state)
        stop = None
        step = first
        dt_ps = section["timestep_fs"] / 1000.0
        try:
            while True:
                atoms.get_forces()
                try:
                    monitor.record(step, float(state["time_ps"]) + (step - first) * dt_ps, atoms, calc.results)
                except RuntimeError:
                    stop = monitor.stopped
                    break
                if step % every == 0 or step == first:
                    accepted = {"positions": atoms.positions.copy(), "velocities": atoms.get_velocities(),
                                "box": atoms.cell[:].copy(), "step": step,
                                "time_ps": float(state["time_ps"]) + (step - first) * dt_ps}
                if step - first >= section["steps"]:
                    break
                dynamics.run(1)
                step += 1
        finally:
            monitor.close()
        steps, deviations, frames = _records(records_path, frames_path)
        if stop is not None and stop.deviation["max_devi_f_qm"] > abort:
            log.warning("round stopped at a blow-up (%.3g eV/Å over the abort bound %g): back to step %d",
                        stop.deviation["max_devi_f_qm"], abort, accepted["step"])
        return Exploration(steps, deviations, frames, stop, accepted, step - first)


def explorer_of(section):
    """The explorer the run file's ``explorer`` section names: OpenMM ML/MM (pdb or top) or ASE (start)."""
    return ASEExplorer(section) if section["start"] else OpenMMExplorer(section)


def _checked(context, monitor):
    """The deviation of the context's current step taken now (the forces evaluated: the monitor records it); the
    :class:`~pinn.md.openmm_deviation.DeviationStop` when it is over the upper bound, else ``None``."""
    try:
        context.getState(getEnergy=True)
    except Exception:  # OpenMM's exception with the force's message: ours only when the monitor stopped
        if monitor.stopped is None:
            raise
    return monitor.stopped


def _state_of(context):
    from openmm import unit
    state = context.getState(getPositions=True, getVelocities=True)
    box = state.getPeriodicBoxVectors(asNumpy=True)
    return {"positions": state.getPositions(asNumpy=True).value_in_unit(unit.nanometer),
            "velocities": state.getVelocities(asNumpy=True).value_in_unit(unit.nanometer / unit.picosecond),
            "box": None if box is None else box.value_in_unit(unit.nanometer),
            "step": int(state.getStepCount()), "time_ps": float(state.getTime().value_in_unit(unit.picosecond))}


def _records(records_path, frames_path):
    """The steps, ``max_devi_f_qm`` and frames a round's monitor wrote (empty when it wrote none)."""
    from pinn.io import ase_files
    from pinn.io.model_devi import read_model_devi
    if not os.path.exists(records_path):
        return [], [], []
    table = read_model_devi(records_path)
    frames = ase_files.read(frames_path, index=":") if os.path.exists(frames_path) else []
    return table["step"].tolist(), table["max_devi_f_qm"].tolist(), frames


def save_state(path, state):
    """Write an explorer state (:attr:`Exploration.state`) to ``path`` (``.npz``) atomically."""
    from pinn.files.durable import replacing
    arrays = {key: np.asarray(value) for key, value in state.items() if value is not None}
    with replacing(path, "wb") as f:
        np.savez(f, **arrays)


def load_state(path):
    """The explorer state of ``path`` (:func:`save_state`)."""
    with np.load(path) as data:
        state = {key: data[key] for key in data.files}
    return {"positions": state["positions"], "velocities": state.get("velocities"), "box": state.get("box"),
            "step": int(state["step"]), "time_ps": float(state["time_ps"])}
