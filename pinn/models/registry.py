"""The models by their params name (``params['model']['name']``)."""
from pinn.models.dipole import ACDipoleModel, DipoleModel
from pinn.models.dipole_variants import VARIANTS
from pinn.models.polarizability import POLARIZABILITY_MODELS
from pinn.models.potential import PotentialModel

MODELS = {"potential_model": PotentialModel, "dipole_model": DipoleModel,
          # upstream PiNN 2.x's dipole models (pinn.models.dipole, pinn.models.dipole_variants)
          "AC_dipole_model": ACDipoleModel, **VARIANTS,
          # upstream PiNN 2.x's polarizability models (pinn.models.polarizability)
          **POLARIZABILITY_MODELS}
#: upstream PiNN 2.x's models that pinn does not have yet: name → what it is
NOT_YET = {name: "one of upstream PiNN 2.x's dipole models" for name in (
    "AC_quadrupole_model", "combined_dipole_model")}

