"""pinn in openmm-ml (issue 78), with openmmml from PyPI: ``MLPotential('pinn')`` is found by its entry point in a
process that imports openmm-ml alone; ``createSystem`` is ``get_calc``; ``createMixedSystem`` is
``create_mixed_system`` for both embeddings; ``interpolate=True`` is the force field at λ = 0 and the ML/MM system
at 1, the linear mix in between with dU/dλ right (OpenMM's derivative and central differences), serialised by
XmlSerializer and by save_system; a committee is the members' mean; bad input is refused with a message.  Flexible
TIP3P water in a 2 nm box with PME (tests/openmm_water.py), one water the ML region, the Reference platform."""
import os
import subprocess
import sys

import numpy as np
import pytest

openmm = pytest.importorskip("openmm", reason="OpenMM is not installed (pip install 'pinn[openmm]')")
pytest.importorskip("openmmml", reason="openmm-ml is not installed (pip install 'pinn[openmm]')")
from openmm import app, unit  # noqa: E402
from openmm_water import train_electrostatic_water_model, water  # noqa: E402

LAMBDA = "lambda_interpolate"
REGION = [0, 1, 2]


@pytest.fixture(scope="module")
def box():
    return water(app.PME)


@pytest.fixture(scope="module")
def electrostatic_models(tmp_path_factory):
    """Two electrostatic PiNets (seeds 0 and 1), each trained 2 steps: one model, or a committee of two."""
    models = []
    for seed in (0, 1):
        folder = tmp_path_factory.mktemp(f"openmmml-{seed}")
        models.append(train_electrostatic_water_model(folder, seed))
    return models


def _state(system, positions, lam=None):
    """(energy kJ/mol, forces kJ/mol/nm, dU/dλ or None) on the Reference platform."""
    context = openmm.Context(system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName("Reference"))
    context.setPositions(positions)
    if lam is not None:
        context.setParameter(LAMBDA, lam)
    state = context.getState(getEnergy=True, getForces=True, getParameterDerivatives=lam is not None)
    derivative = state.getEnergyParameterDerivatives()[LAMBDA] if lam is not None else None
    return (state.getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole),
            state.getForces(asNumpy=True).value_in_unit(unit.kilojoule_per_mole / unit.nanometer), derivative)


def _same(a, b):
    """Two (energy, forces) equal to double-precision rounding of sums over the box."""
    assert a[0] == pytest.approx(b[0], rel=1e-9, abs=1e-7)
    np.testing.assert_allclose(a[1], b[1], rtol=0, atol=1e-7 * max(1.0, np.abs(b[1]).max()))


def test_mlpotential_pinn_is_found_by_name_in_a_process_that_imports_openmm_ml_alone(ethanol_model, tmp_path):
    """The entry point: `MLPotential('pinn', model=...)` in a fresh process (another directory) whose script imports
    openmmml and nothing of pinn."""
    script = ("import sys\nfrom openmmml import MLPotential\nimpl = MLPotential('pinn', model=sys.argv[1])._impl\n"
              "print(type(impl).__module__, type(impl).__name__, impl.model)\n")
    done = subprocess.run([sys.executable, "-c", script, ethanol_model], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-3:] == ["pinn.md.openmmml_potential", "PinnPotentialImpl",
                                        os.path.abspath(ethanol_model)]


def test_create_system_is_get_calc(ethanol_model, box):
    """createSystem: the pinn force on every atom of the periodic box; energy and forces are get_calc's on the same
    structure (kJ/mol, kJ/mol/nm)."""
    from ase import Atoms
    from openmmml import MLPotential

    from pinn import get_calc
    topology, _, positions = box
    system = MLPotential("pinn", model=ethanol_model).createSystem(topology)
    energy, forces, _ = _state(system, positions)
    xyz = np.array(positions.value_in_unit(unit.angstrom))
    cell = np.array(topology.getPeriodicBoxVectors().value_in_unit(unit.angstrom))
    atoms = Atoms(numbers=[a.element.atomic_number for a in topology.atoms()], positions=xyz, cell=cell, pbc=True)
    atoms.calc = get_calc(ethanol_model)
    ev = 96.48533212331002
    assert energy == pytest.approx(atoms.get_potential_energy() * ev, rel=1e-9)
    np.testing.assert_allclose(forces, atoms.get_forces() * ev * 10, rtol=0, atol=1e-6)


@pytest.mark.parametrize("embedding", ["mechanical", "electrostatic"])
def test_create_mixed_system_is_pinns_and_interpolates(embedding, ethanol_model, electrostatic_models, box,
                                                       tmp_path):
    """createMixedSystem = create_mixed_system; interpolate=True (through openmm-ml and through create_mixed_system,
    the same): the force field at λ = 0, the ML/MM system at 1, the linear mix at 0.3 (energy and forces), dU/dλ
    = U(1) − U(0) from OpenMM and from central differences; XmlSerializer and save_system/load_system keep it; a λ
    outside [0, 1] is refused naming it."""
    from openmmml import MLPotential

    from pinn.md.openmm import create_mixed_system, load_system, save_system
    model = ethanol_model if embedding == "mechanical" else electrostatic_models[0]
    topology, mm, positions = box
    potential = MLPotential("pinn", model=model)
    mixed = potential.createMixedSystem(topology, mm, REGION, embedding=embedding)
    ours = create_mixed_system(mm, topology, REGION, model, embedding=embedding, force_group=0)
    at_one = _state(mixed, positions)
    _same(at_one, _state(ours, positions))
    at_zero = _state(mm, positions)
    assert abs(at_one[0] - at_zero[0]) > 1.0  # the two ends differ: the checks below can fail
    through_openmm_ml = potential.createMixedSystem(topology, mm, REGION, embedding=embedding, interpolate=True)
    through_pinn = create_mixed_system(mm, topology, REGION, model, embedding=embedding, interpolate=True)
    for system in (through_openmm_ml, through_pinn):
        for lam, end in ((0.0, at_zero), (1.0, at_one)):
            _same(_state(system, positions, lam)[:2], end[:2])
        energy, forces, derivative = _state(system, positions, 0.3)
        _same((energy, forces), (0.3 * at_one[0] + 0.7 * at_zero[0], 0.3 * at_one[1] + 0.7 * at_zero[1]))
        assert derivative == pytest.approx(at_one[0] - at_zero[0], rel=1e-9)
        h = 1e-3
        central = (_state(system, positions, 0.3 + h)[0] - _state(system, positions, 0.3 - h)[0]) / (2 * h)
        assert central == pytest.approx(derivative, rel=1e-6)
        copied = openmm.XmlSerializer.deserialize(openmm.XmlSerializer.serialize(system))
        _same(_state(copied, positions, 0.3)[:2], (energy, forces))
        save_system(system, tmp_path / "system.json")
        loaded = load_system(tmp_path / "system.json")
        assert "PythonForce" not in (tmp_path / "system.json").read_text()
        _same(_state(loaded, positions, 0.3)[:2], (energy, forces))
        for outside in (1.5, -0.1):
            with pytest.raises(openmm.OpenMMException, match=rf"{LAMBDA} = {outside:g}: outside \[0, 1\]"):
                _state(loaded, positions, outside)


def test_a_committee_through_mlpotential_is_the_members_mean(electrostatic_models, box):
    """MLPotential('pinn', model=[a, b]): the ML/MM energy and forces are the mean of the members' systems'."""
    from openmmml import MLPotential
    topology, mm, positions = box
    members = [_state(MLPotential("pinn", model=m).createMixedSystem(topology, mm, REGION, embedding="electrostatic"),
                      positions) for m in electrostatic_models]
    assert abs(members[0][0] - members[1][0]) > 1e-3
    committee = MLPotential("pinn", model=electrostatic_models)
    both = _state(committee.createMixedSystem(topology, mm, REGION, embedding="electrostatic"), positions)
    _same(both[:2], ((members[0][0] + members[1][0]) / 2, (members[0][1] + members[1][1]) / 2))


def test_bad_input_is_refused_with_a_message(ethanol_model, electrostatic_models, box):
    """A model without the embedding asked for, interpolate with a committee, a region that splits a molecule under
    electrostatic embedding, an unknown option, no model."""
    from openmmml import MLPotential
    topology, mm, _ = box
    with pytest.raises(ValueError, match="embedding='electrostatic', but the model .* has embedding 'mechanical'"):
        MLPotential("pinn", model=ethanol_model).createMixedSystem(topology, mm, REGION, embedding="electrostatic")
    with pytest.raises(ValueError, match="embedding='mechanical', but the model .* has embedding 'electrostatic'"):
        MLPotential("pinn", model=electrostatic_models[0]).createMixedSystem(topology, mm, REGION)
    committee = MLPotential("pinn", model=electrostatic_models)
    with pytest.raises(ValueError, match="interpolate=True takes one model, not a committee of 2"):
        committee.createMixedSystem(topology, mm, REGION, embedding="electrostatic", interpolate=True)
    potential = MLPotential("pinn", model=electrostatic_models[0])
    with pytest.raises(ValueError, match=r"needs a region of whole molecules; bonds \[\(0, 2\)\] join it"):
        potential.createMixedSystem(topology, mm, [0, 1], embedding="electrostatic")
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['qm_charg'\]; it takes \['qm_charge'"):
        potential.createMixedSystem(topology, mm, REGION, embedding="electrostatic", qm_charg=0)
    with pytest.raises(ValueError, match="give model="):
        MLPotential("pinn")
