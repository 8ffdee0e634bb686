"""Building blocks shared by the networks: dense layers, cutoff and radial basis functions.

Everything is a ``tf.Module`` holding plain ``tf.Variable``s (no Keras
layers), initialised from a NumPy random state so that a given seed gives the
same weights on every process and every TensorFlow version.
"""
import contextlib
import contextvars

import numpy as np
import tensorflow as tf

from pinn.schema import ParamsError

#: the top-level ``precision`` key: the dtype of the weights (and of everything but the layers' matrix
#: products), and the dtype those products are computed in (``None``: the weights')
PRECISIONS = {"float32": (tf.float32, None), "float64": (tf.float64, None),
              "mixed_bfloat16": (tf.float32, tf.bfloat16), "mixed_float16": (tf.float32, tf.float16)}
_COMPUTE_DTYPE = contextvars.ContextVar("pinn_compute_dtype", default=None)


def precision_dtypes(precision):
    """``(weights' dtype, matrix products' dtype or None)`` of a ``precision`` (see :data:`PRECISIONS`)."""
    try:
        return PRECISIONS[precision]
    except KeyError:
        raise ParamsError(f"precision: {precision!r}; one of {', '.join(PRECISIONS)}") from None


@contextlib.contextmanager
def computing_in(dtype):
    """Layers made inside compute their matrix products in ``dtype`` (``None``: their weights' dtype):
    mixed precision.  Their weights, inputs and outputs keep their own dtype."""
    token = _COMPUTE_DTYPE.set(None if dtype is None else tf.as_dtype(dtype))
    try:
        yield
    finally:
        _COMPUTE_DTYPE.reset(token)


def compute_dtype():
    """The dtype layers made now compute their matrix products in (``None``: their weights')."""
    return _COMPUTE_DTYPE.get()


def mixed_matmul(x, kernel, dtype):
    """``x @ kernel`` computed in ``dtype`` (``None``: as they are), returned in ``x``'s dtype."""
    if dtype is None:
        return tf.matmul(x, kernel)
    return tf.cast(tf.matmul(tf.cast(x, dtype), tf.cast(kernel, dtype)), x.dtype)

ACTIVATIONS = {
    "tanh": tf.tanh,
    "ssp": lambda x: tf.nn.softplus(x) - tf.math.log(tf.constant(2.0, x.dtype)),
    "softplus": tf.nn.softplus,
    "swish": tf.nn.silu,
    "silu": tf.nn.silu,
    "relu": tf.nn.relu,
    "linear": tf.identity,
}


class Dense(tf.Module):
    """``y = act(x W + b)`` with Glorot-uniform ``W`` and zero ``b``; ``x W`` in the compute dtype of
    its making (:func:`computing_in`), the rest in the weights' dtype; ``output=True``: a network's
    output units, always in the weights' dtype (mixed precision keeps the outputs' last product in
    full precision, as Keras advises)."""

    def __init__(self, n_in, n_out, rng, act="linear", use_bias=True, dtype=tf.float32, name=None, output=False):
        super().__init__(name=name)
        limit = np.sqrt(6.0 / (n_in + n_out))
        self.kernel = tf.Variable(rng.uniform(-limit, limit, (n_in, n_out)), dtype=dtype, name="kernel")
        self.bias = tf.Variable(np.zeros(n_out), dtype=dtype, name="bias") if use_bias else None
        self.act = ACTIVATIONS[act]
        self.compute_dtype = None if output else compute_dtype()

    def __call__(self, x):
        y = mixed_matmul(x, self.kernel, self.compute_dtype)
        if self.bias is not None:
            y = y + self.bias
        return self.act(y)


class FeedForward(tf.Module):
    """A stack of :class:`Dense` layers, every one activated."""

    def __init__(self, n_in, nodes, rng, act="tanh", use_bias=True, dtype=tf.float32, name=None):
        super().__init__(name=name)
        self.layers = []
        for i, n in enumerate(nodes):
            self.layers.append(Dense(n_in, n, rng, act=act, use_bias=use_bias, dtype=dtype, name=f"dense_{i}"))
            n_in = n
        self.n_out = n_in

    def __call__(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def _cutoff_cosine(x):
    return 0.5 * (tf.cos(np.pi * x) + 1.0)


def _cutoff_tanh(x):
    return tf.tanh(1.0 - x) ** 3


def _cutoff_hip(x):
    return tf.cos(0.5 * np.pi * x) ** 2


def _cutoff_polynomial(x):
    return 1.0 - 6.0 * x ** 5 + 15.0 * x ** 4 - 10.0 * x ** 3


#: cutoff functions of x = r / rc; all are 1 at 0 and 0 with zero slope at x = 1.
#: ``f1`` / ``cosine``: 0.5 (cos(pi x) + 1); ``f2``: tanh(1 - x)^3;
#: ``hip``: cos^2(pi x / 2); ``polynomial``: 1 - 6x^5 + 15x^4 - 10x^3 (also zero curvature).
CUTOFFS = {
    "f1": _cutoff_cosine, "cosine": _cutoff_cosine,
    "f2": _cutoff_tanh,
    "hip": _cutoff_hip,
    "polynomial": _cutoff_polynomial,
}


def cutoff(dist, rc, cutoff_type):
    """Cutoff function values for distances ``dist`` (Å); exactly 0 beyond ``rc``."""
    x = dist / rc
    inside = x < 1.0
    x_safe = tf.where(inside, x, tf.zeros_like(x))
    return tf.where(inside, CUTOFFS[cutoff_type](x_safe), tf.zeros_like(x))


#: how a network's ``out_pool`` reduces the atoms' outputs of each structure
POOLS = {"sum": tf.math.unsorted_segment_sum, "max": tf.math.unsorted_segment_max,
         "min": tf.math.unsorted_segment_min}


def atomic_number(value, where):
    """The atomic number of ``value``: a number, its text, or an element symbol ('Cu').

    Raises:
        ParamsError: an unknown symbol, named with ``where`` (the params key).
    """
    from ase.data import atomic_numbers
    if isinstance(value, str) and not value.isdigit():
        if value not in atomic_numbers:
            raise ParamsError(f"{where}: unknown element {value!r}")
        return atomic_numbers[value]
    return int(value)


def atom_type_list(value):
    """Schema check of ``atom_types``: a non-empty list of atomic numbers 0..118 (0: a dummy element)."""
    if not value or not all(isinstance(z, int) and not isinstance(z, bool) and 0 <= z <= 118 for z in value):
        return "must be a non-empty list of atomic numbers (integers 0..118)"
    if len(set(value)) != len(value):
        return "lists an element twice"
    return None


def check_centers(params):
    """Refuse a ``center`` list that the Gaussian basis cannot take (PiNet's and PiNet2's ``center``).

    Raises:
        ParamsError: centers with another basis, or not one per basis function.
    """
    if params["center"] is None:
        return
    if params["basis_type"] != "gaussian":
        raise ParamsError(f"network.params.center: centers of the Gaussian basis; basis_type is "
                          f"{params['basis_type']!r}")
    if len(params["center"]) != params["n_basis"]:
        raise ParamsError(f"network.params.center: {len(params['center'])} centers for n_basis "
                          f"{params['n_basis']}; give one per basis function")


def radial_basis(dist, fc, basis_type, n_basis, rc, gamma=3.0, center=None):
    """Radial basis [n_pairs, n_basis].

    ``polynomial``: fc^k for k = 1..n_basis (upstream PiNN's choice);
    ``gaussian``: exp(-gamma (r - c_k)^2) fc with centers c_k (Å) given by ``center``, or evenly
    in [0, rc].
    """
    if basis_type == "polynomial":
        return tf.stack([fc ** (k + 1) for k in range(n_basis)], axis=1)
    if basis_type == "gaussian":
        centers = tf.constant(np.linspace(0.0, rc, n_basis) if center is None else np.asarray(center, float),
                              dist.dtype)
        return tf.exp(-gamma * (dist[:, None] - centers[None, :]) ** 2) * fc[:, None]
    raise ValueError(f"unknown basis_type {basis_type!r}")


class ElementIndex(tf.Module):
    """Maps atomic numbers to indices into ``atom_types`` (-1 for unknown ones)."""

    def __init__(self, atom_types, name=None):
        super().__init__(name=name)
        self.atom_types = [int(z) for z in atom_types]
        table = np.full(max(self.atom_types) + 1, -1, np.int32)
        table[self.atom_types] = np.arange(len(self.atom_types))
        self.table = tf.constant(table)

    def __call__(self, elems):
        """Return type indices of ``elems``; fails with a clear error on unknown elements."""
        in_range = tf.logical_and(elems > 0, elems < tf.shape(self.table)[0])
        idx = tf.where(in_range, tf.gather(self.table, tf.where(in_range, elems, 0)), -1)
        check = tf.debugging.assert_non_negative(
            idx, message=f"structure contains an element that is not in atom_types {self.atom_types}")
        with tf.control_dependencies([check]):
            return tf.identity(idx)


def scatter_sum(values, ids, n):
    """Sum rows of ``values`` into ``n`` rows: ``out[k] = sum of values[p] with ids[p] = k``.

    ``tf.math.unsorted_segment_sum``, differentiable to any order (forces in a training loss take
    its second derivative).  Not a ``tf.custom_gradient``: inside a ``tf.function`` each call of one
    registers a gradient function in TensorFlow's process-wide registry that is never removed and
    holds the traced graph, so every model built in a process kept its graphs (tens of MB each)
    for the process's life (``benchmarks/bench_memory.py``).

    Args:
        values: [n_items, ...] tensor.
        ids: [n_items] int32 row indices, all in [0, n).
        n: number of output rows (int32 scalar).

    Returns:
        [n, ...] tensor.
    """
    return tf.math.unsorted_segment_sum(values, ids, n)


class PairInteraction(tf.Module):
    """PiNet's PI step as a module: I_pc = Σ_b W_pcb([P_i, P_j]) e_pb for each pair p = (i, j).

    W is a feed-forward net on the concatenated properties of the pair: hidden layers
    ``nodes[:-1]`` with activation ``act``, then a linear layer with ``nodes[-1]`` × ``n_basis``
    outputs, read as [n_out, n_basis] and contracted with the radial basis e (the same net as
    :class:`pinn.networks.pinet.GCBlock`'s).  It is evaluated in a cheaper order, exact up to float
    rounding: the first layer is linear before its activation, [P_i, P_j] K = P_i K_i + P_j K_j,
    so both products are taken per atom and gathered per pair; the last layer is contracted per
    basis function, so the [n_pairs, n_out, n_basis] weight tensor is never formed.

    Args:
        n_in: size of the atomic properties P.
        nodes: layer sizes; the last is the number of interaction channels n_out.
        n_basis: number of radial basis functions.
        rng: NumPy random state of the weight initialisation.
        act: activation of the hidden layers (a key of ``ACTIVATIONS``).
        dtype: float dtype of the weights.
    """

    def __init__(self, n_in, nodes, n_basis, rng, act="tanh", dtype=tf.float32, name=None):
        super().__init__(name=name)
        self.n_in = n_in
        self.n_out = nodes[-1]
        self.n_basis = n_basis
        self.hidden = FeedForward(2 * n_in, nodes[:-1], rng, act, dtype=dtype, name="hidden")
        self.last = Dense(self.hidden.n_out, self.n_out * n_basis, rng, dtype=dtype, name="last")

    def plain(self, prop, ind_2, basis):
        """The same interactions in the order of the equation (slower; for the tests)."""
        pair = tf.concat([tf.gather(prop, ind_2[:, 0]), tf.gather(prop, ind_2[:, 1])], axis=1)
        weights = tf.reshape(self.last(self.hidden(pair)), [-1, self.n_out, self.n_basis])
        return tf.reduce_sum(weights * basis[:, None, :], axis=2)

    def __call__(self, prop, ind_2, basis):
        """Interactions [n_pairs, n_out] of properties ``prop`` [n_atoms, n_in] for the pairs ``ind_2``
        [n_pairs, 2] with radial basis ``basis`` [n_pairs, n_basis]."""
        layers = self.hidden.layers + [self.last]
        first = layers[0]
        c = first.compute_dtype  # mixed precision: the products in it (computing_in)
        x = (tf.gather(mixed_matmul(prop, first.kernel[:self.n_in], c), ind_2[:, 0])
             + tf.gather(mixed_matmul(prop, first.kernel[self.n_in:], c), ind_2[:, 1]) + first.bias)
        if len(layers) == 1:  # no hidden layer: x holds the basis weights themselves
            return tf.reduce_sum(tf.reshape(x, [-1, self.n_out, self.n_basis]) * basis[:, None, :], axis=2)
        x = first.act(x)
        for layer in layers[1:-1]:
            x = layer(x)
        kernel = tf.reshape(self.last.kernel, [-1, self.n_out, self.n_basis])
        inter = tf.matmul(basis, tf.reshape(self.last.bias, [self.n_out, self.n_basis]), transpose_b=True)
        for b in range(self.n_basis):
            inter = inter + mixed_matmul(x, kernel[:, :, b], c) * basis[:, b:b + 1]
        return inter
