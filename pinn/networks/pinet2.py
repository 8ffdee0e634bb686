"""PiNet2: PiNet with equivariant vector (and rank-2 tensor) features.

After upstream PiNN 2.x's ``PiNet2`` (J. Li, L. Knijff, Z. Zhang, L. Andersson, C. Zhang, "PiNN:
equivariant neural network suite for modelling electrochemical systems", 2024), with its parameter names.
Besides the scalar atomic properties P1 [n_atoms, C] of PiNet, each atom carries, for
``rank`` 3, vector properties P3 [n_atoms, 3, C] and, for ``rank`` 5, rank-2 tensor properties
P5 [n_atoms, 5, C] (the five components of a traceless symmetric 3×3 matrix, see
:func:`p5_to_matrix`).  Each of the ``depth`` blocks does, with u_ij = diff_ij / r_ij the unit
vector from atom i to its neighbor j and e_ij the radial basis:

- invariant path: I_ij = II(PI([P1_i, P1_j], e_ij)) (``pi_nodes``; ``ii_nodes``, no bias, the last
  layer 1, 2 or 3 × ``ii_nodes[-1]`` wide for rank 1, 3, 5), split into I1, I3, I5;
  Q_i = PP(Σ_j I_ij) (``pp_nodes``, no bias);
- vector path: X_ij = (P3_j + u_ij) I3_ij (``weighted``: P3_i W + P3_j W' instead of P3_j),
  V_i = (Σ_j X_ij) W3 (linear, no bias, ``pp_nodes[-1]`` channels), D3_i = Σ_x V_ix V_ix
  (``weighted``: Σ_x (V W)_ix (V W')_ix);
- tensor path: the same with u_ij replaced by T(u_ij) = u u^T − 1/3, in the orthonormal
  five-component basis of traceless symmetric matrices, giving U_i and D5_i;
- mixing: [S1, S3, S5] = MIX([Q_i, D3_i, D5_i]) (``pp_nodes[:-1]`` then 1, 2 or 3 ×
  ``ii_nodes[-1]``, with bias); the block's new properties are P1' = S1, P3' = V S3,
  P5' = U S5 (a vector scaled channel by channel by invariants stays equivariant);
- output: an output net (``out_nodes`` with ``act``, then a linear layer without bias to
  ``out_units``) maps P1' to the block's atomic contribution; the contributions are added;
- residual update: P1 ← P1 + P1' (P1 projected linearly in the first block, where it is the
  one-hot element encoding), P3 ← P3 + P3', P5 ← P5 + P5' (P3 and P5 start at zero).

Every scalar is rotation-invariant and P3 / P5 rotate with the structure, so the energy is
invariant and forces equivariant; pairs at the cutoff contribute nothing (I_ij vanishes with the
cutoff function, the II net having no bias) as long as act(0) = 0 (not ``softplus``).

**Extra outputs (``out_extra``) for models.** ``out_extra: {'p3': k}`` (upstream's option) adds,
per key, one head per block on that block's quantity, whose results are summed over blocks like
the main output:

- ``'p1'``: [n_atoms, k], invariant (the block's P1');
- ``'p3'``: [n_atoms, 3, k], Cartesian vectors (x, y, z) that rotate with the structure (P3'),
  e.g. atomic dipoles (upstream's ``AD_dipole_model`` reads ``p3`` with k = 1); rank ≥ 3;
- ``'p5'``: [n_atoms, 5, k], traceless symmetric tensors in the basis of :func:`p5_to_matrix`; rank 5;
- ``'dotted_p3'`` / ``'dotted_p5'``: [n_atoms, k], invariant (the dot products D3 / D5);
- per pair of ``ind_2``: ``'i1'`` [n_pairs, k], invariant (the interactions I, all of their
  1, 2 or 3 parts), ``'i3'`` [n_pairs, 3, k] (the vector pair terms X_ij, rank ≥ 3) and ``'i5'``
  [n_pairs, 5, k] (rank 5): what upstream's bond-charge dipole and polarizability models read.

The equivariant heads (p3, p5, i3, i5) are linear without bias (``out_nodes`` then k channels,
mixing channels only), so equivariance holds exactly; the pair heads have no bias, so that they
vanish at the cutoff with the interactions they read; p1 and the dotted heads are output nets
(``act``, with bias).  Models call ``net.atomic_outputs(tensors)`` ([n_atoms, out_units]) and::

    outputs, extras = net.call_with_extras(tensors)   # extras == {'p3': [n_atoms, 3, k], ...}

and may check ``net.out_extra`` (``{'p3': k}``) when they are built; ``net(tensors)`` returns
``(outputs, extras)`` as upstream's does.  The extras are never pooled by ``out_pool``.  All
lengths are Å; the outputs are in the units the model trains them in.

Differences from upstream's code (all deliberate):

- upstream builds ``p5`` in the basis (T_xx, T_yy, T_xy, T_xz, T_yz), in which the sum of squares
  is not rotation-invariant (so its rank-5 energy is not invariant); pinn uses an orthonormal
  basis (:func:`p5_to_matrix`), in which it is;
- upstream's ``out_extra`` heads have a bias, which breaks equivariance (p3, i3) and the smoothness
  at the cutoff (i1, i3); pinn's equivariant and pair heads have none;
- the PI and output nets are pinn's PiNet's: hidden layers with ``act``, a linear last PI layer;
  (upstream's PiNet2 output nets have no activation and its PI layers are all activated).
"""
import tensorflow as tf

from pinn import keys as K
from pinn.networks.base import Network
from pinn.networks.equivariant import (DotLayer, PIXLayer, ScaleLayer, mix_channels,  # noqa: F401  (upstream's names)
                                       p5_to_matrix, rank2_components)
from pinn.networks.layers import (POOLS, Dense, ElementIndex, FeedForward, PairInteraction, check_centers,
                                  cutoff,
                                  radial_basis, scatter_sum)
from pinn.networks.pinet import PARAMS as PINET_PARAMS
from pinn.schema import Option, ParamsError

#: keys of ``out_extra`` and the smallest rank that has them
EXTRA_RANKS = {"p1": 1, "p3": 3, "p5": 5, "i1": 1, "i3": 3, "i5": 5, "dotted_p3": 3, "dotted_p5": 5}
#: extra outputs that are equivariant (their heads mix channels linearly, without bias)
EQUIVARIANT_EXTRAS = ("p3", "p5", "i3", "i5")
#: extra outputs per pair (their heads have no bias, so that they vanish with the interactions at the cutoff)
PAIR_EXTRAS = ("i1", "i3", "i5")


def _extra_spec(value):
    for key, units in value.items():
        if key not in EXTRA_RANKS:
            return f"keys must be among {sorted(EXTRA_RANKS)}, got {key!r}"
        if not isinstance(units, int) or isinstance(units, bool) or units <= 0:
            return f"{key}: the number of output channels must be a positive integer"
    return None


PARAMS = dict(PINET_PARAMS)
PARAMS.update({
    "rank": Option(int, 3, "highest order of the atomic features: 1 (scalars only, like PiNet), 3 (and vectors) or "
                   "5 (and rank-2 tensors)", choices=(1, 3, 5)),
    "weighted": Option(bool, False, "weighted style of the equivariant pair and dot products (a learnt channel "
                       "mixing of P_i and P_j, and of the two factors of the dot product); upstream's default "
                       "false since its commit e242fed"),
    "out_extra": Option(dict, {}, "extra outputs for models: {key: channels}, keys p1, p3, p5, dotted_p3, "
                        "dotted_p5 (per atom) and i1, i3, i5 (per pair), e.g. {'p3': 1} for atomic vectors "
                        "[n_atoms, 3, 1] (see pinn.networks.pinet2)",
                        check=_extra_spec),
})

class EquivariantPath(tf.Module):
    """The vector (or tensor) path of a block: features [n_atoms, m, C] → new features and their dot products.

    Args:
        n_inter: channels of the interactions I3 (or I5) and of the incoming features.
        n_out: channels of the new features (``pp_nodes[-1]``).
        weighted: the weighted style (learnt mixings in the pair term and the dot product).
        first: the first block (its incoming features are zero: no pair term).
        rng, dtype: initialisation and dtype of the weights.
    """

    def __init__(self, n_inter, n_out, weighted, first, rng, dtype, name=None):
        super().__init__(name=name)
        self.first = first
        self.weighted = weighted
        if weighted and not first:
            self.pair_i = Dense(n_inter, n_inter, rng, use_bias=False, dtype=dtype, name="pair_i")
            self.pair_j = Dense(n_inter, n_inter, rng, use_bias=False, dtype=dtype, name="pair_j")
        self.pp = Dense(n_inter, n_out, rng, use_bias=False, dtype=dtype, name="pp")
        if weighted:
            self.dot_a = Dense(n_out, n_out, rng, use_bias=False, dtype=dtype, name="dot_a")
            self.dot_b = Dense(n_out, n_out, rng, use_bias=False, dtype=dtype, name="dot_b")

    def __call__(self, px, ind_2, inter, direction, n_atoms):
        """New features and invariants.

        Args:
            px: incoming features [n_atoms, m, C] (ignored in the first block).
            ind_2: pairs [n_pairs, 2].
            inter: the interactions of this path [n_pairs, C].
            direction: u_ij [n_pairs, 3] (or its rank-2 components [n_pairs, 5]).
            n_atoms: number of atoms (int32 scalar).

        Returns:
            (features [n_atoms, m, n_out], dot products [n_atoms, n_out], pair interactions
            [n_pairs, m, C]: upstream's ``i3`` / ``i5``).
        """
        pair = direction[:, :, None]
        if not self.first:
            if self.weighted:
                pair = pair + (tf.gather(mix_channels(px, self.pair_i), ind_2[:, 0])
                               + tf.gather(mix_channels(px, self.pair_j), ind_2[:, 1]))
            else:
                pair = pair + tf.gather(px, ind_2[:, 1])
        pair_inter = pair * inter[:, None, :]
        new = mix_channels(scatter_sum(pair_inter, ind_2[:, 0], n_atoms), self.pp)
        if self.weighted:
            dots = tf.reduce_sum(mix_channels(new, self.dot_a) * mix_channels(new, self.dot_b), axis=1)
        else:
            dots = tf.reduce_sum(new * new, axis=1)
        return new, dots, pair_inter


class GCBlock2(tf.Module):
    """One PiNet2 block (see the module docstring).

    Args:
        n_in: channels of the incoming scalar properties P1.
        p: resolved network params.
        first: the first block (no incoming P3 / P5).
        rng, dtype: initialisation and dtype of the weights.
    """

    def __init__(self, n_in, p, first, rng, dtype, name=None):
        super().__init__(name=name)
        self.rank = p["rank"]
        self.n_props = self.rank // 2 + 1
        n_ii = p["ii_nodes"][-1]
        self.pi = PairInteraction(n_in, p["pi_nodes"], p["n_basis"], rng, p["act"], dtype=dtype, name="pi")
        self.ii = FeedForward(self.pi.n_out, p["ii_nodes"][:-1] + [n_ii * self.n_props], rng, p["act"],
                              use_bias=False, dtype=dtype, name="ii")
        self.pp = FeedForward(self.ii.n_out, p["pp_nodes"], rng, p["act"], use_bias=False, dtype=dtype, name="pp")
        n_pp = self.pp.n_out
        if self.rank >= 3:
            self.vectors = EquivariantPath(n_ii, n_pp, p["weighted"], first, rng, dtype, name="p3")
        if self.rank >= 5:
            self.tensors = EquivariantPath(n_ii, n_pp, p["weighted"], first, rng, dtype, name="p5")
        self.mix = FeedForward(n_pp * self.n_props, p["pp_nodes"][:-1] + [n_ii * self.n_props], rng, p["act"],
                               dtype=dtype, name="mix")
        self.n_out = n_ii

    def __call__(self, p1, p3, p5, ind_2, basis, d3, d5):
        """The block's new features.

        Args:
            p1: [n_atoms, n_in] scalar properties; p3: [n_atoms, 3, C] or None; p5: [n_atoms, 5, C] or None.
            ind_2: pairs [n_pairs, 2]; basis: radial basis [n_pairs, n_basis].
            d3: unit pair vectors [n_pairs, 3]; d5: their rank-2 components [n_pairs, 5] (rank 5).

        Returns:
            dict with ``p1`` [n_atoms, ii_nodes[-1]] and the invariant pair interactions ``i1``
            [n_pairs, n_props × ii_nodes[-1]]; by rank, ``p3`` [n_atoms, 3, ·], ``i3`` [n_pairs, 3, ·]
            and ``dotted_p3`` [n_atoms, ·], and ``p5``, ``i5``, ``dotted_p5`` likewise.
        """
        n_atoms = tf.shape(p1)[0]
        inter = self.ii(self.pi(p1, ind_2, basis))
        parts = tf.split(inter, self.n_props, axis=1)
        scalars = [self.pp(scatter_sum(inter, ind_2[:, 0], n_atoms))]
        new = {"i1": inter}
        if self.rank >= 3:
            v3, new["dotted_p3"], new["i3"] = self.vectors(p3, ind_2, parts[1], d3, n_atoms)
            scalars.append(new["dotted_p3"])
        if self.rank >= 5:
            v5, new["dotted_p5"], new["i5"] = self.tensors(p5, ind_2, parts[2], d5, n_atoms)
            scalars.append(new["dotted_p5"])
        scales = tf.split(self.mix(tf.concat(scalars, axis=1)), self.n_props, axis=1)
        new["p1"] = scales[0]
        if self.rank >= 3:
            new["p3"] = v3 * scales[1][:, None, :]
        if self.rank >= 5:
            new["p5"] = v5 * scales[2][:, None, :]
        return new


class PiNet2(Network):
    """PiNet2 network: ``net.atomic_outputs(tensors) -> [n_atoms, out_units]``; with ``out_extra``,
    ``net.call_with_extras(tensors) -> (outputs, {'p3': [n_atoms, 3, k], ...})`` (see the module docstring);
    ``net(tensors)`` as upstream calls it (:class:`pinn.networks.base.Network`).

    Built from params (``PiNet2(params, dtype=..., seed=...)``) or with upstream PiNN's arguments
    (``PiNet2(atom_types=[1, 8], rank=3)``, upstream's defaults).  The atomic outputs need
    ``elems`` [n_atoms], ``ind_1`` [n_atoms, 1], ``ind_2`` [n_pairs, 2], ``diff`` [n_pairs, 3]
    (r_j − r_i, Å) and ``dist`` [n_pairs] (|diff|, Å), as :func:`pinn.io.batch.pair_geometry` makes them.
    """

    PARAMS = PARAMS
    UPSTREAM_ARGS = ("atom_types", "rc", "cutoff_type", "basis_type", "n_basis", "gamma", "center", "pp_nodes",
                     "pi_nodes", "ii_nodes", "out_nodes", "out_units", "out_extra", "out_pool", "act", "depth",
                     "weighted", "rank")
    UPSTREAM_DEFAULTS = {"basis_type": "polynomial", "n_basis": 4}
    #: static shapes only (XLA): the calculator compiles it on padded batches
    JIT_COMPATIBLE = True

    def build(self, p, dtype, rng):
        self._check(p)
        self.rc = p["rc"]
        self.rank = p["rank"]
        self.atom_types = self.atom_types_of(p)
        self.element_index = ElementIndex(self.atom_types)
        self.n_types = len(self.atom_types)
        self.blocks = []
        self.outputs = []
        self.residual = []
        self.extra_heads = {key: [] for key in sorted(self.out_extra)}
        n_prop = self.n_types
        for d in range(p["depth"]):
            block = GCBlock2(n_prop, p, d == 0, rng, dtype, name=f"gc_{d}")
            self.blocks.append(block)
            out_ff = FeedForward(block.n_out, p["out_nodes"], rng, p["act"], dtype=dtype, name=f"out_{d}")
            self.outputs.append((out_ff, Dense(out_ff.n_out, p["out_units"], rng, use_bias=False, dtype=dtype,
                                               name=f"out_{d}_units", output=True)))
            for key in sorted(self.out_extra):
                # equivariant heads: linear and without bias, so that they mix channels only; pair heads:
                # without bias, so that they vanish at the cutoff with the interactions they read
                act = "linear" if key in EQUIVARIANT_EXTRAS else p["act"]
                n_in = {"p1": block.n_out, "i1": block.n_out * block.n_props, "i3": block.n_out,
                        "i5": block.n_out}.get(key, block.pp.n_out)
                use_bias = key not in EQUIVARIANT_EXTRAS and key not in PAIR_EXTRAS
                ff = FeedForward(n_in, p["out_nodes"], rng, act, use_bias=use_bias, dtype=dtype,
                                 name=f"{key}_out_{d}")
                self.extra_heads[key].append((ff, Dense(ff.n_out, self.out_extra[key], rng, use_bias=False,
                                                        dtype=dtype, name=f"{key}_out_{d}_units", output=True)))
            self.residual.append(None if n_prop == block.n_out else
                                 Dense(n_prop, block.n_out, rng, use_bias=False, dtype=dtype, name=f"res_{d}"))
            n_prop = block.n_out

    @staticmethod
    def _check(p):
        """Refuse settings the architecture cannot build, naming the key."""
        check_centers(p)
        if p["rank"] >= 3 and p["pp_nodes"][-1] != p["ii_nodes"][-1]:
            raise ParamsError(f"network.params.pp_nodes: PiNet2 of rank {p['rank']} scales its vector features "
                              f"({p['pp_nodes'][-1]} channels, pp_nodes[-1]) by invariants of ii_nodes[-1] = "
                              f"{p['ii_nodes'][-1]} channels; make the two equal")
        for key in p["out_extra"]:
            if EXTRA_RANKS[key] > p["rank"]:
                raise ParamsError(f"network.params.out_extra: {key!r} needs rank {EXTRA_RANKS[key]} or more "
                                  f"(rank is {p['rank']})")

    def regularized_weights(self):
        """The weight matrices of the hidden layers (no biases, no output units): what upstream PiNN's
        ``use_l2`` regularises."""
        modules = list(self.blocks) + [out_ff for out_ff, _ in self.outputs] + \
            [r for r in self.residual if r is not None] + [ff for heads in self.extra_heads.values() for ff, _ in heads]
        return [v for m in modules for v in m.trainable_variables if v.name.startswith("kernel")]

    def _forward(self, tensors, with_extras):
        ind_2 = tensors[K.IND_2]
        dist = tensors[K.DIST]
        idx = self.element_index(tensors[K.ELEMS])
        p1 = tf.one_hot(idx, self.n_types, dtype=dist.dtype)
        fc = cutoff(dist, self.rc, self.params["cutoff_type"])
        basis = radial_basis(dist, fc, self.params["basis_type"], self.params["n_basis"], self.rc,
                             self.params["gamma"], self.params["center"])
        d3 = tensors[K.DIFF] / dist[:, None] if self.rank >= 3 else None
        d5 = rank2_components(d3) if self.rank >= 5 else None
        p3 = p5 = None
        output = 0.0
        extras = {key: 0.0 for key in self.extra_heads} if with_extras else {}
        for d, (block, (out_ff, out_units), residual) in enumerate(zip(self.blocks, self.outputs, self.residual)):
            new = block(p1, p3, p5, ind_2, basis, d3, d5)
            output = output + out_units(out_ff(new["p1"]))
            for key in extras:
                ff, units = self.extra_heads[key][d]
                if key not in EQUIVARIANT_EXTRAS:
                    extras[key] = extras[key] + units(ff(new[key]))
                else:
                    x = new[key]
                    for layer in ff.layers + [units]:
                        x = mix_channels(x, layer)
                    extras[key] = extras[key] + x
            p1 = (p1 if residual is None else residual(p1)) + new["p1"]
            p3 = new.get("p3") if p3 is None else p3 + new["p3"]
            p5 = new.get("p5") if p5 is None else p5 + new["p5"]
        if self.params["out_pool"]:
            output = POOLS[self.params["out_pool"]](output, tensors[K.IND_1][:, 0],
                                                    tf.reduce_max(tensors[K.IND_1]) + 1)
        return output, extras

    def call_with_extras(self, tensors):
        """Atomic outputs and the extra outputs of ``out_extra``.

        Args:
            tensors: dict with ``elems``, ``ind_1``, ``ind_2``, ``diff`` (Å) and ``dist`` (Å).

        Returns:
            (outputs [n_atoms, out_units] (pooled per structure with ``out_pool``),
            dict {key: extra output} for the keys of ``out_extra``: ``p1`` [n_atoms, k],
            ``p3`` [n_atoms, 3, k] (x, y, z), ``p5`` [n_atoms, 5, k] (see :func:`p5_to_matrix`),
            ``dotted_p3`` / ``dotted_p5`` [n_atoms, k], and per pair of ``ind_2``: ``i1``
            [n_pairs, k], ``i3`` [n_pairs, 3, k], ``i5`` [n_pairs, 5, k]).
        """
        return self._forward(tensors, True)

    def atomic_outputs(self, tensors):
        """Atomic outputs [n_atoms, out_units] (pooled per structure with ``out_pool``); see
        :meth:`call_with_extras`."""
        return self._forward(tensors, False)[0]
