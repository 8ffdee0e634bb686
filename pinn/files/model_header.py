"""The header of a model file (:mod:`pinn.files.model_file`): its format, its version and its shape.

The header is JSON that anyone can write, so a reader checks its shape before using any of it:
every key a reader uses, of its type, named in the error when it is missing or of another type
(``water.pinn: damaged pinn model file (its header's members[0].rc is 'x' (a string), not a number)``).
"""
import re

#: what the header's ``format`` says
FORMAT = "pinn-model"
#: the version this pinn writes, and the newest it reads (1: pinn 0.29.0's, without the list of arrays
#: in the header and with a hash over the arrays alone; 2: with them; 3: the Numba engine's ``codes`` name the
#: network, so that PiNet2's engine arrays are not read as PiNet's by an older pinn; 1 and 2 hold PiNet's)
FORMAT_VERSION = 3


class ModelFileError(ValueError):
    """A file that is not a pinn model file, is damaged, or is of a newer format (one line)."""


_NUMBER = (int, float)
#: per key of a member's entry: the types it may have, and their name for messages
_MEMBER_KEYS = {"name": ((str,), "a string"), "source": ((str,), "a string"), "checkpoint": ((str,), "a string"),
                "step": ((int,), "an integer"), "averaged": ((bool,), "true or false"),
                "params": ((dict,), "a mapping"), "model": ((str,), "a string"), "network": ((str,), "a string"),
                "atom_types": ((list,), "a list of atomic numbers"), "rc": (_NUMBER, "a number"),
                "e_unit": (_NUMBER, "a number"), "numba_engine": ((bool,), "true or false"),
                "needs_tensorflow": ((str, type(None)), "a string or null")}
_TOP_KEYS = {"pinn_version": ((str,), "a string"), "created": ((str,), "a string"),
             "kind": ((str,), "a string"), "members": ((list,), "a list"), "sha256": ((str,), "a string")}


def check_header(path, header):
    """Refuse a header that is not a pinn model file's, of a newer format, or of the wrong shape.

    Args:
        path: the file (for messages).
        header: the parsed JSON of its header.

    Raises:
        ModelFileError: naming the file and the key (``members[1].step``, ``arrays['m0/var/x'].shape``).
    """
    if not isinstance(header, dict):
        raise ModelFileError(f"{path}: not a pinn model file (its header is a JSON {type(header).__name__}, not "
                             "an object)")
    if header.get("format") != FORMAT:
        raise ModelFileError(f"{path}: not a pinn model file (format {header.get('format')!r})")
    version = header.get("format_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ModelFileError(f"{path}: damaged pinn model file (its header's format_version is {version!r}, not a "
                             "version number)")
    if version > FORMAT_VERSION:
        raise ModelFileError(f"{path}: a pinn model file of format version {version} (written by pinn "
                             f"{header.get('pinn_version')}); this pinn reads versions up to {FORMAT_VERSION}: "
                             "upgrade pinn")
    _check_keys(path, header, _TOP_KEYS, "")
    if header["kind"] not in ("model", "committee"):
        _refuse(path, "kind", header["kind"], "'model' or 'committee'")
    count = len(header["members"])
    if count == 0 or (header["kind"] == "model" and count != 1):
        wanted = "one" if header["kind"] == "model" else "one or more"
        raise ModelFileError(f"{path}: damaged pinn model file (its header's members has {count} entries; a "
                             f"{header['kind']} has {wanted})")
    if not re.fullmatch(r"[0-9a-f]{64}", header["sha256"]):
        _refuse(path, "sha256", header["sha256"], "64 hexadecimal digits")
    for k, member in enumerate(header["members"]):
        if not isinstance(member, dict):
            _refuse(path, f"members[{k}]", member, "a mapping")
        _check_keys(path, member, _MEMBER_KEYS, f"members[{k}].")
        if not all(isinstance(z, int) and not isinstance(z, bool) and 0 < z < 119 for z in member["atom_types"]):
            _refuse(path, f"members[{k}].atom_types", member["atom_types"], "a list of atomic numbers")
    if version >= 2:
        _check_arrays(path, header.get("arrays"))


def _check_arrays(path, arrays):
    """The header's ``arrays``: name → ``{'dtype': NumPy's dtype string, 'shape': [sizes]}``."""
    if not isinstance(arrays, dict):
        _refuse(path, "arrays", arrays, "a mapping of array names to dtype and shape")
    for name, entry in arrays.items():
        key = f"arrays[{name!r}]"
        if not isinstance(entry, dict):
            _refuse(path, key, entry, "a mapping with dtype and shape")
        if not isinstance(entry.get("dtype"), str):
            _refuse(path, f"{key}.dtype", entry.get("dtype"), "a NumPy dtype string")
        shape = entry.get("shape")
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                  for d in shape):
            _refuse(path, f"{key}.shape", shape, "a list of sizes")


def _check_keys(path, entry, keys, prefix):
    """Refuse an entry that lacks one of ``keys`` or holds it with another type."""
    for key, (types, name) in keys.items():
        if key not in entry:
            raise ModelFileError(f"{path}: damaged pinn model file (its header has no {prefix}{key})")
        value = entry[key]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            _refuse(path, prefix + key, value, name)


#: what a JSON value of each Python type is called in messages
_KINDS = {str: "a string", int: "an integer", float: "a number", bool: "true or false", list: "a list",
          dict: "a mapping", type(None): "null"}


def _refuse(path, key, value, expected):
    """Raise the error for header key ``key`` holding ``value`` where ``expected`` (words) belongs."""
    shown = repr(value)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    raise ModelFileError(f"{path}: damaged pinn model file (its header's {key} is {shown} "
                         f"({_KINDS.get(type(value), type(value).__name__)}), not {expected})")
