"""Upstream PiNN's ``pinn.layers`` names that scripts call on their own: :class:`CellListNL`.

Upstream PiNN 2.x builds its networks from Keras layers and scripts sometimes use its
neighbor-list layer directly, e.g. to look at the distances of a batch::

    from pinn.layers import CellListNL
    nl = CellListNL(rc=10)({'ind_1': ind_1, 'coord': coord, 'cell': cell})
    nl['dist']  # every pair within 10 Å

In ``pinn`` the networks take the neighbor lists from the input pipeline
(:func:`pinn.io.add_neighbors`) or compute them themselves; this layer gives the same
pairs for a batch by hand, from :func:`pinn.io.batch.batch_pairs`.
"""
import tensorflow as tf

from pinn.io.batch import batch_pairs


class CellListNL(tf.Module):
    """Upstream PiNN's neighbor-list layer: every pair of a sparse batch closer than ``rc``.

    ``CellListNL(rc)(tensors)`` as upstream calls it (a ``tf.Module`` here, not a Keras layer).
    The pairs are those of :func:`pinn.io.neighbors.neighbor_list`, found structure by structure
    with cell lists in NumPy (``tf.numpy_function``); ``diff`` and ``dist`` are computed in
    TensorFlow from ``coord`` and ``cell``, so gradients reach both.

    Args:
        rc: cutoff radius, Å (upstream's default 5.0).
        name: the module's name.

    Raises:
        ValueError: ``rc`` not positive.
    """

    def __init__(self, rc=5.0, name=None):
        super().__init__(name=name)
        if not float(rc) > 0:
            raise ValueError(f"CellListNL: rc must be a positive cutoff radius in Å, got {rc!r}")
        self.rc = float(rc)

    def __call__(self, tensors):
        """The neighbor pairs of a sparse batch.

        Args:
            tensors: dict with ``ind_1`` [n_atoms, 1] int (the structure of each atom; the atoms
                of a structure contiguous and in structure order, as :func:`pinn.io.sparse_batch`
                gives them), ``coord`` [n_atoms, 3] (Å); optionally ``cell`` [n_struct, 3, 3]
                (Å, rows a, b, c; or [3, 3] for a batch of one) and ``pbc`` [n_struct, 3] bool.
                Without ``pbc`` a structure is periodic along a, b and c when its cell is not
                all zeros and open otherwise (upstream's layer takes any batch with ``cell`` as
                periodic); without ``cell`` every structure is open.

        Returns:
            dict: ``ind_2`` [n_pairs, 2] int32, the atom indices (i, j) into ``coord`` (both
            orders of a pair, sorted by structure and i); ``shift`` [n_pairs, 3], the periodic
            image of j in multiples of a, b, c; ``diff`` [n_pairs, 3], r_j + shift·cell − r_i (Å);
            ``dist`` [n_pairs], |diff| (Å), 0 < dist < rc.
        """
        return batch_pairs(tensors, self.rc)


__all__ = ["CellListNL"]
