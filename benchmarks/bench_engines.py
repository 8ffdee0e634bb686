"""ms/step of the same model and system in each MD engine: ASE, LAMMPS, OpenMM, i-PI.

Usage:  python benchmarks/bench_engines.py [ethanol cu108 acetone-water] [--steps 200]

For each system, one model file (``pinn export`` of the model bench_train.py left in bench-data:
ethanol's for ethanol and for acetone in water, H C O; Cu 108's for Cu), and NVE with a 0.5 fs step
(velocity Verlet in each engine; i-PI: one bead, ``nve``).  Every line has the median ms per step
over the steps after 10 warm-up ones and, for reference, ``pinn_ms``: the pinn calculator's own time
per force call in ASE's MD of the same system (the Numba engine, the Verlet list's updates and the
calculator around them; line ``pinn-calculator``), so ``overhead`` = ms/step / pinn_ms − 1 is what the
engine adds.

- ``ase``: ``ase.md.verlet.VelocityVerlet`` with the calculator;
- ``lammps``: ``fix nve`` + :func:`pinn.md.lammps.attach` (``run`` of all steps, timed per step by
  the callback; ethanol in a periodic box with 6 Å of vacuum around it, farther than the cutoff);
- ``openmm``: ``VerletIntegrator`` on a system of the pinn force alone (:func:`pinn.md.openmm.pinn_force`;
  CPU platform), timed per ``step(1)``;
- ``ipi``: i-PI's server (a subprocess) and ASE's socket client (what :func:`pinn.md.ipi.serve_ipi`
  runs) in this process, timed between force requests; ``ipi-alone``: i-PI's own time per step,
  with its dummy forcefield in process (two runs' difference, start-up left out); ``ipi-direct``:
  pinn inside i-PI's process (``<ffdirect>``, :mod:`pinn.md.ipi_driver`; i-PI in a subprocess,
  ``<simulation threading="false">``: one system needs no thread pool), the
  median interval between i-PI's calls of pinn's driver; ``ipi-direct-driver``: the median time
  inside the driver (pinn's calculator and the unit conversions) of the same run;
- acetone in water (1528 atoms, amber03 + SPC/E, PME 1 nm): ``openmm-mm`` the MM system alone,
  ``openmm-mlmm`` the ML/MM system (acetone's 10 atoms ML, :func:`pinn.md.openmm.create_mixed_system`),
  and ``ase``/``openmm`` the whole system as ML.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

from common import DATA, emit

SYSTEMS = ("ethanol", "cu108", "acetone-water")
STEP_FS = 0.5
#: i-PI's polling interval of its socket (s): its default, 1e-4, is most of a small system's step
IPI_LATENCY = float(os.environ.get("PINN_BENCH_IPI_LATENCY", "1e-4"))
#: the acetone-in-water system (GROMACS topology and gzipped coordinates, tests/data/mimic)
ACETONE_WATER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "mimic")


def _structure(name):
    from ase.build import bulk, molecule
    if name == "ethanol":
        atoms = molecule("CH3CH2OH")
        atoms.center(vacuum=6.0)
        return atoms, "ethanol"
    if name == "cu108":
        return bulk("Cu", "fcc", a=3.61, cubic=True) * (3, 3, 3), "cu108"
    from ase import Atoms
    gro = _acetone_water()[0]
    positions = np.array(gro.positions.value_in_unit(gro.positions.unit)) * 10.0
    numbers = [a.element.atomic_number for a in _acetone_water()[1].topology.atoms()]
    cell = np.array(gro.getPeriodicBoxVectors()._value) * 10.0
    return Atoms(numbers=numbers, positions=positions, cell=cell, pbc=True), "ethanol"


_ACETONE = {}


def _acetone_water():
    if not _ACETONE:
        import gzip
        from openmm import app, unit
        work = tempfile.mkdtemp(prefix="bench-acetone-")
        for name in ("acetone.top", "acetone.itp"):
            shutil.copy(os.path.join(ACETONE_WATER, name), work)
        with gzip.open(os.path.join(ACETONE_WATER, "equilibrated.gro.gz")) as packed, \
                open(os.path.join(work, "equilibrated.gro"), "wb") as out:
            out.write(packed.read())
        gro = app.GromacsGroFile(os.path.join(work, "equilibrated.gro"))
        top = app.GromacsTopFile(os.path.join(work, "acetone.top"),
                                 periodicBoxVectors=gro.getPeriodicBoxVectors(), includeDir="/usr/share/gromacs/top")
        mm = top.createSystem(nonbondedMethod=app.PME, nonbondedCutoff=1.0 * unit.nanometer)
        _ACETONE.update(gro=gro, top=top, mm=mm)
    return _ACETONE["gro"], _ACETONE["top"], _ACETONE["mm"]


def _thermal(atoms, temperature=300):
    from pinn.md.velocities import thermalize
    thermalize(atoms, temperature, rng=np.random.RandomState(0))


def run_ase(atoms, model, steps):
    """ASE's velocity Verlet: ``(ms per step, ms per force call of the calculator in it)``; the second is
    the reference of every engine (the Numba engine, the neighbor list's updates and the calculator
    on the same kind of trajectory)."""
    import pinn
    from ase import units
    from ase.md.verlet import VelocityVerlet
    atoms = atoms.copy()
    calc = atoms.calc = pinn.get_calc(model)
    calls, calculate = [], calc.calculate

    def timed_calculate(*args, **kwargs):
        t0 = time.perf_counter()
        calculate(*args, **kwargs)
        calls.append(time.perf_counter() - t0)
    calc.calculate = timed_calculate
    _thermal(atoms)
    md = VelocityVerlet(atoms, STEP_FS * units.fs)
    return _median_ms(lambda: md.run(1), steps), 1000 * float(np.median(calls[10:]))


def _median_ms(step, steps, warm_up=10):
    """Median ms of ``step()`` over ``steps`` calls after ``warm_up`` ones."""
    times = []
    for k in range(steps + warm_up):
        t0 = time.perf_counter()
        step()
        if k >= warm_up:
            times.append(time.perf_counter() - t0)
    return 1000 * float(np.median(times))


def run_lammps(atoms, model, steps):
    from ase.data import atomic_masses, chemical_symbols
    from pinn.md.lammps import attach, load_lammps
    lmp = load_lammps()(cmdargs=["-log", "none", "-screen", "none", "-nocite"])
    elements = sorted(set(atoms.numbers))
    cell = atoms.cell.array
    if np.count_nonzero(cell - np.diag(np.diag(cell))):
        raise ValueError("this benchmark gives LAMMPS orthogonal boxes")  # ethanol: periodic, 6 Å of vacuum
    lmp.commands_string(f"""units metal
atom_style atomic
atom_modify map array
boundary p p p
region box block 0 {cell[0, 0]} 0 {cell[1, 1]} 0 {cell[2, 2]}
create_box {len(elements)} box
timestep {STEP_FS / 1000}
thermo 0""")
    for t, z in enumerate(elements, start=1):
        lmp.command(f"mass {t} {atomic_masses[z]}")
    for z, position in zip(atoms.numbers, atoms.positions):
        lmp.command(f"create_atoms {elements.index(z) + 1} single {position[0]} {position[1]} {position[2]} units box")
    lmp.command("velocity all create 300 4928459 dist gaussian mom yes")
    lmp.command("fix nve all nve")
    fix = attach(lmp, model, elements=[chemical_symbols[z] for z in elements])
    stamps = []
    callback = fix.callback

    def timed(*args):
        callback(*args)
        stamps.append(time.perf_counter())
    lmp.set_fix_external_callback(fix.fix_id, timed, lmp)
    fix.run(steps + 10)
    lmp.close()
    return 1000 * float(np.median(np.diff(stamps[10:])))


def run_openmm(atoms, model, steps):
    import openmm
    from openmm import unit
    from pinn.md.openmm import pinn_force
    system = openmm.System()
    for mass in atoms.get_masses():
        system.addParticle(mass)
    periodic = bool(atoms.pbc.all())
    if periodic:
        system.setDefaultPeriodicBoxVectors(*[openmm.Vec3(*row) * 0.1 for row in atoms.cell.array])
    system.addForce(pinn_force(model, atoms.numbers, periodic=periodic))
    return _time_openmm(system, atoms.positions * 0.1, steps)


def _time_openmm(system, positions_nm, steps):
    import openmm
    from openmm import unit
    integrator = openmm.VerletIntegrator(STEP_FS * 0.001)
    context = openmm.Context(system, integrator, openmm.Platform.getPlatformByName("CPU"))
    context.setPositions(positions_nm * unit.nanometer if not hasattr(positions_nm, "unit") else positions_nm)
    context.setVelocitiesToTemperature(300, 1)
    return _median_ms(lambda: integrator.step(1), steps)


def _ipi_input(work, atoms, steps, forcefield, threading=True):
    """Write i-PI's init.xyz and input.xml (NVE, one bead) with the given forcefield element;
    ``threading=False``: i-PI's steps in its main thread, not its thread pool (one system needs none)."""
    a, b, c = atoms.cell.lengths() if atoms.pbc.all() else (30.0, 30.0, 30.0)
    lines = [str(len(atoms)), f"# CELL(abcABC): {a} {b} {c} 90.0 90.0 90.0 cell{{angstrom}} positions{{angstrom}}"]
    lines += [f"{s} {x:.10f} {y:.10f} {z:.10f}" for s, (x, y, z) in zip(atoms.get_chemical_symbols(), atoms.positions)]
    with open(os.path.join(work, "init.xyz"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(work, "input.xml"), "w") as f:
        f.write(f"""<simulation verbosity="quiet" safe_stride="100000" threading="{str(threading).lower()}">
  <output prefix="sim"><properties stride="100000" filename="out">[ step ]</properties></output>
  <total_steps>{steps}</total_steps>
  {forcefield}
  <system>
    <initialize nbeads="1"><file mode="xyz" units="angstrom">init.xyz</file>
      <velocities mode="thermal" units="kelvin">300</velocities></initialize>
    <forces><force forcefield="pinn"/></forces>
    <motion mode="dynamics"><dynamics mode="nve"><timestep units="femtosecond">{STEP_FS}</timestep></dynamics></motion>
  </system>
</simulation>
""")


def _ipi_program():
    return shutil.which("i-pi") or os.path.join(os.path.dirname(sys.executable), "i-pi")


def run_ipi_alone(atoms, steps):
    """i-PI's own time per step: its dummy forcefield (zero forces) in its own process, no socket; the
    difference of two runs' wall times, so that start-up does not count."""
    walls, extra = [], 20000  # enough steps that start-up's spread (~0.1 s) stays small
    for n in (100, 100 + extra):
        work = tempfile.mkdtemp(prefix="bench-ipi-")
        _ipi_input(work, atoms, n, '<ffdirect name="pinn"><pes>dummy</pes></ffdirect>')
        t0 = time.perf_counter()
        subprocess.run([_ipi_program(), "input.xml"], cwd=work, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=True)
        walls.append(time.perf_counter() - t0)
        shutil.rmtree(work, ignore_errors=True)
    return 1000 * (walls[1] - walls[0]) / extra


#: i-PI in a process of its own, its forcefield's calls timed: the median interval between them
_IPI_TIMED = r"""
import json, time
import numpy as np
from ipi.engine.simulation import Simulation
from ipi.pes.dummy import Dummy_driver
stamps, inside, call = [], [], Dummy_driver.__call__
def timed(self, cell, pos):
    stamps.append(time.perf_counter())
    done = call(self, cell, pos)
    inside.append(time.perf_counter() - stamps[-1])
    return done
Dummy_driver.__call__ = timed
Simulation.load_from_xml(open("input.xml"), request_banner=False, custom_verbosity="quiet").run()
print(json.dumps([1000 * float(np.median(np.diff(stamps[10:]))), 1000 * float(np.median(inside[10:]))]))
"""


IPI_DIRECT_INSIDE_MS = {}


def run_ipi_direct(atoms, model, steps):
    """i-PI with pinn in its own process (``<ffdirect>`` of :func:`pinn.md.ipi.ffdirect_element`):
    the median interval between its calls of pinn's driver, i.e. a whole step.  Sets
    ``IPI_DIRECT_INSIDE_MS``: the median time inside the driver (pinn's part of the step)."""
    from pinn.md.ipi import ffdirect_element
    work = tempfile.mkdtemp(prefix="bench-ipi-")
    _ipi_input(work, atoms, steps + 10, ffdirect_element(model, os.path.join(work, "init.xyz"),
                                                        pbc=bool(atoms.pbc.all())), threading=False)
    done = subprocess.run([sys.executable, "-c", _IPI_TIMED], cwd=work, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"i-PI with pinn in process failed: {done.stderr[-2000:]}")
    shutil.rmtree(work, ignore_errors=True)
    step_ms, inside_ms = json.loads(done.stdout.strip().splitlines()[-1])
    IPI_DIRECT_INSIDE_MS[atoms.get_chemical_formula()] = inside_ms
    return step_ms


def run_ipi(atoms, model, steps):
    from ase.calculators.socketio import SocketClient
    import pinn
    ipi = _ipi_program()
    work = tempfile.mkdtemp(prefix="bench-ipi-")
    address = f"pinn-bench-{os.getpid()}"
    _ipi_input(work, atoms, steps + 10, f'<ffsocket name="pinn" mode="unix" pbc="{str(bool(atoms.pbc.all())).lower()}">'
               f'<address>{address}</address><latency>{IPI_LATENCY}</latency></ffsocket>')
    server = subprocess.Popen([ipi, "input.xml"], cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    socket = f"/tmp/ipi_{address}"
    while not os.path.exists(socket):
        if server.poll() is not None:
            raise RuntimeError(f"i-PI stopped (see {work})")
        time.sleep(0.1)
    client_atoms = atoms.copy()
    client_atoms.calc = pinn.get_calc(model)
    client = SocketClient(unixsocket=address)
    stamps = []
    for _ in client.irun(client_atoms, use_stress=False):
        stamps.append(time.perf_counter())
    client.close()
    server.wait(timeout=120)
    shutil.rmtree(work, ignore_errors=True)
    return 1000 * float(np.median(np.diff(stamps[10:])))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("systems", nargs="*", default=list(SYSTEMS))
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--engines", default="ase,lammps,openmm,ipi,ipi-direct")
    args = ap.parse_args()
    from pinn.models.export import export_model
    tmp = tempfile.mkdtemp(prefix="bench-engines-")
    for name in args.systems:
        atoms, model_name = _structure(name)
        model = os.path.join(tmp, f"{model_name}.pinn")
        if not os.path.exists(model):
            export_model(os.path.join(DATA, f"{model_name}-model"), model)
        ase_ms, reference = run_ase(atoms, model, args.steps)
        emit(benchmark="engines", system=name, atoms=len(atoms), engine="pinn-calculator", ms_per_step=round(reference, 3))
        runners = {"ase": lambda *a: ase_ms, "lammps": run_lammps, "openmm": run_openmm, "ipi": run_ipi,
                   "ipi-direct": run_ipi_direct}
        for engine in args.engines.split(","):
            ms = runners[engine](atoms, model, args.steps)
            emit(benchmark="engines", system=name, atoms=len(atoms), engine=engine, ms_per_step=round(ms, 3),
                 pinn_ms=round(reference, 3), overhead=round(ms / reference - 1, 3))
            if engine == "ipi-direct":
                emit(benchmark="engines", system=name, atoms=len(atoms), engine="ipi-direct-driver",
                     ms_per_step=round(IPI_DIRECT_INSIDE_MS[atoms.get_chemical_formula()], 3))
            if engine == "ipi":
                emit(benchmark="engines", system=name, atoms=len(atoms), engine="ipi-alone",
                     ms_per_step=round(run_ipi_alone(atoms, args.steps), 3))
        if name == "acetone-water":
            from pinn.md.openmm import create_mixed_system
            gro, top, mm = _acetone_water()
            ml = [a.index for a in top.topology.atoms() if a.residue.name == "ACT"]
            for label, system in (("openmm-mm", mm), ("openmm-mlmm", create_mixed_system(mm, top.topology, ml, model))):
                ms = _time_openmm(system, gro.positions, args.steps)
                emit(benchmark="engines", system=name, atoms=len(atoms), engine=label, ms_per_step=round(ms, 3),
                     ml_atoms=len(ml) if label == "openmm-mlmm" else 0)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
