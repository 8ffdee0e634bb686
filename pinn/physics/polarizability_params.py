"""The options of upstream PiNN 2.x's polarizability models (:mod:`pinn.physics.polarizability`)."""
from pinn.physics.base import COMMON_PARAMS
from pinn.schema import Option, non_negative, positive


def _zero_or_one(value):
    return None if value in (0, 1, False, True) else "0 or 1 (upstream's flags)"


def _sigma_table(value):
    for z, s in value.items():
        if not (isinstance(s, (int, float)) and not isinstance(s, bool) and s > 0):
            return f"{z}: a width must be a positive number of Å"
    return None


PARAMS = {
    "p_scale": Option(float, 1.0, "polarizability unit during training (upstream's key): the loss is on errors × "
                      "p_scale", check=positive),
    "p_unit": Option(float, 1.0, "the data's polarizability unit in bohr³ (upstream's key): predictions are "
                     "α in bohr³ / p_unit", check=positive),
    "p_loss_multiplier": Option(float, 1.0, "weight of the polarizability (or egap) loss", check=non_negative),
    "train_egap": Option((int, bool), 0, "1: train on the data's egap instead of α (EEM and EtaInv models)",
                         check=_zero_or_one),
    "eval_egap": Option((int, bool), 0, "1: also evaluate the egap error (EEM and EtaInv models)",
                        check=_zero_or_one),
    "ewald_rc": Option((float, None), None, "Ewald sum: real-space cutoff, Å (with ewald_kmax and ewald_eta)",
                       check=positive),
    "ewald_kmax": Option((int, None), None, "Ewald sum: largest reciprocal index in each direction",
                         check=positive),
    "ewald_eta": Option((float, None), None, "Ewald sum: width of the auxiliary Gaussians, Å", check=positive),
    "sigma": Option(dict, {}, "Gaussian widths σ (Å) of the charges, {atomic number: σ}, for elements beyond "
                    "upstream's defaults (H, C, N, O, S, Cl) or in place of them", check=_sigma_table),
    **COMMON_PARAMS,
}

#: the EtaInv models' options: ε besides the others
ETAINV_PARAMS = {**PARAMS, "epsilon": Option(float, 0.01, "ε of η⁻¹ = MᵀM + ε 1 (upstream's key)", check=positive)}
