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
``switch_width`` (Å), ``damping``).  :func:`load_system` reads the JSON, refuses a system XML that holds any
``PythonForce``, deserializes the rest with OpenMM and rebuilds each pinn force from its description at its index
among the forces (so force indices and groups are the saved ones); the model at the saved absolute path must have
the saved SHA-256 (:func:`pinn.md.openmm_computation.model_sha256`).  Nothing is unpickled on loading.
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
#: its version
VERSION = 1

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
    root = ET.fromstring(openmm.XmlSerializer.serialize(system))
    forces = root.find("Forces")
    for element in [e for e in forces if e.get("type") == "PythonForce"]:
        forces.remove(element)
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
    if force.getGlobalParameters():
        raise ValueError(f"{where}: a pinn force with global parameters, which pinn does not make")
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
    if document.get("version") != VERSION:
        raise ValueError(f"load_system: {path} has version {document.get('version')!r}; this pinn reads {VERSION}")
    text, described = document.get("system"), document.get("forces")
    if not isinstance(text, str) or not isinstance(described, list):
        raise ValueError(f"load_system: {path}: 'system' must be OpenMM's XML and 'forces' a list")
    root = _system_tree(text, path)
    elements = list(root.find("Forces"))
    for element in elements:
        root.find("Forces").remove(element)
    pinn = {}
    for entry in described:
        index = entry.get("index") if isinstance(entry, dict) else None
        if not isinstance(index, int) or isinstance(index, bool) or index in pinn:
            raise ValueError(f"load_system: {path}: a pinn force without an index of its own: {str(entry)[:80]}")
        pinn[index] = entry
    total = len(elements) + len(pinn)
    if any(not 0 <= k < total for k in pinn):
        raise ValueError(f"load_system: {path}: pinn force indices {sorted(pinn)} do not fit {total} forces")
    rebuilt = {k: _pinn_force(entry, path) for k, entry in pinn.items()}  # models checked before OpenMM's part
    system = openmm.XmlSerializer.deserialize(ET.tostring(root, encoding="unicode"))
    others = iter(elements)
    for k in range(total):
        force = rebuilt[k] if k in rebuilt else openmm.XmlSerializer.deserialize(
            ET.tostring(next(others), encoding="unicode"))
        system.addForce(force)
    return system


def _system_tree(text, path):
    """The element tree of the system's XML, refused when it holds a PythonForce or a document type."""
    if "<!DOCTYPE" in text.upper() or "<!ENTITY" in text.upper():
        raise ValueError(f"load_system: {path}: the system XML has a document type or entities, which OpenMM's "
                         "XML never has; refused")
    try:
        root = ET.fromstring(text)
    except ET.ParseError as err:
        raise ValueError(f"load_system: {path}: the system XML does not parse ({err})") from None
    if root.tag != "System" or root.find("Forces") is None:
        raise ValueError(f"load_system: {path}: the XML is not an OpenMM System with Forces")
    for element in root.iter():
        if "pythonforce" in (element.get("type") or "").lower():
            raise ValueError(f"load_system: {path}: its system XML holds a PythonForce ({element.get('name')!r}), "
                             "which OpenMM unpickles, running code, when it loads; refused (pinn's forces are "
                             "described in the file's 'forces', never pickled)")
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
    models = entry["model"] if isinstance(entry["model"], list) else [entry["model"]]
    if not models or not all(isinstance(m, str) and os.path.isabs(m) for m in models):
        raise ValueError(f"{where}: the model must be an absolute path (or a list of them), got {entry['model']!r}")
    computation = PinnComputation.from_description(entry)
    computation.calc  # the model checked and loaded now: a wrong one fails here, not at the first step
    particles = entry["particles"] or None
    return python_force(computation, particles, entry["periodic"], entry["force_group"], entry["name"])
