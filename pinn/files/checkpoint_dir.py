"""The checkpoints of a directory and its ``checkpoint`` state file, without TensorFlow.

A checkpoint ``ckpt-N`` is the pair of files ``ckpt-N.index`` and
``ckpt-N.data-00000-of-00001`` (TensorFlow's tensor bundle); ``N`` is the global step.
The state file ``checkpoint`` (a text protocol buffer, as TensorFlow's
``CheckpointManager`` writes it, so ``tf.train.latest_checkpoint`` and other tools
read it) names the latest checkpoint and those kept.

Nothing here trusts the state file alone: the checkpoints on disk are found by their
index files, so a missing or damaged state file costs nothing, and a checkpoint the
state file names but whose index is gone is reported as damaged.  A state file that
names a checkpoint outside its directory (an absolute path elsewhere, ``../``) is
refused (:class:`CheckpointOutside`): what reads the checkpoint would also write
beside it.
"""
import glob
import os
import re
import shutil
import time

from pinn.files.durable import fsync_dir, write_atomic

#: the name of the state file in a checkpoint directory
STATE_FILE = "checkpoint"
#: the checkpoints' name prefix (``ckpt-<step>``)
PREFIX = "ckpt"
#: the sub-folder damaged checkpoints are moved to (kept for inspection, out of the way)
DAMAGED_DIR = "damaged"

_LINE = re.compile(r'^(model_checkpoint_path|all_model_checkpoint_paths):\s*"((?:[^"\\]|\\.)*)"\s*$')
_NUMBER_LINE = re.compile(r"^(all_model_checkpoint_timestamps|last_preserved_timestamp):\s*[-+0-9.eE]+\s*$")


class StateFileError(ValueError):
    """The state file exists but is not a valid state (torn, or not TensorFlow's format)."""


class CheckpointOutside(ValueError):
    """The state file names a checkpoint outside its directory (refused, not passed over: reading or
    writing beside it would touch another directory)."""


def step_of(path):
    """The step of checkpoint ``path`` (``.../ckpt-1500`` → 1500), or ``None`` for another name."""
    match = re.fullmatch(rf"{PREFIX}-(\d+)", os.path.basename(os.fspath(path)))
    return int(match.group(1)) if match else None


def on_disk(directory):
    """Checkpoints of ``directory`` that have an index file, oldest step first (path prefixes)."""
    found = []
    for index in glob.glob(os.path.join(glob.escape(os.fspath(directory)), f"{PREFIX}-*.index")):
        path = index[:-len(".index")]
        if step_of(path) is not None:
            found.append(path)
    return sorted(found, key=step_of)


def read_state(directory):
    """The state file of ``directory``: ``(latest, kept)`` as full paths, or ``None`` when there is none.

    Raises:
        StateFileError: the file is there but is not a whole state (the message names it and the line).
        CheckpointOutside: it names a checkpoint outside ``directory`` (an absolute path elsewhere, or
            ``../``), naming the directory and the path.
    """
    path = os.path.join(os.fspath(directory), STATE_FILE)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        raise StateFileError(f"{path}: not text") from None
    latest = None
    kept = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or _NUMBER_LINE.match(line):
            continue
        match = _LINE.match(line)
        if not match:
            raise StateFileError(f"{path}: line {number} is not a state entry: {line[:80]!r}")
        name = match.group(2).encode().decode("unicode_escape")
        full = name if os.path.isabs(name) else os.path.join(os.fspath(directory), name)
        if not is_inside(full, directory):
            raise CheckpointOutside(f"{os.fspath(directory)}: its checkpoint state file names {name}, outside the "
                                    f"directory; refused (remove {path}, or name a checkpoint of the directory)")
        if match.group(1) == "model_checkpoint_path":
            latest = full
        else:
            kept.append(full)
    if latest is None or not text.endswith("\n"):
        raise StateFileError(f"{path}: incomplete (no latest checkpoint named, or a torn last line)")
    return latest, kept


def is_inside(path, directory):
    """Whether ``path`` lies directly in ``directory`` (a checkpoint's place), links resolved."""
    return os.path.dirname(os.path.realpath(path)) == os.path.realpath(os.fspath(directory))


def write_state(directory, kept):
    """Write the state file of ``directory`` atomically: ``kept`` (paths, oldest first), the last the latest.

    The names are written relative to ``directory`` (as TensorFlow's manager does), so the
    directory can be moved.  With ``kept`` empty the state file is removed.
    """
    directory = os.fspath(directory)
    path = os.path.join(directory, STATE_FILE)
    if not kept:
        if os.path.exists(path):
            os.unlink(path)
            fsync_dir(directory)
        return path

    def quoted(p):
        name = os.path.relpath(os.path.abspath(p), os.path.abspath(directory))
        return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'

    lines = [f"model_checkpoint_path: {quoted(kept[-1])}"]
    lines += [f"all_model_checkpoint_paths: {quoted(p)}" for p in kept]
    stamps = [_mtime(p) for p in kept]
    lines += [f"all_model_checkpoint_timestamps: {t:.6f}" for t in stamps]
    lines.append(f"last_preserved_timestamp: {min(stamps):.6f}")
    write_atomic(path, "\n".join(lines) + "\n")
    return path


def _mtime(path):
    try:
        return os.stat(path + ".index").st_mtime
    except OSError:
        return time.time()


def candidates(directory):
    """Checkpoints to try for "the latest", newest step first: those on disk, and the state file's
    latest even when its index is missing (so that it is reported, not silently passed over).

    Returns:
        ``(paths, problem)``: ``problem`` is ``None`` or the reason the state file was not used.

    Raises:
        CheckpointOutside: the state file names a checkpoint outside ``directory``.
    """
    paths = set(on_disk(directory))
    problem = None
    try:
        state = read_state(directory)
    except StateFileError as err:
        state = None
        problem = str(err)
    if state is not None:
        latest, kept = state
        paths.update(p for p in kept if os.path.exists(p + ".index"))
        if step_of(latest) is not None:
            paths.add(latest)
    return sorted(paths, key=lambda p: step_of(p) or -1, reverse=True), problem


def latest(directory):
    """The latest checkpoint of ``directory``: the state file's when its index exists, else the newest
    on disk, else ``None``.

    Raises:
        CheckpointOutside: the state file names a checkpoint outside ``directory``.
    """
    try:
        state = read_state(directory)
    except StateFileError:
        state = None
    if state is not None and os.path.exists(state[0] + ".index"):
        return state[0]
    found = on_disk(directory)
    return found[-1] if found else None


def files_of(path):
    """The files (and TensorFlow's temporary folder) that make up checkpoint ``path``."""
    base = glob.escape(os.fspath(path))
    return sorted(glob.glob(base + ".index") + glob.glob(base + ".data-*") + glob.glob(base + "_temp*"))


def size_of(path):
    """Bytes on disk of checkpoint ``path`` (0 when it has no files)."""
    return sum(os.path.getsize(p) for p in files_of(path) if os.path.isfile(p))


def remove(path):
    """Delete checkpoint ``path``'s files."""
    for p in files_of(path):
        if os.path.isdir(p):
            shutil.rmtree(p, ignore_errors=True)
        elif os.path.exists(p):
            os.unlink(p)


def quarantine(path):
    """Move checkpoint ``path``'s files into :data:`DAMAGED_DIR` beside it (replacing an older copy there).

    Returns:
        the folder they went to.
    """
    folder = os.path.join(os.path.dirname(os.path.abspath(path)), DAMAGED_DIR)
    os.makedirs(folder, exist_ok=True)
    for p in files_of(path):
        target = os.path.join(folder, os.path.basename(p))
        if os.path.isdir(target):
            shutil.rmtree(target)
        os.replace(p, target)
    fsync_dir(os.path.dirname(os.path.abspath(path)))
    return folder
