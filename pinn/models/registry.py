"""The models by their params name (``params['model']['name']``)."""
from pinn.models.dipole import DipoleModel
from pinn.models.potential import PotentialModel

MODELS = {"potential_model": PotentialModel, "dipole_model": DipoleModel}
