"""The options of the potential model (:mod:`pinn.physics.potential`): upstream PiNN's keys and meanings."""
from pinn.physics.embedding_kinds import KINDS, MECHANICAL, embedding_of
from pinn.physics.base import COMMON_PARAMS
from pinn.schema import Option, ParamsError, false_or_positive, non_negative, positive

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
    "embedding": Option(str, MECHANICAL.name, "how the QM region of QM/MM frames (docs/qmmm.md) meets its MM "
                        "environment: " + "; ".join(f"'{kind.name}' ({kind.what})" for kind in KINDS.values())
                        + " (network.params.out_units is set to 2 for it where the params leave it unset)",
                        choices=tuple(KINDS)),
    "embedding_damping": Option(float, 0.0, "with embedding 'electrostatic': r_d (Å) of MiMiC's smeared Coulomb "
                                "kernel (r_d⁴ − r⁴)/(r_d⁵ − r⁵) between QM charges and MM charges; 0: bare 1/r",
                                check=non_negative),
    **COMMON_PARAMS,
}

#: upstream PiNN's other names of potential-model keys (PiNN 1.x / 2.x code) → the documented one
ALIASES = {"max_force": "max_force_comp", "use_f_weights": "use_f_weight"}


def check_embedding(params):
    """Refuse what the model's embedding (:func:`pinn.physics.embedding_kinds.embedding_of`) cannot follow (resolved
    ``params``).

    Raises:
        ParamsError: naming ``network.params.out_units`` (or another key the kind needs of the network, set by
            :func:`pinn.params.resolve` where the params leave it unset), ``model.params.use_stress`` (a kind
            without stress), ``model.params.jit`` (a kind XLA cannot compile) or ``model.params.embedding_damping``
            (set for a kind without damping).
    """
    mp = params["model"]["params"]
    network = params["network"]
    kind = embedding_of(mp)
    where = f"model.params.embedding {kind.name!r}"
    if mp["embedding_damping"] and not kind.damped:
        raise ParamsError(f"model.params.embedding_damping: damps the Coulomb energy of an electrostatic "
                          f"embedding; embedding is {kind.name}")
    for key, value in kind.network_needs:
        given = network["params"].get(key)
        if given != value:
            raise ParamsError(f"network.params.{key}: {where} needs {key}: {value!r}, the params say {given!r}"
                              + ("" if given is not None else
                                 f" (the {network['name']} network has no {key}: use PiNet or PiNet2)"))
    if mp["use_stress"] and not kind.gives_stress:
        raise ParamsError(f"model.params.use_stress: {where} gives a QM region's energy and forces in its MM "
                          "environment, no stress")
    if mp["jit"] and not kind.compiles_with_xla:
        raise ParamsError(f"model.params.jit: {where}: XLA cannot compile the step (the QM–MM pairs vary from "
                          "batch to batch); leave jit unset or false")
