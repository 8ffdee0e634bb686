"""The selection of frames to label: the band, the count, the spacing, the order; what the loop refuses before it
labels."""
import pytest

from pinn.learn.selection import select_frames


def test_frames_in_the_band_by_deviation_spaced_and_in_step_order():
    steps = [0, 10, 20, 30, 40, 50, 60, 70]
    devi = [0.01, 0.20, 0.25, 0.50, 0.12, 0.22, 0.05, 0.30]
    # band [0.05, 0.3): 10, 20, 40, 50, 60; by deviation 20 (0.25), 50 (0.22), 10 (0.20: 10 steps from 20) ...
    assert [steps[k] for k in select_frames(steps, devi, 0.05, 0.3, max_frames=3, min_spacing=15)] == [20, 50]
    assert [steps[k] for k in select_frames(steps, devi, 0.05, 0.3, max_frames=2, min_spacing=0)] == [20, 50]
    assert [steps[k] for k in select_frames(steps, devi, 0.05, 0.3, max_frames=9, min_spacing=10)] == \
        [10, 20, 40, 50, 60]
    assert select_frames(steps, devi, 0.6, 0.9, max_frames=3, min_spacing=0) == []


def test_a_loop_that_accepts_no_step_stops_saying_why(tmp_path):
    """stop.stalled_rounds: rounds that end where they started (their exploration.json) end the loop, naming what to
    change; a round that moves on resets the count."""
    import json

    import yaml

    from pinn.learn.loop import LearningLoop
    (tmp_path / "start.xyz").write_text("")
    config = {"workdir": "loop", "initial": {"data": "start.xyz"},
              "committee": {"params": {}}, "explorer": {"start": "start.xyz"}, "oracle": {"ase": "emt"},
              "stop": {"rounds": 100, "stalled_rounds": 2}}
    (tmp_path / "learn.yml").write_text(yaml.safe_dump(config))
    loop = LearningLoop.__new__(LearningLoop)  # the stop rule alone: no system, no oracle
    from pinn.learn.config import read_learn_file
    loop.config = read_learn_file(tmp_path / "learn.yml")
    loop.workdir = loop.config["workdir"]
    from pinn.learn.loop import LoopState
    loop.state = LoopState(loop.workdir)
    for round_, time_ps in enumerate([0.5, 0.5, 0.5], 1):
        (tmp_path / "loop" / f"round-{round_}").mkdir(parents=True)
        (tmp_path / "loop" / f"round-{round_}" / "exploration.json").write_text(json.dumps({"time_ps": time_ps}))
    loop.state.round = 2
    assert loop._stop_reason(loop.config["stop"], started=float("inf")) is None  # round 1 moved, round 2 not
    loop.state.round = 3
    assert "the last 2 rounds accepted no MD step" in loop._stop_reason(loop.config["stop"], started=float("inf"))


def test_elements_the_committee_does_not_know_are_refused_before_a_label(tmp_path):
    """A QM region (OpenMM) or an ASE system holding an element missing from the committee's atom_types: the loop
    refuses before round 0, naming the key and the element, with no frame labelled (before: round 0 labelled its
    initial frames, then training refused them)."""
    import yaml
    from ase import Atoms
    from ase.calculators.singlepoint import SinglePointCalculator

    from pinn.io import ase_files
    from pinn.learn.loop import LearningLoop
    from pinn.schema import ParamsError
    frame = Atoms("CuH", positions=[[0, 0, 0], [1.5, 0, 0]], cell=[8, 8, 8], pbc=True)
    frame.calc = SinglePointCalculator(frame, energy=-1.0, forces=[[0.1, 0, 0], [-0.1, 0, 0]])
    ase_files.write(str(tmp_path / "start.xyz"), [frame], format="extxyz")
    network = {"name": "PiNet", "params": {"atom_types": [1, 8]}}
    config = {"workdir": "loop", "initial": {"data": "start.xyz"}, "committee": {"params": {"network": network}},
              "explorer": {"start": "start.xyz"}, "oracle": {"ase": "emt"}, "stop": {"rounds": 1}}
    (tmp_path / "learn.yml").write_text(yaml.safe_dump(config))
    with pytest.raises(ParamsError, match=r"explorer.start: the committee sees \['Cu'\].*atom_types \[1, 8\]"):
        LearningLoop(tmp_path / "learn.yml").run()
    assert not (tmp_path / "loop" / "round-0" / "committee").exists()

    pytest.importorskip("openmm", reason="OpenMM is not installed")
    import openmm
    from openmm import app, unit
    forcefield = app.ForceField("amber14/tip3p.xml")
    modeller = app.Modeller(app.Topology(), [])
    modeller.addSolvent(forcefield, model="tip3p", boxSize=openmm.Vec3(2.0, 2.0, 2.0) * unit.nanometer)
    with open(tmp_path / "water.pdb", "w") as f:
        app.PDBFile.writeFile(modeller.topology, modeller.positions, f)
    network["params"]["atom_types"] = [1, 6]
    config.update(initial={"frames": 2}, explorer={"pdb": "water.pdb", "forcefield": ["amber14/tip3p.xml"],
                                                   "qm": [0, 1, 2]}, oracle={"pyscf": {"basis": "sto-3g"}})
    (tmp_path / "learn.yml").write_text(yaml.safe_dump(config))
    with pytest.raises(ParamsError, match=r"explorer.qm: the committee sees \['O'\].*atom_types \[1, 6\]"):
        LearningLoop(tmp_path / "learn.yml").run()
    assert not (tmp_path / "loop" / "round-0" / "selected.xyz").exists()


def test_an_explorer_from_an_openmm_system_xml_is_the_force_fields(tmp_path):
    """explorer.system (OpenMM's XmlSerializer XML, with the pdb): the same MM system as pdb + forcefield (the same
    energy at the PDB's positions); a System XML holding a PythonForce is refused unread, one of another size is
    refused naming both counts, and pdb with both forcefield and system is refused."""
    openmm = pytest.importorskip("openmm", reason="OpenMM is not installed")
    import yaml
    from openmm import app, unit

    from pinn.learn.config import read_learn_file
    from pinn.learn.explorer import OpenMMExplorer
    from pinn.schema import ParamsError
    forcefield = app.ForceField("amber14/tip3p.xml")
    modeller = app.Modeller(app.Topology(), [])
    modeller.addSolvent(forcefield, model="tip3p", boxSize=openmm.Vec3(2.0, 2.0, 2.0) * unit.nanometer)
    with open(tmp_path / "water.pdb", "w") as f:
        app.PDBFile.writeFile(modeller.topology, modeller.positions, f)
    system = forcefield.createSystem(modeller.topology, nonbondedMethod=app.PME, constraints=None, rigidWater=False,
                                     nonbondedCutoff=0.9 * unit.nanometer)
    (tmp_path / "system.xml").write_text(openmm.XmlSerializer.serialize(system))

    def explorer(**changes):
        section = {"pdb": "water.pdb", "qm": [0, 1, 2], **changes}
        config = {"initial": {"frames": 2}, "committee": {"params": {}}, "explorer": section, "oracle": {"ase": "emt"},
                  "stop": {"rounds": 1}}
        (tmp_path / "learn.yml").write_text(yaml.safe_dump(config))
        return read_learn_file(tmp_path / "learn.yml")["explorer"]

    def energy(mm):
        context = openmm.Context(mm, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName("Reference"))
        context.setPositions(modeller.positions)
        return context.getState(getEnergy=True).getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole)

    from_xml = OpenMMExplorer(explorer(system="system.xml"))
    from_forcefield = OpenMMExplorer(explorer(forcefield=["amber14/tip3p.xml"]))
    assert energy(from_xml.mm) == pytest.approx(energy(from_forcefield.mm), rel=1e-12)
    assert from_xml.elements == [1, 8]
    with pytest.raises(ParamsError, match="with pdb, give forcefield .* or system"):
        explorer(system="system.xml", forcefield=["amber14/tip3p.xml"])

    crafted = ('<Force forceGroup="0" function="80" name="PythonForce" type="PythonForce" usesPeriodic="0" '
               'version="2"><GlobalParameters/><Particles/></Force></Forces>')  # a pickle, never unpickled
    (tmp_path / "system.xml").write_text(openmm.XmlSerializer.serialize(system).replace("</Forces>", crafted))
    with pytest.raises(ValueError, match="explorer.system: .* holds a PythonForce .* refused"):
        OpenMMExplorer(explorer(system="system.xml"))
    small = openmm.System()
    small.addParticle(1.0)
    small.addForce(openmm.NonbondedForce())
    (tmp_path / "system.xml").write_text(openmm.XmlSerializer.serialize(small))
    with pytest.raises(ValueError, match=r"explorer.system: .* has 1 particles, the structure \d+ atoms"):
        OpenMMExplorer(explorer(system="system.xml"))
