"""The run file of ``pinn learn``: what the loop starts from, its committee, explorer, selection, oracle,
retraining and stop, each section checked against its schema (a key that does not exist is refused with the
nearest allowed name).  Paths are relative to the run file.

::

    workdir: loop                    # the loop's directory: rounds, labels, models, deviation logs
    initial:
      data: start.xyz                # labelled frames in the QM/MM convention; or frames: 20 (labelled first)
    committee:
      size: 4
      params: {network: {...}, model: {...}}   # a run file's params (model_dir is the loop's)
      max_steps: 2000                # the first training
      batch_size: 8
    explorer:
      pdb: water.pdb                 # with forcefield: [amber14/tip3p.xml] or system: system.xml (OpenMM's
                                     # XmlSerializer); or top: x.top, gro: x.gro
      forcefield: [amber14/tip3p.xml]
      qm: [0, 1, 2]                  # the QM atoms' indices, or {resname: ACT}
      embedding: electrostatic
      temperature_k: 300
      timestep_fs: 0.5
      steps: 2000                    # at most this many steps a round
      every: 10                      # a record (deviation, frame) every this many steps
    select: {low: 0.05, high: 0.3, abort: 1.0, max_frames: 4, min_spacing: 50, audit_blow_ups: true}
    oracle: {pyscf: {method: HF, basis: 6-31g}}   # or {ase: emt} or {command: "...", timeout_s: 3600}
    retrain: {max_steps: 500}        # each round, warm-started from the members of the round before
    stop: {time_ps: 5, rounds: 20, wall_s: 3600}
"""
import os

import yaml

from pinn.schema import Option, ParamsError, did_you_mean, non_negative, positive, validate_section

INITIAL = {
    "data": Option((str, list, None), None, "labelled frames in the QM/MM convention (files ASE reads)"),
    "frames": Option((int, None), None, "without data: the oracle labels this many frames of the MM system's own "
                     "MD (the explorer's thermostat) first", check=positive),
    "spacing": Option(int, 200, "steps of that MD between two of those frames", check=positive),
}
COMMITTEE = {
    "size": Option(int, 4, "the members", check=lambda v: None if v >= 2 else "a committee has two or more"),
    "params": Option(dict, doc="the members' params, as a run file's top level (network, model, precision, "
                     "seed); model_dir is the loop's"),
    "max_steps": Option(int, 1000, "the first training's steps", check=positive),
    "batch_size": Option(int, 8, "structures per batch", check=positive),
}
EXPLORER = {
    "pdb": Option((str, None), None, "the system's PDB (with forcefield)"),
    "forcefield": Option((list, None), None, "OpenMM force field files (with pdb), e.g. [amber14/tip3p.xml]"),
    "system": Option((str, None), None, "instead of forcefield: an OpenMM System's XML (XmlSerializer.serialize; "
                     "with pdb, the atoms and positions): its forces as they are (nonbonded and cutoff_nm are the "
                     "file's, and not given here)"),
    "top": Option((str, None), None, "a GROMACS topology (with gro)"),
    "gro": Option((str, None), None, "a GROMACS coordinate file (with top)"),
    "include_dir": Option((str, None), None, "GROMACS's topology folder (with top)"),
    "start": Option((str, None), None, "a system without MM: its structure (a file ASE reads; ASE's Langevin MD "
                    "with the committee)"),
    "qm": Option((list, dict, None), None, "the QM atoms of an OpenMM system: their indices, or {resname: NAME}"),
    "embedding": Option(str, "electrostatic", "the members' embedding", choices=("mechanical", "electrostatic")),
    "nonbonded": Option(str, "PME", "OpenMM's nonbonded method", choices=("PME", "NoCutoff", "CutoffPeriodic")),
    "cutoff_nm": Option(float, 0.9, "the nonbonded cutoff (nm)", check=positive),
    "temperature_k": Option(float, 300.0, "Langevin thermostat's temperature (K)", check=positive),
    "friction_per_ps": Option(float, 1.0, "Langevin thermostat's friction (1/ps)", check=positive),
    "timestep_fs": Option(float, 0.5, "the MD step (fs)", check=positive),
    "steps": Option(int, 2000, "at most this many steps a round", check=positive),
    "every": Option(int, 10, "a record (deviation, frame) every this many steps", check=positive),
    "platform": Option(str, "CPU", "OpenMM's platform"),
    "seed": Option(int, 0, "the velocities' and the thermostat's seed"),
}
SELECT = {
    "low": Option(float, 0.05, "eV/Å: below this deviation on the QM atoms the committee knows the frame",
                  check=non_negative),
    "high": Option(float, 0.3, "eV/Å: a round stops at the first step over this; its frame is labelled too",
                   check=positive),
    "abort": Option(float, 1.0, "eV/Å: a step over this is a blow-up: not labelled, the round goes back to the "
                    "last accepted state", check=positive),
    "max_frames": Option(int, 4, "at most this many frames a round", check=positive),
    "min_spacing": Option(int, 50, "chosen frames lie at least this many steps apart", check=non_negative),
    "audit_blow_ups": Option(bool, True, "a round whose labelled frames show a true force error over abort on a QM "
                             "atom (the audit: the committee that chose them against the oracle) blew up unseen: its "
                             "MD is not accepted, the next round starts where it started (its labels are kept)"),
}
ORACLE = {
    "pyscf": Option((dict, None), None, "PySCF in the MM charges: {method, basis, charge, spin}"),
    "ase": Option((str, None), None, "an ASE calculator by name, for frames without an MM part: emt"),
    "command": Option((str, None), None, "a command with {in} and {out} (pinn.learn.oracles.CommandOracle)"),
    "timeout_s": Option((float, None), None, "with command: seconds it may run", check=positive),
    "output": Option(str, "extxyz", "with command: what {out} is, a file of labelled frames (extxyz) or a folder "
                     "of MiMiC single points frame-K/ (mimic)", choices=("extxyz", "mimic")),
    "max_failures": Option(float, 0.5, "stop when more than this share of a round's frames cannot be labelled",
                           check=non_negative),
}
RETRAIN = {
    "max_steps": Option(int, 500, "each round's training steps", check=positive),
    "warm_start": Option(bool, True, "start each member from its self of the round before (else from fresh "
                         "weights of its seed)"),
}
STOP = {
    "time_ps": Option((float, None), None, "simulated time of all rounds (ps)", check=positive),
    "rounds": Option((int, None), 10, "rounds", check=positive),
    "wall_s": Option((float, None), None, "wall time (s): no round starts after it", check=positive),
    "stalled_rounds": Option(int, 10, "end the loop when this many rounds in a row accepted no MD step (each stopped "
                             "over select.high before its first record, or blew up: the committee does not learn "
                             "where it stands)", check=positive),
}
SECTIONS = {"initial": INITIAL, "committee": COMMITTEE, "explorer": EXPLORER, "select": SELECT, "oracle": ORACLE,
            "retrain": RETRAIN, "stop": STOP}
TOP = ["workdir", *SECTIONS]
#: the paths of each section, made relative to the run file
PATHS = {"initial": ("data",), "explorer": ("pdb", "top", "gro", "include_dir", "start", "system")}


def read_learn_file(path):
    """Read and check a ``pinn learn`` run file.

    Returns:
        dict: ``workdir`` (absolute) and each section validated (defaults filled, paths absolute).

    Raises:
        ParamsError: naming the file and the key.
    """
    path = os.fspath(path)
    with open(path) as f:
        raw = yaml.safe_load(f) or {}
    if not isinstance(raw, dict):
        raise ParamsError(f"{path}: a pinn learn run file is a mapping of {TOP}")
    for key in raw:
        if key not in TOP:
            raise ParamsError(f"{path}: {key}: unknown key;{did_you_mean(key, TOP)} allowed keys: {TOP}")
    base = os.path.dirname(os.path.abspath(path))
    config = {"workdir": os.path.join(base, raw.get("workdir") or "learn")}
    for name, schema in SECTIONS.items():
        try:
            section = validate_section(raw.get(name) or {}, schema, name)
        except ParamsError as error:
            raise ParamsError(f"{path}: {error}") from None
        for key in PATHS.get(name, ()):
            value = section.get(key)
            if isinstance(value, str):
                section[key] = os.path.join(base, value)
            elif isinstance(value, list):
                section[key] = [os.path.join(base, v) for v in value]
        config[name] = section
    _check(config, path)
    return config


def _check(config, path):
    explorer = config["explorer"]
    given = [key for key in ("pdb", "top", "start") if explorer[key]]
    if len(given) != 1:
        raise ParamsError(f"{path}: explorer: give pdb (with forcefield), top and gro, or start (a system without "
                          f"MM), one of them (got {given or 'none'})")
    if not explorer["start"] and explorer["qm"] is None:
        raise ParamsError(f"{path}: explorer.qm: the QM atoms of the OpenMM system (indices or {{resname: NAME}})")
    if explorer["start"] and config["initial"]["frames"]:
        raise ParamsError(f"{path}: initial.frames labels an MM system's own MD; a system without MM needs "
                          "initial.data")
    if explorer["pdb"] and bool(explorer["forcefield"]) == bool(explorer["system"]):
        raise ParamsError(f"{path}: explorer: with pdb, give forcefield (the force field files) or system (an OpenMM "
                          "System's XML), one of them")
    if explorer["system"] and not explorer["pdb"]:
        raise ParamsError(f"{path}: explorer.system: give pdb too (the system's atoms and positions)")
    if explorer["top"] and not explorer["gro"]:
        raise ParamsError(f"{path}: explorer.gro: the coordinates of the top")
    oracle = config["oracle"]
    given = [key for key in ("pyscf", "ase", "command") if oracle[key] is not None]
    if len(given) != 1:
        raise ParamsError(f"{path}: oracle: give one of pyscf, ase or command (got {given or 'none'})")
    select = config["select"]
    if not select["low"] < select["high"] < select["abort"]:
        raise ParamsError(f"{path}: select: low < high < abort, got {select['low']}, {select['high']}, "
                          f"{select['abort']}")
    initial = config["initial"]
    if (initial["data"] is None) == (initial["frames"] is None):
        raise ParamsError(f"{path}: initial: give data (labelled frames) or frames (how many to label first)")
    stop = config["stop"]
    if all(stop[key] is None for key in STOP):
        raise ParamsError(f"{path}: stop: give time_ps, rounds or wall_s")
