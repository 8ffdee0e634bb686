"""ASE's file I/O, per process: every ``ase.io`` read and write and every ASE database pinn opens goes
through here.

ASE makes its I/O MPI-aware as soon as ``mpi4py`` is imported in the process (``ase.parallel.world``
becomes MPI's world): ``ase.io.read`` and ``iread`` then read on rank 0 and broadcast its frames,
so every rank gets rank 0's file whatever file it asked for; ``ase.io.write`` and ASE's trajectory
writer write on rank 0 only; ``ase.db`` queries run on rank 0.  pinn imports mpi4py in every job whose
ranks MPI carries (MPI alone, or Horovod's MPI controller with the MPI host exchange), where each rank
must read its own share of the files (:func:`pinn.io.distribute_data`).  So:

- the functions here run ASE with a world of this process alone (:func:`per_process`), whatever
  state ASE's world is in: ``read``, ``iread``, ``write`` and ``connect`` are ASE's own with
  ``parallel=False`` (``serial=True`` for a database) inside it (``iread``: each frame);
- :func:`make_ase_world_per_process` makes that ASE's world for the rest of the process; a parallel
  world calls it when it starts (:func:`pinn.parallel.worlds.init`), so the ``ase.io.read`` of a user's
  input script after ``params['parallel'] = True`` reads that rank's file too.

``tests/io/test_ase_files.py`` fails when code in ``pinn/``, ``inputs/``, ``benchmarks/`` or ``tools/``
calls ASE's I/O other than through this module.
"""
import contextlib
import os
import threading
import weakref

#: held while ASE's world is swapped, so that two threads' swaps do not interleave
_LOCK = threading.RLock()


@contextlib.contextmanager
def per_process():
    """ASE's world is this process alone inside the block (``ase.parallel.DummyMPI``: rank 0 of 1), and
    what it was before afterwards (an MPI world, or not yet chosen).  ASE's MPI-aware functions
    (``ase.io``, trajectories, ``ase.db``, the velocity distributions and Langevin's random numbers)
    then touch this process's files and numbers only."""
    import ase.parallel
    world = ase.parallel.world
    with _LOCK:
        before = world.__dict__.get("comm")  # None: ASE has not chosen its world yet (it does on first use)
        world.comm = ase.parallel.DummyMPI()
        try:
            yield
        finally:
            world.comm = before


def make_ase_world_per_process():
    """Make ASE's world this process alone from now on (what a data-parallel job needs: each rank's
    ``ase.io.read`` reads that rank's file, and each rank's ``ase.io.write`` writes).

    Returns:
        int: the number of processes ASE's world had before: 1 if it was not MPI-aware (or not chosen
        yet), N if ASE had already been using MPI's world of N ranks (reads before this call then gave
        every rank rank 0's frames unless they went through this module).
    """
    import ase.parallel
    world = ase.parallel.world
    with _LOCK:
        before = world.__dict__.get("comm")
        size = 1 if before is None else int(getattr(before, "size", 1))
        world.comm = ase.parallel.DummyMPI()
    return size


def read(path, index=None, format=None, **kwargs):
    """``ase.io.read`` of this process's file: ``Atoms`` (``index`` an int or None: the last frame)
    or a list of ``Atoms`` (``index`` a slice or ``':'``), never another rank's frames."""
    import ase.io
    with per_process():
        return ase.io.read(path, index=index, format=format, parallel=False, **kwargs)


def iread(path, index=":", format=None, **kwargs):
    """``ase.io.iread`` of this process's file: its frames one at a time (a long trajectory is never
    whole in memory), each read with ASE's world this process alone."""
    import ase.io
    with per_process():
        frames = ase.io.iread(path, index=index, format=format, parallel=False, **kwargs)
    while True:
        with per_process():
            try:
                atoms = next(frames)
            except StopIteration:
                return
        yield atoms


def write(path, images, format=None, **kwargs):
    """``ase.io.write`` on this process (every process that calls it writes, ``.traj`` included)."""
    import ase.io
    with per_process():
        return ase.io.write(path, images, format=format, parallel=False, **kwargs)


def trajectory_writer(path):
    """ASE's ``Trajectory(path, 'w')`` written by this process (``master=True``: not rank 0 of ASE's world
    alone), for frames written one at a time."""
    from ase.io.trajectory import Trajectory
    with per_process():
        return Trajectory(path, "w", master=True)


def connect(path, **kwargs):
    """``ase.db.connect`` with ``serial=True``: queries run on this process (use as a context manager)."""
    import ase.db
    with per_process():
        return ase.db.connect(path, serial=True, **kwargs)


#: the databases :func:`database` has open, by real path (an entry goes when its last user lets it go)
_OPEN_DATABASES = weakref.WeakValueDictionary()


def database(path):
    """An open ASE database for reading, shared by every reader of this process while any holds it.

    LMDB (``.aselmdb``, through ``ase-db-backends``) allows one open environment per file and process:
    a streamed dataset keeps its database open, and a second ``connect`` of the file would fail.  Readers
    ask here instead; the connection closes when the last of them lets it go (an LMDB database is opened
    read-only, without a lock file).

    Returns:
        the database (``ase.db.core.Database``; not a context manager to close: keep a reference while
        reading).
    """
    key = os.path.realpath(os.fspath(path))
    db = _OPEN_DATABASES.get(key)
    if db is None:
        options = {"readonly": True} if key.endswith(".aselmdb") else {}
        db = connect(os.fspath(path), **options)
        _OPEN_DATABASES[key] = db
    return db
