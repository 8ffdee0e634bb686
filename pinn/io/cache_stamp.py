"""A TensorFlow file cache of training structures that knows what it was made from (``data.cache: PATH``).

``dataset.cache(PATH)`` reuses whatever complete cache it finds at ``PATH``, whatever it was made from:
a run given other training files would train on the old ones.  :func:`prepare_cache` runs before the
cache is used and keeps a record beside it, ``PATH.pinn-cache.json`` (:data:`RECORD_SUFFIX`), of what
the cached structures depend on (:func:`made_from`): the training files (absolute paths, sizes and
modification times in ns), the cutoff ``rc`` (the neighbor lists are cached), the elements, the split
and seed, the MiMiC options, the model's embedding and the rank and number of ranks (each rank caches
its share).  The cache is reused only when the record equals what the run would cache and the cache is
complete; otherwise its files and the record are removed, a new record is written and TensorFlow caches
again in the first epoch, with a log line saying why (which item changed).

Why this is safe:

- **TensorFlow finishes a cache or leaves none.**  During the first pass it writes
  ``PATH_0.data-00000-of-00001.tempstate…`` under the lock ``PATH_0.lockfile`` and renames the data
  to ``PATH.data-00000-of-00001`` and ``PATH.index`` only when the pass reached the end (TF 2.15); an
  iterator dropped before the end discards its files.  So ``PATH.index`` exists only for a whole pass.
  A run killed in the pass leaves the temporary file and the lock, which would make TensorFlow refuse
  the path ("concurrent caching iterator"): such a cache is incomplete and is removed like a stale one.
- **The record comes first.**  The old record goes, then the old cache files, then the new record is
  written (atomically) before TensorFlow's pass; an index beside a record can therefore only come from
  a pass that followed that record.  The files are stamped before the data are read, so a file changed
  while (or after) it is read gives another stamp the next time: the cache is rebuilt, never reused
  stale.  What it cannot see is a rewrite that keeps a file's size and modification time.
- **One run at a time per path.**  Runs that may overlap (the tasks of a committee's job array) need
  paths of their own; members trained one after another share one cache (the same data, split and seed).
"""
import glob
import json
import logging
import os

from pinn.files.durable import write_atomic

log = logging.getLogger("pinn")

#: the record of a cache at PATH is PATH + this
RECORD_SUFFIX = ".pinn-cache.json"
#: the version of the record's layout (a record of another version is stale)
RECORD_VERSION = 1


def rank_path(path, rank):
    """The cache path of ``rank``: ``path`` for rank 0 (and a run of one process), ``path-rankN`` for rank N
    (each rank caches its own share of the data)."""
    return os.fspath(path) if not rank else f"{os.fspath(path)}-rank{rank}"


def file_entry(path):
    """``{'path', 'size', 'mtime_ns'}`` of a file (absolute path), or ``{'path', 'missing': True}``."""
    path = os.path.abspath(os.fspath(path))
    try:
        stat = os.stat(path)
    except OSError:
        return {"path": path, "missing": True}
    return {"path": path, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def made_from(files, rc, atom_types=None, split=None, seed=0, options=None, embedding=None, rank=0, ranks=1):
    """The record of what a cache of training structures depends on (JSON-ready).

    Args:
        files: the training files (stamped now: call this before the data are read).
        rc: the neighbor lists' cutoff (Å).
        atom_types: the network's elements.
        split, seed: the split of the files and its seed.
        options: other options that change the structures (``data.mimic``'s, less its files).
        embedding: the model's embedding (QM/MM frames are cut to their region for a mechanical one).
        rank, ranks: this rank and the number of ranks (each caches its share).

    Returns:
        a dict as JSON gives it back (lists, not tuples), so that it compares equal to a stored record.
    """
    record = {"version": RECORD_VERSION, "files": [file_entry(f) for f in files], "rc": float(rc),
              "atom_types": sorted(int(z) for z in atom_types) if atom_types is not None else None,
              "split": split, "seed": seed, "options": options or {}, "embedding": embedding,
              "rank": int(rank), "ranks": int(ranks)}
    return json.loads(json.dumps(record, default=str))


def differences(stored, wanted):
    """What differs between two records, in words (a list)."""
    said = []
    old = {e["path"]: e for e in stored.get("files", [])}
    new = {e["path"]: e for e in wanted["files"]}
    for path in new:
        if path not in old:
            said.append(f"{path} new")
        elif old[path] != new[path]:
            said.append(f"{path} changed ({_entry_change(old[path], new[path])})")
    said += [f"{path} no longer" for path in old if path not in new]
    if not said and [e["path"] for e in stored.get("files", [])] != list(new):
        said.append("the files' order")
    for key, value in wanted.items():
        if key != "files" and stored.get(key) != value:
            said.append(f"{key} {stored.get(key)!r} then, {value!r} now")
    return said


def _entry_change(old, new):
    if new.get("missing") or old.get("missing"):
        return "missing now" if new.get("missing") else "there now"
    if old["size"] != new["size"]:
        return f"{old['size']} bytes then, {new['size']} now"
    return "modified since"


def cache_files(path):
    """The files of TensorFlow's cache at ``path``: complete (``PATH.index``, ``PATH.data-*``) and what a
    pass that did not end left (``PATH_N.lockfile``, ``PATH_N.data-*.tempstate*``)."""
    stem = glob.escape(os.fspath(path))
    patterns = (".index", ".data-*", "_[0-9]*.lockfile", "_[0-9]*.index*", "_[0-9]*.data-*")
    return sorted({name for pattern in patterns for name in glob.glob(stem + pattern)})


def _stored_record(path):
    try:
        with open(path + RECORD_SUFFIX) as f:
            record = json.load(f)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def prepare_cache(path, record):
    """Make ``path`` ready for ``dataset.cache(path)`` by a run that caches what ``record`` (:func:`made_from`)
    describes: a complete cache of the same record is kept; anything else there is removed and the new
    record written.  Logs one line saying which, and why.

    Returns:
        ``True`` when the complete cache is reused, ``False`` when the first epoch caches again.

    Raises:
        OSError: the folder cannot be made or written (naming the path).
    """
    path = os.path.abspath(os.fspath(path))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    stored = _stored_record(path)
    present = cache_files(path)
    complete = os.path.exists(path + ".index")
    if stored == record and complete:
        log.info("data.cache %s: made from the same data (the record %s); reusing it", path, path + RECORD_SUFFIX)
        return True
    if stored is None and not present:
        why = "no cache there yet; the first epoch writes it"
    elif stored is None:
        why = f"no record of what it was made from ({path + RECORD_SUFFIX}); removing it and caching again"
    elif stored != record:
        why = f"made from other data ({'; '.join(differences(stored, record))}); removing it and caching again"
    elif present:
        why = "incomplete (a run stopped in its first epoch); removing it and caching again"
    else:
        why = "not written yet (no run has finished a first epoch with it); the first epoch writes it"
    if os.path.exists(path + RECORD_SUFFIX):
        os.remove(path + RECORD_SUFFIX)
    for name in present:
        os.remove(name)
    write_atomic(path + RECORD_SUFFIX, json.dumps(record, indent=1) + "\n")
    log.info("data.cache %s: %s", path, why)
    return False
