"""Params: their schema, their resolution and upstream PiNN's sections in pinn's terms.

- :mod:`pinn.params.schema`: ``Option``, ``ParamsError``, ``validate_section``: how every stage
  declares its options (the stages import it; it imports nothing of pinn);
- :mod:`pinn.params.resolution`: :func:`resolve` (once: defaults, every section, the cross-field
  checks) and the ``params.yml`` of a model directory;
- :mod:`pinn.params.upstream`: upstream PiNN 2.x's ``optimizer`` section and network defaults.

The names below import on first use (:mod:`pinn.lazy`), so ``import pinn.params.schema`` from a
network or a reader imports nothing else.
"""
from pinn.lazy import lazy_exports

_RESOLUTION = ("ResolvedParams", "legacy", "model_schema", "read_params", "resolve", "read_params_file",
               "resolve_network", "network_params", "write_params", "TOP_LEVEL", "PARAMS_FORMAT")
_EXPORTS = {**{name: "pinn.params.resolution" for name in _RESOLUTION},
            **{name: "pinn.params.schema" for name in ("ParamsError", "Option", "describe")}}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
