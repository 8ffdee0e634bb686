"""The loop of ``pinn learn``: a committee explores ML/MM MD, the oracle labels the frames it is unsure of, the
committee is retrained on them (warm-started), and the run goes on from the last accepted state.

Round 0 trains the committee on the initial data.  Each round k ≥ 1:

1. **explores** (:class:`~pinn.learn.explorer.OpenMMExplorer`) with round k − 1's committee until its steps are
   done or a step's deviation on the QM atoms exceeds ``select.high``;
2. **selects** (:func:`~pinn.learn.selection.select_frames`) at most ``max_frames`` records in the band
   [``low``, ``high``), spaced by ``min_spacing`` steps, and the stop's frame when it lies under ``abort``;
3. **labels** them with the oracle (:mod:`pinn.learn.oracles`); frames that cannot be labelled are set aside and
   named; more than ``max_failures`` of them stops the loop; the committee that chose them is audited on them
   (:func:`audit_committee`), and a true force error over ``abort`` is a blow-up its deviation did not show: the
   round's MD is not accepted (:meth:`LearningLoop.reject_a_hidden_blow_up`);
4. **retrains** each member from its round k − 1 self on all labels (``pinn train``'s library, a warm start).

The loop's directory holds ``state.json`` (the last finished stage), ``config.json`` (the run file as read), and
per round ``round-K/``: ``committee/member-M`` (the models), ``model_devi.out`` and ``frames.xyz`` (the records),
``selected.xyz``, ``labels.xyz`` (written whole), ``failed.txt``, ``audit.json`` (:func:`audit_committee`),
``rejected.json`` (a hidden blow-up), ``exploration.json``, ``state.npz`` (the accepted state the next round
starts from) and ``train.yml``.  A loop started again (after SIGTERM, a requeue, a crash) resumes after its last
finished stage: no frame is labelled twice.
"""
import json
import logging
import os
import time

import yaml

from pinn.learn.config import read_learn_file
from pinn.learn.report import read_json
from pinn.learn.selection import select_frames

log = logging.getLogger("pinn")

STAGES = ("explored", "labelled", "trained")
#: tests only: ``ROUND:STAGE`` (or ``ROUND:member-M``) pauses the loop there, its files written and state.json not
#: yet, after writing ``paused`` in the loop's directory, so that a test can kill it at that moment
_PAUSE = "PINN_TEST_LEARN_PAUSE"


class LoopState:
    """``state.json`` of a loop's directory: the round and its last finished stage, written atomically.

    Attributes:
        round: the round (0: the first training).
        stage: the round's last finished stage (:data:`STAGES`), or ``None`` (nothing done yet).
        committee: the round whose committee is the latest (a round without labels keeps the one before).
        time_ps: the simulated time of the accepted states so far (ps).
    """

    def __init__(self, workdir):
        self.path = os.path.join(workdir, "state.json")
        self.round, self.stage, self.committee, self.time_ps = 0, None, 0, 0.0
        if os.path.exists(self.path):
            with open(self.path) as f:
                saved = json.load(f)
            self.round, self.stage = int(saved["round"]), saved["stage"]
            self.committee, self.time_ps = int(saved["committee"]), float(saved["time_ps"])

    def finish(self, round_, stage, **changes):
        """Say that ``stage`` of ``round_`` is done (written before the next stage starts)."""
        from pinn.files.durable import write_atomic
        self.round, self.stage = round_, stage
        for key, value in changes.items():
            setattr(self, key, value)
        write_atomic(self.path, json.dumps({"round": self.round, "stage": self.stage, "committee": self.committee,
                                            "time_ps": self.time_ps}))


class LearningLoop:
    """The loop of a ``pinn learn`` run file (see the module).

    Args:
        path: the run file (:mod:`pinn.learn.config`).
    """

    def __init__(self, path, world=None):
        self.config = read_learn_file(path)
        self.workdir = self.config["workdir"]
        self.world = world if world is not None else _world()
        if self.world.is_chief:
            os.makedirs(self.workdir, exist_ok=True)
            _write_json(os.path.join(self.workdir, "config.json"), self.config)  # what the report reads
        self.world.barrier()
        self.state = LoopState(self.workdir)
        self.oracle_section = self.config["oracle"]
        self._explorer = None
        _check_initial_labels(self.config["initial"]["data"])

    # ------------------------------------------------------------------ places
    def round_dir(self, round_):
        path = os.path.join(self.workdir, f"round-{round_}")
        os.makedirs(path, exist_ok=True)
        return path

    def members(self, round_):
        """The model directories of round ``round_``'s committee."""
        folder = os.path.join(self.round_dir(round_), "committee")
        return [os.path.join(folder, f"member-{m}") for m in range(self.config["committee"]["size"])]

    def label_files(self, up_to):
        """The initial data and every round's labels up to round ``up_to`` (round 0's: the initial frames labelled
        by the loop)."""
        initial = self.config["initial"]["data"]
        files = [] if initial is None else list(initial) if isinstance(initial, list) else [initial]
        for round_ in range(0, up_to + 1):
            labels = os.path.join(self.workdir, f"round-{round_}", "labels.xyz")
            if os.path.exists(labels):
                files.append(labels)
        return files

    @property
    def explorer(self):
        if self._explorer is None:
            from pinn.learn.explorer import explorer_of
            self._explorer = explorer_of(self.config["explorer"])
        return self._explorer

    # ------------------------------------------------------------------ the loop
    def run(self):
        """Run rounds until a stop of the run file's ``stop`` section; returns the reason the loop ended (on every
        rank)."""
        stop = self.config["stop"]
        started = time.monotonic()
        unknown = self._shared(self.unknown_elements)
        if unknown:
            from pinn.schema import ParamsError
            raise ParamsError(unknown)
        if self.state.stage is None:  # round 0: the initial data (labelled first, without data)
            failure = self._shared(self.label_initial) if self.config["initial"]["frames"] else None
            if failure:
                return failure
            self._chief_finishes(0, "labelled")
        if self.state.round == 0 and self.state.stage == "labelled":  # round 0: the committee on the initial data
            self.train(0, self.config["committee"]["max_steps"], init=None)
            self._chief_finishes(0, "trained", committee=0)
        while True:
            if self.state.stage == "trained":
                reason = self._shared(lambda: self._stop_reason(stop, started))
                if reason:
                    log.info("pinn learn: %s", reason)
                    return reason
                round_ = self.state.round + 1
            else:
                round_ = self.state.round
            outcome = self.round(round_)
            if outcome:
                return outcome

    def unknown_elements(self):
        """What is wrong when the atoms the committee sees in the explorer's system (the QM region of an OpenMM
        one, every atom of an ASE one) hold elements its network does not know, else ``None``: asked before round 0,
        so that no label is paid for a committee that could not be trained on it."""
        from ase.data import chemical_symbols

        from pinn.networks import atom_types_of
        from pinn.params import resolve
        params = resolve({**self.config["committee"]["params"], "model_dir": self.members(0)[0]})
        known = set(atom_types_of(params))
        unknown = sorted(set(self.explorer.elements) - known)
        if not unknown:
            return None
        where = "explorer.start" if self.config["explorer"]["start"] else "explorer.qm"
        return (f"{where}: the committee sees {[chemical_symbols[z] for z in unknown]}, elements its network does "
                f"not know (committee.params network.params.atom_types {sorted(known)}): add them to atom_types")

    def _stop_reason(self, stop, started):
        if stop["rounds"] is not None and self.state.round >= stop["rounds"]:
            return f"{self.state.round} rounds done (stop.rounds)"
        if stop["time_ps"] is not None and self.state.time_ps >= stop["time_ps"]:
            return f"{self.state.time_ps:g} ps simulated (stop.time_ps {stop['time_ps']:g})"
        if stop["wall_s"] is not None and time.monotonic() - started >= stop["wall_s"]:
            return f"wall time over {stop['wall_s']:g} s (stop.wall_s)"
        stalled = self._stalled_rounds()
        if stalled >= stop["stalled_rounds"]:
            return (f"the last {stalled} rounds accepted no MD step (stop.stalled_rounds): each stopped over "
                    f"select.high {self.config['select']['high']:g} eV/Å before its first record or blew up "
                    "(round-K/rejected.json); train the committee longer (committee.max_steps, retrain.max_steps) "
                    "or raise select.high")
        return None

    def _stalled_rounds(self):
        """How many of the latest rounds in a row ended where they started (accepted no MD step)."""
        count = 0
        round_ = self.state.round
        while round_ >= 1:
            end = self.accepted_ps(round_)
            if end is None:
                break
            start = self.accepted_ps(round_ - 1) if round_ > 1 else 0.0
            if start is None or end > start:
                break
            count += 1
            round_ -= 1
        return count

    def accepted_ps(self, round_):
        """The simulated time of round ``round_``'s accepted end state (ps; its exploration.json, or where a hidden
        blow-up sent it back: rejected.json), or ``None`` (not explored)."""
        folder = os.path.join(self.workdir, f"round-{round_}")
        rejected = read_json(os.path.join(folder, "rejected.json"))
        if rejected is not None:
            return rejected["back_to_ps"]
        explored = read_json(os.path.join(folder, "exploration.json"))
        return None if explored is None else explored["time_ps"]

    # ------------------------------------------------------------------ ranks
    def _shared(self, decide):
        """``decide()`` on rank 0 (a text, or ``None``), the same on every rank: the text goes through the loop's
        directory (``decision.txt``), after a barrier."""
        if self.world.size == 1:
            return decide()
        path = os.path.join(self.workdir, "decision.txt")
        if self.world.is_chief:
            from pinn.files.durable import write_atomic
            text = decide()
            write_atomic(path, "" if text is None else text)
        self.world.barrier()
        with open(path) as f:
            text = f.read()
        self.world.barrier()  # everyone has read it before the next decision replaces it
        return text or None

    def _chief_finishes(self, round_, stage, **changes):
        """Rank 0 writes that ``stage`` of ``round_`` is done once every rank got there; every rank then reads it."""
        self.world.barrier()
        if self.world.is_chief:
            self.state.finish(round_, stage, **changes)
        self.world.barrier()
        self.state = LoopState(self.workdir)

    def round(self, round_):
        """Round ``round_`` from its stage after the last finished one; returns why the loop must end, or ``None``.
        Rank 0 explores and labels; every rank trains its share of the members."""
        folder = self.round_dir(round_)
        stage = self.state.stage if self.state.round == round_ else None
        if stage is None:
            simulated = self.explore(round_, folder) if self.world.is_chief else None
            self._chief_finishes(round_, "explored", time_ps=simulated)
            stage = "explored"
        if stage == "explored":
            failure = self._shared(lambda: self.label(round_, folder))
            if failure:
                return failure
            rejected = read_json(os.path.join(folder, "rejected.json"))
            self._chief_finishes(round_, "labelled", **({"time_ps": rejected["back_to_ps"]} if rejected else {}))
            stage = "labelled"
        if stage == "labelled":
            if os.path.exists(os.path.join(folder, "labels.xyz")):
                self.train(round_, self.config["retrain"]["max_steps"], init=self.state.committee)
                self._chief_finishes(round_, "trained", committee=round_)
            else:
                log.info("round %d: nothing to label; the committee of round %d goes on", round_,
                         self.state.committee)
                self._chief_finishes(round_, "trained")
        return None

    def explore(self, round_, folder):
        """Stage 1: explore from the last accepted state; the records, the selection and the accepted state.

        Returns:
            the simulated time of the accepted state (ps).
        """
        from pinn.io import ase_files
        from pinn.learn.explorer import save_state
        select = self.config["select"]
        exploration = self.explorer.explore(self.members(self.state.committee), self.start_state(round_),
                                            select["high"],
                                            select["abort"], os.path.join(folder, "model_devi.out"),
                                            os.path.join(folder, "frames.xyz"))
        chosen = [exploration.frames[k] for k in select_frames(exploration.steps, exploration.deviations,
                                                               select["low"], select["high"], select["max_frames"],
                                                               select["min_spacing"])]
        stop = exploration.stop
        if stop is not None and stop.deviation["max_devi_f_qm"] <= select["abort"]:
            chosen.append(stop.atoms)
        selected = os.path.join(folder, "selected.xyz")
        if chosen:
            ase_files.write(selected + ".part", chosen, format="extxyz")
            os.replace(selected + ".part", selected)
        save_state(os.path.join(folder, "state.npz"), exploration.state)
        record = {"round": round_, "committee": self.state.committee, "steps": exploration.steps_run,
                  "time_ps": float(exploration.state["time_ps"]), "records": len(exploration.steps),
                  "selected": len(chosen),
                  "stopped_at": None if stop is None else stop.step,
                  "max_devi_f_qm": float(max(exploration.deviations)) if exploration.deviations else None}
        with open(os.path.join(folder, "exploration.json"), "w") as f:
            json.dump(record, f)
        log.info("round %d: %d steps explored (%s), %d frame(s) selected", round_, exploration.steps_run,
                 "stopped at step %d" % stop.step if stop is not None else "no stop", len(chosen))
        self._pause_for_tests(round_, "explored")
        return record["time_ps"]

    def start_state(self, round_):
        """The state round ``round_`` starts from: the accepted state of the round before (``state.npz``), else the
        explorer's initial one."""
        from pinn.learn.explorer import load_state
        previous = os.path.join(self.workdir, f"round-{round_ - 1}", "state.npz")
        return load_state(previous) if os.path.exists(previous) else self.explorer.initial_state

    def reject_a_hidden_blow_up(self, round_, folder, audit):
        """After the audit (``select.audit_blow_ups``): when the true force error on a QM atom of a labelled frame
        exceeds ``select.abort``, the round blew up where its committee's deviation did not show it (members that
        agree where they are all wrong). Its MD is not accepted: ``state.npz`` becomes the state the round started
        from and ``rejected.json`` says why; the labels are kept (they are where the committee was wrong).
        :meth:`round` then sets the loop's time back to its ``back_to_ps``, on every rank."""
        from pinn.learn.explorer import save_state
        select = self.config["select"]
        worst = max(audit["max_error_f_qm"])
        if not select["audit_blow_ups"] or worst <= select["abort"]:
            return
        start = self.start_state(round_)
        back_to = float(start["time_ps"])
        frame = audit["max_error_f_qm"].index(worst)
        _write_json(os.path.join(folder, "rejected.json"),
                    {"max_error_f_qm": worst, "step": audit["step"][frame],
                     "max_devi_f_qm": audit["max_devi_f_qm"][frame], "abort": select["abort"],
                     "back_to_ps": back_to, "back_to_step": int(start["step"])})
        save_state(os.path.join(folder, "state.npz"), start)
        log.warning("round %d: the committee's force error on a QM atom of the frame of step %d is %.3g eV/Å (its "
                    "deviation %.3g), over select.abort %g: a blow-up the deviation did not show; its MD is not "
                    "accepted, the next round starts again at %g ps with the labels", round_, audit["step"][frame],
                    worst, audit["max_devi_f_qm"][frame], select["abort"], back_to)

    def label_initial(self):
        """Round 0 without initial data: ``initial.frames`` frames of the MM system's own MD labelled (as
        :meth:`label` does a round's selection); returns why the loop must end, or ``None``."""
        from pinn.io import ase_files
        initial = self.config["initial"]
        folder = self.round_dir(0)
        frames = self.explorer.mm_frames(initial["frames"], initial["spacing"])
        selected = os.path.join(folder, "selected.xyz")
        ase_files.write(selected + ".part", frames, format="extxyz")
        os.replace(selected + ".part", selected)
        failure = self.label(0, folder, audit=False)
        if failure is None and not os.path.exists(os.path.join(folder, "labels.xyz")):
            return "round 0: no initial frame could be labelled (round-0/failed.txt says why)"
        return failure

    def label(self, round_, folder, audit=True):
        """Stage 2: the selected frames labelled (written whole), those set aside named in ``failed.txt``, and
        (``audit``) the committee that chose them audited on them."""
        from pinn.io import ase_files
        selected = os.path.join(folder, "selected.xyz")
        frames = ase_files.read(selected, index=":") if os.path.exists(selected) else []
        if frames:
            labels = self.oracle(folder).label(frames)
            with open(os.path.join(folder, "failed.txt"), "w") as f:
                f.writelines(f"{index} {reason}\n" for index, reason in labels.failed)
            if labels.labelled:
                path = os.path.join(folder, "labels.xyz")
                ase_files.write(path + ".part", [atoms for _, atoms in labels.labelled], format="extxyz")
                os.replace(path + ".part", path)
                if audit:
                    record = audit_committee(self.members(self.state.committee), [a for _, a in labels.labelled])
                    _write_json(os.path.join(folder, "audit.json"), record)
                    self.reject_a_hidden_blow_up(round_, folder, record)
            log.info("round %d: %s", round_, labels.describe())
            share = len(labels.failed) / len(frames)
            if share > self.oracle_section["max_failures"]:
                return (f"round {round_}: {len(labels.failed)} of {len(frames)} frames could not be labelled (more "
                        f"than oracle.max_failures {self.oracle_section['max_failures']:g}); first: frame "
                        f"{labels.failed[0][0]}: {labels.failed[0][1]}")
        self._pause_for_tests(round_, "labelled")
        return None

    def oracle(self, folder):
        from pinn.learn.oracles import ASEOracle, CommandOracle, PySCFOracle
        section = self.oracle_section
        if section["pyscf"] is not None:
            return PySCFOracle(**section["pyscf"])
        if section["command"] is not None:
            return CommandOracle(section["command"], timeout_s=section["timeout_s"],
                                 workdir=os.path.join(folder, "oracle"), output=section["output"])
        if section["ase"].lower() == "emt":
            from ase.calculators.emt import EMT
            return ASEOracle(EMT())
        raise ValueError(f"oracle.ase: {section['ase']!r} is not a calculator pinn learn names (emt); use "
                         "pinn.learn.oracles.ASEOracle from a script for others")

    def train(self, round_, max_steps, init):
        """Stage 3: each member of round ``round_`` trained on every label so far (warm-started from round
        ``init``'s members, or from scratch)."""
        from pinn.training.run_file import run_training
        committee = self.config["committee"]
        folder = self.round_dir(round_)
        run = {**committee["params"], "model_dir": os.path.join(folder, "committee"),
               "data": {"train": self.label_files(round_), "batch_size": committee["batch_size"]},
               "train": {"max_steps": max_steps}}
        path = os.path.join(folder, "train.yml")
        if self.world.is_chief:
            with open(path, "w") as f:
                yaml.safe_dump(run, f)
        self.world.barrier()
        warm = None if init is None or not self.config["retrain"]["warm_start"] else \
            os.path.join(self.round_dir(init), "committee")
        mine = range(self.world.rank, committee["size"], self.world.size)  # at the same time on the ranks
        for member in mine:  # a member trained before a restart goes on from its checkpoint
            started = time.time()
            run_training(path, member=member, init_model=warm)
            _write_json(os.path.join(folder, f"trained-member-{member}.json"),
                        {"rank": self.world.rank, "start": started, "end": time.time()})
            self._pause_for_tests(round_, f"member-{member}")
        log.info("round %d: member(s) %s trained on %d file(s) of labels", round_, list(mine),
                 len(run["data"]["train"]))


    def _pause_for_tests(self, round_, stage):
        if os.environ.get(_PAUSE) == f"{round_}:{stage}":
            with open(os.path.join(self.workdir, "paused"), "w") as f:
                f.write(f"{round_}:{stage}\n")
            time.sleep(600)


def audit_committee(members, labelled):
    """How wrong the committee that chose the frames was on them: per labelled frame its deviation and the error of
    its mean forces on the QM atoms (what the deviation estimates).

    Args:
        members: the committee's model directories.
        labelled: the labelled frames (``ase.Atoms`` with the oracle's energy and forces).

    Returns:
        dict of lists: ``step``, ``max_devi_f_qm`` (eV/Å), ``max_error_f_qm`` (the largest error of an atom's
        force, eV/Å), ``rmse_f_qm`` (eV/Å, over the QM atoms' components), ``error_e`` (eV).
    """
    import numpy as np

    from pinn.calculator import get_calc
    calc = get_calc(list(members))
    audit = {"step": [], "max_devi_f_qm": [], "max_error_f_qm": [], "rmse_f_qm": [], "error_e": []}
    for frame in labelled:
        reference_energy, reference_forces = frame.get_potential_energy(), frame.get_forces()
        atoms = frame.copy()
        atoms.calc = calc
        forces = atoms.get_forces()
        qm = np.asarray(atoms.arrays.get("qm", np.ones(len(atoms), bool))).astype(bool)
        per_atom = calc.results["forces_deviation"]
        error = forces[qm] - reference_forces[qm]
        audit["step"].append(int(frame.info.get("step", -1)))
        audit["max_devi_f_qm"].append(float(per_atom[qm].max()))
        audit["max_error_f_qm"].append(float(np.linalg.norm(error, axis=1).max()))
        audit["rmse_f_qm"].append(float(np.sqrt(np.mean(error ** 2))))
        audit["error_e"].append(float(atoms.get_potential_energy() - reference_energy))
    return audit


def learn(path, world=None):
    """Run the loop of a ``pinn learn`` run file (see :mod:`pinn.learn.loop`); returns why it ended.

    Under a launcher (``mpirun``, ``srun``, ``horovodrun``) with several ranks, rank 0 explores and labels and the
    members train at the same time, member m on rank m mod size (the world: ``world``, else
    :func:`pinn.parallel.init`'s).
    """
    return LearningLoop(path, world).run()


def _check_initial_labels(data):
    """Refuse initial data whose first frame holds a stress: the oracles' labels hold energy and forces, and files of
    other labels cannot be trained on together.

    Raises:
        ValueError: naming the file.
    """
    from pinn.io import ase_files
    files = [] if data is None else [data] if isinstance(data, str) else list(data)
    for path in files:
        first = ase_files.read(path, index=0)
        if first.calc is not None and "stress" in first.calc.results:
            raise ValueError(f"initial.data: {path} holds stress labels; the loop's labels hold energy and forces "
                             "alone (QM/MM convention), and files of other labels cannot be trained on together: "
                             "write the frames without their stress (e.g. atoms.calc.results.pop('stress'))")


def _world():
    """The world of the loop's ranks: one process alone, else the launcher's ranks (Horovod or MPI alone)."""
    from pinn.parallel.serial import SerialWorld
    from pinn.runtime.ranks import launcher_rank
    if launcher_rank()[1] == 1:
        return SerialWorld()
    from pinn.parallel import init
    return init({"parallel": True})


def _write_json(path, record):
    from pinn.files.durable import write_atomic
    write_atomic(path, json.dumps(record))


__all__ = ["learn", "LearningLoop", "LoopState", "audit_committee"]
