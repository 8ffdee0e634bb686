"""PiNet: the pairwise-interaction network of Shao et al., J. Chem. Inf. Model. 60, 1184 (2020).

Each of ``depth`` graph-convolution blocks does

- PP: a feed-forward net on atomic properties P_i (``pp_nodes``);
- PI: pairwise interactions I_ij = sum_b W_b([P_i, P_j]) e_b(r_ij), a
  feed-forward net on the concatenated properties (``pi_nodes``, the last
  layer's output split over the ``n_basis`` radial basis functions);
- II: a feed-forward net on the interactions (``ii_nodes``, no bias, so that
  an interaction vanishing at the cutoff stays zero);
- IP: P_i' = sum_j I_ij;

then an output net (``out_nodes`` and a linear unit) adds each block's
atomic contribution, and a residual update carries P to the next block.
Parameter names follow upstream PiNN so users' params carry over.
"""
import tensorflow as tf

from pinn import keys as K
from pinn.networks.base import Network
from pinn.networks.layers import (ACTIVATIONS, CUTOFFS, POOLS, Dense, ElementIndex, FeedForward, atom_type_list,
                                  check_centers, cutoff, mixed_matmul, radial_basis, scatter_sum)
from pinn.schema import Option, positive, positive_int_list

def _numbers(value):
    if not value or not all(isinstance(c, (int, float)) and not isinstance(c, bool) for c in value):
        return "a non-empty list of numbers"
    return None


def _pool_choice(value):
    return None if value in (False, "sum", "max", "min") else "false, 'sum', 'max' or 'min'"


PARAMS = {
    "atom_types": Option(list, [1, 6, 7, 8], "atomic numbers the network knows (0: a dummy element, as "
                         "upstream allows)", check=atom_type_list),
    "rc": Option(float, 4.0, "cutoff radius, Å", check=positive),
    "depth": Option(int, 4, "number of graph-convolution blocks", check=positive),
    "pp_nodes": Option(list, [16, 16], "hidden sizes of the property-property nets", check=positive_int_list),
    "pi_nodes": Option(list, [16, 16], "sizes of the property-interaction nets", check=positive_int_list),
    "ii_nodes": Option(list, [16, 16], "sizes of the interaction-interaction nets", check=positive_int_list),
    "out_nodes": Option(list, [16, 16], "hidden sizes of the output nets", check=positive_int_list),
    "out_units": Option(int, 1, "outputs per atom", check=positive),
    "act": Option(str, "tanh", "activation function", choices=tuple(ACTIVATIONS)),
    "basis_type": Option(str, "gaussian", "radial basis (upstream PiNN's default: polynomial; see "
                         "UPSTREAM_NETWORK_DEFAULTS)", choices=("polynomial", "gaussian")),
    "n_basis": Option(int, 10, "number of radial basis functions", check=positive),
    "gamma": Option(float, 3.0, "width parameter of the Gaussian basis, 1/Å²", check=positive),
    "cutoff_type": Option(str, "f1", "cutoff function", choices=tuple(CUTOFFS)),
    "center": Option((list, None), None, "centers of the Gaussian basis functions, Å (n_basis of them; "
                     "default: evenly spaced from 0 to rc)", check=_numbers),
    "out_pool": Option((bool, str), False, "false: one output per atom; 'sum', 'max' or 'min': the atoms' "
                       "outputs pooled per structure (the network on its own; the models sum atomic outputs)",
                       check=_pool_choice),
}


class GCBlock(tf.Module):
    """One PP → PI → II → IP graph-convolution block."""

    def __init__(self, n_in, p, rng, dtype, name=None):
        super().__init__(name=name)
        self.n_basis = p["n_basis"]
        self.pp = FeedForward(n_in, p["pp_nodes"], rng, p["act"], dtype=dtype, name="pp")
        n_pp = self.pp.n_out
        self.pi_hidden = FeedForward(2 * n_pp, p["pi_nodes"][:-1], rng, p["act"], dtype=dtype, name="pi")
        self.n_pi = p["pi_nodes"][-1]
        self.pi_out = Dense(self.pi_hidden.n_out, self.n_pi * self.n_basis, rng, dtype=dtype, name="pi_out")
        self.ii = FeedForward(self.n_pi, p["ii_nodes"], rng, p["act"], use_bias=False, dtype=dtype, name="ii")
        self.n_out = self.ii.n_out

    def pair_interactions(self, prop, ind_2, basis):
        """The PI step: I_pc = sum_b W_pcb e_pb with W_p = PI-net([P_i, P_j]), [n_pairs, n_pi].

        Evaluated as the same sums in a cheaper order, exact up to float rounding (tested
        against the plain form):

        - the first PI layer is linear before its activation, [P_i, P_j] W = P_i W_i + P_j W_j,
          so both products are taken per atom and gathered per pair (a matmul over atoms
          instead of 10-50x more pairs);
        - the last PI layer and the basis sum are contracted per basis function,
          I = sum_b (h K_b) * e_b + e B^T, with 2-D [n_pairs, n_pi] products only: the
          [n_pairs, n_pi, n_basis] weight tensor of the plain form, and its gradients,
          never exist.
        """
        layers = self.pi_hidden.layers + [self.pi_out]
        first = layers[0]
        n_prop = prop.shape[-1]
        c = first.compute_dtype  # mixed precision: the products in it (pinn.networks.layers.computing_in)
        x = (tf.gather(mixed_matmul(prop, first.kernel[:n_prop], c), ind_2[:, 0])
             + tf.gather(mixed_matmul(prop, first.kernel[n_prop:], c), ind_2[:, 1]))
        if len(layers) == 1:  # no hidden PI layer: the plain contraction
            x = tf.reshape(x + first.bias, [-1, self.n_pi, self.n_basis])
            return tf.reduce_sum(x * basis[:, None, :], axis=2)
        x = first.act(x + first.bias)
        for layer in layers[1:-1]:
            x = layer(x)
        n_hidden = x.shape[-1]
        kernel = tf.reshape(self.pi_out.kernel, [n_hidden, self.n_pi, self.n_basis])
        bias = tf.reshape(self.pi_out.bias, [self.n_pi, self.n_basis])
        inter = tf.matmul(basis, bias, transpose_b=True)
        for b, e_b in enumerate(tf.unstack(basis, axis=1)):
            inter = inter + mixed_matmul(x, kernel[:, :, b], c) * e_b[:, None]
        return inter

    def interactions(self, prop, ind_2, basis):
        """The block's pair interactions I_ij [n_pairs, ii_nodes[-1]] (PP, PI, II) of atom features ``prop``."""
        return self.ii(self.pair_interactions(self.pp(prop), ind_2, basis))

    def __call__(self, prop, ind_2, basis):
        return scatter_sum(self.interactions(prop, ind_2, basis), ind_2[:, 0], tf.shape(prop)[0])


class PiNet(Network):
    """PiNet network: ``net.atomic_outputs(tensors) -> [n_atoms, out_units]``; ``net(tensors)`` as upstream.

    Built from params (``PiNet(params, dtype=..., seed=...)``) or with upstream PiNN's arguments
    (``PiNet(atom_types=[1, 8], rc=4.5)``, upstream's defaults); see :class:`pinn.networks.base.Network`.
    """

    PARAMS = PARAMS
    UPSTREAM_ARGS = ("atom_types", "rc", "cutoff_type", "basis_type", "n_basis", "gamma", "center", "pp_nodes",
                     "pi_nodes", "ii_nodes", "out_nodes", "out_units", "out_pool", "act", "depth")
    UPSTREAM_DEFAULTS = {"basis_type": "polynomial", "n_basis": 4}
    #: static shapes only (XLA): the calculator compiles it on padded batches
    JIT_COMPATIBLE = True

    def build(self, params, dtype, rng):
        self.rc = params["rc"]
        check_centers(params)
        self.atom_types = self.atom_types_of(params)
        self.element_index = ElementIndex(self.atom_types)
        self.n_types = len(params["atom_types"])
        self.blocks = []
        self.outputs = []
        self.residual = []
        n_prop = self.n_types
        for d in range(params["depth"]):
            block = GCBlock(n_prop, params, rng, dtype, name=f"gc_{d}")
            self.blocks.append(block)
            out_ff = FeedForward(block.n_out, params["out_nodes"], rng, params["act"], dtype=dtype, name=f"out_{d}")
            self.outputs.append((out_ff, Dense(out_ff.n_out, params["out_units"], rng, use_bias=False,
                                               dtype=dtype, name=f"out_{d}_units", output=True)))
            self.residual.append(None if n_prop == block.n_out else
                                 Dense(n_prop, block.n_out, rng, use_bias=False, dtype=dtype, name=f"res_{d}"))
            n_prop = block.n_out

    def regularized_weights(self):
        """The weight matrices of the hidden layers (no biases, no output units): what upstream PiNN's
        ``use_l2`` regularises."""
        ffs = [b for block in self.blocks for b in block.trainable_variables] + \
            [v for out_ff, _ in self.outputs for v in out_ff.trainable_variables] + \
            [v for r in self.residual if r is not None for v in r.trainable_variables]
        return [v for v in ffs if v.name.startswith("kernel")]

    def atomic_outputs(self, tensors):
        """[n_atoms, out_units] (per structure with ``out_pool``) from ``elems``, ``ind_1``, ``ind_2``, ``dist`` (Å)."""
        output, _ = self._forward(tensors, keep=False)
        if self.params["out_pool"]:
            return POOLS[self.params["out_pool"]](output, tensors[K.IND_1][:, 0], tf.reduce_max(tensors[K.IND_1]) + 1)
        return output

    def call_with_interactions(self, tensors):
        """The atomic outputs and every block's pair interactions (what bond-charge models read).

        Args:
            tensors: dict with ``elems``, ``ind_2`` and ``dist`` (Å).

        Returns:
            (outputs [n_atoms, out_units], not pooled; list over the blocks of the interactions
            I_ij [n_pairs, ii_nodes[-1]]).
        """
        return self._forward(tensors, keep=True)

    def _forward(self, tensors, keep):
        """(atomic outputs [n_atoms, out_units], the blocks' interactions when ``keep``, else ``None``)."""
        idx = self.element_index(tensors[K.ELEMS])
        prop = tf.one_hot(idx, self.n_types, dtype=tensors[K.DIST].dtype)
        fc = cutoff(tensors[K.DIST], self.rc, self.params["cutoff_type"])
        basis = radial_basis(tensors[K.DIST], fc, self.params["basis_type"], self.params["n_basis"],
                             self.rc, self.params["gamma"], self.params["center"])
        ind_2 = tensors[K.IND_2]
        n_atoms = tf.shape(prop)[0]
        output = 0.0
        kept = [] if keep else None
        for block, (out_ff, out_units), residual in zip(self.blocks, self.outputs, self.residual):
            inter = block.interactions(prop, ind_2, basis)
            new_prop = scatter_sum(inter, ind_2[:, 0], n_atoms)
            output = output + out_units(out_ff(new_prop))
            prop = (prop if residual is None else residual(prop)) + new_prop
            if keep:
                kept.append(inter)
        return output, kept
