"""The params mechanism: :class:`Option` declares one option (type, default, allowed values,
meaning), :func:`validate_section` checks a dict against a schema of options, and
:class:`ParamsError` names the bad key.  Each stage declares its own options with it
(``PiNet.PARAMS``, ``PotentialModel.PARAMS``, :data:`pinn.params.training_options.TRAINING_PARAMS`,
:data:`pinn.parallel.worlds.PARAMS`); :mod:`pinn.params` puts them together.
"""
import copy
import difflib

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
            raise ParamsError(f"{path}: expected {self.type_names()}, got {type(value).__name__} ({value!r})"
                              f"{_number_as_text_hint(value, allowed)}")
        if self.choices is not None and value not in self.choices:
            raise ParamsError(f"{path}: {value!r} is not one of {list(self.choices)}")
        if self.check is not None:
            problem = self.check(value)
            if problem:
                raise ParamsError(f"{path}: {problem} (got {value!r})")
        return copy.deepcopy(value)

    def type_names(self):
        return " or ".join("None" if t is None else t.__name__ for t in self.types)


def _number_as_text_hint(value, allowed):
    """The hint for a number in exponent form that YAML read as text: PyYAML (YAML 1.1) takes ``1e-3`` and
    ``1.0e3`` for strings, a float needs a dot and a signed exponent.  Returns "" for anything else."""
    if not isinstance(value, str) or not (float in allowed or int in allowed) or "e" not in value.lower():
        return ""
    try:
        float(value)
    except ValueError:
        return ""
    return "; YAML reads an exponent without a dot or a sign as text: write e.g. 1.0e-3, 1.0e+3"


def positive(value):
    return None if value > 0 else "must be positive"


def non_negative(value):
    return None if value >= 0 else "must not be negative"


def false_or_positive(value):
    """An option that is off (``false``) or a positive number."""
    if value is True:
        return "false or a positive number"
    return None if value is False or value > 0 else "false or a positive number"


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
        raise ParamsError(f"{path}.{unknown[0]}: unknown key;{did_you_mean(unknown[0], schema)} "
                          f"allowed keys: {sorted(schema)}")
    out = {}
    for key, option in schema.items():
        if key in values:
            out[key] = option.validate(values[key], f"{path}.{key}")
        elif option.default is REQUIRED:
            raise ParamsError(f"{path}.{key}: required key is missing ({option.doc})")
        else:
            out[key] = copy.deepcopy(option.default)
    return out


def describe(schema):
    """Markdown table rows (key, type, default, doc) of a schema, for the docs."""
    rows = []
    for key, option in schema.items():
        default = "required" if option.default is REQUIRED else repr(option.default)
        doc = option.doc + (f" One of {list(option.choices)}." if option.choices else "")
        rows.append(f"| `{key}` | {option.type_names()} | `{default}` | {doc} |")
    return "\n".join(["| key | type | default | meaning |", "|---|---|---|---|"] + rows)


def did_you_mean(key, allowed):
    """`` did you mean `x`?`` for the allowed name closest to ``key`` (ignoring case), or an empty string.

    Every message that refuses an unknown name (a params key, a network or model name, a
    section of a run file) adds it: ``model.params.learnin_rate: unknown key; did you mean
    `learning_rate`? allowed keys: [...]``.
    """
    names = {str(a).lower(): str(a) for a in allowed}
    close = difflib.get_close_matches(str(key).lower(), list(names), n=1, cutoff=0.6)
    return f" did you mean `{names[close[0]]}`?" if close else ""
