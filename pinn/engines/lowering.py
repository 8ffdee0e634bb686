"""The one boundary between TensorFlow models and the Numba engines.

:func:`capability` answers, for the MD engine (``'md'``: energy, forces, stress;
:class:`pinn.engines.md.FastPiNet`) or the training engine (``'training'``: the loss
gradients; :class:`pinn.engines.gradients.TrainingEngine`), whether it can run a model:
with the model lowered to a :class:`~pinn.engines.spec.PiNetSpec`, or with the reason it
cannot, naming the setting.  Every path asks it (``get_calc``, training with
``engine: auto``, the engine-weights file); a model an engine cannot run runs in
TensorFlow, with the reason in the log.  :func:`lower` reads a TensorFlow PiNet or PiNet2 potential
into the specification; everything that reads the TensorFlow modules for an engine is here.
"""
from dataclasses import dataclass
from typing import Optional

import numpy as np

from pinn.engines.numba.md_kernels import available
from pinn.engines.spec import (ACTIVATIONS, BASES, CUTOFFS, BlockSpec, LayerSpec, PathSpec, PiNet2BlockSpec, PiNet2Spec,
                               PiNetSpec)

#: the ``network.params`` of PiNet that the lowering reads; any other option is refused, since
#: the kernels would ignore it
LOWERED_PINET_PARAMS = frozenset({"atom_types", "rc", "depth", "pp_nodes", "pi_nodes", "ii_nodes", "out_nodes",
                                  "out_units", "act", "basis_type", "n_basis", "gamma", "cutoff_type", "center",
                                  "out_pool"})
#: the ``network.params`` of PiNet2 that the lowering reads (``out_extra``: heads the potential's energy
#: does not read, so the MD engine leaves them out)
LOWERED_PINET2_PARAMS = LOWERED_PINET_PARAMS | {"rank", "weighted", "out_extra"}
#: what each engine computes
PURPOSES = {"md": "the numba MD engine", "training": "the numba training engine"}
#: activations the training engine's hand-derived second derivatives cover
TRAINING_ACTIVATIONS = ("tanh",)


@dataclass(frozen=True, eq=False)
class Capability:
    """The answer of :func:`capability`: the lowered model, or why not.

    Attributes:
        spec: the :class:`~pinn.engines.spec.PiNetSpec` (``None`` when refused).
        reason: why the engine cannot run the model, naming the setting (``None`` when it can).
    """

    spec: Optional[PiNetSpec]
    reason: Optional[str]

    def __bool__(self):
        return self.spec is not None


def potential_of(model):
    """The :class:`~pinn.physics.potential.PotentialModel` of ``model`` (a Trainer, an inference handle,
    or the model itself), else ``None``."""
    from pinn.physics.potential import PotentialModel
    model = model if isinstance(model, PotentialModel) else getattr(model, "model", None)
    return model if isinstance(model, PotentialModel) else None


#: potential-model loss options (upstream PiNN's) that the numba training engine does not implement
UNLOWERED_LOSS_OPTIONS = ("use_e_per_sqrt", "max_energy", "use_e_weight", "max_force_comp", "no_force_comp",
                          "use_f_weight", "use_l2")


def refusal(model, purpose="md"):
    """Why the ``purpose`` engine cannot run ``model``, or ``None`` when it can (without lowering it).

    Args:
        model: a potential model, a Trainer or an inference handle.
        purpose: ``'md'`` or ``'training'``.

    Returns:
        ``None``, or a message naming the setting that is not supported.
    """
    from pinn.networks.pinet import PiNet
    from pinn.networks.pinet2 import PiNet2
    if purpose not in PURPOSES:
        raise ValueError(f"purpose must be one of {sorted(PURPOSES)}, got {purpose!r}")
    engine = PURPOSES[purpose]
    if not available():
        return f"{engine} needs Numba (pip install numba)"
    potential = potential_of(model)
    if potential is None:
        return f"{engine} runs potential models with a PiNet or PiNet2 network only"
    if potential.embedding.sees_environment and purpose == "training":
        return (f"model.params.embedding {potential.embedding.name!r}: {engine} implements the QM region "
                "alone (the electrostatic embedding trains in TensorFlow)")
    network = type(potential.network)  # exactly these classes: the kernels implement their equations only
    if network not in (PiNet, PiNet2):
        return (f"{engine} runs potential models with a PiNet or PiNet2 network only, not "
                f"{network.__name__} (which runs in TensorFlow)")
    p = potential.network.params
    unknown = sorted(set(p) - (LOWERED_PINET2_PARAMS if network is PiNet2 else LOWERED_PINET_PARAMS))
    if unknown:
        return f"network.params.{unknown[0]}: {engine} does not implement this option"
    for key in ("center", "out_pool"):  # read here: only their defaults (evenly spaced centers, atomic outputs)
        if p[key] not in (None, False):
            return f"network.params.{key}: {engine} does not implement {p[key]!r}"
    for key, implemented in (("act", ACTIVATIONS), ("cutoff_type", CUTOFFS), ("basis_type", BASES)):
        if p[key] not in implemented:
            return f"network.params.{key}: {engine} does not implement {p[key]!r} (it has {list(implemented)})"
    if purpose == "training":
        if potential.network.compute_dtype is not None:
            return (f"precision mixed_{potential.network.compute_dtype.name}: {engine} computes in the weights' "
                    "precision; mixed precision trains with the tensorflow engine")
        if p["act"] not in TRAINING_ACTIVATIONS:
            return f"network.params.act: {engine} supports {list(TRAINING_ACTIVATIONS)} only, not {p['act']!r}"
        if len(p["pi_nodes"]) < 2:
            return f"network.params.pi_nodes: {engine} needs at least one hidden PI layer (2 sizes)"
        if network is PiNet2 and p["out_extra"]:
            return (f"network.params.out_extra: {engine} trains the energy's weights only (the extra heads "
                    "train in TensorFlow)")
        if potential.params["use_stress"]:
            return f"model.params.use_stress: {engine} trains on energies and forces only"
        for key in UNLOWERED_LOSS_OPTIONS:
            if potential.params[key] not in (False, None):
                return f"model.params.{key}: {engine} does not implement this loss option"
    return None


def capability(model, purpose="md"):
    """Whether the ``purpose`` engine can run ``model``, with the model lowered when it can.

    Args:
        model: a potential model, a Trainer or an inference handle (its current weights are read:
            inside ``averaged_weights()`` for the averaged ones).
        purpose: ``'md'`` or ``'training'``.

    Returns:
        :class:`Capability`: ``spec`` (a :class:`~pinn.engines.spec.PiNetSpec`) or ``reason``.
    """
    reason = refusal(model, purpose)
    return Capability(None, reason) if reason else Capability(lower(potential_of(model)), None)


def _layer(dense, activated):
    """A dense layer's current weights as a :class:`~pinn.engines.spec.LayerSpec` (``None`` for ``None``)."""
    if dense is None:
        return None
    bias = dense.bias.numpy() if dense.bias is not None else None
    return LayerSpec(dense.kernel.numpy(), bias, activated, dense.kernel, dense.bias)


def _common(model):
    """The settings a PiNet and a PiNet2 specification share, as keyword arguments."""
    net = model.network
    p = net.params
    return dict(activation=p["act"], cutoff=p["cutoff_type"], basis=p["basis_type"], n_basis=int(p["n_basis"]),
                rc=float(p["rc"]), gamma=float(p["gamma"]), output_scale=1.0 / float(model.params["e_scale"]),
                atom_types=tuple(int(z) for z in net.element_index.atom_types),
                e_dress=np.asarray(model.e_dress.numpy(), np.float64), dtype=np.dtype(model.dtype.as_numpy_dtype))


def lower(model):
    """A PiNet or PiNet2 potential's settings and current weights as a :class:`~pinn.engines.spec.PiNetSpec`
    or :class:`~pinn.engines.spec.PiNet2Spec`.

    Args:
        model: a :class:`~pinn.physics.potential.PotentialModel` with a PiNet or PiNet2 network (see
            :func:`capability`, which checks that first).

    Returns:
        the specification (weights copied as NumPy arrays; each layer names the ``tf.Variable`` it came from).
    """
    from pinn.networks.pinet2 import PiNet2
    if isinstance(model.network, PiNet2):
        return _lower_pinet2(model)
    net = model.network
    blocks = []
    for d, block in enumerate(net.blocks):
        out_ff, units = net.outputs[d]
        pi = [_layer(dense, True) for dense in block.pi_hidden.layers] + [_layer(block.pi_out, False)]
        blocks.append(BlockSpec(pp=tuple(_layer(dense, True) for dense in block.pp.layers), pi=tuple(pi),
                                ii=tuple(_layer(dense, True) for dense in block.ii.layers),
                                out=tuple(_layer(dense, True) for dense in out_ff.layers),
                                units=_layer(units, False), residual=_layer(net.residual[d], False),
                                n_pi=int(block.n_pi)))
    return PiNetSpec(blocks=tuple(blocks), **_common(model))


def _lower_pinet2(model):
    """:func:`lower` of a PiNet2 potential: a :class:`~pinn.engines.spec.PiNet2Spec`."""
    net = model.network
    blocks = []
    for d, block in enumerate(net.blocks):
        out_ff, units = net.outputs[d]
        paths = []
        for name in ("vectors", "tensors"):
            path = getattr(block, name, None)
            if path is None:
                paths.append(None)
                continue
            paths.append(PathSpec(pp=_layer(path.pp, False), pair_i=_layer(getattr(path, "pair_i", None), False),
                                  pair_j=_layer(getattr(path, "pair_j", None), False),
                                  dot_a=_layer(getattr(path, "dot_a", None), False),
                                  dot_b=_layer(getattr(path, "dot_b", None), False)))
        pi = [_layer(dense, True) for dense in block.pi.hidden.layers] + [_layer(block.pi.last, False)]
        blocks.append(PiNet2BlockSpec(pi=tuple(pi), ii=tuple(_layer(dense, True) for dense in block.ii.layers),
                                      pp=tuple(_layer(dense, True) for dense in block.pp.layers),
                                      mix=tuple(_layer(dense, True) for dense in block.mix.layers),
                                      out=tuple(_layer(dense, True) for dense in out_ff.layers),
                                      units=_layer(units, False), residual=_layer(net.residual[d], False),
                                      paths=tuple(paths), n_inter=int(block.n_out)))
    return PiNet2Spec(blocks=tuple(blocks), **_common(model))


def supports(model):
    """Whether the MD engine can run ``model`` (see :func:`refusal`)."""
    return refusal(model, "md") is None


def check_supported(model):
    """Why the training engine cannot train ``model``, or ``None`` when it can (see :func:`refusal`)."""
    return refusal(model, "training")


def pinet_arrays(model):
    """The MD engine's arrays of a PiNet or PiNet2 potential (a model, a Trainer or an inference handle):
    :meth:`~pinn.engines.spec.PiNetSpec.arrays` of its lowered specification.

    Raises:
        ValueError: the MD engine cannot run it (the reason).
    """
    answer = capability(model, "md")
    if not answer:
        raise ValueError(answer.reason)
    return answer.spec.arrays()
