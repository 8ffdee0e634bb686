"""A PiNet or PiNet2 potential as the Numba engines see it: a typed specification with named fields.

:func:`pinn.engines.lowering.lower` reads a TensorFlow PiNet potential into a :class:`PiNetSpec`,
a PiNet2 potential into a :class:`PiNet2Spec` (their settings and their layers' weights, block by block);
their ``arrays()`` pack them into the flat arrays and index tables that the kernels take
(:data:`ARRAY_KEYS`; ``codes`` names the network).  The MD engine and the training engine are both built
from them, so the layout of the kernels' tables is written in one place: here.
"""
from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

from pinn.engines.numba.layout import (ACT_CODES, B2_II, B2_MIX, B2_N_II, B2_N_INTER, B2_N_MIX, B2_N_OUT,
                                       B2_N_PI, B2_N_PP, B2_OUT, B2_PATH, B2_PI, B2_PP, B2_RESIDUAL, B2_UNITS,
                                       BASIS_CODES, BLOCK_II, BLOCK_N_II, BLOCK_N_OUT, BLOCK_N_PI, BLOCK_N_PP,
                                       BLOCK_OUT, BLOCK_PI, BLOCK_PP, BLOCK_RESIDUAL, BLOCK_UNITS, BLOCK_WIDTH_IN,
                                       BLOCK_WIDTH_OUT, BLOCK_Z_OUT, CUTOFF_CODES, NETWORK_CODES, PATH_COLUMNS,
                                       PATH_COMPONENTS, PATH_DOT_A, PATH_DOT_B, PATH_PAIR_I, PATH_PAIR_J, PATH_PP,
                                       TANH_FAST)

#: the arrays of :meth:`PiNetSpec.arrays` (and of an engine-weights file, :mod:`pinn.engines.exported`)
ARRAY_KEYS = ("flat", "table", "layers", "blocks", "codes", "scal", "type_of", "e_dress", "workspace")

#: what the kernels implement, by params key (``network.params``)
ACTIVATIONS = tuple(ACT_CODES)
CUTOFFS = tuple(CUTOFF_CODES)
BASES = tuple(BASIS_CODES)


@dataclass(frozen=True, eq=False)
class LayerSpec:
    """One dense layer ``y = act(x W + b)``.

    Attributes:
        kernel: W, [n_in, n_out].
        bias: b, [n_out], or ``None`` for a layer without one (the II nets).
        activated: whether the network's activation follows (the last PI layer, the output
            units and the residual maps are linear).
        kernel_source, bias_source: the ``tf.Variable`` each was read from (``None`` when
            built from arrays); the training engine maps its gradients back to them.
    """

    kernel: np.ndarray
    bias: Optional[np.ndarray]
    activated: bool
    kernel_source: object = None
    bias_source: object = None

    @property
    def n_in(self):
        return int(self.kernel.shape[0])

    @property
    def n_out(self):
        return int(self.kernel.shape[1])


@dataclass(frozen=True, eq=False)
class BlockSpec:
    """One graph-convolution block of PiNet with its output net.

    Attributes:
        pp: the property-property layers (activated), on each atom's properties.
        pi: the property-interaction layers on the pairs' [P_i, P_j]; the last one (linear) gives
            n_pi · n_basis weights per pair.
        ii: the interaction-interaction layers (activated, no bias).
        out: the output net's hidden layers (activated).
        units: the output layer (linear) to the per-atom outputs.
        residual: the linear map of the properties when their width changes, else ``None``.
        n_pi: the interactions per pair (the last PI layer's width / n_basis).
    """

    pp: Tuple[LayerSpec, ...]
    pi: Tuple[LayerSpec, ...]
    ii: Tuple[LayerSpec, ...]
    out: Tuple[LayerSpec, ...]
    units: LayerSpec
    residual: Optional[LayerSpec]
    n_pi: int

    @property
    def n_in(self):
        """Width of the properties entering the block."""
        return self.pp[0].n_in if self.pp else self.pi[0].n_in // 2

    @property
    def n_out(self):
        """Width of the new properties (the II output)."""
        return self.ii[-1].n_out if self.ii else self.n_pi


@dataclass(frozen=True, eq=False)
class PotentialSpec:
    """What a PiNet and a PiNet2 potential share as the kernels see them: E = output_scale · Σ_i net_i +
    Σ_i e_dress[Z_i] (the fields: see :class:`PiNetSpec`); subclasses add their ``blocks`` and ``layers()``."""

    activation: str
    cutoff: str
    basis: str
    n_basis: int
    rc: float
    gamma: float
    output_scale: float
    atom_types: Tuple[int, ...]
    e_dress: np.ndarray
    dtype: np.dtype

    def sources(self):
        """The ``tf.Variable`` behind each tensor of ``arrays()``' ``flat``, in its order (``None`` for
        the zero bias of a layer without one)."""
        out = []
        for layer in self.layers():
            out += [layer.kernel_source, layer.bias_source]
        return out


@dataclass(frozen=True, eq=False)
class PiNetSpec(PotentialSpec):
    """A PiNet potential: E = output_scale · Σ_i net_i + Σ_i e_dress[Z_i].

    Attributes:
        activation: the network's activation (a key of :data:`ACTIVATIONS`).
        cutoff: the cutoff function (:data:`CUTOFFS`).
        basis: the radial basis (:data:`BASES`).
        n_basis: number of basis functions.
        rc: cutoff radius, Å.
        gamma: width of the Gaussian basis, 1/Å².
        output_scale: eV per unit of the network's output (1 / the model's e_scale).
        atom_types: the atomic numbers, in the network's order.
        e_dress: per-element energy offsets in that order, eV.
        blocks: the :class:`BlockSpec` of each block, in order.
        dtype: the weights' precision (float32 or float64).
    """

    blocks: Tuple[BlockSpec, ...]

    def layers(self):
        """Every layer in the kernels' order: per block PP, PI, II, output net, units, residual."""
        for block in self.blocks:
            yield from block.pp
            yield from block.pi
            yield from block.ii
            yield from block.out
            yield block.units
            if block.residual is not None:
                yield block.residual

    def arrays(self):
        """The kernels' arrays (:data:`ARRAY_KEYS`).

        Returns:
            dict: ``flat`` (every weight, one array of the model's precision), ``table`` (offset,
            rows, columns of each tensor in ``flat``), ``layers`` (kernel tensor, bias tensor,
            activated, width of each layer), ``blocks`` (the positions of each block's layers,
            columns named by ``layout.BLOCK_*``), ``codes`` (activation, cutoff, basis, n_basis,
            widest layer + 1, network), ``scal`` (rc in Å, gamma, output_scale), ``type_of`` (atomic
            number → index, -1 for unknown), ``e_dress`` (eV), ``workspace`` (scratch sizes).
        """
        packer = _Packer(self.dtype)
        blocks = []
        widths = [self.n_basis]
        zpair_rows = zatom_cols = 0
        for block in self.blocks:
            row = [0] * 13
            for first, count, group in ((BLOCK_PP, BLOCK_N_PP, block.pp), (BLOCK_PI, BLOCK_N_PI, block.pi),
                                        (BLOCK_II, BLOCK_N_II, block.ii), (BLOCK_OUT, BLOCK_N_OUT, block.out)):
                row[first], row[count] = packer.group(group)
            row[BLOCK_UNITS] = packer.layer(block.units)
            row[BLOCK_RESIDUAL] = packer.layer(block.residual)
            row[BLOCK_WIDTH_IN] = block.n_in
            row[BLOCK_WIDTH_OUT] = block.n_out
            pp_cols = sum(spec.n_out for spec in block.pp)
            row[BLOCK_Z_OUT] = pp_cols
            zatom_cols = max(zatom_cols, pp_cols + sum(spec.n_out for spec in block.out))
            zpair_rows = max(zpair_rows, sum(spec.n_out for spec in block.pi[:-1] + block.ii))
            for spec in block.pi + block.pp + block.ii + block.out:
                widths += [spec.n_in, spec.n_out]
            blocks.append(row)
        n_first = max(block.pi[0].n_out for block in self.blocks)
        return packer.arrays(self, blocks, max(widths) + 1, "PiNet", [max(zpair_rows, 1), max(zatom_cols, 1), n_first])


class _Packer:
    """Packs layers into the kernels' ``flat``, ``table`` and ``layers`` arrays (:mod:`pinn.engines.numba.layout`)."""

    def __init__(self, dtype):
        self.dtype = np.dtype(dtype)
        self.tensors = []
        self.layers = []
        self.offset = 0

    def tensor(self, value):
        """Add a tensor (a [rows, cols] matrix or a vector, as one row); its id."""
        value = np.asarray(value, dtype=self.dtype)
        value = value.reshape(value.shape[0], -1) if value.ndim == 2 else value.reshape(1, -1)
        self.tensors.append((self.offset, value.shape[0], value.shape[1], value))
        self.offset += value.size
        return len(self.tensors) - 1

    def layer(self, spec):
        """Add a :class:`LayerSpec` (a zero bias for one without); its row of ``layers`` (-1 for ``None``)."""
        if spec is None:
            return -1
        bias = spec.bias if spec.bias is not None else np.zeros(spec.n_out)
        self.layers.append((self.tensor(spec.kernel), self.tensor(bias), int(spec.activated), spec.n_out))
        return len(self.layers) - 1

    def group(self, specs):
        """Add consecutive layers: (the first one's row, their count)."""
        first = len(self.layers)
        for spec in specs:
            self.layer(spec)
        return first, len(specs)

    def arrays(self, spec, blocks, width, network, workspace):
        """The arrays of :data:`ARRAY_KEYS` of ``spec`` (a :class:`PiNetSpec` or :class:`PiNet2Spec`) with
        its ``blocks`` rows, the widest layer + 1, the network's name (:data:`NETWORK_CODES`) and the
        scratch sizes."""
        flat = np.zeros(self.offset, self.dtype)
        for start, rows, cols, value in self.tensors:
            flat[start:start + rows * cols] = value.ravel()
        act = ACT_CODES[spec.activation]
        if act == ACT_CODES["tanh"] and self.dtype == np.float32:
            act = TANH_FAST
        type_of = np.full(max(spec.atom_types) + 1, -1, np.int64)
        type_of[list(spec.atom_types)] = np.arange(len(spec.atom_types))
        return {
            "flat": flat,
            "table": np.array([t[:3] for t in self.tensors], np.int64),
            "layers": np.array(self.layers, np.int64),
            "blocks": np.array(blocks, np.int64),
            "codes": np.array([act, CUTOFF_CODES[spec.cutoff], BASIS_CODES[spec.basis], spec.n_basis, width,
                               NETWORK_CODES[network]], np.int64),
            "scal": np.array([spec.rc, spec.gamma, spec.output_scale], np.float64),
            "type_of": type_of,
            "e_dress": np.asarray(spec.e_dress, np.float64),
            "workspace": np.array(workspace, np.int64),
        }


@dataclass(frozen=True, eq=False)
class PathSpec:
    """One equivariant path of a PiNet2 block (vectors or rank-2 tensors).

    Attributes:
        pp: the linear map (no bias) of the summed pair terms to the new features.
        pair_i, pair_j: the weighted style's mixings of P_i and P_j in the pair term (``None``: the
            unweighted P_j, or the first block, which has no incoming features).
        dot_a, dot_b: the weighted style's mixings of the two factors of the dot product (``None``: Σ V V).
    """

    pp: LayerSpec
    pair_i: Optional[LayerSpec] = None
    pair_j: Optional[LayerSpec] = None
    dot_a: Optional[LayerSpec] = None
    dot_b: Optional[LayerSpec] = None


@dataclass(frozen=True, eq=False)
class PiNet2BlockSpec:
    """One PiNet2 block with its output net (the equations: :mod:`pinn.networks.pinet2`).

    Attributes:
        pi: the pair-interaction layers on [P1_i, P1_j]; the last one (linear) gives n_pi · n_basis weights.
        ii: the interaction layers (activated, no bias); the last one 1, 2 or 3 × ``n_inter`` wide.
        pp: the layers on the summed interactions (activated, no bias).
        mix: the mixing net on [Q, D3, D5] (activated, with bias).
        out: the output net's hidden layers; units: the output layer (linear, no bias).
        residual: the linear map of P1 when its width changes, else ``None``.
        paths: the :class:`PathSpec` of the vectors and of the rank-2 tensors (``None`` below the rank).
        n_inter: channels per part of the interactions (``ii_nodes[-1]``).
    """

    pi: Tuple[LayerSpec, ...]
    ii: Tuple[LayerSpec, ...]
    pp: Tuple[LayerSpec, ...]
    mix: Tuple[LayerSpec, ...]
    out: Tuple[LayerSpec, ...]
    units: LayerSpec
    residual: Optional[LayerSpec]
    paths: Tuple[Optional[PathSpec], Optional[PathSpec]]
    n_inter: int


@dataclass(frozen=True, eq=False)
class PiNet2Spec(PotentialSpec):
    """A PiNet2 potential: :class:`PotentialSpec`'s fields with :class:`PiNet2BlockSpec` blocks."""

    blocks: Tuple[PiNet2BlockSpec, ...]

    def layers(self):
        """Every layer in the kernels' order (that of :meth:`arrays`)."""
        for block in self.blocks:
            yield from block.pi + block.ii + block.pp + block.mix + block.out
            yield block.units
            if block.residual is not None:
                yield block.residual
            for path in block.paths:
                if path is not None:
                    yield from (layer for layer in (path.pair_i, path.pair_j, path.pp, path.dot_a, path.dot_b)
                                if layer is not None)

    def arrays(self):
        """The kernels' arrays (:data:`ARRAY_KEYS`), as :meth:`PiNetSpec.arrays`' but with the columns
        ``layout.B2_*`` in ``blocks`` (:mod:`pinn.engines.numba.pinet2_kernels`)."""
        packer = _Packer(self.dtype)
        blocks = []
        widths = [self.n_basis]
        for block in self.blocks:
            row = [-1] * (B2_PATH + PATH_COLUMNS * len(PATH_COMPONENTS))
            for first, count, group in ((B2_PI, B2_N_PI, block.pi), (B2_II, B2_N_II, block.ii),
                                        (B2_PP, B2_N_PP, block.pp), (B2_MIX, B2_N_MIX, block.mix),
                                        (B2_OUT, B2_N_OUT, block.out)):
                row[first], row[count] = packer.group(group)
            row[B2_UNITS] = packer.layer(block.units)
            row[B2_RESIDUAL] = packer.layer(block.residual)
            row[B2_N_INTER] = block.n_inter
            for k, path in enumerate(block.paths):
                if path is not None:
                    col = B2_PATH + PATH_COLUMNS * k
                    for column, layer in ((PATH_PAIR_I, path.pair_i), (PATH_PAIR_J, path.pair_j),
                                          (PATH_PP, path.pp), (PATH_DOT_A, path.dot_a), (PATH_DOT_B, path.dot_b)):
                        row[col + column] = packer.layer(layer)
            for spec in block.pi + block.ii + block.pp + block.mix + block.out:
                widths += [spec.n_in, spec.n_out]
            blocks.append(row)
        return packer.arrays(self, blocks, max(widths) + 1, "PiNet2", [1, 1, 1])
