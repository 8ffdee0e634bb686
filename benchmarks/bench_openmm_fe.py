"""An end-state correction from the force field to ML/MM (issue 78), worked and measured: one water (the solute, HF
in the ML model) in flexible TIP3P water (PME), for mechanical and electrostatic embedding, through openmm-ml's
``MLPotential('pinn')`` with ``interpolate=True``.

1. Data: frames of the MM water's own MD (Langevin, 300 K), the solute cut as each model sees it
   (:class:`pinn.md.openmm.FrameCutter`): in the MM charges (electrostatic) and alone (mechanical), labelled by
   PySCF (:class:`pinn.learn.oracles.PySCFOracle`, HF); the last ``--test`` frames held out.
2. Models: one PiNet per embedding, trained from scratch by ``pinn train``'s library; their errors on the
   held-out frames (forces on the solute, energies: RMSE and mean), and the electrostatic model's in no field on
   the vacuum ones (what its vacuum leg stands on).
3. Free energies, per embedding and per leg (the solute in water; alone in vacuum, NoCutoff): ``--windows`` λ
   windows from 0 (the force field) to 1 (ML/MM), each equilibrated then sampled; U is linear in λ, so each sample's
   energy at every λ is U + (λ' − λ) dU/dλ (OpenMM's parameter derivative), with no other evaluation.  ΔA(MM →
   ML/MM) by MBAR (pymbar, samples decorrelated by their statistical inefficiency), by the one-step exponential
   average from λ = 0 alone (EXP) and by thermodynamic integration (TI, trapezoids), each ± its standard error.
   The correction to the solute's hydration free energy is ΔA(water) − ΔA(vacuum): the models' energy zero
   (their fitted atomic energies) cancels there.

Usage:  python benchmarks/bench_openmm_fe.py WORKDIR [--frames 160] [--test 20] [--basis 6-31g] [--train-steps 10000]
                                            [--windows 6] [--equilibrate 2000] [--samples 200] [--every 50] [--quick]

Prints JSON lines: the data and training (seconds, held-out RMSE), then per embedding and leg ΔA ± σ (kJ/mol) by
MBAR, EXP and TI, the smallest overlap of neighbouring windows, the samples kept, and the wall time.
"""
import argparse
import os
import sys
import time

import numpy as np
import yaml

from common import emit

KT_PER_KJ_MOL = 1.0 / (0.0083144626 * 300.0)  # 1/kT at 300 K, mol/kJ
REGION = [0, 1, 2]


def water_box(box_nm, cutoff_nm):
    """(topology, MM system, positions) of flexible TIP3P water with PME; the first water is the solute."""
    import openmm
    from openmm import app, unit
    forcefield = app.ForceField("amber14/tip3p.xml")
    modeller = app.Modeller(app.Topology(), [])
    modeller.addSolvent(forcefield, model="tip3p", boxSize=openmm.Vec3(box_nm, box_nm, box_nm) * unit.nanometer)
    system = forcefield.createSystem(modeller.topology, nonbondedMethod=app.PME, rigidWater=False, constraints=None,
                                     nonbondedCutoff=cutoff_nm * unit.nanometer)
    return modeller.topology, system, modeller.positions


def lone_water(topology, positions):
    """(topology, MM system, positions) of the solute alone in vacuum (NoCutoff, flexible)."""
    from openmm import app
    modeller = app.Modeller(topology, positions)
    modeller.delete([r for r in topology.residues() if r.index != 0])
    forcefield = app.ForceField("amber14/tip3p.xml")
    system = forcefield.createSystem(modeller.topology, nonbondedMethod=app.NoCutoff, rigidWater=False,
                                     constraints=None)
    return modeller.topology, system, modeller.positions


def langevin(step_fs, seed):
    import openmm
    from openmm import unit
    integrator = openmm.LangevinMiddleIntegrator(300 * unit.kelvin, 1 / unit.picosecond, step_fs * unit.femtosecond)
    integrator.setRandomNumberSeed(seed)
    return integrator


def mm_frames(topology, system, positions, count, spacing, seed):
    """The solute as the electrostatic and the mechanical model see it, ``count`` frames ``spacing`` steps apart of
    the MM water's MD (0.5 fs)."""
    import openmm
    from openmm import unit

    from pinn.md.openmm import FrameCutter
    cutters = {kind: FrameCutter(system, topology, REGION, embedding=kind) for kind in ("electrostatic", "mechanical")}
    context = openmm.Context(system, langevin(0.5, seed), openmm.Platform.getPlatformByName("CPU"))
    context.setPositions(positions)
    openmm.LocalEnergyMinimizer.minimize(context)
    context.setVelocitiesToTemperature(300 * unit.kelvin, seed)
    context.getIntegrator().step(4 * spacing)
    frames = {kind: [] for kind in cutters}
    for _ in range(count):
        context.getIntegrator().step(spacing)
        state = context.getState(getPositions=True)
        xyz = state.getPositions(asNumpy=True).value_in_unit(unit.nanometer)
        box = state.getPeriodicBoxVectors(asNumpy=True).value_in_unit(unit.nanometer)
        for kind, cutter in cutters.items():
            frames[kind].append(cutter(xyz, box))
    return frames, context.getState(getPositions=True).getPositions(asNumpy=True)


def run_file(folder, embedding, steps):
    network = {"name": "PiNet", "params": {"atom_types": [1, 8], "rc": 4.5, "depth": 3, "pp_nodes": [16],
                                           "pi_nodes": [16], "ii_nodes": [16, 16], "out_nodes": [16],
                                           "out_units": 2 if embedding == "electrostatic" else 1}}
    model = {"use_force": True, "fit_e_dress": True, "f_loss_multiplier": 10.0, "learning_rate": 3e-3,
             "lr_schedule": "constant", "ema_decay": None, "progress_bar": "off", "log_every_n_steps": 1000}
    if embedding == "electrostatic":
        model["embedding"] = "electrostatic"
    run = {"model_dir": os.path.join(folder, "model"), "precision": "float32",
           "network": network, "model": {"name": "potential_model", "params": model},
           "data": {"train": "train.xyz", "batch_size": 4}, "train": {"max_steps": steps}}
    path = os.path.join(folder, "train.yml")
    with open(path, "w") as f:
        yaml.safe_dump(run, f)
    return path


def test_errors(model, frames):
    """A model on labelled frames: the RMSE of its forces on the solute's atoms (eV/Å), the RMSE and the mean of its
    energy errors (eV; the mean is what shifts a free energy)."""
    import pinn
    calc = pinn.get_calc(model)
    forces, energies = [], []
    for frame in frames:
        atoms = frame.copy()
        atoms.calc = calc
        qm = atoms.arrays["qm"].astype(bool) if "qm" in atoms.arrays else np.ones(len(atoms), bool)
        forces.append((atoms.get_forces() - frame.get_forces())[qm])
        energies.append(atoms.get_potential_energy() - frame.get_potential_energy())
    energies = np.array(energies)
    return {"rmse_f": round(float(np.sqrt(np.mean(np.concatenate(forces) ** 2))), 4),
            "rmse_e": round(float(np.sqrt(np.mean(energies ** 2))), 4), "mean_e": round(float(energies.mean()), 4)}


def sample_windows(system, positions, lambdas, args, seed):
    """Per window: U (kJ/mol) and dU/dλ (kJ/mol) every ``args.every`` steps after ``args.equilibrate``."""
    import openmm
    from openmm import unit
    energies, slopes = [], []
    for k, lam in enumerate(lambdas):
        context = openmm.Context(system, langevin(0.5, seed + k), openmm.Platform.getPlatformByName("CPU"))
        context.setPositions(positions)
        context.setParameter("lambda_interpolate", float(lam))
        context.setVelocitiesToTemperature(300 * unit.kelvin, seed + k)
        integrator = context.getIntegrator()
        integrator.step(args.equilibrate)
        u, du = [], []
        for _ in range(args.samples):
            integrator.step(args.every)
            state = context.getState(getEnergy=True, getParameterDerivatives=True)
            u.append(state.getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole))
            du.append(state.getEnergyParameterDerivatives()["lambda_interpolate"])
        energies.append(np.array(u))
        slopes.append(np.array(du))
    return energies, slopes


def free_energies(lambdas, energies, slopes):
    """ΔA(λ=0 → 1) and σ (kJ/mol) by MBAR, EXP (from λ = 0) and TI; the smallest neighbouring overlap; samples
    kept per window."""
    from pymbar import MBAR, timeseries
    from pymbar.other_estimators import exp
    kept_u, kept_du, kept_lambda = [], [], []
    for lam, u, du in zip(lambdas, energies, slopes):
        index = timeseries.subsample_correlated_data(du)
        kept_u.append(u[index])
        kept_du.append(du[index])
        kept_lambda.append(np.full(len(index), lam))
    u, du, source = np.concatenate(kept_u), np.concatenate(kept_du), np.concatenate(kept_lambda)
    offset = float(np.median(kept_du[0]))  # the models' energy zero, taken out before MBAR and put back
    reduced = np.array([(u + (lam - source) * du - lam * offset) * KT_PER_KJ_MOL for lam in lambdas])
    mbar = MBAR(reduced, np.array([len(k) for k in kept_u]))
    result = mbar.compute_free_energy_differences()
    overlap = mbar.compute_overlap()["matrix"]
    neighbours = min(overlap[k, k + 1] for k in range(len(lambdas) - 1))
    w = (kept_du[0] - offset) * KT_PER_KJ_MOL
    one_step = exp(w)
    means = np.array([d.mean() for d in kept_du])
    errors = np.array([d.std(ddof=1) / np.sqrt(len(d)) for d in kept_du])
    weights = np.gradient(np.asarray(lambdas)) if len(lambdas) > 2 else np.full(len(lambdas), 0.5)
    weights[0] = weights[-1] = (lambdas[1] - lambdas[0]) / 2
    return {"dA_mbar": offset + result["Delta_f"][0, -1] / KT_PER_KJ_MOL,
            "sd_mbar": result["dDelta_f"][0, -1] / KT_PER_KJ_MOL,
            "dA_exp": offset + one_step["Delta_f"] / KT_PER_KJ_MOL, "sd_exp": one_step["dDelta_f"] / KT_PER_KJ_MOL,
            "dA_ti": float(np.sum(weights * means)), "sd_ti": float(np.sqrt(np.sum((weights * errors) ** 2))),
            "exp_work_sd_kt": float(np.std(w)), "min_overlap": float(neighbours),
            "kept": [len(k) for k in kept_u]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workdir")
    ap.add_argument("--frames", type=int, default=160)
    ap.add_argument("--test", type=int, default=20)
    ap.add_argument("--spacing", type=int, default=200, help="MD steps between labelled frames")
    ap.add_argument("--basis", default="6-31g")
    ap.add_argument("--train-steps", type=int, default=10000)
    ap.add_argument("--windows", type=int, default=6)
    ap.add_argument("--equilibrate", type=int, default=2000)
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--every", type=int, default=50)
    ap.add_argument("--box", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="a few steps of everything (checks the script)")
    args = ap.parse_args()
    if args.quick:
        args.frames, args.test, args.basis, args.train_steps = 8, 2, "sto-3g", 20
        args.windows, args.equilibrate, args.samples, args.every = 3, 20, 20, 5
    from openmmml import MLPotential

    from pinn.io import ase_files
    from pinn.learn.oracles import PySCFOracle
    from pinn.training.run_file import run_training
    os.makedirs(args.workdir, exist_ok=True)
    topology, mm, positions = water_box(args.box, 0.9)
    from openmm import app
    with open(os.path.join(args.workdir, "water.pdb"), "w") as f:  # what docs/md-engines.md's recipe reads
        app.PDBFile.writeFile(topology, positions, f)
    start = time.perf_counter()
    frames, equilibrated = mm_frames(topology, mm, positions, args.frames, args.spacing, args.seed)
    oracle = PySCFOracle(method="HF", basis=args.basis)
    models, tests, labelling = {}, {}, {}
    for kind, cut in frames.items():
        folder = os.path.join(args.workdir, kind)
        os.makedirs(folder, exist_ok=True)
        began = time.perf_counter()
        labelled = [atoms for _, atoms in oracle.label(cut).labelled]
        labelling[kind] = time.perf_counter() - began
        ase_files.write(os.path.join(folder, "train.xyz"), labelled[:-args.test], format="extxyz")
        tests[kind] = labelled[-args.test:]
        run_training(run_file(folder, kind, args.train_steps))
        models[kind] = os.path.join(folder, "model")
    version = {"python": sys.version.split()[0], "basis": args.basis, "quick": args.quick}
    # the electrostatic model in no field, on the vacuum frames: what its vacuum leg stands on
    emit(benchmark="openmm_fe_models", frames=args.frames, test_frames=args.test, train_steps=args.train_steps,
         seconds=round(time.perf_counter() - start, 1),
         label_s={k: round(v, 1) for k, v in labelling.items()},
         test={k: test_errors(m, tests[k]) for k, m in models.items()},
         electrostatic_in_vacuum=test_errors(models["electrostatic"], tests["mechanical"]), **version)
    lambdas = np.linspace(0.0, 1.0, args.windows)
    legs = {"water": (topology, mm, equilibrated), "vacuum": lone_water(topology, equilibrated)}
    for kind, model in models.items():
        potential = MLPotential("pinn", model=model)
        results = {}
        for leg, (top, system, xyz) in legs.items():
            began = time.perf_counter()
            mixed = potential.createMixedSystem(top, system, REGION, embedding=kind, interpolate=True)
            energies, slopes = sample_windows(mixed, xyz, lambdas, args, args.seed)
            results[leg] = free_energies(lambdas, energies, slopes)
            wall = time.perf_counter() - began
            emit(benchmark="openmm_fe_leg", embedding=kind, leg=leg, windows=args.windows,
                 equilibrate_steps=args.equilibrate, samples=args.samples, every=args.every, step_fs=0.5,
                 wall_s=round(wall, 1), **{k: (round(v, 3) if isinstance(v, float) else v)
                                          for k, v in results[leg].items()}, **version)
        correction = {m: results["water"][f"dA_{m}"] - results["vacuum"][f"dA_{m}"] for m in ("mbar", "exp", "ti")}
        sigma = {m: float(np.hypot(results["water"][f"sd_{m}"], results["vacuum"][f"sd_{m}"]))
                 for m in ("mbar", "exp", "ti")}
        emit(benchmark="openmm_fe_correction", embedding=kind,
             **{f"ddA_{m}": round(v, 3) for m, v in correction.items()},
             **{f"sd_{m}": round(v, 3) for m, v in sigma.items()}, **version)


if __name__ == "__main__":
    main()
