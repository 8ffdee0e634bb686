"""A committee in ML/MM MD (issue 77): the cost of the pinn force of flexible TIP3P water (PME 0.9 nm, 2.2 nm box)
with 2 waters by an electrostatic model alone and by a committee of M members (the members' mean drives the
dynamics), with and without a DeviationMonitor writing each step's deviation; and the MM system's own step.

The members have the electrostatic layout of bench_qmmm_models.py (PiNet depth 3, 16 nodes, rc 4.5 Å, two
outputs per atom), each with its own seed, saved untrained: their cost is the layout's, whatever the weights, but
untrained forces would blow the water up in MD, so the pinn force is timed on the thermalised water's positions
(each evaluation at positions moved by 1e-4 nm and a step count of its own, so that nothing is reused and the
monitor takes every evaluation), alternating the systems in rounds.
An MD step is the MM step plus the pinn force.  Runs on the numba engine (no TensorFlow call per evaluation).

Usage:  python benchmarks/bench_qmmm_committee.py [--members-count 4] [--members DIR ...] [--evaluations 600]
                                                  [--box 2.2] [--seed 0] [--workdir DIR] [--no-monitor]

Prints one JSON line per system: ms per evaluation of the pinn force (the median), and for the MM system ms per
NVE step (the median of 4 blocks).
"""
import argparse
import os
import sys
import tempfile
import time

import numpy as np

from bench_qmmm_md import region, run
from common import emit

NETWORK = {"name": "PiNet", "params": {"atom_types": [1, 8], "rc": 4.5, "depth": 3, "pp_nodes": [16],
                                       "pi_nodes": [16], "ii_nodes": [16, 16], "out_nodes": [16], "out_units": 2}}


def untrained_members(workdir, count):
    """``count`` electrostatic model directories of :data:`NETWORK`, seeds 0..count-1, saved untrained."""
    from pinn.models import get_model
    out = []
    for seed in range(count):
        params = {"model_dir": os.path.join(workdir, f"member-{seed}"), "network": NETWORK, "seed": seed,
                  "model": {"name": "potential_model",
                            "params": {"embedding": "electrostatic", "use_force": True, "embedding_damping": 0.0}}}
        model = get_model(params)
        model.save()
        model.close()
        out.append(params["model_dir"])
    return out


def pinn_context(system):
    """A CPU context of ``system`` whose pinn force alone is in group 1."""
    import openmm
    for force in system.getForces():
        if type(force).__name__ != "PythonForce":
            force.setForceGroup(0)
    return openmm.Context(system, openmm.VerletIntegrator(0.00025), openmm.Platform.getPlatformByName("CPU"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--members-count", type=int, default=4)
    ap.add_argument("--members", nargs="+", help="electrostatic model directories (default: untrained, made here)")
    ap.add_argument("--evaluations", type=int, default=600)
    ap.add_argument("--box", type=float, default=2.2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir")
    ap.add_argument("--no-monitor", action="store_true", help="leave out the monitored committee (older pinn)")
    args = ap.parse_args()
    from openmm import unit

    import pinn
    from pinn.md.openmm import create_mixed_system
    from pinn.qmmm_reference import _water_box
    workdir = args.workdir or tempfile.mkdtemp(prefix="bench-committee-")
    members = args.members or untrained_members(workdir, args.members_count)
    simulation, _, _ = _water_box(args.box, args.seed, 300.0, 0.25)
    simulation.step(200)  # thermalised MM water
    state = simulation.context.getState(getPositions=True, getVelocities=True)
    positions, velocities = state.getPositions(), state.getVelocities()
    topology, mm = simulation.topology, simulation.system
    qm = region(topology, positions.value_in_unit(unit.nanometer), args.box)
    mm_ms, _, _ = run(mm, positions, velocities, 400, 0.25)
    emit(benchmark="qmmm_committee", system="mm", what="ms per NVE step (0.25 fs)", atoms=mm.getNumParticles(),
         box_nm=args.box, ms=round(mm_ms, 3), python=sys.version.split()[0])
    committee = pinn.get_calc(members)
    fast = getattr(committee, "_fast_embedded", None)
    stacked = bool(fast is not None and fast.committee.stacked)
    systems = {"one model": (members[0], None), f"committee of {len(members)}": (members, None)}
    if not args.no_monitor:
        from pinn.md.openmm import DeviationMonitor
        monitor = DeviationMonitor(os.path.join(workdir, "model_devi.out"), overwrite=True)
        systems[f"committee of {len(members)}, monitored"] = (members, monitor)
    contexts = {}
    for name, (model, monitor) in systems.items():
        options = {"monitor": monitor} if monitor is not None else {}
        contexts[name] = pinn_context(create_mixed_system(mm, topology, qm, model, embedding="electrostatic",
                                                          **options))
    xyz = np.array(positions.value_in_unit(unit.nanometer))
    rng = np.random.default_rng(args.seed)
    times = {name: [] for name in contexts}
    rounds = 10
    for round_ in range(rounds + 1):  # round 0: warm-up (compilation, first neighbor lists), not counted
        for name, context in contexts.items():
            for k in range(args.evaluations // rounds):
                context.setPositions(xyz + rng.normal(0.0, 1e-4, xyz.shape))
                context.setStepCount(round_ * args.evaluations + k)  # a new step: the monitor takes each
                start = time.perf_counter()
                context.getState(getForces=True, groups={1})
                if round_:
                    times[name].append(time.perf_counter() - start)
    one = float(np.median(times["one model"]))
    for name, (model, _) in systems.items():
        ms = 1000 * float(np.median(times[name]))
        count = len(model) if isinstance(model, list) else 1
        emit(benchmark="qmmm_committee", system=name, what="ms per pinn force evaluation", members=count,
             engine=committee.engine, one_kernel_call=stacked if count > 1 else None, atoms=mm.getNumParticles(),
             qm_atoms=len(qm), box_nm=args.box, evaluations=len(times[name]), ms=round(ms, 3),
             ratio_to_one_model=round(ms / (1000 * one), 3),
             md_step_ratio_to_one_model=round((mm_ms + ms) / (mm_ms + 1000 * one), 3), python=sys.version.split()[0])


if __name__ == "__main__":
    main()
