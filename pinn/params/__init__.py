"""Params: their schema, their resolution and upstream PiNN's sections in pinn's terms.

- :mod:`pinn.schema`: ``Option``, ``ParamsError``, ``validate_section``: how every stage
  declares its options (the stages import it; it imports nothing of pinn);
- :mod:`pinn.params.resolution`: :func:`resolve` (once: defaults, every section, the cross-field
  checks) and the ``params.yml`` of a model directory;
- :mod:`pinn.params.upstream`: upstream PiNN 2.x's ``optimizer`` section and network defaults.

The names below import on first use (:mod:`pinn.runtime.lazy`), so ``import pinn.schema`` from a
network or a reader imports nothing else.
"""
from pinn.runtime.lazy import lazy_exports

_EXPORTS = {
    "ResolvedParams": "pinn.params.resolution", "legacy": "pinn.params.resolution",
    "model_schema": "pinn.params.resolution", "read_params": "pinn.params.resolution",
    "resolve": "pinn.params.resolution", "read_params_file": "pinn.params.resolution",
    "resolve_network": "pinn.params.resolution", "network_params": "pinn.params.resolution",
    "write_params": "pinn.params.resolution", "TOP_LEVEL": "pinn.params.resolution",
    "PARAMS_FORMAT": "pinn.params.resolution",
    "ParamsError": "pinn.schema", "Option": "pinn.schema", "describe": "pinn.schema",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
