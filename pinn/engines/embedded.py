"""The electrostatic embedding on the Numba engine (MD): a QM region's PiNet energy and charges from
:class:`pinn.engines.md.FastPiNet`, the Coulomb energy of those charges with the MM charges in NumPy.

What :meth:`pinn.physics.potential.PotentialModel.predict` computes with ``embedding: electrostatic``
(:mod:`pinn.physics.embedding`), for one QM/MM structure:

    E = E_net(QM) + Σ_a q_a φ_a,   φ_a = k_e Σ_m Q_m v(|r_m − r_a|),   q = q̃ − mean(q̃) + Q_region / n_QM

Forces: the network's pairs carry ∂E_net/∂r and Σ_a (φ_a − φ̄) ∂q̃_a/∂r (the kernels' backward pass seeded with
φ − φ̄ on the charge output); the Coulomb term at fixed charges adds −∂(Σ q_a φ_a)/∂r on QM and MM atoms.
φ depends on the positions and the MM charges alone, so a committee's members share it and its seed, and
run in one kernel call (:class:`FastEmbeddedCommittee`).  NumPy only (no TensorFlow).
"""
import numpy as np

from pinn.units import COULOMB


def kernel_and_slope(r, damping):
    """(v(r), dv/dr) of :func:`pinn.physics.embedding.coulomb_kernel` (1/Å, 1/Å²)."""
    if not damping:
        return 1.0 / r, -1.0 / (r * r)
    a = float(damping)
    top = a ** 3 + a * a * r + a * r * r + r ** 3
    bottom = a ** 4 + a ** 3 * r + a * a * r * r + a * r ** 3 + r ** 4
    d_top = a * a + 2 * a * r + 3 * r * r
    d_bottom = a ** 3 + 2 * a * a * r + 3 * a * r * r + 4 * r ** 3
    return top / bottom, (d_top * bottom - top * d_bottom) / (bottom * bottom)


class MMField:
    """The MM charges' field at the QM atoms of one QM/MM structure, and the Coulomb term of the QM charges in it.

    Args:
        coord: [n, 3] positions (Å).
        qm: [n] bool, the QM atoms.
        mm_charge: [n] the MM atoms' charges (e; the QM entries ignored).
        cell, pbc: the cell and periodicity (QM–MM vectors in the minimum image when periodic).
        damping: ``model.params.embedding_damping`` (Å; 0: bare 1/r).

    Attributes:
        qm_index, mm_index: the QM and the MM atoms' indices.
        phi: [n_qm] the MM charges' potential at each QM atom (eV/e).
    """

    def __init__(self, coord, qm, mm_charge, cell, pbc, damping):
        coord = np.asarray(coord, np.float64)
        qm = np.asarray(qm, bool)
        self.n_atoms = len(coord)
        self.qm_index = np.flatnonzero(qm)
        self.mm_index = np.flatnonzero(~qm)
        self.mm_charge = np.asarray(mm_charge, np.float64)
        charges_mm = self.mm_charge[self.mm_index]
        vectors = coord[self.mm_index][None, :, :] - coord[self.qm_index][:, None, :]  # [n_qm, n_mm, 3], QM → MM
        if pbc is not None and np.any(pbc):
            cell = np.asarray(cell, np.float64)
            fractional = vectors @ np.linalg.inv(cell)
            vectors = vectors - (np.round(fractional) * np.asarray(pbc, bool)) @ cell
        r = np.linalg.norm(vectors, axis=2)
        v, slope = kernel_and_slope(r, damping)
        self.phi = COULOMB * v @ charges_mm  # [n_qm], eV/e
        self._vectors = vectors
        self._pull = COULOMB * charges_mm[None, :] * slope / r  # [n_qm, n_mm]: dE/dr_m per unit q_a, over |r|

    @property
    def seed(self):
        """∂E/∂q̃ of the network's raw charges (eV/e): φ − φ̄ (their mean is taken out with the region's charge)."""
        return self.phi - self.phi.mean()

    def complete(self, energy, forces, raw, qm_charge):
        """The structure's energy, forces and charges from M networks' outputs on the QM atoms.

        Args:
            energy: [M] the networks' energies (eV).
            forces: [M, n_qm, 3] their forces, with the seed's term (eV/Å).
            raw: [M, n_qm] their raw charges q̃ (e).
            qm_charge: the region's charge (e).

        Returns:
            (energy [M] eV, forces [M, n, 3] eV/Å on every atom, charges [M, n] e: the QM atoms' q, the MM
            atoms' own), float64.
        """
        raw = np.asarray(raw, np.float64)
        q = raw - raw.mean(axis=1, keepdims=True) + float(qm_charge) / len(self.qm_index)
        weights = q[:, :, None] * self._pull[None]  # [M, n_qm, n_mm]
        count = len(q)
        total = np.zeros((count, self.n_atoms, 3))
        total[:, self.qm_index] = forces + np.einsum("man,anx->max", weights, self._vectors)
        total[:, self.mm_index] = -np.einsum("man,anx->mnx", weights, self._vectors)
        charges = np.tile(self.mm_charge, (count, 1))
        charges[:, self.qm_index] = q
        return np.asarray(energy, np.float64) + q @ self.phi, total, charges


class FastEmbeddedPiNet:
    """A QM/MM structure's energy, forces and charges on the Numba engine.

    Args:
        fast: a :class:`pinn.engines.md.FastPiNet` of a network with two outputs per atom.
        damping: ``model.params.embedding_damping`` (Å; 0: bare 1/r).
    """

    def __init__(self, fast, damping=0.0):
        if fast.outputs != 2:
            raise ValueError(f"FastEmbeddedPiNet: the network has {fast.outputs} output(s) per atom; the electrostatic "
                             "embedding reads two (energy, charge)")
        self.fast = fast
        self.damping = float(damping)

    def __call__(self, numbers, coord, qm, mm_charge, qm_charge, cand_i, cand_j, cand_offset, cell=None, pbc=None):
        """Energy, forces on every atom and charges of one QM/MM structure.

        Args:
            numbers: [n] atomic numbers (the QM atoms' in the model's ``atom_types``).
            coord: [n, 3] positions (Å).
            qm: [n] bool, the QM atoms.
            mm_charge: [n] the MM atoms' charges (e; the QM entries ignored).
            qm_charge: the region's charge (e).
            cand_i, cand_j, cand_offset: candidate pairs among the QM atoms, numbered among them (a Verlet list
                of the QM positions).
            cell, pbc: the cell and periodicity (QM–MM vectors in the minimum image when periodic).

        Returns:
            dict with ``energy`` (eV), ``forces`` [n, 3] (eV/Å) and ``charges`` [n] (e: the QM atoms' predicted,
            the MM atoms' own), float64.
        """
        field = MMField(coord, qm, mm_charge, cell, pbc, self.damping)
        region = field.qm_index
        coord = np.asarray(coord, np.float64)
        out = self.fast(np.asarray(numbers)[region], coord[region], cand_i, cand_j, cand_offset, cell, pbc,
                        charge_seed=field.seed)
        energy, forces, charges = field.complete([out["energy"]], out["forces"][None], out["charges_raw"][None],
                                                 qm_charge)
        return {"energy": float(energy[0]), "forces": forces[0], "charges": charges[0]}


class FastEmbeddedCommittee:
    """A committee of electrostatically embedded PiNet (or PiNet2) potentials on the Numba engine: the MM field
    once, one neighbor search of the QM atoms, the members in one kernel call where they share a layout
    (:class:`pinn.engines.committee.FastCommittee`, seeded with the field they share).

    Args:
        committee: the :class:`~pinn.engines.committee.FastCommittee` of the members' engines (two outputs per
            atom each).
        damping: ``model.params.embedding_damping`` (Å), the members' (they must share it).
    """

    def __init__(self, committee, damping=0.0):
        wrong = [k for k, m in enumerate(committee.members) if m.outputs != 2]
        if wrong:
            raise ValueError(f"FastEmbeddedCommittee: member {wrong[0]}'s network has one output per atom; the "
                             "electrostatic embedding reads two (energy, charge)")
        self.committee = committee
        self.damping = float(damping)

    def __call__(self, numbers, coord, qm, mm_charge, qm_charge, cand_i, cand_j, cand_offset, cell=None, pbc=None,
                 members=None):
        """Every member's energy, forces on every atom and charges of one QM/MM structure (the arguments as
        :meth:`FastEmbeddedPiNet.__call__`; ``members``: the indices of the members to evaluate, default all).

        Returns:
            dict with ``energy`` [M] (eV), ``forces`` [M, n, 3] (eV/Å) and ``charges`` [M, n] (e), float64.
        """
        field = MMField(coord, qm, mm_charge, cell, pbc, self.damping)
        region = field.qm_index
        coord = np.asarray(coord, np.float64)
        out = self.committee(np.asarray(numbers)[region], coord[region], cand_i, cand_j, cand_offset, cell, pbc,
                             members=members, charge_seed=field.seed)
        energy, forces, charges = field.complete(out["energy"], out["forces"], out["charges_raw"], qm_charge)
        return {"energy": energy, "forces": forces, "charges": charges}
