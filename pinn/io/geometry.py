"""Positions no model can evaluate: non-finite positions or cells, and two atoms at the same place.

Two atoms at one position make a pair of distance 0, whose gradient (the forces, the training
step's) is 0/0: training turns non-finite, the calculator gives NaN forces.  A NaN position
makes an atom without neighbors, whose energy looks valid.  Both are refused where structures
enter pinn: by the loaders, naming the file and frame (:func:`pinn.io.base.check_structure`, the
TFRecord reader), in the neighbor list, and by the calculator, naming the atoms.

Two atoms count as coincident when they are closer than :data:`MIN_DISTANCE` (periodic images
included): no physical structure has such a pair (H₂'s bond, the shortest, is 0.74 Å), so it is
an atom written twice or a frame that blew up.

NumPy only; the search costs a few sorts of the atoms, once per frame at load.
"""
import itertools

import numpy as np

#: two atoms closer than this are refused as one atom written twice, Å
MIN_DISTANCE = 0.01


def face_distances(cell):
    """Distances between opposite faces of a cell ([3, 3], rows a, b, c, Å): [3] Å, V / |b x c| etc."""
    cross = _cross_rows(cell)
    volume = abs(cross[0] @ cell[0])
    return volume / np.sqrt(np.sum(cross * cross, axis=1))


def _cross_rows(cell):
    """[b × c, c × a, a × b] of the rows a, b, c of a 3x3 array (np.cross costs ten times more)."""
    u, v = cell[[1, 2, 0]], cell[[2, 0, 1]]
    return np.stack([u[:, 1] * v[:, 2] - u[:, 2] * v[:, 1], u[:, 2] * v[:, 0] - u[:, 0] * v[:, 2],
                     u[:, 0] * v[:, 1] - u[:, 1] * v[:, 0]], axis=1)


def complete_lattice(cell, pbc):
    """A copy of ``cell`` ([3, 3], rows a, b, c, Å) whose vectors along the open directions of ``pbc``
    (three booleans) are replaced by orthonormal fill-ins (1 Å long)."""
    lattice = cell.copy()
    periodic = [k for k in range(3) if pbc[k]]
    basis = [lattice[k] / np.linalg.norm(lattice[k]) for k in periodic]
    for k in range(3):
        if pbc[k]:
            continue
        for trial in np.eye(3):
            v = trial.copy()
            for b in basis:
                v -= (v @ b) * b
            if np.linalg.norm(v) > 1e-6:
                v /= np.linalg.norm(v)
                basis.append(v)
                lattice[k] = v
                break
    return lattice


def nonfinite_problem(coord, cell=None):
    """What is non-finite in a structure's positions or cell, or ``None``.

    Args:
        coord: [n_atoms, 3] positions, Å.
        cell: [3, 3] lattice vectors as rows, Å, or ``None``.

    Returns:
        str (naming the first atom with a non-finite position, or the cell) or ``None``.
    """
    coord = np.asarray(coord).reshape(-1, 3)
    bad = ~np.isfinite(coord).all(axis=1)
    if bad.any():
        atom = int(np.argmax(bad))
        return f"atom {atom} has a non-finite position {coord[atom].tolist()} Å"
    if cell is not None and not np.isfinite(np.asarray(cell)).all():
        return f"the cell has non-finite values {np.asarray(cell).tolist()} Å"
    return None


def nonfinite_values_problem(key, value):
    """The line for non-finite entries of a data key's array (other than the positions), or ``None``.

    Args:
        key: the data key (``'f_data'``, ``'mm_charge'``, …), named in the line.
        value: its array (any shape; a scalar too).

    Returns:
        str (``non-finite values in 'f_data' (first at index [3, 0])``: the first entry's index, one number per
        axis) or ``None``.
    """
    value = np.asarray(value)
    finite = np.isfinite(value)
    if finite.all():
        return None
    first = np.argwhere(~finite.reshape(value.shape or (1,)))[0]
    return f"non-finite values in {key!r} (first at index {first.tolist()})"


def geometry_problem(coord, cell=None, pbc=None):
    """What no model can evaluate in one structure's geometry, or ``None``: a non-finite position or
    cell (:func:`nonfinite_problem`), or two atoms at one place (:func:`coincident_pair`).

    Args:
        coord: [n_atoms, 3] positions, Å; cell: [3, 3] rows a, b, c, Å, or ``None``; pbc: three
            booleans or ``None`` (open).

    Returns:
        str (one line, naming the atoms) or ``None``.
    """
    problem = nonfinite_problem(coord, cell)
    if problem:
        return problem
    pair = coincident_pair(coord, cell, pbc)
    return coincident_problem(*pair, np.asarray(coord)[pair[0]]) if pair else None


def coincident_problem(i, j, distance, position):
    """The one-line message for atoms ``i`` and ``j`` found ``distance`` (Å) apart at ``position`` (Å)."""
    where = ", ".join(f"{x:.6g}" for x in np.asarray(position, np.float64).reshape(3))
    return (f"atoms {int(i)} and {int(j)} are at the same position ({float(distance):.3g} Å apart, closer than "
            f"{MIN_DISTANCE} Å) at [{where}] Å")


def refuse_coincident(pair_i, pair_j, dist, coord):
    """Raise when two atoms of pairs already found are closer than :data:`MIN_DISTANCE` (a
    calculator's check on its engine's distances: no search of its own).

    Args:
        pair_i, pair_j: [n_pairs] atom indices of each pair; dist: [n_pairs] their distances, Å.
        coord: [n_atoms, 3] positions, Å (for the message).

    Raises:
        ValueError: naming the two atoms, their distance and position.
    """
    closest = closest_listed(pair_i, pair_j, dist)
    if closest:
        i, j, distance = closest
        raise ValueError(coincident_problem(min(i, j), max(i, j), distance, np.asarray(coord)[i]))


def closest_listed(pair_i, pair_j, dist):
    """The closest of pairs already found, when it is closer than :data:`MIN_DISTANCE`.

    Args:
        pair_i, pair_j: [n_pairs] atom indices of each pair.
        dist: [n_pairs] their distances, Å (e.g. a neighbor list's, an engine's).

    Returns:
        ``(i, j, distance)`` or ``None`` (no pair that close; also for no pairs).
    """
    if len(dist) == 0:
        return None
    k = int(np.argmin(dist))
    if not dist[k] < MIN_DISTANCE:
        return None
    return int(pair_i[k]), int(pair_j[k]), float(dist[k])


def coincident_pair(coord, cell=None, pbc=None):
    """The first two atoms closer than :data:`MIN_DISTANCE`, periodic images included.

    Up to :data:`_DENSE_POINTS` points (atoms and their images) every two are compared; more are
    binned on grids of side 2·MIN_DISTANCE, each shifted by half a bin or not along each axis (8
    grids): two points closer than MIN_DISTANCE share a bin on at least one of them, so a sort of
    the bins finds them without a neighbor search.

    Args:
        coord: [n_atoms, 3] finite positions, Å.
        cell: [3, 3] lattice vectors as rows, Å (``None``: open).
        pbc: three booleans, periodicity along a, b, c (``None``: open).

    Returns:
        ``(i, j, distance)`` with ``i < j`` (Å), or ``None``.
    """
    coord = np.asarray(coord, np.float64).reshape(-1, 3)
    points, atoms = _with_images(coord, cell, pbc)
    if len(points) < 2:
        return None
    if len(points) <= _DENSE_POINTS:
        d2 = np.sum((points[:, None, :] - points[None, :, :]) ** 2, axis=-1)
        close = (d2 < MIN_DISTANCE ** 2) & (atoms[:, None] < atoms[None, :])
        if not close.any():
            return None
        a, b = np.nonzero(close)
        k = np.lexsort((atoms[b], atoms[a]))[0]
        return int(atoms[a[k]]), int(atoms[b[k]]), float(np.sqrt(d2[a[k], b[k]]))
    found = []
    scaled = points / (2 * MIN_DISTANCE)
    for offset in _GRID_OFFSETS:
        for a, b in _same_bin(np.floor(scaled + offset).astype(np.int64)):
            i, j = int(atoms[a]), int(atoms[b])
            distance = float(np.linalg.norm(points[b] - points[a]))
            if i != j and distance < MIN_DISTANCE:
                found.append((min(i, j), max(i, j), distance))
    return min(found) if found else None


#: up to this many points (atoms and images) :func:`coincident_pair` compares every two at once
_DENSE_POINTS = 128
#: the 8 grids of :func:`coincident_pair`: shifted by half a bin, or not, along each axis
_GRID_OFFSETS = np.array(list(itertools.product((0.0, 0.5), repeat=3)))
#: the 27 images (in multiples of a, b, c) of a point next to a cell's faces
_IMAGES = np.array(list(itertools.product((-1, 0, 1), repeat=3)))


def _with_images(coord, cell, pbc):
    """Positions wrapped into the cell along periodic axes, with the images of the atoms within
    MIN_DISTANCE of a periodic face; and the atom of each point."""
    pbc = np.zeros(3, bool) if pbc is None else np.asarray(pbc, bool).reshape(3)
    if not pbc.any() or cell is None:
        return coord, np.arange(len(coord))
    lattice = np.asarray(cell, np.float64).reshape(3, 3)
    lattice = lattice if pbc.all() else complete_lattice(lattice, pbc)
    cross = _cross_rows(lattice)
    volume = cross[0] @ lattice[0]
    if abs(volume) < 1e-10:
        raise ValueError(f"cell {np.asarray(cell).tolist()} is singular along a periodic direction")
    frac = coord @ (cross.T / volume)  # the inverse of the lattice by its cross products (no LAPACK call)
    frac = np.where(pbc, frac - np.floor(frac), frac)
    pad = MIN_DISTANCE * np.sqrt(np.sum(cross * cross, axis=1)) / abs(volume)  # / the face distances
    near = ((frac < pad) | (frac > 1 - pad)) & pbc
    if not near.any():
        return frac @ lattice, np.arange(len(coord))
    shifts = _IMAGES[~np.any(_IMAGES[:, ~pbc] != 0, axis=1)]
    candidates = np.nonzero(near.any(axis=1))[0]
    images = frac[candidates][None, :, :] + shifts[:, None, :]
    keep = np.all(((images > -pad) & (images < 1 + pad)) | ~pbc, axis=-1) & np.any(shifts != 0, axis=1)[:, None]
    image, atom = np.nonzero(keep)
    points = np.concatenate([frac, images[image, atom]]) @ lattice
    return points, np.concatenate([np.arange(len(coord)), candidates[atom]])


def _same_bin(bins):
    """Index pairs (a, b) of the rows of ``bins`` [n, 3] (int64) that are equal."""
    low = bins.min(axis=0)
    span = bins.max(axis=0) - low + 1
    if float(span[0]) * float(span[1]) * float(span[2]) < 2.0 ** 62:  # one int64 per row: one sort
        shifted = bins - low
        keys = (shifted[:, 0] * span[1] + shifted[:, 1]) * span[2] + shifted[:, 2]
        order = np.argsort(keys, kind="stable")
        ordered = keys[order]
        same = lambda gap: ordered[gap:] == ordered[:-gap]  # noqa: E731
    else:
        order = np.lexsort(bins.T[::-1])
        ordered = bins[order]
        same = lambda gap: np.all(ordered[gap:] == ordered[:-gap], axis=1)  # noqa: E731
    pairs = []
    gap = 1
    equal = same(gap)
    while equal.any():  # a run of equal rows: every two of it, at distance 1, 2, ... in the order
        pairs += [(order[k], order[k + gap]) for k in np.nonzero(equal)[0]]
        gap += 1
        equal = same(gap)
    return pairs
