"""The options of the dipole models (:mod:`pinn.physics.dipole`, :mod:`pinn.physics.dipole_variants`):
upstream PiNN 2.x's options of the whole family, and those of the members with atomic charges (AC),
bond charges (BC) or neither."""
from pinn.schema import Option, false_or_positive, non_negative, positive


def _no_per_atom_log(value):
    return ("pinn's evaluation has no per-atom dipole metric: use use_d_per_atom for a per-atom loss, or "
            "leave log_d_per_atom false") if value else None


def family_params(vector_dipole):
    """Upstream PiNN 2.x's options of every dipole model (``vector_dipole``'s default differs by model)."""
    return {
        "vector_dipole": Option(bool, vector_dipole, "loss on the three dipole components (true) or on the "
                                "dipole's magnitude (false; the prediction is the vector either way)"),
        "d_scale": Option(float, 1.0, "dipole unit during training (upstream's): the network's dipole contributions "
                          "are in data units × d_scale, and the loss is on errors × d_scale", check=positive),
        "d_unit": Option(float, 1.0, "the data's dipole unit in e·Å; the calculator multiplies dipoles and "
                         "charges by it", check=positive),
        "max_dipole": Option((bool, float), False, "false, or a number: dipole values (components, or magnitudes "
                             "without vector_dipole) whose label × d_scale exceeds it in size are left out of the loss",
                             check=false_or_positive),
        "use_d_per_atom": Option(bool, False, "dipole errors divided by the structure's number of atoms in the loss"),
        "log_d_per_atom": Option(bool, False, "upstream's per-atom dipole metric: not in pinn (must stay false)",
                                 check=_no_per_atom_log),
        "use_d_weight": Option(bool, False, "multiply each structure's dipole penalty by the data's d_weight"),
        "d_loss_multiplier": Option(float, 1.0, "weight of the dipole loss", check=non_negative),
        "use_l2": Option(bool, False, "add L2 regularisation: l2_loss_multiplier × Σ w²/2 over the network's (and "
                         "bond head's) weight matrices (no biases, no output units)"),
        "l2_loss_multiplier": Option(float, 1.0, "weight of the L2 regularisation (use_l2)", check=non_negative),
    }


#: options of the models with atomic charges (AC)
CHARGE_PARAMS = {
    "charge_neutrality": Option(bool, True, "shift the charges so that each neutral unit sums to zero"),
    "neutral_unit": Option(str, "system", "what is neutral: 'system' (each structure) or 'water_molecule' (every "
                           "three consecutive atoms of a structure)", choices=("system", "water_molecule")),
}

#: pinn's own options of the AC models: a charge loss and a scale of the network's outputs
AC_PARAMS = {
    "use_dipole": Option(bool, True, "train on the dipole moment (d_data)"),
    "use_charge": Option(bool, False, "train on the atomic charges (q_data, e)"),
    "q_loss_multiplier": Option(float, 1.0, "weight of the charge loss (use_charge)", check=non_negative),
    "q_scale": Option(float, 1.0, "network outputs are multiplied by this before the division by d_scale",
                      check=positive),
}

#: options of the models with bond charges (BC)
BOND_PARAMS = {
    "regularization": Option(bool, True, "add the mean square bond charge (in training units) to the loss "
                             "(upstream's BC(R) regularisation)"),
    "bc_loss_multiplier": Option(float, 1.0, "weight of the bond-charge regularisation (upstream: 1)",
                                 check=non_negative),
}

#: upstream's option of its models without a charge loss, where it has no effect
UNUSED_Q_MULTIPLIER = {
    "q_loss_multiplier": Option(float, 1.0, "accepted as upstream's models without a charge loss accept it; "
                                "has no effect", check=non_negative),
}
