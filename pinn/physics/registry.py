"""The models by their params name (``params['model']['name']``)."""
from pinn.physics.embedding_kinds import embedding_of
from pinn.physics.dipole import ACDipoleModel, DipoleModel
from pinn.physics.dipole_variants import VARIANTS
from pinn.physics.polarizability import POLARIZABILITY_MODELS
from pinn.physics.embedded_potential import POTENTIAL_KINDS
from pinn.physics.potential import PotentialModel

MODELS = {"potential_model": PotentialModel, "dipole_model": DipoleModel,
          # upstream PiNN 2.x's dipole models (pinn.physics.dipole, pinn.physics.dipole_variants)
          "AC_dipole_model": ACDipoleModel, **VARIANTS,
          # upstream PiNN 2.x's polarizability models (pinn.physics.polarizability)
          **POLARIZABILITY_MODELS}
#: upstream PiNN 2.x's models that pinn does not have yet: name → what it is
NOT_YET = {name: "one of upstream PiNN 2.x's dipole models" for name in (
    "AC_quadrupole_model", "combined_dipole_model")}



def model_class(params):
    """The model class of resolved ``params``: ``MODELS[model.name]``, and for the potential model the class of
    its embedding (:data:`pinn.physics.embedded_potential.POTENTIAL_KINDS`, the kind read by
    :func:`pinn.physics.embedding_kinds.embedding_of`)."""
    cls = MODELS[params["model"]["name"]]
    if cls is PotentialModel:
        return POTENTIAL_KINDS[embedding_of(params["model"]["params"])]
    return cls


def build_model(params):
    """The model that resolved ``params`` name (``params['model']['name']``), on a network built from
    ``params['network']``, in ``params['precision']`` (mixed: float32 weights, the network's matrix
    products in the low precision), with its initial weights.

    Args:
        params: resolved params (:func:`pinn.params.resolve`).

    Returns:
        the model (a :class:`~pinn.physics.base.Model`); its ``network`` attribute is the network.
    """
    from pinn.networks import get_network
    from pinn.networks.layers import precision_dtypes
    network = get_network(params)
    return model_class(params)(network, params["model"]["params"], network.atom_types,
                               precision_dtypes(params["precision"])[0])
