"""Learning during ML/MM MD, measured (issue 77): `pinn learn` on a QM water in TIP3P water (PME), labelled by
PySCF in the MM charges, as a user runs it from files on disk; then the final committee against a committee trained
on as many frames drawn at random from the same trajectory.

1. Writes the system (a PDB of flexible TIP3P water built by OpenMM) and the run file into WORKDIR.
2. Runs `pinn learn` (one process): round 0 labels --initial frames of the MM water's own MD; each round explores
   ML/MM MD, labels the frames in the deviation band, retrains warm-started; until --time-ps of accepted MD.
3. Draws --test frames uniformly from all rounds' recorded frames, labels them with the same oracle afterwards, and
   measures the final committee's force RMSE on the QM atoms; trains a committee of the same size, steps and params
   on as many frames as the loop labelled, drawn at random from the recorded frames (labelled the same way), and
   measures it on the same test frames.

Usage:  python benchmarks/bench_learn.py WORKDIR [--time-ps 5] [--initial 20] [--members 4] [--basis 6-31g]
                                         [--high 0.3] [--low 0.05] [--steps-per-round 2000] [--test 50] [--quick]

Prints JSON lines: the loop (wall time, simulated ps, steps, labels, share of steps labelled, blow-ups), and the
test errors of the loop's committee and of the random one.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
import yaml

from common import emit


def write_system(workdir, box_nm):
    import openmm
    from openmm import app, unit
    forcefield = app.ForceField("amber14/tip3p.xml")
    modeller = app.Modeller(app.Topology(), [])
    modeller.addSolvent(forcefield, model="tip3p", boxSize=openmm.Vec3(box_nm, box_nm, box_nm) * unit.nanometer)
    with open(os.path.join(workdir, "water.pdb"), "w") as f:
        app.PDBFile.writeFile(modeller.topology, modeller.positions, f)


def run_file(args):
    network = {"name": "PiNet", "params": {"atom_types": [1, 8], "rc": 4.5, "depth": 3, "pp_nodes": [16],
                                           "pi_nodes": [16], "ii_nodes": [16, 16], "out_nodes": [16],
                                           "out_units": 2}}
    model = {"name": "potential_model", "params": {"embedding": "electrostatic", "use_force": True,
                                                   "fit_e_dress": True, "f_loss_multiplier": 10.0,
                                                   "learning_rate": 3e-3, "lr_schedule": "constant",
                                                   "ema_decay": None, "progress_bar": "off",
                                                   "log_every_n_steps": 1000}}
    return {"workdir": "loop", "initial": {"frames": args.initial, "spacing": 200},
            "committee": {"size": args.members, "max_steps": args.first_steps, "batch_size": 4,
                          "params": {"network": network, "model": model, "precision": "float32"}},
            "explorer": {"pdb": "water.pdb", "forcefield": ["amber14/tip3p.xml"], "qm": [0, 1, 2],
                         "embedding": "electrostatic", "timestep_fs": 0.5, "steps": args.steps_per_round,
                         "every": 10, "temperature_k": 300.0, "seed": args.seed},
            "select": {"low": args.low, "high": args.high, "abort": args.abort, "max_frames": args.max_frames,
                       "min_spacing": 100},
            "oracle": {"pyscf": {"method": "HF", "basis": args.basis}},
            "retrain": {"max_steps": args.retrain_steps, "warm_start": not args.from_scratch},
            "stop": {"time_ps": args.time_ps, "rounds": None, "wall_s": args.wall_s}}


def qm_force_rmse(members, frames):
    """RMSE (eV/Å) of a committee's mean forces on the QM atoms over labelled frames."""
    import pinn
    calc = pinn.get_calc(list(members))
    errors = []
    for frame in frames:
        atoms = frame.copy()
        atoms.calc = calc
        qm = atoms.arrays["qm"].astype(bool)
        errors.append((atoms.get_forces() - frame.get_forces())[qm])
    return float(np.sqrt(np.mean(np.concatenate(errors) ** 2)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workdir")
    ap.add_argument("--time-ps", type=float, default=5.0)
    ap.add_argument("--initial", type=int, default=20)
    ap.add_argument("--members", type=int, default=4)
    ap.add_argument("--basis", default="6-31g")
    ap.add_argument("--low", type=float, default=0.05)
    ap.add_argument("--high", type=float, default=0.3)
    ap.add_argument("--abort", type=float, default=1.5)
    ap.add_argument("--max-frames", type=int, default=4)
    ap.add_argument("--steps-per-round", type=int, default=2000)
    ap.add_argument("--first-steps", type=int, default=3000)
    ap.add_argument("--retrain-steps", type=int, default=500)
    ap.add_argument("--from-scratch", action="store_true", help="retrain.warm_start: false")
    ap.add_argument("--wall-s", type=float, default=3600.0, help="no round starts after this (the issue's hour)")
    ap.add_argument("--test", type=int, default=50)
    ap.add_argument("--box", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="a few steps of everything (checks the script)")
    args = ap.parse_args()
    if args.quick:
        args.time_ps, args.initial, args.members, args.basis = 0.01, 3, 2, "sto-3g"
        args.steps_per_round, args.first_steps, args.retrain_steps, args.test = 10, 5, 5, 3
        args.low, args.high, args.abort, args.wall_s = 0.0, 50.0, 100.0, 300.0  # untrained members: every step goes
    os.makedirs(args.workdir, exist_ok=True)
    write_system(args.workdir, args.box)
    with open(os.path.join(args.workdir, "learn.yml"), "w") as f:
        yaml.safe_dump(run_file(args), f)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pinn.cli.commands", "learn", os.path.join(args.workdir, "learn.yml")],
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"pinn learn failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    from pinn.io import ase_files
    from pinn.learn.loop import LoopState
    from pinn.learn.oracles import PySCFOracle
    from pinn.learn.report import loop_records
    loop = os.path.join(args.workdir, "loop")
    state = LoopState(loop)
    rounds = loop_records(loop)
    steps = sum((r["exploration"] or {}).get("steps", 0) for r in rounds)
    accepted = [r for r in rounds if r["rejected"] is None]
    accepted_steps = sum((r["exploration"] or {}).get("steps", 0) for r in accepted)
    labels = sum(r["labels"] for r in rounds)
    blow_ups = sum(1 for r in rounds if (r["exploration"] or {}).get("max_devi_f_qm") and
                   r["exploration"]["stopped_at"] is not None and r["exploration"]["max_devi_f_qm"] > args.abort)
    emit(benchmark="learn_loop", wall_s=round(wall, 1), time_ps=state.time_ps, rounds=state.round, md_steps=steps,
         accepted_md_steps=accepted_steps, initial_labels=args.initial, labels=labels,
         labelled_share=round(labels / max(steps, 1), 4), blow_ups=blow_ups,
         hidden_blow_ups=len(rounds) - len(accepted), members=args.members, basis=args.basis, seed=args.seed,
         high=args.high, max_frames=args.max_frames, retrain_steps=args.retrain_steps, quick=args.quick,
         python=sys.version.split()[0])
    # the trajectory: the accepted rounds' records (a hidden blow-up's MD was not accepted)
    recorded = [f for r in accepted
                for f in ase_files.read(os.path.join(loop, f"round-{r['round']}", "frames.xyz"), index=":")
                if os.path.exists(os.path.join(loop, f"round-{r['round']}", "frames.xyz"))]
    rng = np.random.default_rng(args.seed)
    oracle = PySCFOracle(method="HF", basis=args.basis)
    test_index = np.unique(np.linspace(0, len(recorded) - 1, args.test).round().astype(int))
    test = [f for _, f in oracle.label([recorded[k] for k in test_index]).labelled]
    ase_files.write(os.path.join(args.workdir, "test.xyz"), test, format="extxyz")
    final = [os.path.join(loop, f"round-{state.committee}", "committee", f"member-{m}") for m in range(args.members)]
    loop_rmse = qm_force_rmse(final, test)
    rest = [k for k in range(len(recorded)) if k not in set(test_index.tolist())]
    chosen = rng.choice(rest, size=min(labels, len(rest)), replace=False)
    random_labels = [f for _, f in oracle.label([recorded[k] for k in chosen]).labelled]
    initial = ase_files.read(os.path.join(loop, "round-0", "labels.xyz"), index=":")
    random_dir = os.path.join(args.workdir, "random")
    os.makedirs(random_dir, exist_ok=True)
    ase_files.write(os.path.join(random_dir, "frames.xyz"), initial + random_labels, format="extxyz")
    config = run_file(args)["committee"]
    total_steps = args.retrain_steps if args.from_scratch else config["max_steps"] + args.retrain_steps * state.round
    run = {**config["params"], "model_dir": os.path.join(random_dir, "committee"),
           "data": {"train": "frames.xyz", "batch_size": config["batch_size"]}, "train": {"max_steps": total_steps}}
    with open(os.path.join(random_dir, "train.yml"), "w") as f:
        yaml.safe_dump(run, f)
    from pinn.training.run_file import run_training
    for member in range(args.members):
        run_training(os.path.join(random_dir, "train.yml"), member=member)
    random_members = [os.path.join(random_dir, "committee", f"member-{m}") for m in range(args.members)]
    random_rmse = qm_force_rmse(random_members, test)
    emit(benchmark="learn_test", test_frames=len(test), loop_qm_force_rmse=round(loop_rmse, 4),
         random_qm_force_rmse=round(random_rmse, 4), random_frames=len(random_labels), random_steps=total_steps,
         seed=args.seed, quick=args.quick, python=sys.version.split()[0])
    with open(os.path.join(args.workdir, "bench.json"), "w") as f:
        json.dump({"loop_rmse": loop_rmse, "random_rmse": random_rmse}, f)


if __name__ == "__main__":
    main()
