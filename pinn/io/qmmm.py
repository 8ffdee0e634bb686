"""QM/MM frames (docs/qmmm.md) as datasets: whether a dataset holds them, and the QM region alone for a model
with mechanical embedding (their ASE side: :mod:`pinn.io.qmmm_atoms`).

The convention: one structure of all atoms; per atom ``qm`` (True: QM region), ``mm_charge`` (e, the MM
atoms' point charges; 0 on the QM atoms); per structure ``qm_charge`` (e, the QM region's total charge);
``e_data`` the QM region's energy in the field of the MM charges (eV) and ``f_data`` the forces on every
atom (eV/Å).  In ASE: the per-atom bool array ``qm`` (extxyz ``qm:L:1``), ``initial_charges`` and
``info["charge"]``.
"""
import tensorflow as tf

from pinn import keys as K
from pinn.io.errors import DataError

def is_qmmm(element_spec):
    """Whether a dataset's elements (their ``element_spec``: a dict of specs) are QM/MM frames."""
    return isinstance(element_spec, dict) and K.QM in element_spec


def qm_region():
    """A dataset transform (``dataset.apply(qm_region())``) that keeps the QM region of QM/MM frames alone:
    the QM atoms' rows of every per-atom key (forces included), the structure's other keys, and none of the
    QM/MM keys.  What a model with mechanical embedding sees: the QM atoms in vacuum against the region's
    energy in its environment (the environment's effect is then left for the model to miss).  Apply it
    before ``add_neighbors``, to single structures (not batches).

    Returns:
        A function of a ``tf.data.Dataset``; a dataset without ``qm`` passes unchanged.
    """
    def transform(dataset):
        if not is_qmmm(dataset.element_spec):
            return dataset
        if K.IND_1 in dataset.element_spec or K.IND_2 in dataset.element_spec:
            raise DataError("qm_region(): apply it to single structures, before add_neighbors and sparse_batch")
        return dataset.map(_crop, num_parallel_calls=tf.data.AUTOTUNE)
    return transform


@tf.autograph.experimental.do_not_convert
def _crop(structure):
    keep = structure[K.QM]
    out = {}
    for key, value in structure.items():
        if key in K.QMMM_KEYS:
            continue
        out[key] = tf.boolean_mask(value, keep) if key in K.ATOMIC_KEYS else value
    return out
