"""Upstream PiNN 2.x's module name of its polarizability models (``from pinn.models import pol_models``):
pinn's are in :mod:`pinn.physics.polarizability`, by the same model names."""
from pinn.physics.polarizability import (ACKS2IsoModel, ACKS2Model, EEMIsoModel, EEMModel, EtaInvIsoModel,  # noqa: F401
                                        EtaInvModel, LocalChiIsoModel, LocalChiModel, LocalIsoModel, LocalModel,
                                        POLARIZABILITY_MODELS)

__all__ = ["ACKS2IsoModel", "ACKS2Model", "EEMIsoModel", "EEMModel", "EtaInvIsoModel", "EtaInvModel",
           "LocalChiIsoModel", "LocalChiModel", "LocalIsoModel", "LocalModel", "POLARIZABILITY_MODELS"]
