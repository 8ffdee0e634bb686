"""Positions no model can evaluate: non-finite positions or cells, and two atoms at the same place.

Two atoms at one position make a pair of distance 0, whose gradient (the forces, the training
step's) is 0/0: training turns non-finite, the calculator gives NaN forces.  A NaN position
makes an atom without neighbors, whose energy looks valid.  Both are refused where structures
enter pinn: by the loaders, naming the file and frame (:func:`pinn.io.base.check_structure`, the
TFRecord reader), in the neighbor list, and by the calculator, naming the atoms.

Two atoms count as coincident when they are closer than :data:`MIN_DISTANCE` (periodic images
included): no physical structure has such a pair (H₂'s bond, the shortest, is 0.74 Å), so it is
an atom written twice or a frame that blew up.

NumPy only: the checks and messages.  The search for coincident atoms (:func:`pinn.io.neighbors.coincident_pair`,
:func:`pinn.io.neighbors.geometry_problem`) is the compiled neighbor list's, at that cutoff.
"""

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
