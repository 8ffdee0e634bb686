"""Per-element energy offsets (``e_dress``) fitted by least squares to the energies of a dataset.

Solves min ||C x − E|| with C the element counts per structure (the potential model passes the
energies minus the untrained network's prediction, so the network learns only what the offsets
cannot explain), through the normal equations CᵀC x = CᵀE: their sums over ranks give every rank
the fit to all ranks' structures.  Elements that always appear in fixed proportions get the
minimum-norm split (pseudo-inverse).  NumPy only.
"""
import logging

import numpy as np

from pinn import keys as K


def fit_offsets(batches, atom_types, reduce=None):
    """The least-squares offset of every element (eV).

    Args:
        batches: list of NumPy batch dicts with ``elems``, ``ind_1`` and ``e_data`` (eV); structures
            whose energy is not finite are left out (with a warning).
        atom_types: the atomic numbers, in the order of the result.
        reduce: function summing a float64 array over ranks (``None``: one process).

    Returns:
        float64 array [len(atom_types)]: the offset of each element (eV).
    """
    atom_types = [int(z) for z in atom_types]
    table = np.full(max(atom_types) + 1, -1)
    table[atom_types] = np.arange(len(atom_types))
    n_types = len(atom_types)
    normal = np.zeros((n_types, n_types + 2))  # [CᵀC | CᵀE | structures without a finite energy]
    for b in batches:
        idx = table[b[K.ELEMS]]
        struct = b[K.IND_1][:, 0]
        counts = np.zeros((len(b[K.E_DATA]), n_types))
        np.add.at(counts, (struct, idx), 1.0)
        energies = np.asarray(b[K.E_DATA], np.float64)
        finite = np.isfinite(energies)  # a NaN label would make every offset NaN
        normal[:, :-1] += counts[finite].T @ np.column_stack([counts[finite], energies[finite]])
        normal[0, -1] += np.sum(~finite)
    if reduce is not None:
        normal = reduce(normal)
    if normal[0, -1]:
        logging.getLogger("pinn").warning("fit of e_dress: %d structure(s) without a finite energy left out",
                                          int(normal[0, -1]))
    return np.linalg.pinv(normal[:, :n_types], rcond=1e-12, hermitian=True) @ normal[:, n_types]
