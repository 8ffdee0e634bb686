"""Upstream PiNN 2.x's ``optimizer`` params section, converted to ``model.params`` keys.

Upstream PiNN configures training with a Keras optimizer serialised in the params::

    optimizer:
      class_name: Adam
      config:
        global_clipnorm: 0.01
        learning_rate:
          class_name: ExponentialDecay
          config: {initial_learning_rate: 1.0e-4, decay_steps: 10000, decay_rate: 0.994}

``pinn`` trains with the same Adam arithmetic (Keras 2.15's) configured by
``model.params`` keys, and :func:`convert_optimizer` maps the section onto them so that
it means what it means upstream: the learning rate and its schedule, no warmup, global-norm
clipping only when ``global_clipnorm`` is given, the weight average only when ``use_ema``
is (``ema_decay`` = ``ema_momentum``; pinn's average shortens its memory over the first
steps, see the training page, where Keras' keeps it fixed), and ``weight_decay`` (or ``class_name:
AdamW``, whose default is 0.004) as Keras' decoupled weight decay of every trainable variable
(``weight_decay_on: all``).  Such a file is in upstream's form,
so the potential model's keys whose default differs from upstream's (:data:`UPSTREAM_DEFAULTS`:
``f_loss_multiplier`` 1, pinn's default is 10) and PiNet's and PiNet2's radial basis
(:data:`UPSTREAM_NETWORK_DEFAULTS`: 4 polynomials, pinn's default is 10 Gaussians) take
upstream's default unless the file sets them.

Upstream's Kalman filters, ``class_name: EKF`` or ``gEKF``, become ``optimizer: ekf`` /
``gekf`` with their config in the ``ekf_*`` keys (:mod:`pinn.training.kalman`): the
learning rate (a number, ExponentialDecay or CosineDecay) is λ, ``max_learning_rate`` →
``ekf_max_learning_rate`` (gEKF has no cap upstream: ``None``), ``epsilon``, ``q_0``,
``q_min``, ``q_tau`` → ``ekf_epsilon``, ``ekf_q_0``, ``ekf_q_min``, ``ekf_q_tau``,
``inv_dtype`` / ``div_dtype`` → ``ekf_solve_dtype``; no warmup, no clipping and no weight
average, as upstream.  What has no equivalent here (per-variable ``clipnorm``, other
betas, an unknown key of any optimizer) is refused with the key named, never dropped.
"""
import logging

from pinn.schema import ParamsError

log = logging.getLogger("pinn")

#: Keras Adam's config keys that pinn's Adam follows only at these values (Keras 2.15 defaults)
_FIXED = {"beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-7, "amsgrad": False, "clipvalue": None, "clipnorm": None}
#: Keras 2.15's AdamW's default weight decay (its Adam has none)
ADAMW_WEIGHT_DECAY = 0.004
#: Keras Adam's config keys that change nothing in the arithmetic
_IGNORABLE = ("name", "ema_overwrite_frequency", "jit_compile", "is_legacy_optimizer")
#: keys of a Keras serialisation around a class_name/config pair (Keras ≥ 2.13)
_WRAPPER = ("module", "registered_name")
#: what the section sets in model.params (each may then not be set there too)
KEYS = ("optimizer", "learning_rate", "lr_schedule", "decay_step", "decay_rate", "lr_cosine_steps", "lr_min_factor",
        "lr_warmup_steps", "max_grad_norm", "ema_decay", "weight_decay", "weight_decay_on", "ekf_max_learning_rate",
        "ekf_epsilon", "ekf_q_0", "ekf_q_min", "ekf_q_tau", "ekf_solve_dtype")
#: upstream's config keys of its Kalman filters (pinn/optimizers/ekf.py, gekf.py) → model.params keys
_KALMAN_CONFIG = {
    "EKF": {"max_learning_rate": "ekf_max_learning_rate", "epsilon": "ekf_epsilon", "q_0": "ekf_q_0",
            "q_min": "ekf_q_min", "q_tau": "ekf_q_tau", "inv_dtype": "ekf_solve_dtype"},
    "gEKF": {"epsilon": "ekf_epsilon", "q_0": "ekf_q_0", "q_min": "ekf_q_min", "q_tau": "ekf_q_tau",
             "div_dtype": "ekf_solve_dtype"},
}


#: potential-model keys whose default differs from upstream PiNN's: a params file in upstream's form
#: (with an optimizer section) gets upstream's value unless it sets the key
UPSTREAM_DEFAULTS = {"f_loss_multiplier": 1.0}
#: network keys whose default differs from upstream PiNN's (pinn's PiNet and PiNet2 default to a
#: Gaussian basis of 10 functions, chosen for accuracy per training time; upstream's to 4 polynomials):
#: a params file in upstream's form gets upstream's values unless it sets the keys
UPSTREAM_NETWORK_DEFAULTS = {"PiNet": {"basis_type": "polynomial", "n_basis": 4},
                             "PiNet2": {"basis_type": "polynomial", "n_basis": 4}}


def convert_optimizer(params):
    """``params`` with its upstream ``optimizer`` section turned into ``model.params`` keys (logged).

    Args:
        params: a params dict (nested form); returned unchanged without an ``optimizer`` key.

    Returns:
        A new params dict without ``optimizer``.

    Raises:
        ParamsError: naming the key of the section that pinn cannot follow, or the ``model.params``
            key that the section also sets.
    """
    if "optimizer" not in params:
        return params
    params = dict(params)
    section = params.pop("optimizer")
    settings = _settings(section)
    model = dict(params.get("model") or {})
    model_params = dict(model.get("params") or {})
    both = sorted(set(settings) & set(model_params))
    if both:
        raise ParamsError(f"model.params.{both[0]}: also set by the optimizer section (upstream PiNN's form); "
                          "keep one of the two")
    model_params.update(settings)
    if model.get("name", "potential_model") == "potential_model":  # a file in upstream's form: its defaults
        for key, value in UPSTREAM_DEFAULTS.items():
            if key not in model_params:
                model_params[key] = settings[key] = value
    model["params"] = model_params
    params["model"] = model
    network = params.get("network")
    if isinstance(network, dict) and network.get("name") in UPSTREAM_NETWORK_DEFAULTS:
        network_params = dict(network.get("params") or {})
        for key, value in UPSTREAM_NETWORK_DEFAULTS[network["name"]].items():
            if key not in network_params:
                network_params[key] = settings[f"network.params.{key}"] = value
        params["network"] = dict(network, params=network_params)
    text = ", ".join(f"{k}={v!r}" for k, v in settings.items())
    if text not in _LOGGED:  # params are resolved more than once on the way to a model
        _LOGGED.add(text)
        log.info("params: upstream PiNN's optimizer section taken as model.params %s", text)
    return params


_LOGGED = set()


def _settings(section):
    """model.params keys of the optimizer section (Adam, EKF or gEKF)."""
    if not isinstance(section, dict) or "class_name" not in section:
        raise ParamsError("optimizer: expected {'class_name': 'Adam', 'config': {...}} (upstream PiNN's form), "
                          f"got {section!r}")
    unknown = sorted(set(section) - {"class_name", "config", *_WRAPPER})
    if unknown:
        raise ParamsError(f"optimizer.{unknown[0]}: unknown key; allowed: class_name, config")
    name = str(section["class_name"])
    config = section.get("config") or {}
    if not isinstance(config, dict):
        raise ParamsError(f"optimizer.config: expected a mapping, got {config!r}")
    if name in _KALMAN_CONFIG:
        return _kalman_settings(name, config)
    if name.lower() in ("ekf", "gekf"):
        raise ParamsError(f"optimizer.class_name: {name!r}; upstream PiNN's Kalman filters are spelled 'EKF' "
                          "and 'gEKF'")
    if name.lower() not in ("adam", "adamw"):
        raise ParamsError(f"optimizer.class_name: {name!r}; pinn trains with Adam, AdamW, EKF or gEKF")
    return _adam_settings(config, ADAMW_WEIGHT_DECAY if name.lower() == "adamw" else 0.0)


def _kalman_settings(name, config):
    """model.params keys of upstream's EKF / gEKF config (upstream's defaults where a key is not given)."""
    settings = {"optimizer": name.lower(), "lr_warmup_steps": 0, "max_grad_norm": None, "ema_decay": None,
                "ekf_max_learning_rate": 1.0 if name == "EKF" else None}
    keys = _KALMAN_CONFIG[name]
    if "learning_rate" not in config:
        raise ParamsError(f"optimizer.config.learning_rate: required by {name}")
    for key, value in config.items():
        where = f"optimizer.config.{key}"
        if key == "learning_rate":
            settings.update(_rate_settings(value, where))
        elif key in ("inv_dtype", "div_dtype") and key in keys:
            if value not in ("float64", "float32"):
                raise ParamsError(f"{where}: {value!r}; pinn solves in 'float64' or 'float32'")
            settings[keys[key]] = value
        elif key in keys:
            check = _positive if key in ("max_learning_rate", "epsilon", "q_tau") else _non_negative
            settings[keys[key]] = check(value, where)
        else:
            raise ParamsError(f"{where}: unknown {name} option; allowed: learning_rate, {', '.join(keys)}")
    return settings


def _adam_settings(config, weight_decay=0.0):
    """model.params keys of Keras Adam's (or AdamW's, whose default ``weight_decay`` is given) config; a
    weight decay applies to every trainable variable, as Keras' does."""
    settings = {"optimizer": "adam", "lr_warmup_steps": 0, "max_grad_norm": None, "ema_decay": None,
                "weight_decay": weight_decay, "weight_decay_on": "all"}
    for key, value in config.items():
        where = f"optimizer.config.{key}"
        if key == "learning_rate":
            settings.update(_rate_settings(value, where))
        elif key == "global_clipnorm":
            settings["max_grad_norm"] = None if value is None else _positive(value, where)
        elif key == "use_ema":
            if value:
                settings["ema_decay"] = float(config.get("ema_momentum", 0.99))
        elif key == "ema_momentum":
            _fraction(value, where)
        elif key == "weight_decay":
            settings["weight_decay"] = 0.0 if value is None else _non_negative(value, where)
        elif key in _FIXED:
            if value != _FIXED[key] and not (key in ("clipnorm", "clipvalue") and not value):
                raise ParamsError(f"{where}: {value!r}; pinn's Adam follows only {key}={_FIXED[key]!r}"
                                  + ("; global-norm clipping is optimizer.config.global_clipnorm"
                                     if key == "clipnorm" else ""))
        elif key not in _IGNORABLE:
            raise ParamsError(f"{where}: unknown Adam option; allowed: learning_rate, global_clipnorm, use_ema, "
                              f"ema_momentum, weight_decay, {', '.join(_FIXED)}")
    if "learning_rate" not in settings:
        # Keras Adam's default
        settings["learning_rate"] = 0.001
        settings["lr_schedule"] = "constant"
    return settings


def _rate_settings(value, where):
    """model.params keys of Adam's learning_rate: a number, ExponentialDecay or CosineDecay."""
    if not isinstance(value, dict):
        return {"learning_rate": _positive(value, where), "lr_schedule": "constant"}
    unknown = sorted(set(value) - {"class_name", "config", *_WRAPPER})
    name = value.get("class_name")
    config = value.get("config") or {}
    if unknown or not isinstance(config, dict):
        raise ParamsError(f"{where}: expected a number or {{'class_name': ..., 'config': {{...}}}}, got {value!r}")
    allowed = {"ExponentialDecay": ("initial_learning_rate", "decay_steps", "decay_rate", "staircase", "name"),
               "CosineDecay": ("initial_learning_rate", "decay_steps", "alpha", "name")}
    if name not in allowed:
        raise ParamsError(f"{where}.class_name: {name!r}; pinn follows ExponentialDecay and CosineDecay "
                          "(or a number)")
    extra = sorted(set(config) - set(allowed[name]))
    if extra:
        raise ParamsError(f"{where}.config.{extra[0]}: not an option of {name} that pinn follows; "
                          f"allowed: {', '.join(allowed[name])}")
    for key in allowed[name][:3]:
        if key not in config:
            raise ParamsError(f"{where}.config.{key}: required by {name}")
    rate = _positive(config["initial_learning_rate"], f"{where}.config.initial_learning_rate")
    steps = config["decay_steps"]
    if isinstance(steps, bool) or not isinstance(steps, (int, float)) or steps < 1 or int(steps) != steps:
        raise ParamsError(f"{where}.config.decay_steps: a positive whole number of steps, got {steps!r}")
    if name == "ExponentialDecay":
        return {"learning_rate": rate, "lr_schedule": "step" if config.get("staircase") else "exponential",
                "decay_step": int(steps), "decay_rate": _positive(config["decay_rate"], f"{where}.config.decay_rate")}
    return {"learning_rate": rate, "lr_schedule": "cosine", "lr_cosine_steps": int(steps),
            "lr_min_factor": _fraction(config["alpha"], f"{where}.config.alpha")}


def _positive(value, where):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ParamsError(f"{where}: a positive number, got {value!r}")
    return float(value)


def _non_negative(value, where):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ParamsError(f"{where}: a number ≥ 0, got {value!r}")
    return float(value)


def _fraction(value, where):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ParamsError(f"{where}: a number in [0, 1], got {value!r}")
    return float(value)
