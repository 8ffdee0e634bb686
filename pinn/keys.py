"""Data keys and units: the one place where they are declared.

Every loader produces dicts with these keys and every model consumes them;
use the constants, never string literals, elsewhere in the package.

Internal units: length Å, energy eV, forces eV/Å, stress eV/Å³, charge e,
dipole e·Å.  Readers convert on the way in; the ASE calculator hands ASE the
same units ASE uses (eV, Å), so no conversion happens anywhere else.

Per structure (unbatched) and in a sparse batch (see :func:`pinn.io.sparse_batch`):

================  ============================  ==================================================
key               shape, dtype                  meaning
================  ============================  ==================================================
``elems``         [n_atoms] int32               atomic numbers
``coord``         [n_atoms, 3] float            positions, Å
``cell``          [3, 3] float (batch: [n,3,3]) rows are lattice vectors a, b, c, Å; zeros if none
``pbc``           [3] bool (batch: [n, 3])      periodic along a, b, c
``e_data``        [] float (batch: [n])         reference energy, eV
``f_data``        [n_atoms, 3] float            reference forces, eV/Å
``s_data``        [3, 3] float (batch: [n,3,3]) reference stress, eV/Å³ (ASE sign convention)
``d_data``        [3] float (batch: [n, 3])     reference dipole, e·Å
``q_data``        [n_atoms] float               reference partial charges, e
``ind_1``         [n_atoms, 1] int32            structure index of each atom in a sparse batch
``ind_2``         [n_pairs, 2] int32            atom indices (i, j) of each neighbor pair
``shift``         [n_pairs, 3] float            periodic image of j as integer multiples of a, b, c
``diff``          [n_pairs, 3] float            r_j + shift·cell − r_i, Å
``dist``          [n_pairs] float               |diff|, Å
``real``          batch: [n_struct] bool        False for the padding structure of a padded batch
                                                (:mod:`pinn.io.padding`); absent: all are real
``e_weight``      [] float (batch: [n])         weight of the structure's energy in the loss
                                                (``use_e_weight``), dimensionless
``f_weight``      [n_atoms] float               weight of the atom's force in the loss
                                                (``use_f_weight``), dimensionless
``qm``            [n_atoms] bool                QM/MM frames: True for an atom of the QM region,
                                                False for an MM atom (docs/qmmm.md)
``mm_charge``     [n_atoms] float               QM/MM frames: the point charge of an MM atom, e
                                                (0 on the QM atoms)
``qm_charge``     [] float (batch: [n])         QM/MM frames: the QM region's total charge, e
================  ============================  ==================================================

A QM/MM frame's ``e_data`` is the QM region's energy in the field of the MM charges and its ``f_data``
holds the forces on every atom (on the MM atoms the QM region's pull on their charges).
"""

ELEMS = "elems"
COORD = "coord"
CELL = "cell"
PBC = "pbc"
E_DATA = "e_data"
F_DATA = "f_data"
S_DATA = "s_data"
D_DATA = "d_data"
Q_DATA = "q_data"
IND_1 = "ind_1"
IND_2 = "ind_2"
SHIFT = "shift"
DIFF = "diff"
DIST = "dist"
REAL = "real"
E_WEIGHT = "e_weight"
F_WEIGHT = "f_weight"
QM = "qm"
MM_CHARGE = "mm_charge"
QM_CHARGE = "qm_charge"

#: keys with one row per atom (concatenated in a sparse batch)
ATOMIC_KEYS = (ELEMS, COORD, F_DATA, Q_DATA, F_WEIGHT, QM, MM_CHARGE)
#: keys with one value per structure (stacked in a sparse batch)
STRUCTURE_KEYS = (CELL, PBC, E_DATA, S_DATA, D_DATA, E_WEIGHT, QM_CHARGE)
#: keys with one row per neighbor pair (concatenated, indices offset)
PAIR_KEYS = (IND_2, SHIFT)
#: label keys a loader may provide
LABEL_KEYS = (E_DATA, F_DATA, S_DATA, D_DATA, Q_DATA)
#: the keys of a QM/MM frame's region and environment (inputs, not labels)
QMMM_KEYS = (QM, MM_CHARGE, QM_CHARGE)

#: per-structure shape (without the batch dimension) of every known key
SHAPES = {
    ELEMS: (None,), COORD: (None, 3), CELL: (3, 3), PBC: (3,),
    E_DATA: (), F_DATA: (None, 3), S_DATA: (3, 3), D_DATA: (3,), Q_DATA: (None,),
    IND_2: (None, 2), SHIFT: (None, 3), E_WEIGHT: (), F_WEIGHT: (None,),
    QM: (None,), MM_CHARGE: (None,), QM_CHARGE: (),
}
#: dtype names of every known key ("float" follows the dataset precision)
DTYPES = {
    ELEMS: "int32", PBC: "bool", IND_1: "int32", IND_2: "int32", QM: "bool",
}


def dtype_of(key, float_dtype="float32"):
    """Return the dtype name of ``key``: its declared integer/bool type or ``float_dtype``."""
    return DTYPES.get(key, float_dtype)
