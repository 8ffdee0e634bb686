"""Load the output of CP2K runs (energies, forces, stress from the log; positions from the xyz
trajectory; cells from the ``.cell`` file), as upstream PiNN's ``load_cp2k`` does, in pinn's units."""
import os

import numpy as np

from pinn import keys as K
from pinn.io.base import DataError, Frame, ItemReader
from pinn.io.readers.cp2k_files import (read_cell_file, read_cp2k_forces, read_cp2k_stress, read_xyz_frame,
                                        scan_cp2k_output, scan_xyz)
from pinn.io.splits import chosen_split, split_items

#: what each of upstream PiNN's ``keys`` reads, and from which entry of ``files``
SOURCES = {"coord": "coord", "energy": "out", "force": "out", "stress": "out", "cell_dat": "cell_dat"}


def load_cp2k(files, keys=None, split=False, shuffle=True, seed=0, splits=None):
    """Load the frames of CP2K runs.

    ``files`` names where each quantity is read from and ``keys`` which quantities to read:

    | key | read from | gives |
    |---|---|---|
    | ``coord`` | ``files['coord']``: the xyz trajectory (``PROJECT-pos-1.xyz``) | ``elems``, ``coord`` (Å) |
    | ``energy`` | ``files['out']``: the output log, ``ENERGY| Total FORCE_EVAL`` | ``e_data`` (Hartree → eV) |
    | ``force`` | ``files['out']``: its force blocks (``&PRINT / &FORCES``) | ``f_data`` (Hartree/bohr → eV/Å) |
    | ``stress`` | ``files['out']``: its ``&STRESS_TENSOR`` blocks | ``s_data`` (GPa or bar → eV/Å³, ASE's sign) |
    | ``cell_dat`` | ``files['cell_dat']``: a ``.cell`` file, or [3, 3] or [n_frames, 3, 3], Å | ``cell``, ``pbc`` |

    The i-th frame takes the i-th entry of every source; each source must have as many
    entries as the trajectory has frames (print every quantity at the same frequency).

    Args:
        files: a dict with the entries above, or a list of such dicts (one per run; the
            frames of every run, in order).
        keys: the quantities to read (upstream PiNN's argument); default ``coord``, and
            ``energy`` and ``force`` when ``files`` has ``out``, and ``cell_dat`` when it has
            ``cell_dat``.  ``coord`` is always needed.
        split, shuffle, seed, splits: as for :func:`pinn.io.load_ase` (frames are the items).

    Returns:
        A ``tf.data.Dataset`` of structures (or a nested dict of them), as float32; open
        systems without ``cell_dat``.

    Raises:
        DataError: an unknown key, a missing entry of ``files``, sources with different numbers
            of frames (naming the files and counts), and bad files (naming the file and line;
            the blocks of a frame are read when the dataset is iterated, the first at once).
    """
    split = chosen_split(split, splits, "load_cp2k")
    runs = [files] if isinstance(files, dict) else list(files)
    if not runs or not all(isinstance(run, dict) for run in runs):
        raise DataError(f"load_cp2k: files must be a dict {{'out': ..., 'coord': ..., 'cell_dat': ...}} or a list of "
                        f"them, got {files!r}")
    items = []
    sources = []
    for r, run in enumerate(runs):
        run_keys = _keys(run, keys)
        source = _index_run(run, run_keys)
        sources.append(source)
        coord_file = os.fspath(run["coord"])
        items += [Frame(f"{coord_file}, frame {i}", (r, i)) for i in range(len(source["coord"]))]
    if not items:
        raise DataError(f"load_cp2k: no frames in {[run.get('coord') for run in runs]}")

    def read_cp2k_frame(item):
        r, i = item.payload
        source = sources[r]
        run = runs[r]
        out = {}
        structure = read_xyz_frame(os.fspath(run["coord"]), *source["coord"][i])
        out[K.ELEMS] = structure["elems"]
        out[K.COORD] = structure["coord"]
        if "energy" in source:
            out[K.E_DATA] = source["energy"][i][0]
        if "force" in source:
            out[K.F_DATA] = read_cp2k_forces(os.fspath(run["out"]), *source["force"][i])
        if "stress" in source:
            out[K.S_DATA] = read_cp2k_stress(os.fspath(run["out"]), *source["stress"][i])
        if "cell_dat" in source:
            out[K.CELL] = source["cell_dat"][i]
            out[K.PBC] = np.ones(3, bool)
        return out

    return ItemReader(read_cp2k_frame, "load_cp2k").datasets(split_items(items, split, shuffle=shuffle, seed=seed))


def _keys(run, keys):
    if keys is None:
        keys = ["coord"] + (["energy", "force"] if "out" in run else []) + (["cell_dat"] if "cell_dat" in run else [])
    keys = list(keys)
    unknown = [k for k in keys if k not in SOURCES]
    if unknown:
        raise DataError(f"load_cp2k: unknown keys {unknown}; known: {list(SOURCES)}")
    if "coord" not in keys:
        raise DataError("load_cp2k: keys must include 'coord' (the elements and positions come from the trajectory)")
    missing = sorted({SOURCES[k] for k in keys} - set(run))
    if missing:
        raise DataError(f"load_cp2k: keys {keys} need files {missing}, which {run!r} lacks")
    return keys


def _index_run(run, keys):
    """Per key, one entry per frame: (offset, line) of a block, (energy, line), or a cell."""
    source = {"coord": scan_xyz(run["coord"])}
    counts = {f"{run['coord']} (frames)": len(source["coord"])}
    if any(k in keys for k in ("energy", "force", "stress")):
        out = scan_cp2k_output(run["out"])
        for key, found, what in (("energy", "energy", "energies"), ("force", "forces", "force blocks"),
                                 ("stress", "stress", "stress blocks")):
            if key in keys:
                source[key] = out[found]
                counts[f"{run['out']} ({what})"] = len(out[found])
    if "cell_dat" in keys:
        cell = run["cell_dat"]
        if isinstance(cell, (str, os.PathLike)):
            cells = read_cell_file(cell)
            counts[f"{os.fspath(cell)} (cells)"] = len(cells)
        else:
            cells = np.asarray(cell, np.float64)
            if cells.shape == (3, 3):
                cells = np.repeat(cells[None], len(source["coord"]), axis=0)
            elif cells.ndim != 3 or cells.shape[1:] != (3, 3):
                raise DataError(f"load_cp2k: files['cell_dat'] is an array of shape {cells.shape}; expected [3, 3] or "
                                "[n_frames, 3, 3] (Å)")
            counts["files['cell_dat'] (cells)"] = len(cells)
        source["cell_dat"] = cells
    if len(set(counts.values())) != 1:
        raise DataError("load_cp2k: the sources of one run have different numbers of frames: "
                        + ", ".join(f"{name}: {n}" for name, n in counts.items()))
    return source
