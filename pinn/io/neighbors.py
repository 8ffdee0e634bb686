"""Cell-list neighbor lists for periodic (triclinic) and open systems.

Pure NumPy, vectorised (no per-atom Python loops), so it can run inside the
``tf.data`` pipeline through :func:`tf.numpy_function` and in the ASE
calculator; only the per-step filter of a large Verlet list (:class:`VerletNeighbors`)
runs in a compiled Numba loop (:mod:`pinn.io.verlet_filter`) when Numba is installed.
Distances themselves are computed in TensorFlow from the pair indices and integer image shifts,
so forces and stress stay differentiable.

A pair (i, j, S) means atom j in the periodic image ``S`` (integer multiples of
the lattice vectors a, b, c) lies within ``rc`` of atom i:

    diff = r_j + S @ cell - r_i,   0 < |diff| < rc

The list is full (both (i, j) and (j, i) appear) and sorted by i.  Cells
smaller than twice the cutoff are handled: an atom may be its own neighbor
through a periodic image, and a pair may appear with several shifts.
"""
import numpy as np

from pinn.io.geometry import (MIN_DISTANCE, coincident_problem, complete_lattice, face_distances, nonfinite_problem,
                              refuse_coincident)

#: below this many candidate pairs the O(N^2) search beats binning
_BRUTE_FORCE_PAIRS = 40000
#: a Verlet list of at least this many pairs is filtered by the compiled loop of
#: :mod:`pinn.io.verlet_filter` (below it NumPy takes well under a millisecond, and Numba is not
#: imported)
COMPILED_FILTER_MIN_PAIRS = 20000


def _expand_ranges(starts, counts):
    """Concatenate ``arange(s, s + c)`` for every (s, c) without a loop."""
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.repeat(starts - np.cumsum(counts) + counts, counts)
    return offsets + np.arange(total)


def neighbor_list(coord, cell, pbc, rc):
    """Find all pairs closer than ``rc``.

    Args:
        coord: [n_atoms, 3] positions, Å.
        cell: [3, 3] lattice vectors as rows, Å (ignored along non-periodic
            directions; may be all zeros for an open system).
        pbc: three booleans, periodicity along a, b, c.
        rc: cutoff radius, Å.

    Returns:
        ``(ind_2, shift)``: ``ind_2`` [n_pairs, 2] int32 atom indices (i, j),
        sorted by i; ``shift`` [n_pairs, 3] float64 integer image multiples.

    Raises:
        ValueError: on a singular cell along a periodic direction, a
            non-positive cutoff, a non-finite position or cell, or two atoms
            closer than :data:`pinn.io.geometry.MIN_DISTANCE` (naming them:
            their pair's distance is 0, its gradient 0/0).
    """
    coord = np.asarray(coord, dtype=np.float64).reshape(-1, 3)
    cell = np.asarray(cell, dtype=np.float64).reshape(3, 3)
    pbc = np.asarray(pbc, dtype=bool).reshape(3)
    if not rc > 0:
        raise ValueError(f"cutoff radius must be positive, got {rc}")
    problem = nonfinite_problem(coord, cell)
    if problem:
        raise ValueError(problem)
    n_atoms = len(coord)
    if n_atoms == 0:
        return np.zeros((0, 2), np.int32), np.zeros((0, 3))

    if pbc.any():
        lattice = cell.copy()
        # Open directions get a unit vector orthogonal to the periodic ones so
        # that fractional coordinates stay well defined.
        if not pbc.all():
            lattice = complete_lattice(cell, pbc)
        if abs(np.linalg.det(lattice)) < 1e-10:
            raise ValueError(f"cell {cell.tolist()} is singular along a periodic direction")
        frac = coord @ np.linalg.inv(lattice)
        wrap = np.where(pbc, np.floor(frac), 0.0)
        frac -= wrap
        home = frac @ lattice  # positions wrapped into the cell
        n_img = np.where(pbc, np.ceil(rc / face_distances(lattice)), 0).astype(int)
        grids = [np.arange(-n, n + 1) for n in n_img]
        images = np.stack(np.meshgrid(*grids, indexing="ij"), -1).reshape(-1, 3)
        # keep only image atoms within rc of the home cell (in fractional terms)
        pad = np.where(pbc, rc / face_distances(lattice), np.inf)
        img_frac = frac[None, :, :] + images[:, None, :]  # [n_img, n_atoms, 3]
        keep = np.all((img_frac > -pad) & (img_frac < 1 + pad), axis=-1)
        img_idx, atom_idx = np.nonzero(keep)
        ghost_shift = images[img_idx].astype(np.float64)
        ghost_pos = home[atom_idx] + ghost_shift @ lattice
    else:
        wrap = np.zeros((n_atoms, 3))
        home = coord
        atom_idx = np.arange(n_atoms)
        ghost_shift = np.zeros((n_atoms, 3))
        ghost_pos = coord

    if n_atoms * len(ghost_pos) <= _BRUTE_FORCE_PAIRS:
        i, g, d2 = _pairs_brute_force(home, ghost_pos, rc)
    else:
        i, g, d2 = _pairs_cell_list(home, ghost_pos, rc)
    j = atom_idx[g]
    shift = ghost_shift[g]
    not_self = (i != j) | np.any(shift != 0, axis=1)
    i, j, shift = i[not_self], j[not_self], shift[not_self]
    d2 = d2[not_self]
    if len(d2) and d2.min() < MIN_DISTANCE ** 2:
        k = int(np.argmin(d2))
        raise ValueError(coincident_problem(i[k], j[k], np.sqrt(d2[k]), coord[i[k]]))
    # undo the wrapping: r_j + S@cell - r_i in the original coordinates
    shift = shift + wrap[i] - wrap[j]
    order = np.lexsort((j, i))
    ind_2 = np.stack([i[order], j[order]], axis=1).astype(np.int32)
    return ind_2, shift[order]


def _pairs_brute_force(centers, points, rc):
    """All (center, point) index pairs with distance < rc, and their squared distances (Å²), by dense
    distances."""
    d2 = np.sum((points[None, :, :] - centers[:, None, :]) ** 2, axis=-1)
    i, p = np.nonzero(d2 < rc * rc)
    return i, p, d2[i, p]


def _pairs_cell_list(centers, points, rc):
    """All (center, point) index pairs with distance < rc, and their squared distances (Å²), by binning
    points into cubes of side rc."""
    origin = points.min(axis=0) - 1e-8
    n_bins = np.maximum(np.floor((points.max(axis=0) - origin) / rc).astype(int) + 1, 1)
    point_bin3 = np.minimum(((points - origin) // rc).astype(int), n_bins - 1)
    point_bin = np.ravel_multi_index(point_bin3.T, n_bins)
    order = np.argsort(point_bin, kind="stable")
    sorted_bins = point_bin[order]
    n_flat = int(np.prod(n_bins))
    starts = np.searchsorted(sorted_bins, np.arange(n_flat), side="left")
    ends = np.searchsorted(sorted_bins, np.arange(n_flat), side="right")
    center_bin3 = np.floor((centers - origin) / rc).astype(int)
    all_i = []
    all_p = []
    all_d2 = []
    for offset in np.stack(np.meshgrid(*[[-1, 0, 1]] * 3, indexing="ij"), -1).reshape(-1, 3):
        nb3 = center_bin3 + offset
        valid = np.all((nb3 >= 0) & (nb3 < n_bins), axis=1)
        ci = np.nonzero(valid)[0]
        nb = np.ravel_multi_index(nb3[valid].T, n_bins)
        counts = ends[nb] - starts[nb]
        p = order[_expand_ranges(starts[nb], counts)]
        i = np.repeat(ci, counts)
        d2 = np.sum((points[p] - centers[i]) ** 2, axis=1)
        close = d2 < rc * rc
        all_i.append(i[close])
        all_p.append(p[close])
        all_d2.append(d2[close])
    return np.concatenate(all_i), np.concatenate(all_p), np.concatenate(all_d2)


def batch_neighbor_list(coord, cell, pbc, ind_1, rc):
    """Neighbor list of a sparse batch, structure by structure.

    Args:
        coord: [n_atoms, 3] positions of all atoms in the batch, Å.
        cell: [n_struct, 3, 3] cells, Å.
        pbc: [n_struct, 3] periodicity flags.
        ind_1: [n_atoms] or [n_atoms, 1] structure index of each atom (atoms of
            a structure are contiguous).
        rc: cutoff radius, Å.

    Returns:
        ``(ind_2, shift)`` for the whole batch with atom indices into ``coord``.

    Raises:
        ValueError: as :func:`neighbor_list`, naming the structure's place in the batch (its atoms
            numbered within it).
    """
    ind_1 = np.asarray(ind_1).reshape(-1)
    n_struct = len(cell)
    bounds = np.searchsorted(ind_1, np.arange(n_struct + 1))
    pairs = []
    shifts = []
    for s in range(n_struct):
        lo, hi = bounds[s], bounds[s + 1]
        try:
            p, sh = neighbor_list(coord[lo:hi], cell[s], pbc[s], rc)
        except ValueError as err:
            raise ValueError(f"structure {s} of the batch: {err}") from None
        pairs.append(p + lo)
        shifts.append(sh)
    if not pairs:
        return np.zeros((0, 2), np.int32), np.zeros((0, 3))
    return np.concatenate(pairs).astype(np.int32), np.concatenate(shifts)


class VerletNeighbors:
    """Neighbor lists of one moving structure (MD), rebuilt only when needed.

    The list is built with cutoff ``rc + skin`` and kept while the atom count, cell and
    periodicity stay the same and no atom has moved more than ``skin / 2`` from where it
    was at the build; each call returns the pairs of that list that are closer than
    ``rc`` at the current positions.  No pair can cross from beyond ``rc + skin`` to
    within ``rc`` without one of its atoms moving more than ``skin / 2``, so the result
    holds exactly the pairs a fresh :func:`neighbor_list` would give (in the same order; a
    pair within float64 rounding of ``rc`` may fall either way, as the two compute its
    distance in different orders).  A list of ``COMPILED_FILTER_MIN_PAIRS`` pairs or more is
    filtered by the compiled loop of :mod:`pinn.io.verlet_filter`, with the result of
    :func:`close_pairs_numpy`.

    Args:
        rc: cutoff radius, Å.
        skin: extra radius of the kept list, Å (0: a fresh list at every call).

    Attributes:
        builds: number of full builds so far.
    """

    def __init__(self, rc, skin=0.5):
        if not rc > 0:
            raise ValueError(f"cutoff radius must be positive, got {rc}")
        if not skin >= 0:
            raise ValueError(f"skin must be non-negative, got {skin}")
        self.rc = float(rc)
        self.skin = float(skin)
        self.builds = 0
        self._ref = None  # (coord, cell, pbc) at the last build
        self._pairs = None  # (ind_2, shift) within rc + skin
        self._offsets = None  # shift @ cell of those pairs (the cell is fixed while the list is kept)
        self._near = None  # the pairs within skin + MIN_DISTANCE at the build: the only ones that can coincide

    def _stale(self, coord, cell, pbc):
        if self._ref is None or self.skin == 0:
            return True
        ref_coord, ref_cell, ref_pbc = self._ref
        if ref_coord.shape != coord.shape or not np.array_equal(ref_cell, cell) or not np.array_equal(ref_pbc, pbc):
            return True
        moved = np.max(np.sum((coord - ref_coord) ** 2, axis=1)) if len(coord) else 0.0
        return moved > (0.5 * self.skin) ** 2

    def _update(self, coord, cell, pbc):
        """Rebuild the kept list if needed; returns whether it was rebuilt.

        Raises:
            ValueError: at every call, a non-finite position or cell (such an atom would keep the list and
                find no neighbors), or two atoms closer than :data:`pinn.io.geometry.MIN_DISTANCE`: at a
                build by :func:`neighbor_list`, between builds among the few pairs that were within
                ``skin + MIN_DISTANCE`` at the build (no other pair can have come that close).
        """
        problem = nonfinite_problem(coord, cell)
        if problem:
            raise ValueError(problem)
        if not self._stale(coord, cell, pbc):
            self._refuse_coincident(coord)
            return False
        self._pairs = neighbor_list(coord, cell, pbc, self.rc + self.skin)
        self._ref = (coord.copy(), cell.copy(), pbc.copy())
        self.builds += 1
        self._offsets = self._pairs[1] @ cell
        self._first = np.ascontiguousarray(self._pairs[0][:, 0])
        self._second = np.ascontiguousarray(self._pairs[0][:, 1])
        diff = coord[self._second] - coord[self._first] + self._offsets
        self._near = np.nonzero(np.einsum("ij,ij->i", diff, diff) < (self.skin + MIN_DISTANCE) ** 2)[0]
        return True

    def _refuse_coincident(self, coord):
        """Refuse two atoms at one place among the pairs that could have come that close since the build:
        each atom moved less than skin/2, so a pair came closer by less than the skin."""
        if len(self._near):
            first = self._first[self._near]
            second = self._second[self._near]
            diff = coord[second] - coord[first] + self._offsets[self._near]
            refuse_coincident(first, second, np.sqrt(np.einsum("ij,ij->i", diff, diff)), coord)

    def __call__(self, coord, cell, pbc):
        """``(ind_2, shift)`` of the pairs closer than ``rc``, as :func:`neighbor_list` returns them.

        Raises:
            ValueError: as :func:`neighbor_list`, also between two rebuilds (see :meth:`_update`).
        """
        coord = np.asarray(coord, dtype=np.float64).reshape(-1, 3)
        cell = np.asarray(cell, dtype=np.float64).reshape(3, 3)
        pbc = np.asarray(pbc, dtype=bool).reshape(3)
        if self._update(coord, cell, pbc) and self.skin == 0:
            return self._pairs
        ind_2, shift = self._pairs
        if len(ind_2) >= COMPILED_FILTER_MIN_PAIRS:
            from pinn.io import verlet_filter
            if verlet_filter.available():
                return verlet_filter.close_pairs(coord, ind_2, shift, self._offsets, self.rc * self.rc)
        return close_pairs_numpy(coord, ind_2, shift, self._offsets, self.rc * self.rc)

    def candidates(self, coord, cell, pbc):
        """The kept list itself, for a consumer that drops the pairs beyond ``rc`` on its own
        (:class:`pinn.engines.md.FastPiNet`): ``(first, second, offsets)``, the atoms of each
        pair (contiguous int32, sorted by first atom) and its image offset shift · cell (Å), a
        superset of the pairs closer than ``rc`` (rebuilt when stale, as for a call; refusing what a
        call refuses)."""
        coord = np.asarray(coord, dtype=np.float64).reshape(-1, 3)
        cell = np.asarray(cell, dtype=np.float64).reshape(3, 3)
        pbc = np.asarray(pbc, dtype=bool).reshape(3)
        self._update(coord, cell, pbc)
        return self._first, self._second, self._offsets


def close_pairs_numpy(coord, ind_2, shift, offsets, rc2):
    """``(ind_2, shift)`` of the listed pairs with squared distance below ``rc2`` (Å²), in list
    order: the Verlet list's per-step filter in NumPy (:func:`pinn.io.verlet_filter.close_pairs`
    is its compiled twin and gives the same arrays).

    Args:
        coord: [n_atoms, 3] float64 positions, Å; ind_2: [n_pairs, 2] int32 atom indices;
        shift: [n_pairs, 3] float64 image multiples; offsets: [n_pairs, 3] float64 shift @ cell, Å.
    """
    diff = coord[ind_2[:, 1]] - coord[ind_2[:, 0]] + offsets
    close = np.sum(diff * diff, axis=1) < rc2  # x² + y² + z² in turn, as the compiled loop sums
    return ind_2[close], shift[close]
