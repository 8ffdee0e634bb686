"""The compiled part of :func:`pinn.io.neighbors.neighbor_list`: the positions wrapped into the cell, the
periodic images of the atoms near the cell (the ghosts) and the pairs closer than the cutoff, in Numba loops
that release the GIL.

The data pipeline computes a neighbor list for every structure of the first epoch inside ``tf.data`` (a
``tf.numpy_function``, :func:`pinn.io.add_neighbors`), beside the training step in the same process: in
NumPy each list held the GIL for about 2 ms of small array operations (a 64-atom copper cell), which the
step then waited for.  Here the same list takes a few tens of microseconds, with the GIL released.

Pairs come sorted by the first atom i, then by the second atom j, then by the ghost's order (image by image,
in the order of :func:`images_of`, atom by atom): a pair may appear with several shifts in a cell smaller
than twice the cutoff.
"""
import numpy as np
from numba import njit

#: up to this many center-ghost candidates the pairs are found by testing every one; above it, by
#: binning the ghosts into cubes of side rc
BRUTE_FORCE_PAIRS = 40000


@njit(cache=True, nogil=True)
def wrapped(coord, lattice, pbc):
    """The positions wrapped into the cell along its periodic directions.

    Args:
        coord: [n_atoms, 3] positions, Å.
        lattice: [3, 3] non-singular lattice vectors as rows, Å.
        pbc: [3] bool, periodicity along a, b, c.

    Returns:
        ``(frac, wrap, home)``: [n_atoms, 3] fractional coordinates in [0, 1) along periodic directions,
        the whole lattice multiples taken off them, and the wrapped positions ``frac @ lattice`` (Å).
    """
    inverse = _inverse3(lattice)
    n_atoms = coord.shape[0]
    frac = np.empty((n_atoms, 3))
    wrap = np.zeros((n_atoms, 3))
    home = np.empty((n_atoms, 3))
    for k in range(n_atoms):
        for d in range(3):
            frac[k, d] = coord[k, 0] * inverse[0, d] + coord[k, 1] * inverse[1, d] + coord[k, 2] * inverse[2, d]
            if pbc[d]:
                wrap[k, d] = np.floor(frac[k, d])
                frac[k, d] -= wrap[k, d]
        for d in range(3):
            home[k, d] = frac[k, 0] * lattice[0, d] + frac[k, 1] * lattice[1, d] + frac[k, 2] * lattice[2, d]
    return frac, wrap, home


@njit(cache=True, nogil=True)
def _inverse3(m):
    """The inverse of a 3×3 matrix by its adjugate (no LAPACK call: a few ns, not tens of µs)."""
    out = np.empty((3, 3))
    for r in range(3):
        for c in range(3):
            r1, r2 = (c + 1) % 3, (c + 2) % 3
            c1, c2 = (r + 1) % 3, (r + 2) % 3
            out[r, c] = m[r1, c1] * m[r2, c2] - m[r1, c2] * m[r2, c1]
    det = m[0, 0] * out[0, 0] + m[0, 1] * out[1, 0] + m[0, 2] * out[2, 0]
    return out / det


@njit(cache=True, nogil=True)
def ghosts(frac, home, lattice, n_img, pad):
    """The images of the atoms that lie within the cutoff of the home cell, image by image (the first
    multiple slowest), atom by atom.

    Args:
        frac: [n_atoms, 3] fractional coordinates wrapped into [0, 1) along periodic directions.
        home: [n_atoms, 3] the wrapped positions (``frac @ lattice``), Å.
        lattice: [3, 3] lattice vectors as rows, Å (completed along open directions).
        n_img: [3] int64 images to search on each side along a, b, c (0 along open directions).
        pad: [3] the cutoff in fractional units along a, b, c (``inf`` along open directions).

    Returns:
        ``(atom, shift, position)``: [n_ghosts] int64 atom index, [n_ghosts, 3] float64 image multiples,
        [n_ghosts, 3] float64 positions (Å).
    """
    n_atoms = frac.shape[0]
    most = (2 * n_img[0] + 1) * (2 * n_img[1] + 1) * (2 * n_img[2] + 1) * n_atoms  # every image of every atom
    atom = np.empty(most, np.int64)
    shift = np.empty((most, 3), np.float64)
    position = np.empty((most, 3), np.float64)
    g = 0
    for a in range(-n_img[0], n_img[0] + 1):
        for b in range(-n_img[1], n_img[1] + 1):
            for c in range(-n_img[2], n_img[2] + 1):
                for k in range(n_atoms):
                    if _inside(frac, k, a, b, c, pad):
                        atom[g] = k
                        shift[g, 0], shift[g, 1], shift[g, 2] = a, b, c
                        for d in range(3):
                            position[g, d] = home[k, d] + (a * lattice[0, d] + b * lattice[1, d]
                                                           + c * lattice[2, d])
                        g += 1
    return atom[:g].copy(), shift[:g].copy(), position[:g].copy()


@njit(cache=True, nogil=True)
def _inside(frac, k, a, b, c, pad):
    x = frac[k, 0] + a
    y = frac[k, 1] + b
    z = frac[k, 2] + c
    return -pad[0] < x < 1 + pad[0] and -pad[1] < y < 1 + pad[1] and -pad[2] < z < 1 + pad[2]


@njit(cache=True, nogil=True)
def _distance2(centers, i, points, g):
    dx = points[g, 0] - centers[i, 0]
    dy = points[g, 1] - centers[i, 1]
    dz = points[g, 2] - centers[i, 2]
    return dx * dx + dy * dy + dz * dz


@njit(cache=True, nogil=True)
def _candidates(points, rc):
    """The ghosts binned into cubes of side ``rc`` or more (no more cubes than ghosts, for a short cutoff):
    (``order``: ghosts sorted by bin, ``starts``: each bin's first place in ``order``, ``n_bins`` along x, y, z,
    ``origin``: the corner of the first bin, Å, ``side``: the cubes' side, Å)."""
    n_points = points.shape[0]
    origin = np.empty(3)
    extent = np.empty(3)
    for d in range(3):
        low = points[0, d]
        high = points[0, d]
        for g in range(n_points):
            low = min(low, points[g, d])
            high = max(high, points[g, d])
        origin[d] = low - 1e-8
        extent[d] = high - origin[d]
    side = max(rc, ((extent[0] + rc) * (extent[1] + rc) * (extent[2] + rc) / n_points) ** (1.0 / 3.0))
    n_bins = np.empty(3, np.int64)
    for d in range(3):
        n_bins[d] = max(int(np.floor(extent[d] / side)) + 1, 1)
    flat = np.empty(n_points, np.int64)
    for g in range(n_points):
        flat[g] = _bin_of(points, g, origin, side, n_bins)
    order = np.argsort(flat, kind="mergesort")
    starts = np.zeros(n_bins[0] * n_bins[1] * n_bins[2] + 1, np.int64)
    for g in range(n_points):
        starts[flat[g] + 1] += 1
    for b in range(1, len(starts)):
        starts[b] += starts[b - 1]
    return order, starts, n_bins, origin, side


@njit(cache=True, nogil=True)
def _bin_of(points, g, origin, side, n_bins):
    flat = 0
    for d in range(3):
        cube = min(int(np.floor((points[g, d] - origin[d]) / side)), n_bins[d] - 1)
        flat = flat * n_bins[d] + cube
    return flat


@njit(cache=True, nogil=True)
def _close_to(centers, i, points, rc2, brute, order, starts, n_bins, origin, side, found):
    """The ghosts within the cutoff of center ``i`` (into ``found``; their count)."""
    n = 0
    if brute:
        for g in range(points.shape[0]):
            if _distance2(centers, i, points, g) < rc2:
                found[n] = g
                n += 1
        return n
    home = np.empty(3, np.int64)
    for d in range(3):
        home[d] = int(np.floor((centers[i, d] - origin[d]) / side))
    for a in range(home[0] - 1, home[0] + 2):
        if a < 0 or a >= n_bins[0]:
            continue
        for b in range(home[1] - 1, home[1] + 2):
            if b < 0 or b >= n_bins[1]:
                continue
            for c in range(home[2] - 1, home[2] + 2):
                if c < 0 or c >= n_bins[2]:
                    continue
                flat = (a * n_bins[1] + b) * n_bins[2] + c
                for place in range(starts[flat], starts[flat + 1]):
                    g = order[place]
                    if _distance2(centers, i, points, g) < rc2:
                        found[n] = g
                        n += 1
    return n


@njit(cache=True, nogil=True)
def pairs(centers, wrap, ghost_atom, ghost_shift, ghost_pos, rc, brute_force_pairs):
    """The pairs (i, j, S) of distinct atoms (or an atom and its own periodic image) closer than ``rc``.

    Args:
        centers: [n_atoms, 3] wrapped positions, Å.
        wrap: [n_atoms, 3] the image multiples each atom was wrapped by (undone in the shifts).
        ghost_atom, ghost_shift, ghost_pos: the ghosts (:func:`ghosts`).
        rc: cutoff radius, Å.
        brute_force_pairs: up to this many center-ghost candidates every one is tested; above it the ghosts
            are binned (:data:`BRUTE_FORCE_PAIRS`).

    Returns:
        ``(ind_2, shift, closest)``: [n_pairs, 2] int32 (i, j) sorted by i, then j, then ghost;
        [n_pairs, 3] float64 image multiples in the caller's (unwrapped) coordinates; the place of the
        closest pair (-1 without pairs).
    """
    n_atoms = centers.shape[0]
    n_points = ghost_pos.shape[0]
    rc2 = rc * rc
    brute = n_atoms * n_points <= brute_force_pairs
    if brute:  # no bins
        order, starts, n_bins, origin, side = _no_bins()
    else:
        order, starts, n_bins, origin, side = _candidates(ghost_pos, rc)
    found = np.empty(n_points, np.int64)
    kept = np.empty(16 * n_atoms + 16, np.int64)  # the ghost of each pair, grown as needed
    first = np.zeros(n_atoms + 1, np.int64)
    for i in range(n_atoms):
        n = _close_to(centers, i, ghost_pos, rc2, brute, order, starts, n_bins, origin, side, found)
        if first[i] + n > len(kept):
            grown = np.empty(2 * (first[i] + n), np.int64)
            grown[:first[i]] = kept[:first[i]]
            kept = grown
        m = first[i]
        for k in range(n):
            if not _is_self(i, found[k], ghost_atom, ghost_shift):
                kept[m] = found[k]
                m += 1
        # i's pairs by the second atom, then by ghost
        segment = kept[first[i]:m]
        keys = ghost_atom[segment] * n_points + segment
        kept[first[i]:m] = segment[np.argsort(keys)]
        first[i + 1] = m
    total = first[n_atoms]
    ind_2 = np.empty((total, 2), np.int32)
    shift = np.empty((total, 3), np.float64)
    closest = -1
    closest_d2 = np.inf
    for i in range(n_atoms):
        for place in range(first[i], first[i + 1]):
            g = kept[place]
            j = ghost_atom[g]
            ind_2[place, 0] = i
            ind_2[place, 1] = j
            for d in range(3):
                shift[place, d] = ghost_shift[g, d] + wrap[i, d] - wrap[j, d]
            d2 = _distance2(centers, i, ghost_pos, g)
            if d2 < closest_d2:
                closest_d2 = d2
                closest = place
    return ind_2, shift, closest


@njit(cache=True, nogil=True)
def _no_bins():
    return np.empty(0, np.int64), np.empty(0, np.int64), np.ones(3, np.int64), np.zeros(3), 1.0


@njit(cache=True, nogil=True)
def _is_self(i, g, ghost_atom, ghost_shift):
    return ghost_atom[g] == i and ghost_shift[g, 0] == 0 and ghost_shift[g, 1] == 0 and ghost_shift[g, 2] == 0
