"""A pinn potential as an i-PI client: i-PI integrates (path integrals, thermostats, ...), pinn gives
the forces.

``pinn ipi MODEL --structure init.xyz --unix NAME`` (or ``--host HOST --port PORT``) connects to an
i-PI server whose ``<ffsocket>`` has that address, and answers its requests until i-PI ends the
run: for each structure (each bead) i-PI sends positions and cell, pinn returns energy, forces and
the virial (−stress × volume, for a structure periodic in all three directions; zero otherwise).
i-PI does not send elements: ``--structure`` is a file with the atoms in i-PI's order (its
``<initialize>`` file does).  Built on ASE's socket client (:class:`ase.calculators.socketio.SocketClient`),
which speaks i-PI's protocol and converts its atomic units.
"""
import logging
import time

log = logging.getLogger("pinn")


def serve_ipi(model, structure, unixsocket=None, host="localhost", port=None, timeout=None, **calc_options):
    """Answer an i-PI server's force requests until it ends the run.

    Args:
        model: what :func:`pinn.get_calc` takes (a model directory, a model file, a committee) or an
            ASE calculator.
        structure: the atoms (an :class:`ase.Atoms`, or a file :mod:`pinn.io.ase_files` reads: its
            first frame), in the order of i-PI's system; only their elements are used.
        unixsocket: i-PI's ``<address>`` of a ``mode="unix"`` socket (ASE and i-PI put it at
            ``/tmp/ipi_NAME``); or ``host`` and ``port`` of a ``mode="inet"`` one.
        timeout: seconds to wait for i-PI's messages (default: ASE's, none).
        calc_options: passed on to :func:`pinn.get_calc` (e.g. ``engine``, ``drive``).

    Returns:
        dict: ``calls`` (structures computed) and ``seconds`` (wall time of the run).

    Raises:
        ValueError: neither or both of ``unixsocket`` and ``port``.
    """
    from ase.calculators.calculator import Calculator
    from ase.calculators.socketio import SocketClient

    from pinn.calculator import get_calc
    from pinn.io.ase_files import read
    if (unixsocket is None) == (port is None):
        raise ValueError("serve_ipi: give unixsocket (i-PI's mode='unix' address) or port (mode='inet'), one of them")
    atoms = read(structure, index=0) if isinstance(structure, str) else structure.copy()
    calc = model if isinstance(model, Calculator) else get_calc(model, **calc_options)
    atoms.calc = calc
    where = f"unix socket /tmp/ipi_{unixsocket}" if unixsocket is not None else f"{host}:{port}"
    log.info("i-PI client: %d atoms (%s), %s, on %s", len(atoms), atoms.get_chemical_formula(),
             type(calc).__name__, where)
    client = SocketClient(host=host, port=port, unixsocket=unixsocket, timeout=timeout)
    started, calls = time.perf_counter(), 0
    try:
        for _ in client.irun(atoms, use_stress=bool(atoms.pbc.all())):
            calls += 1
    finally:
        client.close()
    seconds = time.perf_counter() - started
    log.info("i-PI client: i-PI ended the run after %d structures, %.1f s", calls, seconds)
    return {"calls": calls, "seconds": seconds}
