"""The cell-list neighbor list agrees pair by pair with ASE's."""
import numpy as np
import pytest
from ase import Atoms
from ase.neighborlist import neighbor_list as ase_neighbor_list

from pinn.io.neighbors import batch_neighbor_list, neighbor_list
import pinn.io.neighbor_kernels as kernels


def _pairs(i, j, shift):
    return sorted(zip(np.asarray(i).tolist(), np.asarray(j).tolist(),
                      map(tuple, np.rint(shift).astype(int).tolist())))


def _random_atoms(rng, n, cell_scale, pbc):
    cell = np.diag(rng.uniform(0.6, 1.4, 3) * cell_scale) + rng.uniform(-0.4, 0.4, (3, 3)) * cell_scale
    frac = rng.uniform(-0.3, 1.3, (n, 3))  # atoms outside the cell too
    return Atoms(numbers=np.ones(n, int), positions=frac @ cell, cell=cell, pbc=pbc)


@pytest.mark.parametrize("pbc", [(True, True, True), (True, False, True), (False, False, False)])
@pytest.mark.parametrize("cell_scale,n", [(3.0, 4), (6.0, 20), (12.0, 60)])
def test_matches_ase(rng, pbc, cell_scale, n):
    rc = 4.0  # cells of 3 and 6 Å are smaller than 2 rc: several images, self-images
    for _ in range(3):
        atoms = _random_atoms(rng, n, cell_scale, pbc)
        i, j, S = ase_neighbor_list("ijS", atoms, rc)
        ind_2, shift = neighbor_list(atoms.positions, atoms.cell[:], atoms.pbc, rc)
        assert _pairs(ind_2[:, 0], ind_2[:, 1], shift) == _pairs(i, j, S)
        assert np.all(np.diff(ind_2[:, 0]) >= 0), "pairs must be sorted by i"
        diff = atoms.positions[ind_2[:, 1]] + shift @ atoms.cell[:] - atoms.positions[ind_2[:, 0]]
        assert np.all(np.linalg.norm(diff, axis=1) < rc)


@pytest.mark.parametrize("cell_scale", [5.0, 14.0])  # images of atoms within one cell, and a cell > 2 rc
def test_cell_list_equals_brute_force(rng, monkeypatch, cell_scale):
    """The binned search gives the brute-force search's list, pair for pair and in the same order."""
    atoms = _random_atoms(rng, 150, cell_scale, (True, True, True))
    monkeypatch.setattr(kernels, "BRUTE_FORCE_PAIRS", 0)
    binned = neighbor_list(atoms.positions, atoms.cell[:], atoms.pbc, 3.5)
    monkeypatch.setattr(kernels, "BRUTE_FORCE_PAIRS", 10 ** 12)
    brute = neighbor_list(atoms.positions, atoms.cell[:], atoms.pbc, 3.5)
    np.testing.assert_array_equal(binned[0], brute[0])
    np.testing.assert_array_equal(binned[1], brute[1])
    assert np.all(np.lexsort((binned[0][:, 1], binned[0][:, 0])) == np.arange(len(binned[0]))), "sorted by i, j"


def test_batch_offsets(rng):
    a = _random_atoms(rng, 5, 5.0, (True, True, True))
    b = _random_atoms(rng, 7, 6.0, (False, False, False))
    coord = np.concatenate([a.positions, b.positions])
    ind_1 = np.array([0] * 5 + [1] * 7)
    ind_2, shift = batch_neighbor_list(coord, np.stack([a.cell[:], b.cell[:]]), np.stack([a.pbc, b.pbc]), ind_1, 3.0)
    pa, sa = neighbor_list(a.positions, a.cell[:], a.pbc, 3.0)
    pb, sb = neighbor_list(b.positions, b.cell[:], b.pbc, 3.0)
    np.testing.assert_array_equal(ind_2, np.concatenate([pa, pb + 5]))
    np.testing.assert_array_equal(shift, np.concatenate([sa, sb]))


def test_bad_input():
    with pytest.raises(ValueError, match="singular"):
        neighbor_list(np.zeros((2, 3)), np.zeros((3, 3)), (True, True, True), 3.0)
    with pytest.raises(ValueError, match="positive"):
        neighbor_list(np.zeros((2, 3)), np.eye(3), (False,) * 3, 0.0)


def _pair_set(ind_2, shift):
    return sorted(zip(ind_2[:, 0].tolist(), ind_2[:, 1].tolist(), map(tuple, np.round(shift).astype(int).tolist())))


@pytest.mark.parametrize("periodic", [True, False])
@pytest.mark.parametrize("compiled", [False, True], ids=["numpy-filter", "compiled-filter"])
def test_verlet_list_equals_fresh_lists_along_a_trajectory(periodic, compiled, monkeypatch):
    """The Verlet list (kept while atoms move less than skin/2) gives exactly the pairs of a
    fresh list at every step, also when atoms leave the cell, and rebuilds only when needed;
    with the per-step filter in NumPy and in the compiled loop (used for large lists)."""
    from pinn.io import neighbors
    from pinn.io.neighbors import VerletNeighbors, neighbor_list
    monkeypatch.setattr(neighbors, "COMPILED_FILTER_MIN_PAIRS", 0 if compiled else 10**12)
    rng = np.random.RandomState(3)
    cell = np.array([[7.0, 0.0, 0.0], [1.2, 6.5, 0.0], [0.4, -0.8, 6.8]])
    coord = rng.uniform(0, 1, (40, 3)) @ cell
    pbc = np.array([periodic] * 3)
    rc, skin = 3.0, 0.6
    verlet = VerletNeighbors(rc, skin)
    velocity = rng.normal(0, 0.02, coord.shape)
    for step in range(60):
        coord = coord + velocity  # drifts out of the cell over the run
        got = verlet(coord, cell, pbc)
        want = neighbor_list(coord, cell, pbc, rc)
        assert _pair_set(*got) == _pair_set(*want), step
        assert (np.diff(got[0][:, 0]) >= 0).all()
    assert 1 < verlet.builds < 60
    # a new cell forces a rebuild
    builds = verlet.builds
    verlet(coord, cell * 1.01, pbc)
    assert verlet.builds == builds + 1
    with pytest.raises(ValueError, match="skin"):
        VerletNeighbors(rc, -0.1)


def test_compiled_filter_equals_numpy_filter_over_several_chunks():
    """The compiled filter of a large Verlet list returns the same arrays, in the same order, as
    the NumPy one, with pairs placed to within float64 rounding of the cutoff."""
    pytest.importorskip("numba")
    from pinn.io import verlet_filter
    from pinn.io.neighbors import close_pairs_numpy
    rng = np.random.RandomState(7)
    n_atoms, n_pairs, rc = 500, 3 * verlet_filter.CHUNK + 123, 4.0
    coord = rng.uniform(-5, 5, (n_atoms, 3))
    ind_2 = np.sort(rng.randint(0, n_atoms, (n_pairs, 2)).astype(np.int32), axis=0)
    shift = rng.randint(-1, 2, (n_pairs, 3)).astype(np.float64)
    offsets = shift @ np.diag([6.0, 7.0, 8.0])
    # a third of the pairs put at rc (times 1 - 1e-16 .. 1 + 1e-16) from their first atom
    at_rc = rng.rand(n_pairs) < 1 / 3
    direction = rng.normal(size=(n_pairs, 3))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    target = coord[ind_2[:, 0]] + direction * rc * (1 + rng.uniform(-1e-16, 1e-16, (n_pairs, 1)))
    offsets[at_rc] = (target - coord[ind_2[:, 1]])[at_rc]
    want_ind, want_shift = close_pairs_numpy(coord, ind_2, shift, offsets, rc * rc)
    kept = close_pairs_numpy(coord, ind_2, np.arange(n_pairs)[:, None], offsets, rc * rc)[1][:, 0]
    assert 0 < len(kept) < n_pairs and 0 < at_rc[kept].sum() < at_rc.sum()  # pairs at rc go both ways
    got_ind, got_shift = verlet_filter.close_pairs(coord, ind_2, shift, offsets, rc * rc)
    np.testing.assert_array_equal(got_ind, want_ind)
    np.testing.assert_array_equal(got_shift, want_shift)
    assert got_ind.dtype == np.int32 and got_shift.dtype == np.float64
