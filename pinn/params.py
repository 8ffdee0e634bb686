"""The params schema: one declaration of every option, its type, default and meaning.

:func:`resolve` validates a user's params dict (from an input script or a YAML
file), fills in defaults and returns the resolved dict; an unknown or ill-typed
key raises :class:`ParamsError` naming the key path (``model.params.use_force``)
and what is allowed.  Older flat params (``'network': 'pinet'``,
``'network_params'``, ``'model_params'``) are normalised first.
"""
import copy
import os

import yaml

REQUIRED = object()


class ParamsError(ValueError):
    """Invalid params; the message names the key."""


class Option:
    """One option: ``Option(types, default, doc, choices=None, check=None)``.

    ``types`` is a type or tuple of types (``float`` also accepts ints;
    ``None`` in the tuple allows ``None``); ``check`` is a function returning
    an error text or ``None``.
    """

    def __init__(self, types, default=REQUIRED, doc="", choices=None, check=None):
        self.types = types if isinstance(types, tuple) else (types,)
        self.default = default
        self.doc = doc
        self.choices = choices
        self.check = check

    def validate(self, value, path):
        if value is None and None in self.types:
            return None
        allowed = tuple(t for t in self.types if t is not None)
        if float in allowed and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if bool not in allowed and isinstance(value, bool) and (int in allowed or float in allowed):
            raise ParamsError(f"{path}: expected {self.type_names()}, got a bool ({value!r})")
        if list in allowed and isinstance(value, tuple):
            value = list(value)
        if not isinstance(value, allowed):
            raise ParamsError(f"{path}: expected {self.type_names()}, got {type(value).__name__} ({value!r})")
        if self.choices is not None and value not in self.choices:
            raise ParamsError(f"{path}: {value!r} is not one of {list(self.choices)}")
        if self.check is not None:
            problem = self.check(value)
            if problem:
                raise ParamsError(f"{path}: {problem} (got {value!r})")
        return copy.deepcopy(value)

    def type_names(self):
        return " or ".join("None" if t is None else t.__name__ for t in self.types)


def positive(value):
    return None if value > 0 else "must be positive"


def non_negative(value):
    return None if value >= 0 else "must not be negative"


def positive_int_list(value):
    if not value or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value):
        return "must be a non-empty list of positive integers"
    return None


def validate_section(values, schema, path):
    """Validate ``values`` (a dict) against ``schema`` (a dict of :class:`Option`)."""
    if values is None:
        values = {}
    if not isinstance(values, dict):
        raise ParamsError(f"{path}: expected a dict, got {type(values).__name__}")
    unknown = sorted(set(values) - set(schema), key=str)
    if unknown:
        raise ParamsError(f"{path}.{unknown[0]}: unknown key; allowed keys: {sorted(schema)}")
    out = {}
    for key, option in schema.items():
        if key in values:
            out[key] = option.validate(values[key], f"{path}.{key}")
        elif option.default is REQUIRED:
            raise ParamsError(f"{path}.{key}: required key is missing ({option.doc})")
        else:
            out[key] = copy.deepcopy(option.default)
    return out


TOP_LEVEL = {
    "model_dir": Option(str, REQUIRED, "directory for checkpoints, params.yml and logs"),
    "network": Option(dict, REQUIRED, "network: {'name': ..., 'params': {...}} (see the networks page)"),
    "model": Option(dict, {"name": "potential_model", "params": {}},
                    "model: {'name': 'potential_model', 'params': {...}}"),
    "precision": Option(str, "float32", "floating-point precision of the network and training",
                        choices=("float32", "float64")),
    "seed": Option(int, 0, "seed of the weight initialisation"),
    "parallel": Option(bool, False, "train on all ranks of a Horovod job (one process per GPU, launched with "
                       "srun, mpirun or horovodrun; see the parallel-training page)"),
    "parallel_params": Option(dict, {}, "options of parallel training (see below); used when parallel is True"),
}


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


def resolve(params):
    """Validate params and fill in every default.

    Args:
        params: dict as written in an input script or YAML file.

    Returns:
        A new dict with the nested structure ``{'model_dir', 'precision',
        'seed', 'network': {'name', 'params'}, 'model': {'name', 'params'}}``,
        every option present and every network name canonical.

    Raises:
        ParamsError: naming the first bad key.
    """
    from pinn.models import MODELS
    from pinn.networks import NETWORKS, canonical_network_name
    from pinn.parallel import PARAMS as PARALLEL_PARAMS

    if not isinstance(params, dict):
        raise ParamsError(f"params: expected a dict, got {type(params).__name__}")
    out = validate_section(legacy(params), TOP_LEVEL, "params")
    net = validate_section(out["network"], {"name": Option(str, REQUIRED, "network name"),
                                            "params": Option(dict, {}, "network options")}, "network")
    name = canonical_network_name(net["name"])
    if name is None:
        raise ParamsError(f"network.name: {net['name']!r} is not one of {sorted(NETWORKS)}")
    out["network"] = {"name": name,
                      "params": validate_section(net["params"], NETWORKS[name].PARAMS, "network.params")}
    model = validate_section(out["model"], {"name": Option(str, "potential_model", "model name"),
                                            "params": Option(dict, {}, "model options")}, "model")
    if model["name"] not in MODELS:
        raise ParamsError(f"model.name: {model['name']!r} is not one of {sorted(MODELS)}")
    out["model"] = {"name": model["name"],
                    "params": validate_section(model["params"], MODELS[model["name"]].PARAMS, "model.params")}
    out["parallel_params"] = validate_section(out["parallel_params"], PARALLEL_PARAMS, "parallel_params")
    return out


def write_params(params, model_dir):
    """Write resolved params to ``model_dir/params.yml`` (atomically)."""
    os.makedirs(model_dir, exist_ok=True)
    path = os.path.join(model_dir, "params.yml")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        yaml.safe_dump(params, f, sort_keys=False)
    os.replace(tmp, path)
    return path


def read_params(model_dir):
    """Read and resolve ``model_dir/params.yml``; ``model_dir`` in the result is the given directory."""
    path = os.path.join(model_dir, "params.yml")
    if not os.path.exists(path):
        raise ParamsError(f"{path}: no params.yml, is {model_dir!r} a pinn model directory?")
    with open(path) as f:
        params = yaml.safe_load(f)
    params["model_dir"] = os.fspath(model_dir)
    return resolve(params)


def describe(schema):
    """Markdown table rows (key, type, default, doc) of a schema, for the docs."""
    rows = []
    for key, option in schema.items():
        default = "required" if option.default is REQUIRED else repr(option.default)
        doc = option.doc + (f" One of {list(option.choices)}." if option.choices else "")
        rows.append(f"| `{key}` | {option.type_names()} | `{default}` | {doc} |")
    return "\n".join(["| key | type | default | meaning |", "|---|---|---|---|"] + rows)
