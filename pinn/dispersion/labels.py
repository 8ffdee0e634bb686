"""D3 taken out of a dataset's labels (``pinn convert --subtract-d3``): a model trained on the result, used with
D3 beside it (:class:`pinn.dispersion.DispersionCorrected`), reproduces the original labels."""
import numpy as np
from ase.calculators.calculator import all_changes

from pinn.dispersion.d3 import D3Term
def d3_parts(term, atoms):
    """The D3 energy (eV), forces [n_atoms, 3] (eV/Å) and, for a periodic structure, stress [3, 3] (eV/Å³,
    ASE's sign; else ``None``) of ``atoms`` by ``term`` (a :class:`D3Term`), in float64."""
    from ase.stress import voigt_6_to_full_3x3_stress
    atoms = atoms.copy()
    atoms.calc = term
    properties = ["energy", "forces"] + (["stress"] if atoms.pbc.any() else [])
    term.calculate(atoms, properties, all_changes)
    stress = term.results.get("stress")
    return (float(term.results["energy"]), np.array(term.results["forces"], dtype=np.float64),
            None if stress is None else voigt_6_to_full_3x3_stress(stress))


def subtract_d3(dataset, dispersion, functional, source="the dataset"):
    """``dataset`` with D3 taken out of its labels: a model trained on the result plus D3
    (``get_calc(model, dispersion=..., functional=...)``) reproduces the original labels.

    Args:
        dataset: a ``tf.data.Dataset`` of single structures (pinn's keys, eV and Å: as ``load_ase``
            gives) with ``e_data``, ``f_data`` and/or ``s_data``.
        dispersion, functional: the D3 variant and the labels' functional (see :func:`check_d3`).
        source: what the data are, for error messages (e.g. the file names).

    Returns:
        A ``tf.data.Dataset`` with the same keys, dtypes and shapes: ``e_data`` − E_D3, ``f_data`` −
        F_D3, ``s_data`` − σ_D3 (computed in float64, then cast to the labels' dtype); every other key
        as it was.

    Raises:
        ValueError: no energy, forces or stress labels; QM/MM frames (``qm``: a QM region's D3 in its MM
            environment is not the whole frame's); an unknown D3 variant or functional.
        pinn.io.base.DataError: while iterating, a stress label on a structure that is not periodic
            (naming its index).
    """
    import tensorflow as tf

    from pinn import keys as K
    from pinn.io.base import DataError
    spec = dataset.element_spec
    labels = [key for key in (K.E_DATA, K.F_DATA, K.S_DATA) if key in spec]
    if not labels:
        raise ValueError(f"{source}: no energy, forces or stress labels to take D3 out of")
    if K.QM in spec:
        raise ValueError(f"{source}: QM/MM frames; D3 of the whole frame is not the QM region's, so "
                         "--subtract-d3 does not apply (take it out in the QM code's output instead)")
    if spec[K.ELEMS].shape.rank != 1:
        raise ValueError(f"{source}: batched structures; take D3 out of single structures, before batching")
    term = D3Term(dispersion, functional)

    def structures():
        from ase import Atoms
        for index, structure in enumerate(dataset.as_numpy_iterator()):
            cell = structure.get(K.CELL, np.zeros((3, 3)))
            pbc = structure.get(K.PBC, np.zeros(3, bool))
            atoms = Atoms(numbers=structure[K.ELEMS], positions=structure[K.COORD], cell=cell, pbc=pbc)
            energy, forces, stress = d3_parts(term, atoms)
            if K.S_DATA in structure and stress is None:
                raise DataError(f"{source}, structure {index}: a stress label on a structure that is not "
                                "periodic; D3 has no stress to take out of it")
            parts = {K.E_DATA: energy, K.F_DATA: forces, K.S_DATA: stress}
            for key in labels:
                value = structure[key]
                structure[key] = (value.astype(np.float64) - parts[key]).astype(value.dtype)
            yield structure

    return tf.data.Dataset.from_generator(structures, output_signature=spec)
