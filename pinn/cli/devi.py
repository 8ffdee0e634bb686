"""``pinn devi``: a committee's model deviation over a trajectory, in DeePMD-kit's ``model_devi.out`` layout.

``pinn devi MEMBERS... TRAJECTORY [-o model_devi.out] [--select LO:HI [--max N] [--selected FILE]]``

One line per frame under the header (each name right-aligned in DeePMD-kit's column widths)::

    # step max_devi_v min_devi_v avg_devi_v max_devi_f min_devi_f avg_devi_f devi_e

with the figures of :func:`pinn.committee.deviations` (forces in eV/Å; virial and energy per
atom, eV; the virial columns are 0 for a structure without a periodic cell), so scripts written
for ``dp model-devi`` output read it (the layout: :mod:`pinn.io.model_devi`).  ``step`` is the
frame's index in an ASE-readable file, and the trr's step for a MiMiC/GROMACS trajectory (``--mpt``,
with ``--atoms`` for the atoms the members were trained on).

``--select LO:HI`` picks the frames whose ``max_devi_f`` lies in [LO, HI) (eV/Å) — the ones worth
labelling: written as extended XYZ (``--selected``, default ``selected.xyz``; the deviations in
each frame's info), and for a trr also as ``selected.steps`` (one ``step time`` line per frame: what
to relabel with CPMD).  ``--max N`` keeps N of them, spread evenly over the candidates in
trajectory order.
"""
import math
import os
import sys
import time

import numpy as np

def add_parser(commands, common):
    """Add ``pinn devi`` to the ``pinn`` command's subparsers."""
    devi = commands.add_parser("devi", parents=[common], help="a committee's model deviation over a trajectory",
                               description=__doc__.split("\n\n")[0])
    devi.add_argument("paths", nargs="+", metavar="PATH",
                      help="the members (model directories, or one directory holding member-K/), then the "
                      "trajectory (any file ASE reads, or a GROMACS .trr with --mpt)")
    devi.add_argument("-o", "--output", default="model_devi.out", help="the deviations (default model_devi.out)")
    devi.add_argument("--mpt", help="the MiMiCPy topology of a .trr trajectory")
    devi.add_argument("--atoms", help="with --mpt: the atoms the members know, NDX:GROUP or resname:NAME")
    devi.add_argument("--select", metavar="LO:HI", help="write the frames with LO <= max_devi_f < HI (eV/Å)")
    devi.add_argument("--max", type=int, metavar="N", help="with --select: at most N frames, spread evenly")
    devi.add_argument("--selected", default="selected.xyz", help="with --select: the frames' file (extxyz)")
    devi.add_argument("--checkpoint", default="last", help="the members' checkpoint: last (default), best or a path")


def _interval(text):
    try:
        low, high = (float(v) if v else default for v, default in zip(text.split(":"), (0.0, math.inf)))
    except ValueError:
        raise ValueError(f"--select {text!r}: expected LO:HI in eV/Å, e.g. 0.05:0.3") from None
    if not low < high:
        raise ValueError(f"--select {text!r}: LO must be below HI")
    return low, high


def _frames(args, trajectory):
    """``(step, time or None, atoms)`` of every frame of the trajectory."""
    if trajectory.endswith(".trr"):
        if not args.mpt:
            raise ValueError(f"{trajectory}: a trr holds no elements; give its topology with --mpt")
        from pinn.io.mimic import mimic_trajectory
        yield from mimic_trajectory(args.mpt, trajectory, select=_atom_selection(args.atoms))
        return
    if args.mpt or args.atoms:
        raise ValueError("--mpt and --atoms are for a .trr trajectory")
    from pinn.io.ase_files import iread
    for index, atoms in enumerate(iread(trajectory)):
        yield index, None, atoms


def _atom_selection(text):
    if text is None:
        return None
    kind, _, value = text.partition(":")
    if kind == "resname" and value:
        return {"resname": value.split(",")}
    if value:
        return (kind, value)
    raise ValueError(f"--atoms {text!r}: expected NDX_FILE:GROUP or resname:NAME[,NAME]")


def run(args):
    """``pinn devi``; returns the exit status."""
    from ase.stress import voigt_6_to_full_3x3_stress

    from pinn.calculator import get_calc
    from pinn.committee import CommitteeCalc, deviations
    from pinn.io.errors import DataError
    from pinn.io.model_devi import row_of, write_model_devi
    *members, trajectory = args.paths
    if not members:
        raise ValueError("give the members (model directories) before the trajectory")
    if not os.path.exists(trajectory):
        raise FileNotFoundError(f"{trajectory}: no such trajectory")
    window = _interval(args.select) if args.select else None
    if args.max is not None and (window is None or args.max < 1):
        raise ValueError("--max N needs --select and N >= 1")
    calc = get_calc(members if len(members) > 1 else members[0],
                    checkpoint=None if args.checkpoint == "last" else args.checkpoint)
    if not isinstance(calc, CommitteeCalc) or calc.size < 2:
        raise ValueError(f"{members[0]}: a deviation needs a committee of two or more members")
    rows = []
    chosen = []
    started = time.monotonic()
    shown = time.monotonic()
    for index, (step, time_ps, atoms) in enumerate(_frames(args, trajectory)):
        atoms.calc = calc
        try:
            atoms.get_forces()
        except ValueError as error:  # what the calculator refuses (pinn.io.atoms_input), named by its frame
            where = f"frame {index}" + (f" (step {step})" if time_ps is not None else "")
            raise DataError(f"{trajectory}, {where}: {error}") from None
        res = calc.results
        n = len(atoms)
        virials = None
        if "member_stresses" in res:
            volume = atoms.get_volume()
            virials = np.stack([-voigt_6_to_full_3x3_stress(s) * volume for s in res["member_stresses"]])
        devi = deviations(res["member_energies"], res["member_forces"], n, virials)
        rows.append(row_of(step, devi))
        if window and window[0] <= devi["max_forces_deviation"] < window[1]:
            frame = atoms.copy()
            frame.info.update(step=step, max_devi_f=devi["max_forces_deviation"],
                              devi_e=devi["energy_deviation_per_atom"], **({"time": time_ps} if time_ps is not None
                                                                         else {}))
            chosen.append(frame)
        if time.monotonic() - shown > 5:
            shown = time.monotonic()
            print(f"pinn devi: {len(rows)} frames, {len(rows) / (shown - started):.1f} frames/s", file=sys.stderr)
    write_model_devi(args.output, rows)
    print(f"pinn devi: {len(rows)} frames of {trajectory} -> {args.output}")
    if window:
        _write_selected(args, chosen, trajectory.endswith(".trr"))
    return 0


def _write_selected(args, chosen, from_trr):
    from pinn.io.ase_files import write
    candidates = len(chosen)
    if args.max is not None and candidates > args.max:
        keep = np.unique(np.linspace(0, candidates - 1, args.max).round().astype(int))
        chosen = [chosen[k] for k in keep]
    if chosen:
        write(args.selected, chosen, format="extxyz")
    if from_trr:
        steps = os.path.splitext(args.selected)[0] + ".steps"
        with open(steps, "w") as f:
            f.write("# step time_ps: the frames to relabel\n")
            f.writelines(f"{a.info['step']} {a.info['time']:.6f}\n" for a in chosen)
    print(f"pinn devi: {candidates} frames with max_devi_f in {args.select} eV/Å, {len(chosen)} written"
          + (f" to {args.selected}" if chosen else ""))
