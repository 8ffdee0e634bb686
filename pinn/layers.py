"""Upstream PiNN's ``pinn.layers`` names that scripts call on their own: :class:`CellListNL`.

Upstream PiNN 2.x builds its networks from Keras layers and scripts sometimes use its
neighbor-list layer directly, e.g. to look at the distances of a batch::

    from pinn.layers import CellListNL
    nl = CellListNL(rc=10)({'ind_1': ind_1, 'coord': coord, 'cell': cell})
    nl['dist']  # every pair within 10 Å

In ``pinn`` the networks take the neighbor lists from the input pipeline
(:func:`pinn.io.add_neighbors`) or compute them themselves; this layer gives the same
pairs for a batch by hand, from :func:`pinn.io.neighbors.batch_neighbor_list`.
"""
import tensorflow as tf

from pinn import keys as K
from pinn.io.neighbors import batch_neighbor_list
from pinn.models.potential import pair_geometry


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
        coord = tf.convert_to_tensor(tensors[K.COORD])
        ind_1 = tf.cast(tf.reshape(tensors[K.IND_1], [-1, 1]), tf.int32)
        if K.CELL in tensors:
            cell = tf.reshape(tf.cast(tensors[K.CELL], coord.dtype), [-1, 3, 3])
        else:
            n_struct = tf.maximum(tf.reduce_max(ind_1) + 1, 0)  # 0 for a batch without atoms
            cell = tf.zeros([n_struct, 3, 3], coord.dtype)
        if K.PBC in tensors:
            pbc = tf.reshape(tf.cast(tensors[K.PBC], tf.bool), [-1, 3])
        else:
            has_cell = tf.reduce_any(tf.not_equal(cell, 0), axis=[1, 2])
            pbc = tf.tile(has_cell[:, None], [1, 3])
        rc = self.rc

        def pairs(c, cl, p, i1):
            ind_2, shift = batch_neighbor_list(c, cl, p, i1, rc)
            return ind_2.astype("int32"), shift.astype(c.dtype)

        ind_2, shift = tf.numpy_function(pairs, [coord, cell, pbc, ind_1], (tf.int32, coord.dtype), stateful=False)
        batch = {K.COORD: coord, K.CELL: cell, K.IND_1: ind_1,
                 K.IND_2: tf.ensure_shape(ind_2, (None, 2)), K.SHIFT: tf.ensure_shape(shift, (None, 3))}
        batch = pair_geometry(batch)
        return {key: batch[key] for key in (K.IND_2, K.SHIFT, K.DIFF, K.DIST)}


__all__ = ["CellListNL"]
