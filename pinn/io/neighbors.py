"""Cell-list neighbor lists for periodic (triclinic) and open systems.

The positions are wrapped into the cell, and the ghosts (the periodic images near the cell) and the pairs
found, in compiled Numba loops that release the GIL (:mod:`pinn.io.neighbor_kernels`), so that the lists computed
inside the ``tf.data`` pipeline (through :func:`tf.numpy_function`) run beside the training step rather
than hold it up; the ASE calculator uses the same lists.  The per-step filter of a large Verlet list
(:class:`VerletNeighbors`) runs in a compiled parallel loop (:mod:`pinn.io.verlet_filter`).
Distances themselves are computed in TensorFlow from the pair indices and integer image shifts,
so forces and stress stay differentiable.

A pair (i, j, S) means atom j in the periodic image ``S`` (integer multiples of
the lattice vectors a, b, c) lies within ``rc`` of atom i:

    diff = r_j + S @ cell - r_i,   0 < |diff| < rc

The list is full (both (i, j) and (j, i) appear) and sorted by i, then j.  Cells
smaller than twice the cutoff are handled: an atom may be its own neighbor
through a periodic image, and a pair may appear with several shifts.
"""
import numpy as np

from pinn.io import neighbor_kernels as kernels
from pinn.io.geometry import (MIN_DISTANCE, coincident_problem, complete_lattice, face_distances, nonfinite_problem,
                              refuse_coincident)

#: a Verlet list of at least this many pairs is filtered by the compiled loop of
#: :mod:`pinn.io.verlet_filter` (below it NumPy takes well under a millisecond, and Numba is not
#: imported)
COMPILED_FILTER_MIN_PAIRS = 20000


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
    ind_2, shift, closest = pairs_within(coord, cell, pbc, rc)
    if closest >= 0:
        i, j = ind_2[closest]
        distance = np.linalg.norm(coord[j] + shift[closest] @ cell - coord[i])
        if distance < MIN_DISTANCE:
            raise ValueError(coincident_problem(i, j, distance, coord[i]))
    return ind_2, shift


def pairs_within(coord, cell, pbc, rc):
    """The pairs closer than ``rc`` as :func:`neighbor_list` gives them, without its checks of the input and
    its refusal of coincident atoms (:func:`coincident_pair` looks for those with it).

    Args:
        coord: [n_atoms, 3] float64 finite positions, Å.
        cell: [3, 3] float64 lattice vectors as rows, Å.
        pbc: [3] bool periodicity.
        rc: positive cutoff radius, Å.

    Returns:
        ``(ind_2, shift, closest)``: as :func:`neighbor_list`, and the place of the closest pair in them
        (-1 without pairs).

    Raises:
        ValueError: a cell singular along a periodic direction.
    """
    n_atoms = len(coord)
    if n_atoms == 0:
        return np.zeros((0, 2), np.int32), np.zeros((0, 3)), -1
    if pbc.any():
        lattice = cell.copy()
        # Open directions get a unit vector orthogonal to the periodic ones so
        # that fractional coordinates stay well defined.
        if not pbc.all():
            lattice = complete_lattice(cell, pbc)
        if abs(np.linalg.det(lattice)) < 1e-10:
            raise ValueError(f"cell {cell.tolist()} is singular along a periodic direction")
        frac, wrap, home = kernels.wrapped(coord, lattice, pbc)
        reach = rc / face_distances(lattice)  # the cutoff in fractions of a, b, c
        n_img = np.where(pbc, np.ceil(reach), 0).astype(np.int64)
        # only image atoms within rc of the home cell (in fractional terms) are ghosts
        pad = np.where(pbc, reach, np.inf)
        ghost_atom, ghost_shift, ghost_pos = kernels.ghosts(frac, home, lattice, n_img, pad)
    else:
        wrap = np.zeros((n_atoms, 3))
        home = coord
        ghost_atom = np.arange(n_atoms, dtype=np.int64)
        ghost_shift = np.zeros((n_atoms, 3))
        ghost_pos = coord
    return kernels.pairs(home, wrap, ghost_atom, ghost_shift, ghost_pos, float(rc), kernels.BRUTE_FORCE_PAIRS)


def coincident_pair(coord, cell=None, pbc=None):
    """The first two atoms closer than :data:`MIN_DISTANCE`, periodic images included: the first pair
    (i < j, in that order) of the neighbor list at that cutoff (:func:`pairs_within`, compiled; a structure's
    check costs some microseconds).

    Args:
        coord: [n_atoms, 3] finite positions, Å.
        cell: [3, 3] lattice vectors as rows, Å (``None``: open).
        pbc: three booleans, periodicity along a, b, c (``None``: open).

    Returns:
        ``(i, j, distance)`` with ``i < j`` (Å), or ``None``.

    Raises:
        ValueError: a cell singular along a periodic direction.
    """
    coord = np.asarray(coord, np.float64).reshape(-1, 3)
    pbc = np.zeros(3, bool) if pbc is None or cell is None else np.asarray(pbc, bool).reshape(3)
    cell = np.zeros((3, 3)) if cell is None else np.asarray(cell, np.float64).reshape(3, 3)
    ind_2, shift, _ = pairs_within(coord, cell, pbc, MIN_DISTANCE)
    ordered = np.flatnonzero(ind_2[:, 0] < ind_2[:, 1])
    if not len(ordered):
        return None
    k = ordered[0]
    i, j = int(ind_2[k, 0]), int(ind_2[k, 1])
    return i, j, float(np.linalg.norm(coord[j] + shift[k] @ cell - coord[i]))


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
