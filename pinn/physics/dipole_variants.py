"""Upstream PiNN 2.x's dipole models beyond atomic charges: bond charges (BC), atomic dipoles (AD),
oxidation states (OS) and their combinations.

See :mod:`pinn.physics.dipole` for the family's physics and loss.  By upstream's names:

- ``BC_R_dipole_model``: bond charges, D = Σ_(ij) I_ij r_ij, regularised (``regularization``);
- ``AC_BC_R_dipole_model``: atomic charges and bond charges, D = Σ_i q_i r_i + Σ_(ij) I_ij r_ij;
- ``AD_dipole_model``: atomic dipoles, D = Σ_i μ_i;
- ``AD_OS_dipole_model``: atomic dipoles and the data's oxidation states, D = Σ_i μ_i + Σ_i q_ox_i r_i;
- ``AC_AD_dipole_model``: atomic charges and dipoles, D = Σ_i q_i r_i + Σ_i μ_i;
- ``AD_BC_R_dipole_model``: atomic dipoles and bond charges, D = Σ_i μ_i + Σ_(ij) I_ij r_ij.

Atomic dipoles μ_i are PiNet2's equivariant vector output ``p3`` (its ``out_extra: {p3: 1}``,
:mod:`pinn.networks.pinet2`; summed over channels if there are more); the AD models refuse a network
without it (PiNet has scalars only).

Bond charges: with PiNet, I_ij = Σ_t out_t(I^t_ij), a sum over the network's ``depth`` blocks t of an
output net (``out_nodes`` then one linear unit; no biases, so that a bond charge vanishes smoothly at the
cutoff as the interactions do) on the block's pair interactions I^t_ij (PiNet's II output); upstream's
PiNet grows such nets with ``out_inter``, here they belong to the model.  With PiNet2, as upstream:
I_ij = i1_ij + ⟨i3_ij, i3_ij⟩ from the network's pair outputs (``out_extra: {i1: 1, i3: 1}``,
:mod:`pinn.networks.pinet2`; refused without ``i1``).  Only the part of I_ij that differs from I_ji
moves charge ((I_ij − I_ji) r_ij for the two directions of a pair).  Other networks have no bond
charges (refused).
"""
import numpy as np
import tensorflow as tf

from pinn.networks.layers import Dense, FeedForward
from pinn.networks.pinet import PiNet
from pinn.networks.pinet2 import PiNet2
from pinn.physics.base import COMMON_PARAMS
from pinn.physics.dipole import DipoleFamilyModel
from pinn.physics.dipole_params import BOND_PARAMS, CHARGE_PARAMS, UNUSED_Q_MULTIPLIER, family_params
from pinn.schema import ParamsError

#: seed of the bond heads' initial weights (the same on every rank)
BOND_HEAD_SEED = 7


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




def pair_charges(extras):
    """Bond charges [n_pairs] from PiNet2's pair outputs, as upstream's BC models make them:
    I_ij = Σ_c i1_ijc + Σ_c Σ_x i3_ijxc² (the i3 term where the network gives it)."""
    bonds = tf.reduce_sum(extras["i1"], axis=1)
    if "i3" in extras:
        bonds = bonds + tf.reduce_sum(extras["i3"] ** 2, axis=[1, 2])
    return bonds


class DipoleVariantModel(DipoleFamilyModel):
    """Base of upstream's dipole models with bond charges or atomic dipoles (see the module docstring):
    checks the network and gets the parts from one pass of it.

    Takes the arguments of :class:`pinn.physics.dipole.DipoleFamilyModel`.

    Raises:
        ParamsError: a network without what the model needs (p3 for AD, pair features for BC).
    """

    def __init__(self, network, params, atom_types, dtype=tf.float32, name="dipole"):
        network_name = type(network).__name__
        if self.ATOMIC_DIPOLES:
            if not isinstance(network, PiNet2):
                raise ParamsError(f"network.name: the {self.NAME} needs atomic dipoles from equivariant vector "
                                  f"features (p3), which PiNet2 gives; {network_name} has atomic scalars only (use "
                                  "PiNet2 with out_extra: {p3: 1})")
            if "p3" not in getattr(network, "out_extra", {}):
                raise ParamsError(f"network.params.out_extra: the {self.NAME} reads the atomic dipoles from "
                                  f"{network_name}'s p3 output; set out_extra: {{p3: 1}} (with rank 3 or 5)")
        if self.BONDS and not isinstance(network, (PiNet, PiNet2)):
            raise ParamsError(f"network.name: the {self.NAME} needs pair features for its bond charges, which PiNet "
                              f"and PiNet2 give; {network_name} has none")
        if self.BONDS and isinstance(network, PiNet2) and "i1" not in network.out_extra:
            raise ParamsError(f"network.params.out_extra: the {self.NAME} reads its bond charges from PiNet2's pair "
                              "outputs, as upstream's; set out_extra: {i1: 1, i3: 1} (i3 with rank 3 or 5)")
        super().__init__(network, params, atom_types, dtype, name=name)
        if self.BONDS and isinstance(network, PiNet):
            self.bond_head = BondHead(network, dtype)

    def parts(self, tensors):
        """Atomic outputs (``charges``, AC), ``bonds`` [n_pairs] and ``dipoles`` [n_atoms, 3], training units,
        from one pass of the network."""
        net = self.network
        out = {}
        if self.BONDS and isinstance(net, PiNet):
            outputs, interactions = net.call_with_interactions(tensors)
            out["bonds"] = self.bond_head(interactions)
        elif self.ATOMIC_DIPOLES or self.BONDS:
            outputs, extras = net.call_with_extras(tensors)
            if self.ATOMIC_DIPOLES:
                out["dipoles"] = tf.reduce_sum(extras["p3"], axis=2)
            if self.BONDS:
                out["bonds"] = pair_charges(extras)
        else:
            outputs = net.atomic_outputs(tensors)
        out["charges"] = outputs[:, 0]
        return out

    def regularized_weights(self):
        """The network's weight matrices and the bond head's hidden ones (PiNet's; PiNet2's pair heads are the
        network's)."""
        head = self.bond_head.regularized_weights() if self.BONDS and isinstance(self.network, PiNet) else []
        return list(self.network.regularized_weights()) + head


class BCRDipoleModel(DipoleVariantModel):
    """Upstream's ``BC_R_dipole_model``: D = Σ_(ij) I_ij r_ij, the bond charges regularised."""

    NAME = "BC_R_dipole_model"
    BONDS = True
    PARAMS = {**BOND_PARAMS, **family_params(vector_dipole=False), **UNUSED_Q_MULTIPLIER, **COMMON_PARAMS}


class ACBCRDipoleModel(DipoleVariantModel):
    """Upstream's ``AC_BC_R_dipole_model``: D = Σ_i q_i r_i + Σ_(ij) I_ij r_ij (q neutralised as asked)."""

    NAME = "AC_BC_R_dipole_model"
    CHARGES = BONDS = True
    PARAMS = {**CHARGE_PARAMS, **BOND_PARAMS, **family_params(vector_dipole=False), **UNUSED_Q_MULTIPLIER,
              **COMMON_PARAMS}


class ADDipoleModel(DipoleVariantModel):
    """Upstream's ``AD_dipole_model``: D = Σ_i μ_i (PiNet2's p3)."""

    NAME = "AD_dipole_model"
    ATOMIC_DIPOLES = True
    PARAMS = {**family_params(vector_dipole=False), **UNUSED_Q_MULTIPLIER, **COMMON_PARAMS}


class ADOSDipoleModel(DipoleVariantModel):
    """Upstream's ``AD_OS_dipole_model``: D = Σ_i μ_i + Σ_i q_ox_i r_i, with the data's ``oxidation`` (e)."""

    NAME = "AD_OS_dipole_model"
    ATOMIC_DIPOLES = OXIDATION = True
    PARAMS = {**family_params(vector_dipole=True), **UNUSED_Q_MULTIPLIER, **COMMON_PARAMS}


class ACADDipoleModel(DipoleVariantModel):
    """Upstream's ``AC_AD_dipole_model``: D = Σ_i q_i r_i + Σ_i μ_i (q neutralised as asked)."""

    NAME = "AC_AD_dipole_model"
    CHARGES = ATOMIC_DIPOLES = True
    PARAMS = {**CHARGE_PARAMS, **family_params(vector_dipole=False), **UNUSED_Q_MULTIPLIER, **COMMON_PARAMS}


class ADBCRDipoleModel(DipoleVariantModel):
    """Upstream's ``AD_BC_R_dipole_model``: D = Σ_i μ_i + Σ_(ij) I_ij r_ij, the bond charges regularised."""

    NAME = "AD_BC_R_dipole_model"
    ATOMIC_DIPOLES = BONDS = True
    PARAMS = {**BOND_PARAMS, **family_params(vector_dipole=False), **UNUSED_Q_MULTIPLIER, **COMMON_PARAMS}


#: upstream's dipole models of this module by name
VARIANTS = {cls.NAME: cls for cls in (BCRDipoleModel, ACBCRDipoleModel, ADDipoleModel, ADOSDipoleModel,
                                       ACADDipoleModel, ADBCRDipoleModel)}
