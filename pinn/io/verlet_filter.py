"""The per-step filter of a large Verlet list (:class:`pinn.io.neighbors.VerletNeighbors`) in a
compiled parallel loop: the pairs of the kept list that are closer than the cutoff, with the
result of the NumPy filter, about 10× faster (a 10 976-atom Cu cell, 470 000 listed pairs:
5.5 against 56 ms on 2 cores).  Imported only when a list is large enough to need it."""
import numpy as np

try:
    from numba import njit, prange
except ImportError:  # pragma: no cover - numba is a dependency; the caller falls back to NumPy
    njit = None

#: listed pairs per parallel chunk
CHUNK = 8192


def available():
    """Whether Numba is installed (else the caller filters with NumPy)."""
    return njit is not None


def close_pairs(coord, ind_2, shift, offsets, rc2):
    """``(ind_2, shift)`` of the listed pairs with squared distance below ``rc2`` (Å²), in list
    order: what :func:`pinn.io.neighbors.close_pairs_numpy` gives, by two parallel passes over chunks of
    the list (count, then copy), with no per-pair temporaries.

    Args:
        coord: [n_atoms, 3] float64 positions, Å.
        ind_2: [n_pairs, 2] int32 atom indices (i, j) of the listed pairs.
        shift: [n_pairs, 3] float64 image multiples.
        offsets: [n_pairs, 3] float64 image offsets shift @ cell, Å.
        rc2: squared cutoff, Å².

    Returns:
        ``(ind_2, shift)`` of the pairs within the cutoff, new arrays of the input dtypes.
    """
    n_chunks = (len(ind_2) + CHUNK - 1) // CHUNK
    counts = _count_close(coord, ind_2, offsets, rc2, CHUNK, n_chunks)
    starts = np.zeros(n_chunks + 1, np.int64)
    np.cumsum(counts, out=starts[1:])
    out_ind = np.empty((starts[-1], 2), ind_2.dtype)
    out_shift = np.empty((starts[-1], 3), shift.dtype)
    _copy_close(coord, ind_2, shift, offsets, rc2, CHUNK, starts, out_ind, out_shift)
    return out_ind, out_shift


if njit is not None:
    # no fastmath: the squared distance is summed as NumPy's sum over 3 values sums it (x, y, z
    # in turn, no fused multiply-adds), so a pair at the cutoff is kept or dropped as by the
    # NumPy filter
    @njit(cache=True, nogil=True)
    def _is_close(coord, ind_2, offsets, rc2, p):
        i, j = ind_2[p, 0], ind_2[p, 1]
        dx = coord[j, 0] - coord[i, 0] + offsets[p, 0]
        dy = coord[j, 1] - coord[i, 1] + offsets[p, 1]
        dz = coord[j, 2] - coord[i, 2] + offsets[p, 2]
        return dx * dx + dy * dy + dz * dz < rc2

    @njit(cache=True, nogil=True, parallel=True)
    def _count_close(coord, ind_2, offsets, rc2, chunk, n_chunks):
        counts = np.zeros(n_chunks, np.int64)
        for c in prange(n_chunks):
            k = 0
            for p in range(c * chunk, min(len(ind_2), (c + 1) * chunk)):
                if _is_close(coord, ind_2, offsets, rc2, p):
                    k += 1
            counts[c] = k
        return counts

    @njit(cache=True, nogil=True, parallel=True)
    def _copy_close(coord, ind_2, shift, offsets, rc2, chunk, starts, out_ind, out_shift):
        for c in prange(len(starts) - 1):
            k = starts[c]
            for p in range(c * chunk, min(len(ind_2), (c + 1) * chunk)):
                if _is_close(coord, ind_2, offsets, rc2, p):
                    out_ind[k, 0], out_ind[k, 1] = ind_2[p, 0], ind_2[p, 1]
                    out_shift[k, 0], out_shift[k, 1], out_shift[k, 2] = shift[p, 0], shift[p, 1], shift[p, 2]
                    k += 1
