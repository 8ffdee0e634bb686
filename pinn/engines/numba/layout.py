"""The layout of a PiNet or PiNet2 lowered for the Numba kernels, in one place, with named indices and codes.

The kernels (:mod:`pinn.engines.numba.md_kernels`, :mod:`pinn.engines.numba.train_kernels`) run
PiNet, :mod:`pinn.engines.numba.pinet2_kernels` PiNet2; :meth:`pinn.engines.spec.PiNetSpec.arrays` (and
``PiNet2Spec``'s) pack a network into these arrays:

- ``flat``: every weight tensor, one after another; ``table[t] = (offset, rows, cols)`` of tensor ``t``.
- ``layers[l]``: one dense layer, columns :data:`LAYER_KERNEL`, :data:`LAYER_BIAS` (tensor ids; a
  layer without a bias has a zero one), :data:`LAYER_ACTIVATED` (0/1), :data:`LAYER_N_OUT`.
- ``blocks[d]``: one interaction block, columns ``BLOCK_*``: the first layer and the number of
  layers of each of its networks, the layer of its units and of its residual (-1: none), its
  input and output widths, the first column of its outputs among the atoms' values.
- ``codes``: :data:`CODE_ACT` (:data:`ACT_CODES`, or :data:`TANH_FAST`), :data:`CODE_CUTOFF`
  (:data:`CUTOFF_CODES`), :data:`CODE_BASIS` (:data:`BASIS_CODES`), :data:`CODE_N_BASIS`,
  :data:`CODE_WIDTH` (the widest layer plus one).

Kernels read these names as compile-time constants (Numba freezes module globals).
"""

#: activation codes (one activation for the whole network, as PiNet has)
ACT_CODES = {"tanh": 0, "ssp": 1, "softplus": 2, "swish": 3, "silu": 3, "relu": 4, "linear": 5}
#: the identity, for a layer that is not activated
LINEAR = ACT_CODES["linear"]
#: tanh by a rational approximation (float32 models)
TANH_FAST = 6
#: cutoff function codes
CUTOFF_CODES = {"f1": 0, "cosine": 0, "f2": 1, "hip": 2, "polynomial": 3}
#: radial basis codes
BASIS_CODES = {"polynomial": 0, "gaussian": 1}

#: columns of ``codes``
CODE_ACT, CODE_CUTOFF, CODE_BASIS, CODE_N_BASIS, CODE_WIDTH = range(5)

#: columns of ``layers``
LAYER_KERNEL, LAYER_BIAS, LAYER_ACTIVATED, LAYER_N_OUT = range(4)

#: columns of ``blocks``: first layer and number of layers of the atoms' network (PP), the
#: pair-interaction network (PI), the interaction network (II) and the output network (OUT); the
#: layer of the units and of the residual (-1: none); the input and output widths; the first column
#: of the block's outputs
(BLOCK_PP, BLOCK_N_PP, BLOCK_PI, BLOCK_N_PI, BLOCK_II, BLOCK_N_II, BLOCK_OUT, BLOCK_N_OUT, BLOCK_UNITS,
 BLOCK_RESIDUAL, BLOCK_WIDTH_IN, BLOCK_WIDTH_OUT, BLOCK_Z_OUT) = range(13)

#: the column of ``codes`` that names the network the arrays hold (:data:`NETWORK_CODES`); PiNet's arrays
#: written before it have five columns, read as PiNet
CODE_NETWORK = 5
#: network codes
NETWORK_CODES = {"PiNet": 0, "PiNet2": 1}

#: columns of a PiNet2 network's ``blocks`` (:mod:`pinn.engines.numba.pinet2_kernels`): first layer and
#: number of layers of the pair-interaction net (PI), the interaction net (II, its last layer 1, 2 or 3
#: parts of :data:`B2_N_INTER` channels), the atoms' net on the summed interactions (PP), the mixing net
#: (MIX) and the output net (OUT); the layer of the units and of the residual (-1: none); the channels
#: per part of the interactions; then :data:`PATH_COLUMNS` columns per equivariant path (vectors, then
#: rank-2 tensors) from :data:`B2_PATH` on
(B2_PI, B2_N_PI, B2_II, B2_N_II, B2_PP, B2_N_PP, B2_MIX, B2_N_MIX, B2_OUT, B2_N_OUT, B2_UNITS, B2_RESIDUAL,
 B2_N_INTER, B2_PATH) = range(14)
#: columns of one equivariant path, from ``B2_PATH + PATH_COLUMNS * path``: the layers of the weighted pair
#: mixings of P_i and P_j, of the linear map of the summed pair terms, and of the weighted dot product's two
#: mixings (-1: none; the path itself absent when its ``PATH_PP`` is -1)
PATH_PAIR_I, PATH_PAIR_J, PATH_PP, PATH_DOT_A, PATH_DOT_B = range(5)
PATH_COLUMNS = 5
#: equivariant paths: the components of their features (3: vectors, 5: traceless symmetric tensors)
PATH_COMPONENTS = (3, 5)
