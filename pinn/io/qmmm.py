"""QM/MM frames (docs/qmmm.md): read a frame's QM region and MM point charges from ASE, and keep the QM
region alone for a model with mechanical embedding.

The convention: one structure of all atoms; per atom ``qm`` (True: QM region), ``mm_charge`` (e, the MM
atoms' point charges; 0 on the QM atoms); per structure ``qm_charge`` (e, the QM region's total charge);
``e_data`` the QM region's energy in the field of the MM charges (eV) and ``f_data`` the forces on every
atom (eV/Å).  In ASE: the per-atom bool array ``qm`` (extxyz ``qm:L:1``), ``initial_charges`` and
``info["charge"]``.
"""
import numpy as np
import tensorflow as tf

from pinn import keys as K
from pinn.io.errors import DataError

#: the name of the per-atom array of the QM region in ASE frames (and in extxyz files: ``qm:L:1``)
ASE_QM_ARRAY = "qm"


def qmmm_arrays(atoms, source):
    """The QM/MM keys of an ``ase.Atoms`` in pinn's convention, or ``{}`` for a frame without a ``qm`` array.

    Args:
        atoms: ``ase.Atoms``; ``atoms.arrays["qm"]`` (bool per atom) marks the QM region, the MM atoms' point
            charges (e) are its ``initial_charges``, ``atoms.info["charge"]`` the region's total charge (e;
            0 when absent).
        source: the file and frame, for error messages.

    Returns:
        dict with ``qm`` ([n] bool), ``mm_charge`` ([n] float, e; the QM atoms' entries 0) and ``qm_charge``
        ([] float, e), or ``{}``.

    Raises:
        DataError: naming ``source``: a ``qm`` array that is not one bool (or 0/1) per atom, no QM atom, MM
            atoms without ``initial_charges``, a non-numeric or non-finite region charge.
    """
    if ASE_QM_ARRAY not in atoms.arrays:
        return {}
    raw = np.asarray(atoms.arrays[ASE_QM_ARRAY])
    if raw.shape != (len(atoms),) or not (raw.dtype == bool or np.all(np.isin(raw, (0, 1)))):
        raise DataError(f"{source}: the per-atom array 'qm' must be one bool (or 0/1) per atom, got dtype "
                        f"{raw.dtype} and shape {raw.shape}")
    qm = raw.astype(bool)
    if not qm.any():
        raise DataError(f"{source}: its 'qm' array marks no atom as QM")
    if not qm.all() and "initial_charges" not in atoms.arrays:
        raise DataError(f"{source}: {int((~qm).sum())} MM atom(s) (qm False) but no point charges: give the MM "
                        "charges (e) as the frame's initial_charges (extxyz: initial_charges:R:1)")
    charges = np.asarray(atoms.get_initial_charges(), dtype=float)
    region_charge = atoms.info.get("charge", 0)
    try:
        region_charge = float(region_charge)
    except (TypeError, ValueError):
        raise DataError(f"{source}: info['charge'] (the QM region's total charge) is {region_charge!r}, "
                        "not a number") from None
    if not np.isfinite(region_charge):
        raise DataError(f"{source}: info['charge'] (the QM region's total charge) is {region_charge}")
    return {K.QM: qm, K.MM_CHARGE: np.where(qm, 0.0, charges), K.QM_CHARGE: region_charge}


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
