"""A PiNet potential as the Numba engines see it: a typed specification with named fields.

:func:`pinn.engines.lowering.lower` reads a TensorFlow PiNet potential into a
:class:`PiNetSpec` (its settings and its layers' weights, block by block); :meth:`PiNetSpec.arrays`
packs it into the flat arrays and index tables that the kernels take
(:data:`ARRAY_KEYS`).  The MD engine and the training engine are both built from it, so
the layout of the kernels' tables is written in one place: here.
"""
from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

from pinn.engines.numba.layout import (ACT_CODES, TANH_FAST, CUTOFF_CODES, BASIS_CODES, BLOCK_PP, BLOCK_N_PP,
                                       BLOCK_PI, BLOCK_N_PI, BLOCK_II, BLOCK_N_II, BLOCK_OUT, BLOCK_N_OUT,
                                       BLOCK_UNITS, BLOCK_RESIDUAL, BLOCK_WIDTH_IN, BLOCK_WIDTH_OUT,
                                       BLOCK_Z_OUT)

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
class PiNetSpec:
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

    activation: str
    cutoff: str
    basis: str
    n_basis: int
    rc: float
    gamma: float
    output_scale: float
    atom_types: Tuple[int, ...]
    e_dress: np.ndarray
    blocks: Tuple[BlockSpec, ...]
    dtype: np.dtype

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

    def sources(self):
        """The ``tf.Variable`` behind each tensor of :meth:`arrays`' ``flat``, in its order (``None`` for
        the zero bias of a layer without one)."""
        out = []
        for layer in self.layers():
            out += [layer.kernel_source, layer.bias_source]
        return out

    def arrays(self):
        """The kernels' arrays (:data:`ARRAY_KEYS`).

        Returns:
            dict: ``flat`` (every weight, one array of the model's precision), ``table`` (offset,
            rows, columns of each tensor in ``flat``), ``layers`` (kernel tensor, bias tensor,
            activated, width of each layer), ``blocks`` (the positions of each block's layers,
            columns named by ``layout.BLOCK_*``), ``codes`` (activation, cutoff, basis, n_basis,
            widest layer + 1), ``scal`` (rc in Å, gamma, output_scale), ``type_of`` (atomic number →
            index, -1 for unknown), ``e_dress`` (eV), ``workspace`` (scratch sizes).
        """
        dtype = np.dtype(self.dtype)
        tensors = []
        layers = []
        blocks = []
        offset = 0

        def tensor(value):
            nonlocal offset
            value = np.asarray(value, dtype=dtype)
            value = value.reshape(value.shape[0], -1) if value.ndim == 2 else value.reshape(1, -1)
            tensors.append((offset, value.shape[0], value.shape[1], value))
            offset += value.size
            return len(tensors) - 1

        def layer(spec):
            bias = spec.bias if spec.bias is not None else np.zeros(spec.n_out)
            layers.append((tensor(spec.kernel), tensor(bias), int(spec.activated), spec.n_out))
            return len(layers) - 1

        widths = [self.n_basis]
        zpair_rows = zatom_cols = 0
        for block in self.blocks:
            row = [0] * 13
            for first, count, group in ((BLOCK_PP, BLOCK_N_PP, block.pp), (BLOCK_PI, BLOCK_N_PI, block.pi),
                                        (BLOCK_II, BLOCK_N_II, block.ii), (BLOCK_OUT, BLOCK_N_OUT, block.out)):
                row[first] = len(layers)
                row[count] = len(group)
                for spec in group:
                    layer(spec)
            row[BLOCK_UNITS] = layer(block.units)
            row[BLOCK_RESIDUAL] = layer(block.residual) if block.residual is not None else -1
            row[BLOCK_WIDTH_IN] = block.n_in
            row[BLOCK_WIDTH_OUT] = block.n_out
            pp_cols = sum(spec.n_out for spec in block.pp)
            row[BLOCK_Z_OUT] = pp_cols
            zatom_cols = max(zatom_cols, pp_cols + sum(spec.n_out for spec in block.out))
            zpair_rows = max(zpair_rows, sum(spec.n_out for spec in block.pi[:-1] + block.ii))
            for spec in block.pi + block.pp + block.ii + block.out:
                widths += [spec.n_in, spec.n_out]
            blocks.append(row)
        flat = np.zeros(offset, dtype)
        for start, rows, cols, value in tensors:
            flat[start:start + rows * cols] = value.ravel()
        act = ACT_CODES[self.activation]
        if act == ACT_CODES["tanh"] and dtype == np.float32:
            act = TANH_FAST
        type_of = np.full(max(self.atom_types) + 1, -1, np.int64)
        type_of[list(self.atom_types)] = np.arange(len(self.atom_types))
        n_first = max(block.pi[0].n_out for block in self.blocks)
        return {
            "flat": flat,
            "table": np.array([t[:3] for t in tensors], np.int64),
            "layers": np.array(layers, np.int64),
            "blocks": np.array(blocks, np.int64),
            "codes": np.array([act, CUTOFF_CODES[self.cutoff], BASIS_CODES[self.basis], self.n_basis,
                               max(widths) + 1], np.int64),
            "scal": np.array([self.rc, self.gamma, self.output_scale], np.float64),
            "type_of": type_of,
            "e_dress": np.asarray(self.e_dress, np.float64),
            "workspace": np.array([max(zpair_rows, 1), max(zatom_cols, 1), n_first], np.int64),
        }
