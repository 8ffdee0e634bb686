"""The electrostatic embedding on the Numba engine (MD): a QM region's PiNet energy and charges from
:class:`pinn.engines.md.FastPiNet`, the Coulomb energy of those charges with the MM charges in NumPy.

What :meth:`pinn.physics.potential.PotentialModel.predict` computes with ``embedding: electrostatic``
(:mod:`pinn.physics.embedding`), for one QM/MM structure:

    E = E_net(QM) + Σ_a q_a φ_a,   φ_a = k_e Σ_m Q_m v(|r_m − r_a|),   q = q̃ − mean(q̃) + Q_region / n_QM

Forces: the network's pairs carry ∂E_net/∂r and Σ_a (φ_a − φ̄) ∂q̃_a/∂r (the kernels' backward pass seeded with
φ − φ̄ on the charge output); the Coulomb term at fixed charges adds −∂(Σ q_a φ_a)/∂r on QM and MM atoms.
NumPy only (no TensorFlow).
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
        coord = np.asarray(coord, np.float64)
        qm = np.asarray(qm, bool)
        qm_index = np.flatnonzero(qm)
        mm_index = np.flatnonzero(~qm)
        charges_mm = np.asarray(mm_charge, np.float64)[mm_index]
        vectors = coord[mm_index][None, :, :] - coord[qm_index][:, None, :]  # [n_qm, n_mm, 3], QM → MM
        if pbc is not None and np.any(pbc):
            cell = np.asarray(cell, np.float64)
            fractional = vectors @ np.linalg.inv(cell)
            vectors = vectors - (np.round(fractional) * np.asarray(pbc, bool)) @ cell
        r = np.linalg.norm(vectors, axis=2)
        v, slope = kernel_and_slope(r, self.damping)
        phi = COULOMB * v @ charges_mm  # [n_qm], eV/e
        out = self.fast(numbers[qm_index], coord[qm_index], cand_i, cand_j, cand_offset, cell, pbc,
                        charge_seed=phi - phi.mean())
        raw = out["charges_raw"]
        q = raw - raw.mean() + float(qm_charge) / len(qm_index)
        pull = COULOMB * (q[:, None] * charges_mm[None, :] * slope / r)[:, :, None] * vectors  # dE/d r_m per pair
        forces = np.zeros_like(coord)
        forces[qm_index] = out["forces"] + pull.sum(axis=1)
        forces[mm_index] = -pull.sum(axis=0)
        charges = np.asarray(mm_charge, np.float64).copy()
        charges[qm_index] = q
        return {"energy": out["energy"] + float(q @ phi), "forces": forces, "charges": charges}
