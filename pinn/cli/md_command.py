"""``pinn md``: MD from a structure with a model or a committee, on ASE's integrators (:func:`pinn.md.ase_md.run_md`).

``pinn md MODEL... STRUCTURE [--steps N --dt FS --temperature K --ensemble nve|langevin|nvt|npt
--friction 1/PS --tau FS --pressure BAR --barostat-tau FS --seed S --traj OUT --traj-every N
--log OUT --log-every N --stop-deviation X --keep N --stop-file OUT --select LO:HI --selected OUT]``

Several models (or one directory of ``member-K/``) are a committee: the members' mean drives the
MD and the log has the max force deviation of each step.  ``--stop-deviation X`` ends the run at
the first step whose max force deviation exceeds X (eV/Å), writes that frame and the ``--keep``
before it to ``--stop-file`` and exits with status 3; ``--select LO:HI`` writes every frame with
LO <= deviation < HI to ``--selected`` and runs on.  Exit status 0: all steps run.

Nothing is written before the options are checked and the start structure is evaluated; an output that
exists is refused unless ``--overwrite`` (or ``--append``: the log and the trajectory), one that names
the structure or a model always.  A run that fails or is interrupted (exit status 130) midway keeps the
steps done.
"""
import os
import sys

#: the exit status of a run that the deviation stopped
EXIT_STOPPED = 3
#: the exit status of an interrupted run (Ctrl-C: 128 + SIGINT), its steps done written
EXIT_INTERRUPTED = 130


def add_parser(commands, common):
    """Add ``pinn md`` to the ``pinn`` command's subparsers."""
    from pinn.md.ase_md import ENSEMBLES
    md = commands.add_parser("md", parents=[common], help="MD with a model or a committee (ASE's integrators)",
                             description=__doc__.split("\n\n")[0] + "  Exit status 3: stopped by "
                             "--stop-deviation (the frames in --stop-file); 130: interrupted (the steps done "
                             "written).  Nothing is written before the options are checked and the start "
                             "structure is evaluated; an existing output is refused unless --overwrite or "
                             "--append, an output that is the structure or a model always.")
    md.add_argument("paths", nargs="+", metavar="PATH",
                    help="the model (a directory or a model file), or a committee's members, then the structure "
                    "(any file ASE reads)")
    md.add_argument("--frame", type=int, default=-1, help="the structure file's frame (default the last)")
    md.add_argument("--steps", type=int, default=1000, help="steps (default 1000)")
    md.add_argument("--dt", type=float, default=0.5, help="time step, fs (default 0.5)")
    md.add_argument("--ensemble", choices=ENSEMBLES, default="nve", help="default nve")
    md.add_argument("--temperature", type=float, default=300.0,
                    help="K >= 0: the initial velocities' temperature and the thermostat's (> 0; default 300)")
    md.add_argument("--keep-velocities", action="store_true",
                    help="start from the structure's own velocities instead of drawing them")
    md.add_argument("--friction", type=float, default=10.0, help="langevin: friction, 1/ps (default 10)")
    md.add_argument("--tau", type=float, default=100.0, help="nvt, npt: thermostat time, fs (default 100)")
    md.add_argument("--pressure", type=float, default=1.01325, help="npt: pressure, bar (default 1.01325)")
    md.add_argument("--barostat-tau", type=float, default=1000.0, help="npt: barostat time, fs (default 1000)")
    md.add_argument("--seed", type=int, default=0, help="the velocities' and stochastic integrators' seed")
    md.add_argument("--traj", help="trajectory file: .traj (ASE) or .xyz/.extxyz (default none)")
    md.add_argument("--traj-every", type=int, default=10, help="steps between trajectory frames (default 10)")
    md.add_argument("--log", default="md.log", help="the log (default md.log; 'none': no log)")
    md.add_argument("--log-every", type=int, default=1, help="steps between log lines (default 1)")
    md.add_argument("--stop-deviation", type=float, metavar="X",
                    help="a committee: stop at the first step whose max force deviation exceeds X eV/Å")
    md.add_argument("--keep", type=int, default=10,
                    help="with --stop-deviation: the frames before the stop written with it (default 10)")
    md.add_argument("--stop-file", default="stop.xyz", help="with --stop-deviation: the frames (default stop.xyz)")
    md.add_argument("--select", metavar="LO:HI", help="a committee: write every frame with LO <= max force "
                    "deviation < HI (eV/Å)")
    md.add_argument("--selected", default="selected.xyz", help="with --select: the frames (default selected.xyz)")
    existing = md.add_mutually_exclusive_group()
    existing.add_argument("--overwrite", action="store_true",
                          help="replace the log, trajectory, --stop-file and --selected if they exist (default: "
                          "refuse to start)")
    existing.add_argument("--append", action="store_true",
                          help="extend an existing log (no second header; steps from 0 again) and trajectory; "
                          "an existing --stop-file and --selected are still refused (only --overwrite "
                          "replaces them)")
    md.add_argument("--dispersion", metavar="NAME",
                    help="add D3 dispersion with this damping (d3bj, d3zero, …) to the model; needs --functional "
                         "and the dftd3 package")
    md.add_argument("--functional", help="with --dispersion: the DFT functional of the model's labels (e.g. PBE)")
    md.add_argument("--checkpoint", default="last", help="the models' checkpoint: last (default), best or a path")


def run(args):
    """``pinn md``; returns the exit status (0 all steps run, 3 stopped by the deviation, 130 interrupted)."""
    from pinn.calculator import get_calc
    from pinn.cli.devi import _interval
    from pinn.io.ase_files import read
    from pinn.md.ase_md import MDInterrupted, run_md
    *models, structure = args.paths
    if not models:
        raise ValueError("give the model (or a committee's members) before the structure")
    if not os.path.exists(structure):
        raise FileNotFoundError(f"{structure}: no such structure file")
    atoms = read(structure, index=args.frame)
    calc = get_calc(models if len(models) > 1 else models[0],
                    checkpoint=None if args.checkpoint == "last" else args.checkpoint, dispersion=args.dispersion,
                    functional=args.functional)
    log = None if args.log == "none" else args.log
    written = [f"log {log}"] if log else []
    written += [f"trajectory {args.traj}"] if args.traj else []
    selected = [f"selected frames {args.selected}"] if args.select else []
    try:
        outcome = run_md(atoms, calc, args.steps, dt=args.dt, ensemble=args.ensemble, temperature=args.temperature,
                         friction=args.friction, tau=args.tau, pressure=args.pressure,
                         barostat_tau=args.barostat_tau, seed=args.seed, velocities=not args.keep_velocities,
                         traj=args.traj, traj_every=args.traj_every, log=log, log_every=args.log_every,
                         stop_deviation=args.stop_deviation, keep=args.keep, stop_file=args.stop_file,
                         select=_interval(args.select) if args.select else None, selected_file=args.selected,
                         existing="overwrite" if args.overwrite else "append" if args.append else "refuse",
                         inputs=[structure, *models])
    except MDInterrupted as err:
        print(f"pinn md: interrupted after step {err.outcome.steps}"
              + (f"; the steps done in {', '.join(written + selected)}" if written + selected else ""),
              file=sys.stderr)
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        print("pinn md: interrupted before the first step; nothing written", file=sys.stderr)
        return EXIT_INTERRUPTED
    written += [f"{outcome.selected} selected frames in {args.selected}"] if args.select else []
    if outcome.stopped_at is not None:
        print(f"pinn md: stopped at step {outcome.stopped_at}: max force deviation {outcome.deviation:.4g} eV/Å > "
              f"{args.stop_deviation:g}; that frame and up to {args.keep} before it in {args.stop_file}"
              + (f"; {', '.join(written)}" if written else ""))
        return EXIT_STOPPED
    print(f"pinn md: {outcome.steps} steps ({args.ensemble}, {args.dt:g} fs) of {len(atoms)} atoms, "
          f"{outcome.ms_per_step:.3g} ms/step" + (f"; {', '.join(written)}" if written else ""))
    return 0
