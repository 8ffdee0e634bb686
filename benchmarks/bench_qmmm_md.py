"""ML/MM MD in OpenMM (issue 59): time per step of flexible TIP3P water (PME) with 2 waters by a pinn model, with
mechanical and with electrostatic embedding, against the MM system alone, and the NVE drift of the electrostatic
ML/MM system; the models are those bench_qmmm_models.py trains (its --workdir holds mechanical/ and
electrostatic/).

Usage:  python benchmarks/bench_qmmm_md.py WORKDIR [--steps 400] [--box 2.2] [--timestep-fs 0.25] [--seed 0]

Prints one JSON line per system: ms per step (the median of 4 blocks), and for NVE runs the total energy's drift
(max − min, kJ/mol) against the kinetic energy.
"""
import argparse
import os
import sys
import time

import numpy as np

from common import emit


def region(topology, positions, box_nm):
    """The first water and the water nearest to it (oxygens, minimum image): the 6 atoms of the QM region."""
    waters = [[a.index for a in r.atoms()] for r in topology.residues()]
    oxygens = np.array([positions[w[0]] for w in waters])
    offset = oxygens - oxygens[0]
    distance = np.linalg.norm(offset - box_nm * np.round(offset / box_nm), axis=1)
    distance[0] = np.inf
    return waters[0] + waters[int(np.argmin(distance))]


def run(system, positions, velocities, steps, timestep_fs):
    """(ms per step, total energies every 10 steps) of NVE Verlet steps."""
    import openmm
    from openmm import unit
    integrator = openmm.VerletIntegrator(timestep_fs * unit.femtosecond)
    context = openmm.Context(system, integrator, openmm.Platform.getPlatformByName("CPU"))
    context.setPositions(positions)
    context.setVelocities(velocities)
    integrator.step(10)  # first calls: tracing, neighbor lists
    blocks, totals = [], []
    for _ in range(4):
        start = time.perf_counter()
        for _ in range(steps // 40):
            integrator.step(10)
            state = context.getState(getEnergy=True)
            total = state.getPotentialEnergy() + state.getKineticEnergy()
            totals.append(total.value_in_unit(unit.kilojoule_per_mole))
        blocks.append((time.perf_counter() - start) / (steps // 4))
    return 1000 * float(np.median(blocks)), np.array(totals), state.getKineticEnergy().value_in_unit(
        unit.kilojoule_per_mole)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workdir")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--box", type=float, default=2.2)
    ap.add_argument("--timestep-fs", type=float, default=0.25)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    from openmm import unit

    from pinn.md.openmm import create_mixed_system
    from pinn.qmmm_reference import _water_box
    simulation, _, _ = _water_box(args.box, args.seed, 300.0, args.timestep_fs)
    simulation.step(200)  # thermalised MM water
    state = simulation.context.getState(getPositions=True, getVelocities=True)
    positions, velocities = state.getPositions(), state.getVelocities()
    topology, mm = simulation.topology, simulation.system
    qm = region(topology, positions.value_in_unit(unit.nanometer), args.box)
    import pinn
    systems, engines = {"mm": mm}, {"mm": None}
    for embedding in ("mechanical", "electrostatic"):
        model = os.path.join(args.workdir, embedding)
        systems[embedding] = create_mixed_system(mm, topology, qm, model, embedding=embedding)
        engines[embedding] = pinn.get_calc(model).engine  # the engine the pinn force's calculator takes
    for name, system in systems.items():
        ms, totals, kinetic = run(system, positions, velocities, args.steps, args.timestep_fs)
        emit(benchmark="qmmm_md", system=name, engine=engines[name], atoms=mm.getNumParticles(),
             qm_atoms=0 if name == "mm" else len(qm),
             box_nm=args.box, steps=args.steps, timestep_fs=args.timestep_fs, ms_per_step=round(ms, 2),
             nve_drift_kj_mol=round(float(totals.max() - totals.min()), 3), kinetic_kj_mol=round(kinetic, 1),
             python=sys.version.split()[0])


if __name__ == "__main__":
    main()
