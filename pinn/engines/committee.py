"""A committee of PiNet (or PiNet2) potentials on the Numba engine: one neighbor search, the members in one call.

:class:`FastCommittee` finds the pairs within the cutoff once (the first member's
:meth:`~pinn.engines.md.FastPiNet.search`).  Members of one layout (the same network, sizes and
dtype: a committee trained from one run file) hold their weights stacked, and one kernel call
(:mod:`pinn.engines.numba.committee_kernels`) evaluates them, a member per thread, on the shared
pairs; members of different layouts run one after another, each on its own threads
(:meth:`~pinn.engines.md.FastPiNet.on_pairs`).  The members must share the cutoff and the elements.
"""
import numpy as np

from pinn.engines.numba import committee_kernels, pinet2_kernels
from pinn.engines.numba.md_kernels import PARALLEL_MIN_PAIRS, numba_threads


class FastCommittee:
    """Energies, forces and virials of every member of a committee, from one neighbor search.

    Args:
        members: :class:`~pinn.engines.md.FastPiNet` engines of the same cutoff and elements.
        names: what to call each member in errors (default ``member 0``, ``member 1``, …).

    Attributes:
        stacked: whether the members share a layout and run in one kernel call.

    Raises:
        ValueError: no members, or members whose cutoff or elements differ (naming them).
    """

    def __init__(self, members, names=None):
        self.members = list(members)
        if not self.members:
            raise ValueError("a committee needs at least one member")
        names = list(names) if names is not None else [f"member {k}" for k in range(len(self.members))]
        check_same_kind([(name, m.rc, m.atom_types) for name, m in zip(names, self.members)])
        first = self.members[0]
        self.rc = first.rc
        self.atom_types = first.atom_types
        self.threads = first.threads
        self.stacked = len(self.members) > 1 and all(first.same_layout(m) for m in self.members[1:])
        self._stack = MemberStack(self.members) if self.stacked else None
        self._pairs_key = None  # (member 0's search count, numbers, positions, cell) of its pairs

    def __call__(self, numbers, coord, cand_i, cand_j, cand_offset, cell=None, pbc=None, members=None,
                 charge_seed=None):
        """Every member's predictions for one structure (see :meth:`pinn.engines.md.FastPiNet.__call__`
        for the arguments).

        Args:
            members: the indices of the members to evaluate, in order (default: all).  Without member
                0, the pairs of member 0's last search are reused when that search was this committee's,
                for the same numbers, positions and cell (else member 0 finds them again).
            charge_seed: for networks of two outputs per atom (an electrostatic embedding): [n_atoms] ∂E/∂q̃ of
                each atom's second output (eV/e), the same for every member (the potential of the MM charges:
                :class:`pinn.engines.embedded.FastEmbeddedCommittee`); ``None``: 0.

        Returns:
            dict with ``energy`` [M] (eV), ``energies`` [M, n_atoms] (eV, per atom), ``forces``
            [M, n_atoms, 3] (eV/Å), ``virial`` [M, 3, 3] (eV) and, for a periodic cell, ``stress``
            [M, 3, 3] (eV/Å³), float64, for the M members asked for; with two outputs per atom also
            ``charges_raw`` [M, n_atoms] (e), the second output.
        """
        members = list(range(len(self.members))) if members is None else list(members)
        first = self.members[0]
        if 0 in members or not self._pairs_current(numbers, coord, cell):
            first.search(numbers, coord, cand_i, cand_j, cand_offset)
            self._pairs_key = (first.calls, np.array(numbers), np.array(coord, np.float64),
                               None if cell is None else np.array(cell, np.float64))
        pairs = first.pairs()
        if self.in_one_call(len(members), len(pairs[0])):
            return self._stack(numbers, pairs, cell, pbc, members, charge_seed)
        outs = [self.members[k].on_pairs(numbers, *pairs, cell, pbc, charge_seed) for k in members]
        keys = ("energy", "energies", "forces", "virial", "stress", "charges_raw")
        return {key: np.stack([o[key] for o in outs]) for key in keys if key in outs[0]}

    def in_one_call(self, count, n_pairs):
        """Whether ``count`` members on ``n_pairs`` pairs run in one kernel call, a member per thread: when
        they share a layout and that is faster than one after another on all threads (see
        :meth:`MemberStack.pays`)."""
        return self._stack is not None and self._stack.pays(count, n_pairs)

    def _pairs_current(self, numbers, coord, cell):
        """Whether member 0's pairs are of this structure, from this committee's last search."""
        key = self._pairs_key
        return (key is not None and key[0] == self.members[0].calls and np.array_equal(key[1], numbers)
                and np.array_equal(key[2], coord)
                and (key[3] is None if cell is None else key[3] is not None and np.array_equal(key[3], cell)))


class MemberStack:
    """The weights of members of one layout stacked, their workspaces, and the one kernel call.

    Args:
        members: :class:`~pinn.engines.md.FastPiNet` engines for which ``members[0].same_layout(m)``.

    The stacked copy of the weights follows each member's :attr:`~pinn.engines.md.FastPiNet.weights_version`
    (a member's :meth:`~pinn.engines.md.FastPiNet.load_weights` is seen at the next call).
    """

    def __init__(self, members):
        self.members = list(members)
        first = self.members[0]
        self.network = first.network
        self.threads = first.threads
        self.dtype = first.dtype
        self._layout = tuple(first.arrays[key] for key in ("table", "layers", "blocks", "codes"))
        self._same_types = all(np.array_equal(m.arrays["type_of"], first.arrays["type_of"]) for m in self.members)
        self._versions = None
        self._work_key = None

    def pays(self, count, n_pairs):
        """Whether ``count`` members on ``n_pairs`` pairs run faster a member per thread than one after
        another on all threads: always below the single model's thread threshold (where each member
        alone runs on one core), above it when the members fill every thread equally."""
        if count < 2:
            return False
        threshold = pinet2_kernels.PARALLEL_MIN_PAIRS if self.network == "PiNet2" else PARALLEL_MIN_PAIRS
        return self.threads == 1 or n_pairs < threshold or count % self.threads == 0

    def _weights(self):
        """The stacked weights (flat, scal, e_dress), copied again when a member's weights changed."""
        versions = [m.weights_version for m in self.members]
        if versions != self._versions:
            self.flat = np.stack([m.arrays["flat"] for m in self.members])
            self.scal = np.stack([m.arrays["scal"] for m in self.members])
            self._versions = versions
        return self.flat, self.scal

    def __call__(self, numbers, pairs, cell, pbc, members, charge_seed=None):
        """The predictions of ``members`` (indices) on ``pairs`` = (pair_i, pair_j, diff, dist) of one
        structure, with the second output's ``charge_seed`` (``None``: 0), as :meth:`FastCommittee.__call__`
        returns them."""
        pair_i, pair_j, diff, dist = pairs
        n_pairs = len(pair_i)
        flat, scal = self._weights()
        first = self.members[0]
        if self._same_types:
            types = np.tile(first.types_of(numbers), (len(self.members), 1))
        else:
            types = np.stack([m.types_of(numbers) for m in self.members])
        which = np.asarray(members, np.int64)
        diff = np.ascontiguousarray(diff, np.float64)
        dist = np.ascontiguousarray(dist, np.float64)
        table, layers, blocks, codes = self._layout
        two = first.outputs == 2
        with numba_threads(self.threads):
            if self.network == "PiNet2":
                work = self._pinet2_work(len(types[0]), n_pairs, pair_i, pair_j)
                if two:
                    work["charge_seed"][:] = 0.0 if charge_seed is None else charge_seed
                committee_kernels.pinet2_members(which, types, work["pair_i"], work["pair_j"], diff, dist, flat,
                                                 table, layers, blocks, codes, scal, work["charge_seed"],
                                                 work["atomic"], work["charge"], work["g_diff"], work["tile"],
                                                 *work["arrays"], work["forces"], work["virial"])
            else:
                work = self._pinet_work(len(types[0]), n_pairs, dist)
                if two:
                    work["charge_seed"][:] = 0.0 if charge_seed is None else charge_seed
                committee_kernels.pinet_members(which, types, n_pairs, pair_i, pair_j, work["dist"], diff, dist,
                                                flat, table, layers, blocks, codes, scal, *work["arrays"],
                                                work["forces"], work["virial"])
        atomic = work["atomic"][which].astype(np.float64)
        energies = atomic + np.stack([self.members[k].arrays["e_dress"][types[k]] for k in members])
        result = {"energy": energies.sum(axis=1), "energies": energies, "forces": work["forces"][which],
                  "virial": work["virial"][which]}
        if two:
            result["charges_raw"] = work["charge"][which].astype(np.float64)
        if pbc is not None and np.any(pbc):
            cell = np.asarray(cell, np.float64)
            result["stress"] = result["virial"] / abs(np.dot(cell[0], np.cross(cell[1], cell[2])))
        return result

    def _pinet_work(self, n_atoms, n_pairs, dist):
        """PiNet's stacked workspace for ``n_atoms`` and at least ``n_pairs`` (kept while the atom count
        stays and the pairs fit), with ``dist`` in the weights' dtype."""
        key = self._work_key
        if key is None or key[0] != n_atoms or key[1] < n_pairs:
            capacity = max(n_pairs, int(1.25 * key[1]) if key is not None and key[0] == n_atoms else 0, 1)
            arrays = self.members[0].pinet_work(n_atoms, capacity, members=len(self.members))
            order = ("basis", "dbasis", "zpair", "zatom", "pa", "pb", "buf", "grad_r", "atomic", "charge_seed",
                     "charge")  # pinet_members' arguments
            self._work = {"arrays": tuple(arrays[name] for name in order), "atomic": arrays["atomic"],
                          "charge_seed": arrays["charge_seed"], "charge": arrays["charge"],
                          "dist": np.ones(capacity, self.dtype)} | self._outputs(n_atoms)
            self._work_key = (n_atoms, capacity)
        self._work["dist"][:n_pairs] = dist
        return self._work

    def _pinet2_work(self, n_atoms, n_pairs, pair_i, pair_j):
        """PiNet2's stacked workspace for ``n_atoms`` and ``n_pairs`` (kept while the atom count and the
        tiles stay), with the pairs' atoms padded to whole tiles."""
        tiling = pinet2_kernels.tiling(n_pairs, 1)
        tile, n_tiles, _ = tiling
        key = (n_atoms, tiling)
        if self._work_key != key:
            count = len(self.members)
            size = n_tiles * tile
            self._work = {"arrays": self.members[0].pinet2_work(n_atoms, tiling, members=count), "tile": tile,
                          "pair_i": np.zeros(size, np.int32), "pair_j": np.zeros(size, np.int32),
                          "g_diff": np.zeros((count, size, 3)), "atomic": np.zeros((count, n_atoms), self.dtype),
                          "charge": np.zeros((count, n_atoms), self.dtype),
                          "charge_seed": np.zeros((count, n_atoms), self.dtype)} | self._outputs(n_atoms)
            self._work_key = key
        work = self._work
        work["pair_i"][:n_pairs] = pair_i
        work["pair_j"][:n_pairs] = pair_j
        work["pair_i"][n_pairs:] = 0  # any atom: the kernels read these, and add nothing from them
        work["pair_j"][n_pairs:] = 0
        return work

    def _outputs(self, n_atoms):
        """The kernels' float64 outputs: forces [M, n_atoms, 3], virial [M, 3, 3]."""
        count = len(self.members)
        return {"forces": np.zeros((count, n_atoms, 3)), "virial": np.zeros((count, 3, 3))}


def check_same_kind(members):
    """Refuse a committee whose members differ in cutoff or elements.

    Args:
        members: ``[(name, rc in Å, atom_types)]``.

    Raises:
        ValueError: naming the first member that differs from the first one, and how.
    """
    name0, rc0, types0 = members[0]
    for name, rc, types in members[1:]:
        if sorted(types) != sorted(types0):
            raise ValueError(f"a committee's members must know the same elements: {name} has atom_types "
                             f"{sorted(types)}, {name0} {sorted(types0)}")
        if not np.isclose(rc, rc0, rtol=0, atol=1e-9):
            raise ValueError(f"a committee's members must share the cutoff (one neighbor list for all): {name} has "
                             f"rc {rc:g} Å, {name0} {rc0:g} Å")
