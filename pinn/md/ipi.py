"""A pinn potential for i-PI: i-PI integrates (path integrals, thermostats, ...), pinn gives the
forces, two ways.

- **In i-PI's process** (fastest, no socket): i-PI's ``<ffdirect>`` loads the PES module
  :mod:`pinn.md.ipi_driver` (``<pes>custom</pes>`` and its ``<pes_path>``); ``pinn ipi MODEL
  --structure init.xyz --ffdirect NAME`` prints that element for i-PI's input.
- **As a client** of i-PI's ``<ffsocket>``: ``pinn ipi MODEL --structure init.xyz --unix NAME`` (or
  ``--host HOST --port PORT``) connects and answers its requests until i-PI ends the run; built on
  ASE's socket client (:class:`ase.calculators.socketio.SocketClient`), which speaks i-PI's protocol
  and converts its atomic units.  i-PI may share the beads among several such clients.

For each structure (each bead) i-PI sends positions and cell, pinn returns energy, forces and the
virial (−stress × volume) of a periodic structure (zero for a molecule).  i-PI sends no elements and
says nothing of periodicity: the structure file gives both (:func:`ipi_atoms`).
"""
import logging
import os
import re
import time

log = logging.getLogger("pinn")

#: the comment line of i-PI's own xyz format (``# CELL(abcABC): ...``, ``# CELL{H}: ...``), whose cell
#: ASE does not read
_IPI_XYZ_CELL = re.compile(r"^\s*#\s*CELL\s*[({]")
#: the PES module i-PI's ``<ffdirect>`` loads (``<pes>custom</pes>``): :mod:`pinn.md.ipi_driver`
DRIVER_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ipi_driver.py")


def ipi_atoms(structure, pbc=None):
    """The atoms i-PI's structures are made of: elements in i-PI's order, and whether to compute them
    as periodic in the cell i-PI sends.

    Args:
        structure: an :class:`ase.Atoms`, or a file :mod:`pinn.io.ase_files` reads (its first frame):
            i-PI's ``<initialize>`` file does.
        pbc: ``True`` (periodic in i-PI's cell, in all three directions), ``False`` (a molecule or
            cluster: i-PI's cell ignored, no virial) or ``None``: the structure's own periodicity;
            for a file in i-PI's xyz format, whose ``# CELL`` line ASE does not read, periodic.

    Returns:
        ase.Atoms: a copy with ``pbc`` set (the cell comes from i-PI at each request).

    Raises:
        ValueError: a structure periodic in some directions only (i-PI's cell is periodic in all
            three or none).
    """
    from pinn.io.ase_files import read
    if isinstance(structure, str):
        atoms = read(structure, index=0)
        if pbc is None and not atoms.pbc.any() and _is_ipi_xyz(structure):
            pbc = True
    else:
        atoms = structure.copy()
    if pbc is None:
        if atoms.pbc.any() and not atoms.pbc.all():
            raise ValueError(f"{_name(structure)}: periodic in some directions only ({atoms.pbc.tolist()}); "
                             "i-PI's cell is periodic in all three: say pbc=True or pbc=False")
        pbc = bool(atoms.pbc.all())
    atoms.pbc = bool(pbc)
    log.info("i-PI: %d atoms (%s) from %s, %s", len(atoms), atoms.get_chemical_formula(), _name(structure),
             "periodic in i-PI's cell" if pbc else "not periodic (i-PI's cell ignored, no virial)")
    return atoms


def _is_ipi_xyz(path):
    try:
        with open(path) as f:
            f.readline()
            return bool(_IPI_XYZ_CELL.match(f.readline()))
    except (OSError, UnicodeDecodeError):
        return False


def _name(structure):
    return structure if isinstance(structure, str) else "the atoms given"


def serve_ipi(model, structure, unixsocket=None, host="localhost", port=None, timeout=None, pbc=None,
              **calc_options):
    """Answer an i-PI server's force requests until it ends the run.

    Args:
        model: what :func:`pinn.get_calc` takes (a model directory, a model file, a committee) or an
            ASE calculator.
        structure: the atoms in the order of i-PI's system, as :func:`ipi_atoms` takes them.
        unixsocket: i-PI's ``<address>`` of a ``mode="unix"`` socket (ASE and i-PI put it at
            ``/tmp/ipi_NAME``); or ``host`` and ``port`` of a ``mode="inet"`` one.
        timeout: seconds to wait for i-PI's messages (default: ASE's, none).
        pbc: as :func:`ipi_atoms` takes it.
        calc_options: passed on to :func:`pinn.get_calc` (e.g. ``engine``, ``drive``).

    Returns:
        dict: ``calls`` (structures computed) and ``seconds`` (wall time of the run).

    Raises:
        ValueError: neither or both of ``unixsocket`` and ``port``.
    """
    from ase.calculators.calculator import Calculator
    from ase.calculators.socketio import SocketClient

    from pinn.calculator import get_calc
    if (unixsocket is None) == (port is None):
        raise ValueError("serve_ipi: give unixsocket (i-PI's mode='unix' address) or port (mode='inet'), one of them")
    atoms = ipi_atoms(structure, pbc)
    calc = model if isinstance(model, Calculator) else get_calc(model, **calc_options)
    atoms.calc = calc
    where = f"unix socket /tmp/ipi_{unixsocket}" if unixsocket is not None else f"{host}:{port}"
    log.info("i-PI client: %s on %s", type(calc).__name__, where)
    client = SocketClient(host=host, port=port, unixsocket=unixsocket, timeout=timeout)
    started = time.perf_counter()
    calls = 0
    try:
        for _ in client.irun(atoms, use_stress=bool(atoms.pbc.all())):
            calls += 1
    finally:
        client.close()
    seconds = time.perf_counter() - started
    log.info("i-PI client: i-PI ended the run after %d structures, %.1f s", calls, seconds)
    return {"calls": calls, "seconds": seconds}


def ffdirect_element(model, structure, name="pinn", pbc=None, engine=None, drive=None):
    """The ``<ffdirect>`` element of i-PI's input that runs a pinn potential in i-PI's own process.

    Args:
        model: a model directory, a model file or a committee (paths, made absolute: i-PI runs in
            its own directory).
        structure: the structure file (as :func:`ipi_atoms` takes it).
        name: the forcefield's name (what ``<force forcefield="...">`` names).
        pbc, engine, drive: written into ``<parameters>`` when given (see
            :class:`pinn.md.ipi_driver.PinnDriver`).

    Returns:
        str: the XML element, several lines.

    Raises:
        ValueError: a path with a character i-PI's ``<parameters>`` cannot hold (``,{}:`` and the
            like).
    """
    import os
    paths = [model] if isinstance(model, str) else list(model)
    parameters = {"model": ";".join(os.path.abspath(p) for p in paths), "structure": os.path.abspath(structure)}
    for key, value in (("pbc", pbc), ("engine", engine), ("drive", drive)):
        if value is not None:
            parameters[key] = str(value).lower() if isinstance(value, bool) else value
    for key, value in parameters.items():
        bad = sorted(set(value) & set(",{}[]<>&\n"))
        if bad:
            raise ValueError(f"i-PI's <parameters> cannot hold {key}={value!r} (it has {' '.join(bad)}): "
                             "move or link the file to a plain path")
    listed = ", ".join(f"{key}: {value}" for key, value in parameters.items())
    return (f'<ffdirect name="{name}">\n  <pes>custom</pes>\n  <pes_path>{DRIVER_FILE}'
            f'</pes_path>\n  <parameters>{{{listed}}}</parameters>\n</ffdirect>')
