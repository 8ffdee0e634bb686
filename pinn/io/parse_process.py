"""Streamed extended-XYZ frames parsed in a process of their own, beside the training.

A streamed frame is read by ASE's extended-XYZ reader and checked (:func:`pinn.io.check_structure`), about
0.5 ms of Python a frame.  In the training process that Python holds Python's lock, which the training
step needs too, so the step waited on the parse: streamed data trained at two thirds of the rate of the same
frames from a TFRecord cache, whose records are parsed in TensorFlow's C++ threads.  Here a child process
(``python -m pinn.io.parse_process``, which imports neither TensorFlow nor the user's script) reads, converts
and checks the frames, in chunks of :data:`CHUNK` frames, :data:`AHEAD` chunks ahead of the dataset, and sends
back each chunk as one array per key; the training process only slices them (in TensorFlow).

Frames come back in the order they were asked for, the same structures as :class:`pinn.io.ase_stream.FrameIndex`
reads in the process (the same ASE reader, the same checks), and a frame that cannot be read or that the checks
refuse raises the same :class:`pinn.io.DataError`, naming its file and frame, in the training process.  A child
that dies is reported with its exit status; a child whose parent dies sees its input end and exits.

Messages on the pipes are pickles, each after its length in 8 bytes.  To the child: first the
:class:`FrameIndex`, the keys, the keys with one row per atom and the float dtype; then arrays of frame numbers.
From the child, for each array: ``(columns, rows, error)``, the frames up to the first that could not be read or
was refused and that frame's :class:`DataError` (``None`` if none).
"""
import os
import pickle
import struct
import subprocess
import sys
import weakref

import numpy as np

from pinn.io.errors import DataError

#: frames a request asks for (about 16 ms of parsing for 64-atom frames)
CHUNK = 32
#: requests a dataset keeps in flight: the child parses these while the training consumes the chunk before
AHEAD = 4
#: the child's niceness (added to the parent's): where the cores are short, the training step runs first, and the
#: child parses in the time it leaves (the chunks in flight and TensorFlow's prefetch bridge the gaps)
NICENESS = 10
_LENGTH = struct.Struct("<Q")


def _send(pipe, message):
    """Write ``message`` (picklable) to ``pipe`` after its length."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    pipe.write(_LENGTH.pack(len(data)))
    pipe.write(data)
    pipe.flush()


def _receive(pipe):
    """The next message on ``pipe``, or ``None`` where the pipe ended."""
    head = pipe.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        return None
    (length,) = _LENGTH.unpack(head)
    data = pipe.read(length)
    if len(data) < length:
        return None
    return pickle.loads(data)


def _parse(index, frames, keys, ragged, float_dtype):
    """The chunk of frame numbers ``frames`` of ``index``, read, converted and checked.

    Returns:
        (columns, rows, error): the frames up to the first that failed, as
        :func:`pinn.io.structure.columns_of` gives them (``None, None`` where the first failed), and that frame's
        :class:`DataError` (``None`` if none did).
    """
    from pinn.io.ase_structure import atoms_to_structure
    from pinn.io.structure import check_structure, columns_of, keys_problem
    structures = []
    error = None
    for k in frames:
        source = index.source(k)
        try:
            structure = check_structure(atoms_to_structure(index.read(k), source), source, float_dtype)
        except DataError as err:
            error = err
        except Exception as err:  # a reader's own error: name the frame
            error = DataError(f"{source}: {type(err).__name__}: {err}")
        else:
            error = keys_problem(structure, keys, source)
        if error is not None:
            break
        structures.append(structure)
    columns, rows = columns_of(structures, keys, ragged) if structures else (None, None)
    return columns, rows, error


def main():
    """The child: answer each request of frame numbers on stdin with its chunk on stdout, until stdin ends."""
    source = sys.stdin.buffer
    sink = sys.stdout.buffer
    sys.stdout = sys.stderr  # anything printed goes to the parent's error stream, not into the messages
    os.nice(NICENESS)
    import pinn.io.ase_stream  # noqa: F401  (imported, and the compiled checks loaded, before the first request)
    from pinn.io.neighbors import coincident_pair
    coincident_pair(np.zeros((1, 3)), np.eye(3), np.ones(3, bool))
    setup = _receive(source)
    if setup is None:
        return
    index, keys, ragged, float_dtype = setup
    while True:
        frames = _receive(source)
        if frames is None:
            return
        _send(sink, _parse(index, frames, keys, ragged, float_dtype))


class ParseProcess:
    """A child process that parses frames of one :class:`pinn.io.ase_stream.FrameIndex`.

    Args:
        index: the frames (extended XYZ files only: a database's open connection stays in its process).
        keys: the keys every structure has (the first structure's, checked).
        ragged: of those, the keys with one row per atom.
        float_dtype: dtype of the float keys.

    Raises:
        DataError: the child could not be started.
    """

    def __init__(self, index, keys, ragged, float_dtype="float32"):
        package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([package_root] + [p for p in [env.get("PYTHONPATH")] if p])
        for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
            env[name] = "1"  # one core's work: the training keeps the others
        try:
            self.process = subprocess.Popen([sys.executable, "-m", "pinn.io.parse_process"], stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, env=env)
        except OSError as err:
            raise DataError(f"could not start the process that parses streamed frames ({sys.executable} -m "
                            f"pinn.io.parse_process): {err}") from err
        self.pending = 0
        self._finalizer = weakref.finalize(self, _stop, self.process)
        self._write(((index, list(keys), list(ragged), float_dtype)))

    def _write(self, message):
        try:
            _send(self.process.stdin, message)
        except (BrokenPipeError, OSError):
            raise self._died() from None

    def _died(self):
        status = self.process.wait()
        return DataError(f"the process that parses streamed frames ended (exit status {status}); its error, if "
                         "any, is above")

    def submit(self, frames):
        """Ask for the frames numbered ``frames`` (an int64 array); their chunk comes from :meth:`result`."""
        self._write(np.asarray(frames, dtype=np.int64))
        self.pending += 1

    def result(self):
        """The oldest chunk asked for: ``(columns, rows, error)``, the frames up to the first that could not be
        read or was refused, as :func:`pinn.io.structure.columns_of` gives them (``None, None`` for none), and
        that frame's :class:`DataError` naming it (``None`` if every frame was read).

        Raises:
            DataError: the child died.
        """
        message = _receive(self.process.stdout)
        if message is None:
            raise self._died()
        self.pending -= 1
        return message

    def close(self):
        """Stop the child (at once: what it still parses is not wanted)."""
        self._finalizer()


def _stop(process):
    """End ``process``: its input closed, then killed if it has not ended within a second."""
    try:
        process.stdin.close()
    except OSError:
        pass
    try:
        process.wait(timeout=1.0)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    process.stdout.close()


class ParseProcesses:
    """The children that parse the frames of one index for the datasets that stream them: one for each
    dataset iterated at once (a training epoch while the validation runs), kept between epochs; each ends when
    this object goes (with the datasets that hold it) or the process ends.

    Args: as :class:`ParseProcess`'s.
    """

    def __init__(self, index, keys, ragged, float_dtype="float32"):
        self.args = (index, keys, ragged, float_dtype)
        self.idle = [ParseProcess(*self.args)]  # started now: it imports its modules while the training sets up

    def chunks(self, frames):
        """The chunks of the frames numbered ``frames`` (in order), parsed in a child, :data:`AHEAD` in flight.

        Yields:
            ``(columns, rows)`` for each :data:`CHUNK` frames (:func:`pinn.io.structure.columns_of`).

        Raises:
            DataError: after the frames before it, a frame that could not be read or was refused (naming its file
                and frame); a child that died (with its exit status).
        """
        if not len(frames):
            return
        parts = iter([frames[i:i + CHUNK] for i in range(0, len(frames), CHUNK)])
        worker = self.idle.pop() if self.idle else ParseProcess(*self.args)
        finished = False
        try:
            for part in parts:
                worker.submit(part)
                if worker.pending == AHEAD:
                    break
            while worker.pending:
                columns, rows, error = worker.result()
                part = next(parts, None)
                if part is not None and error is None:
                    worker.submit(part)
                if columns is not None:
                    yield columns, rows
                if error is not None:
                    raise error
            finished = True
        finally:
            if finished:
                self.idle.append(worker)  # nothing in flight: the next epoch's dataset takes it
            else:
                worker.close()  # stopped early or failed: what is in flight is not wanted


if __name__ == "__main__":
    main()
