"""The options of the potential model (:mod:`pinn.models.potential`): upstream PiNN's keys and meanings."""
from pinn.models.base import COMMON_PARAMS
from pinn.params.schema import Option, false_or_positive, non_negative, positive

PARAMS = {
    "use_force": Option(bool, False, "train on forces as well as energies"),
    "use_stress": Option(bool, False, "train on stress (periodic structures only)"),
    "use_e_per_atom": Option(bool, False, "energy loss on energy per atom instead of total energy"),
    "log_e_per_atom": Option(bool, False, "evaluation also gives the energy error per atom, E_PER_ATOM_MAE and "
                             "E_PER_ATOM_RMSE in eV/atom (always with use_e_per_atom; upstream PiNN's key)"),
    "e_loss_multiplier": Option(float, 1.0, "weight of the energy loss", check=non_negative),
    "f_loss_multiplier": Option(float, 10.0, "weight of the force loss (per force component, against the energy "
                                "loss per structure)", check=non_negative),
    "s_loss_multiplier": Option(float, 1.0, "weight of the stress loss", check=non_negative),
    "e_scale": Option(float, 1.0, "energy unit during training (upstream PiNN's): labels are multiplied by it "
                      "for the loss and the energy is Σ net / e_scale + dress (eV)", check=positive),
    "use_e_per_sqrt": Option(bool, False, "with use_e_per_atom: the energy error per atom × √(atoms) in the loss"),
    "max_energy": Option((bool, float), False, "false, or a number: structures whose |energy − dress| × e_scale "
                         "exceeds it are left out of the energy loss", check=false_or_positive),
    "use_e_weight": Option(bool, False, "multiply each structure's energy penalty by the data's e_weight"),
    "max_force_comp": Option((bool, float), False, "false, or a number: force components whose |F| × e_scale "
                             "exceeds it are left out of the force loss", check=false_or_positive),
    "no_force_comp": Option((bool, int), False, "false, or a number: at most this many force components of each "
                            "batch (chosen at random, anew for every batch) enter the force loss; in a parallel "
                            "run, of each rank's batch", check=false_or_positive),
    "use_f_weight": Option(bool, False, "multiply each atom's force penalty by the data's f_weight"),
    "use_l2": Option(bool, False, "add L2 regularisation: l2_loss_multiplier × Σ w²/2 over the network's "
                     "weight matrices (no biases, no output layer)"),
    "l2_loss_multiplier": Option(float, 1.0, "weight of the L2 regularisation (use_l2)", check=non_negative),
    "separate_errors": Option(bool, False, "with the EKF optimizer: one Kalman update per loss term in turn "
                              "(energies, then forces, then stress) instead of one joint update"),
    "e_unit": Option(float, 1.0, "the data's energy unit in eV; the calculator multiplies predictions by it",
                     check=positive),
    "e_dress": Option(dict, {}, "per-element energy offsets {atomic number: eV} added to the network energy"),
    "fit_e_dress": Option(bool, False, "before training, fit e_dress by least squares to the training energies "
                          "minus the initial network energies"),
    "fit_e_dress_batches": Option(int, 100, "number of training batches (per rank; per device with backend "
                                  "mirrored) used to fit e_dress",
                                  check=positive),
    **COMMON_PARAMS,
}

#: upstream PiNN's other names of potential-model keys (PiNN 1.x / 2.x code) → the documented one
ALIASES = {"max_force": "max_force_comp", "use_f_weights": "use_f_weight"}
