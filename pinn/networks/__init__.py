"""Networks: ``tf.Module``s mapping a neighbor graph to atomic outputs [n_atoms, out_units].

- :class:`PiNet` (``'PiNet'``), :class:`PiNet2` (``'PiNet2'``, also upstream's earlier name
  ``'NewPiNet2'``), :class:`BPNN` (``'BPNN'``), :class:`LJ` (``'LJ'``).

Each has a ``PARAMS`` schema; build one from resolved params with :func:`get_network`, from
upstream PiNN's network spec ``{'name': ..., 'params': {...}}`` with ``pinn.get_network``, or with
upstream's arguments (``PiNet(atom_types=[1, 8], rc=4.5)``; :mod:`pinn.networks.base`).
"""
import tensorflow as tf

from pinn.networks.bpnn import BPNN
from pinn.networks.lj import LJ
from pinn.networks.pinet import PiNet
from pinn.networks.pinet2 import PiNet2

NETWORKS = {"PiNet": PiNet, "PiNet2": PiNet2, "BPNN": BPNN, "LJ": LJ}
#: upstream PiNN 2.x's networks that pinn does not have yet: lower-case name → what it is
NOT_YET = {}
_ALIASES = {name.lower(): name for name in NETWORKS}
# NewPiNet2: upstream's earlier name of PiNet2 (its polarizability inputs use it)
_ALIASES.update({"bpnn": "BPNN", "behler_parrinello": "BPNN", "lj": "LJ", "pinet": "PiNet", "pinet2": "PiNet2",
                 "newpinet2": "PiNet2"})


def canonical_network_name(name):
    """Return the registered name for ``name`` (case-insensitive), or ``None``."""
    return _ALIASES.get(str(name).lower())


def get_network(params):
    """Build the network of resolved ``params`` (see :func:`pinn.params.resolve`; for upstream PiNN's
    network spec ``{'name': ..., 'params': {...}}`` use ``pinn.get_network``)."""
    from pinn.networks.layers import precision_dtypes
    cls = NETWORKS[params["network"]["name"]]
    dtype, compute = precision_dtypes(params["precision"])
    return cls(params["network"]["params"], dtype=dtype, seed=params["seed"], compute_dtype=compute)


def atom_types_of(params):
    """The atomic numbers the network of resolved ``params`` knows, read from its section without building it
    (what the data are checked against before the model exists)."""
    return NETWORKS[params["network"]["name"]].atom_types_of(params["network"]["params"])


__all__ = ["PiNet", "PiNet2", "BPNN", "LJ", "NETWORKS", "NOT_YET", "get_network", "canonical_network_name",
           "atom_types_of"]
