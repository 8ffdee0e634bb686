"""The params schema: one declaration of every option, its type, default and meaning.

:func:`resolve` validates a user's params dict (from an input script or a YAML
file), fills in defaults and returns the resolved dict; an unknown or ill-typed
key raises :class:`ParamsError` naming the key path (``model.params.use_force``)
and what is allowed.  Older flat params (``'network': 'pinet'``,
``'network_params'``, ``'model_params'``) are normalised first, and upstream PiNN 2.x's
``optimizer`` section is turned into ``model.params`` keys (:mod:`pinn.params.upstream`).
"""
import logging
import os

import yaml

from pinn.files.durable import replacing
from pinn.params.upstream import convert_optimizer
from pinn.schema import REQUIRED, Option, ParamsError, describe, did_you_mean, validate_section

log = logging.getLogger("pinn")

__all__ = ["ParamsError", "Option", "ResolvedParams", "describe", "legacy", "model_schema", "read_params", "resolve",
           "read_params_file", "resolve_network", "network_params", "write_params", "TOP_LEVEL"]

TOP_LEVEL = {
    "model_dir": Option(str, REQUIRED, "directory for checkpoints, params.yml and logs"),
    "network": Option(dict, REQUIRED, "network: {'name': ..., 'params': {...}} (see the networks page)"),
    "model": Option(dict, {"name": "potential_model", "params": {}},
                    "model: {'name': 'potential_model', 'params': {...}}"),
    "precision": Option(str, "float32", "floating-point precision of the network and training: float32, float64, "
                        "or mixed_bfloat16 / mixed_float16 (the tensorflow engine: float32 weights, optimizer and "
                        "sums, the layers' matrix products in bfloat16 or float16; mixed_float16 with dynamic loss "
                        "scaling; see the training page)",
                        choices=("float32", "float64", "mixed_bfloat16", "mixed_float16")),
    "seed": Option(int, 0, "seed of the weight initialisation"),
    "parallel": Option(bool, False, "train on all ranks of a parallel job, joined by Horovod or by MPI alone "
                       "(one process per GPU, launched with srun, mpirun or horovodrun; see the parallel-training "
                       "page); a lone process without either trains as one, saying so"),
    "parallel_params": Option(dict, {}, "options of parallel training (see below); used when parallel is True"),
    "params_format": Option(int, 2, "2: model.params.e_scale means what it means in upstream PiNN (energy = Σ net / "
                            "e_scale); 1: params of pinn < 0.14, where energy = e_scale · Σ net, converted when "
                            "resolved (one logged line)", choices=(1, 2)),
}

#: the params format this version writes (see ``params_format``)
PARAMS_FORMAT = 2


def legacy(params):
    """Normalise upstream PiNN's flat params to the nested form."""
    params = dict(params)
    if isinstance(params.get("network"), str) or "network_params" in params:
        name = params.pop("network", None)
        params["network"] = {"name": name, "params": params.pop("network_params", {}) or {}}
    if "model_params" in params or isinstance(params.get("model"), str):
        name = params.pop("model", None) if isinstance(params.get("model"), str) else None
        params["model"] = {"name": name or "potential_model",
                           "params": params.pop("model_params", {}) or {}}
    return params


class ResolvedParams(dict):
    """Params that :func:`resolve` validated and completed: a dict, marked so that nothing resolves them
    again (:func:`resolve` returns them as they are; the Trainer and the model functions take them as
    they come)."""


# written as the plain mapping it is (yaml.safe_dump of resolved params, or of a model's .params)
yaml.SafeDumper.add_representer(ResolvedParams, yaml.representer.SafeRepresenter.represent_dict)


def resolve(params):
    """Validate params, fill in every default and check the sections against each other, once.

    Args:
        params: dict as written in an input script or YAML file (a :class:`ResolvedParams` is
            returned as it is).

    Returns:
        A new :class:`ResolvedParams` with the nested structure ``{'model_dir', 'precision',
        'seed', 'network': {'name', 'params'}, 'model': {'name', 'params'}, 'parallel',
        'parallel_params', 'params_format'}``, every option present and every network name canonical.

    Raises:
        ParamsError: naming the first bad key, or the key of a setting that contradicts another
            (:func:`pinn.params.training_options.check`).
    """
    from pinn.parallel.worlds import PARAMS as PARALLEL_PARAMS
    from pinn.params.training_options import check as check_training
    from pinn.physics.registry import MODELS
    from pinn.physics.registry import NOT_YET as NOT_YET_MODELS

    if isinstance(params, ResolvedParams):
        return params
    if not isinstance(params, dict):
        raise ParamsError(f"params: expected a dict, got {type(params).__name__}")
    _refuse_not_yet(legacy(params), NOT_YET_MODELS)
    out = validate_section(convert_optimizer(legacy(params)), TOP_LEVEL, "params")
    if out["params_format"] == 1:
        out = _from_format_1(out)
    written_network = dict((out["network"] or {}).get("params") or {}) if isinstance(out["network"], dict) else {}
    out["network"] = resolve_network(out["network"])
    model = validate_section(out["model"], {"name": Option(str, "potential_model", "model name"),
                                            "params": Option(dict, {}, "model options")}, "model")
    if model["name"] not in MODELS:
        raise ParamsError(f"model.name: {model['name']!r} is not one of {sorted(MODELS)};"
                          f"{did_you_mean(model['name'], MODELS)}".rstrip(";"))
    out["model"] = {"name": model["name"],
                    "params": validate_section(_renamed(model["params"], getattr(MODELS[model["name"]], "ALIASES", {})),
                                               model_schema(model["name"]), "model.params")}
    out["parallel_params"] = validate_section(out["parallel_params"], PARALLEL_PARAMS, "parallel_params")
    _set_model_extras(out, MODELS[model["name"]])
    _set_embedding_needs(out, written_network)
    model_check = getattr(MODELS[model["name"]], "check_params", None)
    if model_check is not None:
        model_check(out)
    check_training(out)
    return ResolvedParams(out)


def _set_embedding_needs(params, written):
    """Give the network what the potential model's embedding needs of it (:attr:`pinn.physics.embedding_kinds.Embedding.
    network_needs`, e.g. two outputs per atom) where the written network params (``written``) leave it unset and
    the network has the key; a value the params set otherwise is the model's check to refuse, by name."""
    from pinn.physics.embedding_kinds import embedding_of
    if "embedding" not in params["model"]["params"]:
        return
    net = params["network"]["params"]
    for key, value in embedding_of(params["model"]["params"]).network_needs:
        if key not in written and key in net and net[key] != value:
            log.info("network.params.%s: %s, as model.params.embedding %r needs", key, value,
                     params["model"]["params"]["embedding"])
            net[key] = value


def _set_model_extras(params, model_cls):
    """Give PiNet2 the extra outputs the model reads (``NETWORK_EXTRAS``; upstream's polarizability models set
    ``out_extra`` so, replacing what the file says), logged where that changes the file's setting."""
    extras = getattr(model_cls, "NETWORK_EXTRAS", None)
    net = params["network"]
    if extras is None or net["name"] != "PiNet2":
        return
    if net["params"]["out_extra"] != extras:
        if net["params"]["out_extra"]:
            log.info("network.params.out_extra: %s reads %s, as upstream's model sets it (the params said %s)",
                     params["model"]["name"], extras, net["params"]["out_extra"])
        net["params"]["out_extra"] = dict(extras)


def _from_format_1(params):
    """Params of pinn < 0.14 (energy = e_scale · Σ net) in today's format (energy = Σ net / e_scale):
    the same energies, with e_scale → 1 / e_scale (the loss, computed in e_scale units, changes by
    1 / e_scale², metrics in eV do not)."""
    params = dict(params, params_format=PARAMS_FORMAT)
    model = dict(params.get("model") or {})
    options = dict(model.get("params") or {})
    old = options.get("e_scale", 1.0)
    if old != 1.0 and isinstance(old, (int, float)) and old > 0:
        options["e_scale"] = 1.0 / old
        log.info("params: e_scale %r of pinn < 0.14 (energy = e_scale · Σ net) read as e_scale %r "
                 "(upstream PiNN's meaning: energy = Σ net / e_scale), the same energies", old, 1.0 / old)
    model["params"] = options
    params["model"] = model
    params["network"] = _bpnn_from_format_1(params["network"])
    return params


def _bpnn_from_format_1(section):
    """A BPNN section of pinn < 0.14: its ``fp_scale`` (a multiplier) is ``fp_multiplier`` now, and its
    ``G4`` (with r_jk, over unordered neighbor pairs) is upstream PiNN's ``G3``, which sums over ordered
    pairs: twice the old values, so such a model's energies change (logged)."""
    from pinn.networks import canonical_network_name
    if not isinstance(section, dict) or canonical_network_name(str(section.get("name"))) != "BPNN":
        return section
    options = dict(section.get("params") or {})
    if isinstance(options.get("fp_scale"), (int, float)) and not isinstance(options["fp_scale"], bool):
        options["fp_multiplier"] = float(options.pop("fp_scale"))
    spec = options.get("sf_spec")
    if isinstance(spec, list) and any(isinstance(sf, dict) and sf.get("type") == "G4" for sf in spec):
        options["sf_spec"] = [dict(sf, type="G3") if isinstance(sf, dict) and sf.get("type") == "G4" else sf
                              for sf in spec]
        log.warning("params: the G4 symmetry functions of pinn < 0.14 are upstream PiNN's G3 now, summed over "
                    "ordered neighbor pairs (twice the old values): this BPNN's energies differ from before "
                    "until it is trained again")
    return dict(section, params=options)


def _renamed(options, aliases):
    """``options`` with upstream PiNN's other names of keys (``aliases``: name → documented name) renamed."""
    options = dict(options)
    for alias, name in aliases.items():
        if alias in options:
            if name in options:
                raise ParamsError(f"model.params.{alias}: upstream PiNN's other name of {name}, which is also set; "
                                  "keep one")
            options[name] = options.pop(alias)
    return options


def _refuse_not_yet(params, not_yet_models):
    """One error naming every part of upstream PiNN 2.x's that pinn has not yet (a network, a model),
    so that a file like upstream's ``pinet2-dipole.yml`` is told everything it lacks at once."""
    from pinn.networks import NOT_YET as NOT_YET_NETWORKS
    network = params.get("network")
    model = params.get("model")
    network = network.get("name") if isinstance(network, dict) else None
    model = model.get("name") if isinstance(model, dict) else None
    missing = []
    if isinstance(network, str) and network.lower() in NOT_YET_NETWORKS:
        missing.append(f"network.name: {network!r} is {NOT_YET_NETWORKS[network.lower()]}")
    if isinstance(model, str) and model in not_yet_models:
        missing.append(f"model.name: {model!r} is {not_yet_models[model]}")
    if missing:
        raise ParamsError("; ".join(missing) + ", not in pinn yet")


def resolve_network(section):
    """Validate the network section ``{'name': ..., 'params': {...}}`` and fill in its defaults.

    Returns:
        ``{'name': canonical name, 'params': every option}``.

    Raises:
        ParamsError: naming the first bad key (``network.params.depth``).
    """
    from pinn.networks import NETWORKS, NOT_YET, canonical_network_name
    net = validate_section(section, {"name": Option(str, REQUIRED, "network name"),
                                     "params": Option(dict, {}, "network options")}, "network")
    name = canonical_network_name(net["name"])
    if name is None and str(net["name"]).lower() in NOT_YET:
        raise ParamsError(f"network.name: {net['name']!r} is {NOT_YET[str(net['name']).lower()]}, not in pinn "
                          f"yet (pinn has {sorted(NETWORKS)})")
    if name is None:
        raise ParamsError(f"network.name: {net['name']!r} is not one of {sorted(NETWORKS)};"
                          f"{did_you_mean(net['name'], NETWORKS)}".rstrip(";"))
    return {"name": name, "params": validate_section(net["params"], NETWORKS[name].PARAMS, "network.params")}


def network_params(spec):
    """The params :func:`pinn.networks.get_network` builds a network from, for upstream PiNN's network spec.

    Args:
        spec: ``{'name': 'PiNet', 'params': {...}}`` (float32, seed 0), or a params dict with
            such a ``network`` section and optionally ``precision`` and ``seed``.

    Returns:
        ``{'network': resolved section, 'precision': ..., 'seed': ...}``.

    Raises:
        ParamsError: naming the first bad key.
    """
    if not isinstance(spec, dict):
        raise ParamsError(f"network: expected a dict {{'name': ..., 'params': {{...}}}}, got {type(spec).__name__}")
    top = {k: spec[k] for k in ("precision", "seed") if k in spec and "network" in spec}
    top = validate_section(top, {k: TOP_LEVEL[k] for k in ("precision", "seed")}, "params")
    return {"network": resolve_network(spec.get("network", spec)), **top}


def model_schema(name):
    """The options of ``model.params`` for the model ``name``: the model's own
    (``MODELS[name].PARAMS``: its physics and loss) and the training loop's
    (:data:`pinn.params.training_options.TRAINING_PARAMS`), as upstream PiNN keeps both in
    ``model_params``."""
    from pinn.params.training_options import TRAINING_PARAMS
    from pinn.physics.registry import MODELS
    return {**MODELS[name].PARAMS, **TRAINING_PARAMS}


def write_params(params, model_dir):
    """Write resolved params to ``model_dir/params.yml`` (atomically)."""
    os.makedirs(model_dir, exist_ok=True)
    path = os.path.join(model_dir, "params.yml")
    with replacing(path) as f:
        yaml.safe_dump(params, f, sort_keys=False)
    return path


def read_params(model_dir):
    """Read and resolve ``model_dir/params.yml``; ``model_dir`` in the result is the given directory."""
    path = os.path.join(model_dir, "params.yml")
    if not os.path.exists(path):
        raise ParamsError(f"{path}: no params.yml, is {model_dir!r} a pinn model directory?")
    params = read_params_file(path)
    if "params_format" not in params and "parallel_params" in params:
        params["params_format"] = 1  # written by pinn < 0.14, which always wrote parallel_params
    params["model_dir"] = os.fspath(model_dir)
    return resolve(params)


def read_params_file(path):
    """The params mapping of a YAML file, as written (not resolved).

    Raises:
        ParamsError: naming the file, when it cannot be read as YAML or holds no mapping.
    """
    try:
        with open(path) as f:
            params = yaml.safe_load(f)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise ParamsError(f"{path}: damaged, not readable as YAML ({str(err).splitlines()[0]})") from None
    if not isinstance(params, dict):
        raise ParamsError(f"{path}: damaged, not a params mapping (found {type(params).__name__})")
    return params
