"""Upstream PiNN 2.x's dipole models beyond atomic charges: bond charges (BC) and their combinations.

See :mod:`pinn.models.dipole` for the family's physics and loss.  By upstream's names:

- ``BC_R_dipole_model``: bond charges, D = Σ_(ij) I_ij r_ij, with the regularisation (R) of the bond
  charges (``regularization``);
- ``AC_BC_R_dipole_model``: atomic charges and bond charges, D = Σ_i q_i r_i + Σ_(ij) I_ij r_ij.

Bond charges with PiNet: I_ij = Σ_t out_t(I^t_ij), a sum over the network's ``depth`` blocks t of an output
net (``out_nodes`` then one linear unit; no biases, so that a bond charge vanishes smoothly at the cutoff
as the interactions do) applied to the block's pair interactions I^t_ij (PiNet's II output).  The output
nets belong to the model (upstream's PiNet grows them with ``out_inter``); the atomic outputs (for AC)
are PiNet's own, from the same pass.  Only the part of I_ij that differs from I_ji moves charge
((I_ij − I_ji) r_ij for the two directions of a pair); PiNet's interactions of i→j and j→i differ
because its pair net sees [P_i, P_j] in order.
"""
import numpy as np
import tensorflow as tf

from pinn import keys as K
from pinn.models.base import COMMON_PARAMS
from pinn.models.dipole import (BOND_PARAMS, CHARGE_PARAMS, UNUSED_Q_MULTIPLIER, DipoleFamilyModel,
                                _family_params)
from pinn.networks.layers import Dense, FeedForward, cutoff, radial_basis, scatter_sum
from pinn.networks.pinet import PiNet
from pinn.schema import ParamsError

#: seed of the bond heads' initial weights (the same on every rank)
BOND_HEAD_SEED = 7


def pinet_pass(network, tensors):
    """PiNet's forward pass, keeping every block's pair interactions.

    The same operations as :meth:`pinn.networks.pinet.PiNet.__call__` (tested to give its outputs).

    Args:
        network: a :class:`~pinn.networks.pinet.PiNet`.
        tensors: batch with ``elems``, ``ind_2`` and ``dist`` (Å).

    Returns:
        (atomic outputs [n_atoms, out_units], list over blocks of the interactions [n_pairs, ii_nodes[-1]]).
    """
    p = network.params
    idx = network.element_index(tensors[K.ELEMS])
    prop = tf.one_hot(idx, network.n_types, dtype=tensors[K.DIST].dtype)
    fc = cutoff(tensors[K.DIST], network.rc, p["cutoff_type"])
    basis = radial_basis(tensors[K.DIST], fc, p["basis_type"], p["n_basis"], network.rc, p["gamma"], p["center"])
    ind_2 = tensors[K.IND_2]
    n_atoms = tf.shape(prop)[0]
    output, interactions = 0.0, []
    for block, (out_ff, out_units), residual in zip(network.blocks, network.outputs, network.residual):
        inter = block.ii(block.pair_interactions(block.pp(prop), ind_2, basis))
        new_prop = scatter_sum(inter, ind_2[:, 0], n_atoms)
        output = output + out_units(out_ff(new_prop))
        prop = (prop if residual is None else residual(prop)) + new_prop
        interactions.append(inter)
    return output, interactions


class BondHead(tf.Module):
    """Bond charges from PiNet's pair interactions: I_ij = Σ_t unit_t(ff_t(I^t_ij)), biasless.

    Args:
        network: the :class:`~pinn.networks.pinet.PiNet` whose interactions it reads.
        dtype: float dtype.
    """

    def __init__(self, network, dtype, name="bond_head"):
        super().__init__(name=name)
        rng = np.random.RandomState(BOND_HEAD_SEED)
        p = network.params
        self.nets = []
        for t, block in enumerate(network.blocks):
            ff = FeedForward(block.n_out, p["out_nodes"], rng, p["act"], use_bias=False, dtype=dtype, name=f"ff_{t}")
            self.nets.append((ff, Dense(ff.n_out, 1, rng, use_bias=False, dtype=dtype, name=f"unit_{t}")))

    def __call__(self, interactions):
        """[n_pairs] bond charges (training units) from the blocks' interactions."""
        return tf.add_n([unit(ff(inter)) for (ff, unit), inter in zip(self.nets, interactions)])[:, 0]

    def regularized_weights(self):
        """The hidden layers' weight matrices (not the output units)."""
        return [layer.kernel for ff, _ in self.nets for layer in ff.layers]


class BondChargeModel(DipoleFamilyModel):
    """Base of the models with bond charges (with PiNet; see the module docstring).

    Args: see :class:`pinn.models.dipole.DipoleFamilyModel`.
    """

    BONDS = True

    def __init__(self, network, params, atom_types, dtype=tf.float32, name="dipole"):
        if not isinstance(network, PiNet):
            raise ParamsError(f"network.name: the {self.model_name()} needs pair interactions for its bond charges, "
                              f"which pinn's PiNet gives; {type(network).__name__} has none (use PiNet)")
        super().__init__(network, params, atom_types, dtype, name=name)
        self.bond_head = BondHead(network, dtype)

    @classmethod
    def model_name(cls):
        return cls.__name__

    def parts(self, tensors):
        """Atomic outputs (``charges``, AC) and ``bonds`` [n_pairs], training units, from one PiNet pass."""
        output, interactions = pinet_pass(self.network, tensors)
        return {"charges": output[:, 0], "bonds": self.bond_head(interactions)}

    def regularized_weights(self):
        """The network's weight matrices and the bond head's hidden ones."""
        return list(self.network.regularized_weights()) + self.bond_head.regularized_weights()


class BCRDipoleModel(BondChargeModel):
    """Upstream's ``BC_R_dipole_model``: D = Σ_(ij) I_ij r_ij, the bond charges regularised."""

    PARAMS = {**BOND_PARAMS, **_family_params(vector_dipole=False), **UNUSED_Q_MULTIPLIER, **COMMON_PARAMS}

    @classmethod
    def model_name(cls):
        return "BC_R_dipole_model"


class ACBCRDipoleModel(BondChargeModel):
    """Upstream's ``AC_BC_R_dipole_model``: D = Σ_i q_i r_i + Σ_(ij) I_ij r_ij (q neutralised as asked)."""

    CHARGES = True
    PARAMS = {**CHARGE_PARAMS, **BOND_PARAMS, **_family_params(vector_dipole=False), **UNUSED_Q_MULTIPLIER,
              **COMMON_PARAMS}

    @classmethod
    def model_name(cls):
        return "AC_BC_R_dipole_model"
