"""An ML/MM OpenMM system saved and loaded without pickle: :func:`save_system` and :func:`load_system`.

OpenMM saves an ``openmm.PythonForce`` (a pinn force) by pickling its computation into the system's XML, and
``openmm.XmlSerializer.deserialize`` unpickles it: loading such a file runs whatever code it holds, before any
Context exists.  :func:`save_system` writes one JSON file instead::

    {"format": "pinn-openmm-system", "version": 1, "pinn": "<version that wrote it>",
     "system": "<OpenMM's XML of the system without its pinn forces>",
     "forces": [{"index": 3, "name": "pinn", "force_group": 1, "particles": [...], "kind": "mechanical",
                 "model": "/abs/model.pinn", "model_sha256": "...", "numbers": [...], "periodic": true,
                 "calc_options": {}}, ...]}

(with electrostatic embedding also ``qm``, ``charges``, ``residues``, ``qm_charge``, ``cutoff`` and
``switch_width`` (Å), ``damping``; ``lambda_parameter``, the global parameter the force declares in an interpolated
system, or null).  A pinn force that is a collective variable of a ``CustomCVForce`` (an interpolated system:
:mod:`pinn.md.openmm_interpolation`, openmm-ml's ``interpolate=True``) is described with ``"collective_variable":
K`` (its place among that force's variables, ``index`` the CustomCVForce's) and taken out of that force's XML.
:func:`load_system` reads the JSON, refuses a system XML that holds any ``PythonForce``, deserializes the rest with
OpenMM and rebuilds each pinn force from its description at its index among the forces, or at its place among its
CustomCVForce's variables (so force indices, groups and variable names are the saved ones); the model at the saved
absolute path must have the saved SHA-256 (:func:`pinn.md.openmm_computation.model_sha256`).  Nothing is unpickled
on loading.  Version 1 files (no collective variables, no ``lambda_parameter``) are read as before.
"""
import io
import json
import os
import pickle
import xml.etree.ElementTree as ET

from pinn.physics.embedding_kinds import embedding_of
from pinn.md.openmm_computation import PinnComputation, python_force

#: the ``format`` of the file
FORMAT = "pinn-openmm-system"
#: its version (2: pinn forces inside a CustomCVForce, ``lambda_parameter``)
VERSION = 2
#: the versions :func:`load_system` reads
READS = (1, 2)

#: what a pinn force's pickled computation may hold (read back from a system in memory, when saving it)
_ALLOWED = {("pinn.md.openmm_computation", "PinnComputation"), ("pinn.md.openmm_computation", "EmbeddedComputation"),
            ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "_reconstruct"),
            ("numpy._core.multiarray", "_reconstruct"), ("numpy.core.multiarray", "scalar"),
            ("numpy._core.multiarray", "scalar")}


class _Stub:
    """What a pickle's other classes and functions become when a system in memory is read for saving: nothing of
    theirs runs; a pinn force that holds one refuses to be saved, naming it."""
    name = "?"

    def __new__(cls, *args, **kwargs):
        return object.__new__(cls)

    def __init__(self, *args, **kwargs):
        pass

    def __setstate__(self, state):
        pass

    def __repr__(self):
        return f"<{self.name}>"


class _PinnOnly(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) in _ALLOWED:
            return super().find_class(module, name)
        return type("Stub", (_Stub,), {"name": f"{module}.{name}"})


def save_system(system, path):
    """Write an OpenMM system with pinn forces to one JSON file that :func:`load_system` reads without pickle.

    Args:
        system: an ``openmm.System`` (e.g. of :func:`pinn.md.openmm.create_mixed_system`).
        path: the file to write (atomically; ``.json`` by convention).

    Raises:
        ValueError: a ``PythonForce`` that is not pinn's (its index and name), a pinn force of a model in memory,
            or a calc option that is not JSON (its name).
    """
    import openmm

    from pinn import __version__
    from pinn.files.durable import write_atomic
    described = []
    for index in range(system.getNumForces()):
        force = system.getForce(index)
        if isinstance(force, openmm.PythonForce):
            described.append(_describe(force, index))
        elif isinstance(force, openmm.CustomCVForce):
            for k in range(force.getNumCollectiveVariables()):
                inner = force.getCollectiveVariable(k)
                if isinstance(inner, openmm.PythonForce):
                    described.append({**_describe(inner, index), "collective_variable": k,
                                      "variable_name": force.getCollectiveVariableName(k)})
    root = ET.fromstring(openmm.XmlSerializer.serialize(system))
    forces = root.find("Forces")
    for element in [e for e in forces if e.get("type") == "PythonForce"]:
        forces.remove(element)
    for element in forces:
        variables = element.find("CollectiveVariables") if element.get("type") == "CustomCVForce" else None
        for variable in [] if variables is None else list(variables):
            if any(e.get("type") == "PythonForce" for e in variable):
                variables.remove(variable)
    document = {"format": FORMAT, "version": VERSION, "pinn": __version__,
                "system": ET.tostring(root, encoding="unicode"), "forces": described}
    write_atomic(os.fspath(path), json.dumps(document, allow_nan=False, indent=1) + "\n")
    return path


def _describe(force, index):
    """The JSON description of pinn force ``force`` (the ``index``-th of its system)."""
    import openmm
    where = f"save_system: force {index} ({force.getName()!r})"
    refused = ValueError(f"{where}: its computation cannot be pickled (a pinn force of a model in memory?): build it "
                         "from the model directory or model file")
    try:
        pickled = bytes.fromhex(ET.fromstring(openmm.XmlSerializer.serialize(force)).get("function") or "")
    except Exception:  # OpenMM's message does not say why; a pinn force says it in the log
        raise refused from None
    if not pickled:
        raise refused
    try:
        computation = _PinnOnly(io.BytesIO(pickled)).load()
    except Exception as err:
        raise ValueError(f"{where}: a PythonForce whose computation is not pinn's ({err}): it cannot be saved "
                         "without pickle; remove it, save, and add it again after load_system") from None
    if not isinstance(computation, PinnComputation):
        what = computation.name if isinstance(computation, type) and issubclass(computation, _Stub) else repr(
            computation)
        raise ValueError(f"{where}: a PythonForce of {what}, not pinn's: it cannot be saved without pickle; remove "
                         "it, save, and add it again after load_system")
    declared = set(dict(force.getGlobalParameters()))
    if declared != ({computation.lambda_parameter} if computation.lambda_parameter else set()):
        raise ValueError(f"{where}: a pinn force with global parameters {sorted(declared)}, which pinn does not make "
                         f"(its computation's lambda_parameter: {computation.lambda_parameter!r})")
    try:
        description = computation.describe()
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None
    return {"index": index, "name": force.getName(), "force_group": force.getForceGroup(),
            "particles": [int(i) for i in force.getParticles()], **description}


def load_system(path):
    """The OpenMM system of a file of :func:`save_system`, its pinn forces rebuilt (nothing unpickled).

    Args:
        path: the file.

    Returns:
        ``openmm.System``: the forces in their saved order, each pinn force's calculator made (its model checked).

    Raises:
        ValueError: not such a file, a system XML that holds a ``PythonForce`` (OpenMM would unpickle it, running
            code) or a document type, a force description of the wrong shape; a model that is not at its saved
            path or not the saved one (the path and both hashes).
    """
    import openmm
    path = os.path.abspath(os.fspath(path))
    with open(path, "rb") as f:
        raw = f.read()
    try:
        document = json.loads(raw)
    except ValueError:
        raise ValueError(f"load_system: {path} is not a file of save_system (not JSON)") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise ValueError(f"load_system: {path} is not a file of save_system (no format {FORMAT!r})")
    if document.get("version") not in READS:
        raise ValueError(f"load_system: {path} has version {document.get('version')!r}; this pinn reads "
                         f"{', '.join(map(str, READS))}")
    text, described = document.get("system"), document.get("forces")
    if not isinstance(text, str) or not isinstance(described, list):
        raise ValueError(f"load_system: {path}: 'system' must be OpenMM's XML and 'forces' a list")
    root = _system_tree(text, path)
    elements = list(root.find("Forces"))
    for element in elements:
        root.find("Forces").remove(element)
    pinn, nested = {}, {}
    for entry in described:
        index = entry.get("index") if isinstance(entry, dict) else None
        variable = entry.get("collective_variable") if isinstance(entry, dict) else None
        place = nested.setdefault(index, {}) if variable is not None else pinn
        key = index if variable is None else variable
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (index, key)) or key in place:
            raise ValueError(f"load_system: {path}: a pinn force without an index of its own: {str(entry)[:80]}")
        place[key] = entry
    total = len(elements) + len(pinn)
    if any(not 0 <= k < total for k in pinn):
        raise ValueError(f"load_system: {path}: pinn force indices {sorted(pinn)} do not fit {total} forces")
    rebuilt = {k: _pinn_force(entry, path) for k, entry in pinn.items()}  # models checked before OpenMM's part
    inner = {k: {v: (_variable_name(e, path), _pinn_force(e, path)) for v, e in entries.items()}
             for k, entries in nested.items()}
    system = openmm.XmlSerializer.deserialize(ET.tostring(root, encoding="unicode"))
    others = iter(elements)
    for k in range(total):
        if k in rebuilt:
            force = rebuilt[k]
        else:
            element = next(others)
            force = openmm.XmlSerializer.deserialize(ET.tostring(element, encoding="unicode"))
            if k in inner:
                force = _with_variables(force, inner.pop(k), f"load_system: {path}: force {k}")
        system.addForce(force)
    if inner:
        raise ValueError(f"load_system: {path}: pinn collective variables of forces {sorted(inner)}, which are no "
                         "CustomCVForce")
    return system


def _variable_name(entry, path):
    name = entry.get("variable_name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"load_system: {path}: force {entry['index']}: a pinn collective variable without its "
                         "variable_name")
    return name


def _with_variables(force, variables, where):
    """A copy of CustomCVForce ``force`` (read without its pinn variables) with ``variables`` ({place: (name, pinn
    force)}) back at their places among its collective variables."""
    import copy

    import openmm
    if not isinstance(force, openmm.CustomCVForce):
        raise ValueError(f"{where}: pinn collective variables saved for a {type(force).__name__}")
    kept = [(force.getCollectiveVariableName(k), force.getCollectiveVariable(k))
            for k in range(force.getNumCollectiveVariables())]
    total = len(kept) + len(variables)
    if any(not 0 <= place < total for place in variables):
        raise ValueError(f"{where}: pinn collective variables at {sorted(variables)} do not fit {total} variables")
    whole = openmm.CustomCVForce(force.getEnergyFunction())
    whole.setName(force.getName())
    whole.setForceGroup(force.getForceGroup())
    for k in range(force.getNumGlobalParameters()):
        whole.addGlobalParameter(force.getGlobalParameterName(k), force.getGlobalParameterDefaultValue(k))
    for k in range(force.getNumEnergyParameterDerivatives()):
        whole.addEnergyParameterDerivative(force.getEnergyParameterDerivativeName(k))
    for k in range(force.getNumTabulatedFunctions()):
        whole.addTabulatedFunction(force.getTabulatedFunctionName(k), copy.deepcopy(force.getTabulatedFunction(k)))
    others = iter(kept)
    for place in range(total):
        if place in variables:
            whole.addCollectiveVariable(*variables[place])
        else:
            name, variable = next(others)
            whole.addCollectiveVariable(name, copy.deepcopy(variable))
    return whole


def read_system_xml(path, particles, who):
    """An OpenMM System from OpenMM's own XML (``XmlSerializer.serialize``), read without running code.

    Args:
        path: the XML file.
        particles: how many particles it must have (the structure's atoms).
        who: what to name in messages (e.g. ``"explorer.system"``).

    Raises:
        ValueError: a PythonForce in it (OpenMM would unpickle it, running code), a document type, not an OpenMM
            System, another number of particles.
    """
    import openmm
    with open(path) as f:
        text = f.read()
    root = _system_tree(text, path, who, "a system with a pinn force is saved by save_system")
    system = openmm.XmlSerializer.deserialize(ET.tostring(root, encoding="unicode"))
    if system.getNumParticles() != particles:
        raise ValueError(f"{who}: {path} has {system.getNumParticles()} particles, the structure {particles} atoms")
    return system


def _system_tree(text, path, who="load_system", why="pinn's forces are described in the file's 'forces', never "
                 "pickled"):
    """The element tree of the system's XML, refused when it holds a PythonForce or a document type."""
    if "<!DOCTYPE" in text.upper() or "<!ENTITY" in text.upper():
        raise ValueError(f"{who}: {path}: the system XML has a document type or entities, which OpenMM's "
                         "XML never has; refused")
    try:
        root = ET.fromstring(text)
    except ET.ParseError as err:
        raise ValueError(f"{who}: {path}: the system XML does not parse ({err})") from None
    if root.tag != "System" or root.find("Forces") is None:
        raise ValueError(f"{who}: {path}: the XML is not an OpenMM System with Forces")
    for element in root.iter():
        if "pythonforce" in (element.get("type") or "").lower():
            raise ValueError(f"{who}: {path}: its system XML holds a PythonForce ({element.get('name')!r}), "
                             f"which OpenMM unpickles, running code, when it loads; refused ({why})")
    return root


#: the fields of a force description: JSON types
_FIELDS = {"name": str, "force_group": int, "particles": list, "kind": str, "model": (str, list),
           "model_sha256": str, "numbers": list, "periodic": bool, "calc_options": dict}
_EMBEDDED_FIELDS = {"qm": list, "charges": list, "residues": list, "qm_charge": (int, float),
                    "cutoff": (int, float, type(None)), "switch_width": (int, float), "damping": (int, float)}


def _pinn_force(entry, path):
    """The PythonForce of a force description, its calculator made (the model checked)."""
    where = f"load_system: {path}: force {entry['index']}"
    try:
        kind = embedding_of(entry.get("kind") if isinstance(entry.get("kind"), str) else repr(entry.get("kind")))
    except ValueError as error:
        raise ValueError(f"{where}: kind: {error}") from None
    fields = {**_FIELDS, **(_EMBEDDED_FIELDS if kind.sees_environment else {})}
    for key, kind in fields.items():
        if not isinstance(entry.get(key), kind):
            raise ValueError(f"{where}: {key} is missing or not a {kind}")
    if not isinstance(entry.get("lambda_parameter"), (str, type(None))):
        raise ValueError(f"{where}: lambda_parameter must be a name or null")
    models = entry["model"] if isinstance(entry["model"], list) else [entry["model"]]
    if not models or not all(isinstance(m, str) and os.path.isabs(m) for m in models):
        raise ValueError(f"{where}: the model must be an absolute path (or a list of them), got {entry['model']!r}")
    computation = PinnComputation.from_description(entry)
    computation.calc  # the model checked and loaded now: a wrong one fails here, not at the first step
    particles = entry["particles"] or None
    return python_force(computation, particles, entry["periodic"], entry["force_group"], entry["name"])
