"""The one boundary between TensorFlow models and the Numba engines.

:func:`supports` and :func:`check_supported` answer whether the MD engine
(:class:`pinn.engines.md.FastPiNet`) and the training engine
(:class:`pinn.engines.training.TrainingEngine`) can run a model, and
:func:`pinet_arrays` lowers a PiNet potential's weights and settings to the NumPy
arrays that the kernels (:mod:`pinn.engines.numba`) take.  Everything that reads the
TensorFlow modules for an engine is here; the kernels import NumPy and Numba only.
"""
import numpy as np

from pinn.engines.numba.md_kernels import (_ACT_CODES, _B_II, _B_NII, _B_NOUT, _B_NPI, _B_NPP, _B_OUT, _B_PI,
                                           _B_PP, _B_RES, _B_UNITS, _B_WIN, _B_WOUT, _B_ZOUT, _BASIS_CODES,
                                           _CUTOFF_CODES, _TANH_FAST, available)


def _potential(model):
    """The :class:`~pinn.models.potential.PotentialModel` of a Trainer (or the model itself), else None."""
    from pinn.models.potential import PotentialModel
    model = model if isinstance(model, PotentialModel) else getattr(model, "model", None)
    return model if isinstance(model, PotentialModel) else None


def supports(model):
    """Whether :class:`FastPiNet` can evaluate ``model`` (a Trainer or a PotentialModel): a potential
    model with a PiNet network, with Numba installed."""
    from pinn.networks.pinet import PiNet
    potential = _potential(model)
    return available() and potential is not None and isinstance(potential.network, PiNet)


def pinet_arrays(model, sources=None):
    """Everything :class:`FastPiNet` needs of a PiNet potential, as NumPy arrays.

    Args:
        model: a :class:`pinn.trainer.Trainer` of a potential model with a PiNet network, or
            the :class:`~pinn.models.potential.PotentialModel` itself; its current weights are
            read (inside ``trainer.averaged_weights()`` for the averaged ones).
        sources: an empty list, or None; a list is filled with the ``tf.Variable`` each tensor of
            ``flat`` was copied from, in the order of ``table`` (None for the zero bias of a layer
            without one): how the training engine (:mod:`pinn.engines.training`) maps weights to variables.

    Returns:
        dict of NumPy arrays (the keys of :data:`ARRAY_KEYS`): the weights in one flat array of
        the model's precision (``flat``) with the tables that index it, the network's codes and
        scalars (rc in Å, gamma, e_scale), the element table and the per-element energy offsets
        (eV).  :func:`pinn.exported.save_engine_weights` writes them to a file.
    """
    if not supports(model):
        raise ValueError("the fast engine evaluates potential models with a PiNet network only")
    model = _potential(model)
    net = model.network
    p = net.params
    if p["act"] not in _ACT_CODES:
        raise ValueError(f"activation {p['act']!r} is not supported by the fast engine")
    dtype = np.dtype(model.dtype.as_numpy_dtype)
    act = _ACT_CODES[p["act"]]
    if act == 0 and dtype == np.float32:
        act = _TANH_FAST
    n_basis = int(p["n_basis"])
    tensors, layers, blocks = [], [], []
    offset = [0]

    def tensor(value, source):
        if sources is not None:
            sources.append(source)
        value = np.asarray(value, dtype=dtype)
        value = value.reshape(value.shape[0], -1) if value.ndim == 2 else value.reshape(1, -1)
        tensors.append((offset[0], value.shape[0], value.shape[1], value))
        offset[0] += value.size
        return len(tensors) - 1

    def layer(dense, activated):
        kernel = dense.kernel.numpy()
        bias = dense.bias.numpy() if dense.bias is not None else np.zeros(kernel.shape[1])
        layers.append((tensor(kernel, dense.kernel), tensor(bias, dense.bias), int(activated), kernel.shape[1]))
        return len(layers) - 1

    widths = [n_basis]
    zpair_rows, zatom_cols = 0, 0
    for d, block in enumerate(net.blocks):
        out_ff, units = net.outputs[d]
        residual = net.residual[d]
        row = [0] * 13
        row[_B_PP] = len(layers)
        for dense in block.pp.layers:
            layer(dense, True)
        row[_B_NPP] = len(block.pp.layers)
        pi_layers = block.pi_hidden.layers + [block.pi_out]
        row[_B_PI] = len(layers)
        for dense in pi_layers:
            layer(dense, dense is not block.pi_out)
        row[_B_NPI] = len(pi_layers)
        row[_B_II] = len(layers)
        for dense in block.ii.layers:
            layer(dense, True)
        row[_B_NII] = len(block.ii.layers)
        row[_B_OUT] = len(layers)
        for dense in out_ff.layers:
            layer(dense, True)
        row[_B_NOUT] = len(out_ff.layers)
        row[_B_UNITS] = layer(units, False)
        row[_B_RES] = layer(residual, False) if residual is not None else -1
        row[_B_WIN] = pi_layers[0].kernel.shape[0] // 2 if not block.pp.layers else \
            block.pp.layers[0].kernel.shape[0]
        row[_B_WOUT] = block.n_out
        pp_cols = sum(int(dense.kernel.shape[1]) for dense in block.pp.layers)
        row[_B_ZOUT] = pp_cols
        zatom_cols = max(zatom_cols, pp_cols + sum(int(dense.kernel.shape[1]) for dense in out_ff.layers))
        pi_rows = sum(int(dense.kernel.shape[1]) for dense in pi_layers[:-1])
        zpair_rows = max(zpair_rows, pi_rows + sum(int(dense.kernel.shape[1]) for dense in block.ii.layers))
        for dense in pi_layers + block.pp.layers + block.ii.layers + out_ff.layers:
            widths += list(dense.kernel.shape)
        blocks.append(row)
    flat = np.zeros(offset[0], dtype)
    for off, rows, cols, value in tensors:
        flat[off:off + rows * cols] = value.ravel()
    atom_types = net.element_index.atom_types
    type_of = np.full(max(atom_types) + 1, -1, np.int64)
    type_of[atom_types] = np.arange(len(atom_types))
    n_first = max(int(b.pi_hidden.layers[0].kernel.shape[1]) if b.pi_hidden.layers
                  else int(b.pi_out.kernel.shape[1]) for b in net.blocks)
    return {
        "flat": flat,
        "table": np.array([t[:3] for t in tensors], np.int64),
        "layers": np.array(layers, np.int64),
        "blocks": np.array(blocks, np.int64),
        "codes": np.array([act, _CUTOFF_CODES[p["cutoff_type"]], _BASIS_CODES[p["basis_type"]], n_basis,
                           max(widths) + 1], np.int64),
        "scal": np.array([float(p["rc"]), float(p["gamma"]), float(model.params["e_scale"])], np.float64),
        "type_of": type_of,
        "e_dress": np.asarray(model.e_dress.numpy(), np.float64),
        "workspace": np.array([max(zpair_rows, 1), max(zatom_cols, 1), n_first], np.int64),
    }


def check_supported(model):
    """Why the training engine cannot train ``model`` (a PotentialModel), or None when it can.

    Returns:
        None, or a message naming the param that is not supported.
    """
    if not available():
        return "the numba training engine needs Numba (pip install numba)"
    if not supports(model):
        return "the numba training engine trains potential models with a PiNet network only"
    net = model.network
    p = net.params
    if p["act"] != "tanh":
        return f"network.params.act: the numba training engine supports 'tanh' only, not {p['act']!r}"
    if len(p["pi_nodes"]) < 2:
        return "network.params.pi_nodes: the numba training engine needs at least one hidden PI layer (2 sizes)"
    if model.params["use_stress"]:
        return "model.params.use_stress: the numba training engine trains on energies and forces only"
    return None
