"""OpenMM systems of the ML/MM tests: flexible TIP3P water built by OpenMM itself, an electrostatic model trained
briefly by `pinn train`, and the pinn force group's energy and forces of a context."""
import numpy as np
import yaml

from settings import qmmm_frame

#: the water box (nm) and the PME cutoff (nm)
BOX_NM, CUTOFF_NM = 2.0, 0.9


def water(method):
    """(topology, system, positions) of flexible TIP3P water in a 2 nm box (``method``: app.PME or app.NoCutoff)."""
    import openmm
    from openmm import app, unit
    forcefield = app.ForceField("amber14/tip3p.xml")
    modeller = app.Modeller(app.Topology(), [])
    modeller.addSolvent(forcefield, model="tip3p", boxSize=openmm.Vec3(BOX_NM, BOX_NM, BOX_NM) * unit.nanometer)
    options = {"nonbondedCutoff": CUTOFF_NM * unit.nanometer} if method is app.PME else {}
    system = forcefield.createSystem(modeller.topology, nonbondedMethod=method, constraints=None, rigidWater=False,
                                     **options)
    return modeller.topology, system, modeller.positions


def context_of(system, positions, step_ps=0.00025):
    """A Reference-platform context of ``system`` (velocity Verlet, ``step_ps``) at ``positions``."""
    import openmm
    context = openmm.Context(system, openmm.VerletIntegrator(step_ps), openmm.Platform.getPlatformByName("Reference"))
    context.setPositions(positions)
    return context


def pinn_state(context, forces=False):
    """The pinn force group's (1) energy (kJ/mol) and, with ``forces``, its forces (kJ/mol/nm)."""
    from openmm import unit
    state = context.getState(getEnergy=True, getForces=forces, groups={1})
    energy = state.getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole)
    return (energy, state.getForces(asNumpy=True).value_in_unit(unit.kilojoule_per_mole / unit.nanometer)) \
        if forces else energy


def train_electrostatic_water_model(workdir, seed=0, steps=2):
    """An electrostatic PiNet (float64) trained ``steps`` steps by `pinn train` on synthetic QM/MM frames
    (``workdir/model``); returns the model directory."""
    from pinn.cli import main
    from pinn.io import ase_files
    ase_files.write(str(workdir / "frames.xyz"), [qmmm_frame(s) for s in range(4)], format="extxyz")
    run = {"model_dir": str(workdir / "model"), "precision": "float64", "seed": seed,
           "network": {"name": "PiNet", "params": {"atom_types": [1, 8], "rc": 4.0, "depth": 2, "pp_nodes": [8],
                                                   "pi_nodes": [8], "ii_nodes": [8], "out_nodes": [8],
                                                   "out_units": 2}},
           "model": {"name": "potential_model", "params": {"embedding": "electrostatic", "use_force": True,
                                                           "embedding_damping": 1.0}},
           "data": {"train": str(workdir / "frames.xyz"), "batch_size": 2}, "train": {"max_steps": steps}}
    (workdir / "run.yml").write_text(yaml.safe_dump(run))
    assert main(["train", str(workdir / "run.yml")]) == 0
    return str(workdir / "model")
