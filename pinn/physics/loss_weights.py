"""Weights in the loss: which structures and atoms count (padding does not), and loss-term
weights that follow a schedule over the steps (``model.params.loss_weight_schedule``), and a
random choice of force components (``no_force_comp``)."""
import tensorflow as tf

from pinn import keys as K


def structure_weights(tensors, dtype):
    """[n_struct] of ``dtype``: 1 for the batch's structures, 0 for the padding structure of a
    padded batch (``real`` key, see :mod:`pinn.io.padding`)."""
    if K.REAL in tensors:
        return tf.cast(tensors[K.REAL], dtype)
    return tf.ones([tf.shape(tensors[K.CELL])[0]], dtype)


def atom_weights(tensors, dtype):
    """[n_atoms] of ``dtype``: 1 for the atoms of real structures, 0 for padding atoms."""
    if K.REAL in tensors:
        return tf.gather(tf.cast(tensors[K.REAL], dtype), tensors[K.IND_1][:, 0])
    return tf.ones([tf.shape(tensors[K.ELEMS])[0]], dtype)


def piecewise_linear(x, points):
    """Linear interpolation through ``points`` [[x0, y0], [x1, y1], ...] (x increasing), constant outside.

    Args:
        x: float64 scalar tensor.
        points: list of [x, y] pairs.

    Returns:
        float64 scalar tensor.
    """
    value = tf.constant(float(points[0][1]), tf.float64)
    for (x0, y0), (x1, y1) in zip(points[:-1], points[1:]):
        value += (float(y1) - float(y0)) * tf.clip_by_value((x - float(x0)) / max(float(x1) - float(x0), 1e-12),
                                                            0.0, 1.0)
    return value


def check_weight_schedule(value):
    """Params check of ``loss_weight_schedule``: {term: [[step, weight], ...]} with increasing steps."""
    for term, points in value.items():
        if not isinstance(points, list) or not points or not all(
                isinstance(p, (list, tuple)) and len(p) == 2 and all(isinstance(v, (int, float)) for v in p)
                for p in points):
            return f"{term}: expected a non-empty list of [step, weight] pairs"
        steps = [p[0] for p in points]
        if steps != sorted(steps) or len(set(steps)) != len(steps):
            return f"{term}: steps must increase"
        if any(p[1] < 0 for p in points):
            return f"{term}: weights must not be negative"
    return None


def drawn(tensors, candidates, k):
    """[len(candidates)] 0/1: ``k`` of the non-zero ``candidates`` drawn at random (all when fewer).

    The draw is seeded by the batch's content (its number of atoms and the bits of its summed
    coordinates), so the counts and the sums of one batch draw the same components and another
    batch draws others."""
    coord = tf.cast(tensors[K.COORD], tf.float32)
    seed = tf.stack([tf.shape(coord)[0], tf.bitcast(tf.reduce_sum(coord * 1.618034), tf.int32)])
    score = tf.random.stateless_uniform(tf.shape(candidates), seed, dtype=tf.float32)
    score = tf.where(candidates > 0, score, -tf.ones_like(score))
    ranked = tf.sort(tf.concat([score, [-2.0]], 0), direction="DESCENDING")  # -2: below every candidate
    threshold = tf.gather(ranked, tf.minimum(k, tf.size(score)) - 1) if k > 0 else tf.constant(2.0)
    return tf.cast(tf.logical_and(score >= threshold, candidates > 0), candidates.dtype)
