"""A committee of PiNet (or PiNet2) potentials on the Numba engine: one neighbor search, every member on its pairs.

:class:`FastCommittee` finds the pairs within the cutoff once (the first member's
:meth:`~pinn.engines.md.FastPiNet.__call__`) and evaluates the other members on the same pairs
(:meth:`~pinn.engines.md.FastPiNet.on_pairs`), so a committee of M costs one neighbor search and
M network evaluations.  The members must share the cutoff and the elements.
"""
import numpy as np


class FastCommittee:
    """Energies, forces and virials of every member of a committee, from one neighbor search.

    Args:
        members: :class:`~pinn.engines.md.FastPiNet` engines of the same cutoff and elements.
        names: what to call each member in errors (default ``member 0``, ``member 1``, …).

    Raises:
        ValueError: no members, or members whose cutoff or elements differ (naming them).
    """

    def __init__(self, members, names=None):
        self.members = list(members)
        if not self.members:
            raise ValueError("a committee needs at least one member")
        names = list(names) if names is not None else [f"member {k}" for k in range(len(self.members))]
        check_same_kind([(name, m.rc, m.atom_types) for name, m in zip(names, self.members)])
        self.rc = self.members[0].rc
        self.atom_types = self.members[0].atom_types
        self._pairs_key = None  # (member 0's call count, numbers, positions, cell) of its pairs

    def __call__(self, numbers, coord, cand_i, cand_j, cand_offset, cell=None, pbc=None, members=None):
        """Every member's predictions for one structure (see :meth:`pinn.engines.md.FastPiNet.__call__`
        for the arguments).

        Args:
            members: the indices of the members to evaluate, in order (default: all).  Without member
                0, the pairs of member 0's last call are reused when that call was this committee's,
                for the same numbers, positions and cell (else member 0 finds them again, its
                prediction left out).

        Returns:
            dict with ``energy`` [M] (eV), ``forces`` [M, n_atoms, 3] (eV/Å), ``virial`` [M, 3, 3] (eV)
            and, for a periodic cell, ``stress`` [M, 3, 3] (eV/Å³), float64, for the M members asked for.
        """
        members = range(len(self.members)) if members is None else list(members)
        first = self.members[0]
        outs = []
        if 0 in members or not self._pairs_current(numbers, coord, cell):
            out0 = first(numbers, coord, cand_i, cand_j, cand_offset, cell, pbc)
            self._pairs_key = (first.calls, np.array(numbers), np.array(coord, np.float64),
                               None if cell is None else np.array(cell, np.float64))
        pairs = first.pairs()
        for k in members:
            outs.append(out0 if k == 0 else self.members[k].on_pairs(numbers, *pairs, cell, pbc))
        result = {"energy": np.array([o["energy"] for o in outs]),
                  "forces": np.stack([o["forces"] for o in outs]),
                  "virial": np.stack([o["virial"] for o in outs])}
        if "stress" in outs[0]:
            result["stress"] = np.stack([o["stress"] for o in outs])
        return result

    def _pairs_current(self, numbers, coord, cell):
        """Whether member 0's pairs are of this structure, from this committee's last call."""
        key = self._pairs_key
        return (key is not None and key[0] == self.members[0].calls and np.array_equal(key[1], numbers)
                and np.array_equal(key[2], coord)
                and (key[3] is None if cell is None else key[3] is not None and np.array_equal(key[3], cell)))


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
