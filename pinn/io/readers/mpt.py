"""A reader for MiMiCPy's ``.mpt`` topology files, without the ``mimicpy`` package.

An ``.mpt`` file is XDR (big-endian, every item padded to 4 bytes).  A
*string* is a uint32 length, the bytes and zero padding; a *list* is, for each
item, a uint32 ``1`` followed by the item, then a final uint32 ``0``; a *strlist*
is one string of comma-joined values.  The file holds, in order:

1. strlist: the molecule names of the ``[ molecules ]`` section, in order
   (a name may appear more than once);
2. list of int32: the number of molecules of each entry;
3. strlist, strlist: keys and values of the *repeating* map (a moleculetype
   whose atom table is identical to another one's is stored once, under the
   other's name);
4. until the end of the file, for each stored moleculetype: its name, then
   the atom table as columns: atom numbers (list of int32), types (strlist),
   residue ids (list of int32), residue names, atom names (strlists), charges
   (list of float32), elements (strlist), masses (list of float32).

The per-atom arrays follow GROMACS atom order: for each ``[ molecules ]``
entry, the table of its moleculetype repeated ``count`` times.  This is the
order of the atoms in the run's ``.trr`` files.
"""
import functools
import os
from collections.abc import Mapping

import numpy as np

from pinn.io.errors import DataError

#: the per-atom columns, as mimicpy names them
COLUMNS = ("type", "resid", "resname", "name", "charge", "element", "mass", "mol")
_TABLE = ("number", "type", "resid", "resname", "name", "charge", "element", "mass")


class MPTTopology(Mapping):
    """Per-atom properties of a MiMiC system, read from an ``.mpt`` file.

    A mapping from column name to a numpy array with one entry per atom, in
    GROMACS atom order:

    - ``'element'``: element symbols (str), as MiMiCPy assigned them;
    - ``'name'``, ``'type'``, ``'resname'``: atom names, atom types, residue
      names (str);
    - ``'resid'``: residue numbers (int), renumbered consecutively over the
      molecules as MiMiCPy does;
    - ``'charge'``: partial charges, e (float32 in the file, returned as float64);
    - ``'mass'``: masses, g/mol (float32 in the file, returned as float64);
    - ``'mol'``: the ``[ molecules ]`` name each atom belongs to.

    Attributes:
        path: the file read.
        molecules: list of ``(name, count)`` in ``[ molecules ]`` order.
        moleculetypes: dict of the stored moleculetypes, name -> dict of
            per-atom columns of one molecule.
        repeating: dict name -> name of the stored moleculetype it reuses.
        natoms: number of atoms.
    """

    def __init__(self, path, molecules, moleculetypes, repeating):
        self.path = path
        self.molecules = molecules
        self.moleculetypes = moleculetypes
        self.repeating = repeating
        self._columns = self._expand()
        self.natoms = len(self._columns["element"])

    def _table(self, name):
        stored = self.repeating.get(name, name)
        if stored not in self.moleculetypes:
            raise DataError(f"{self.path}: molecule {name!r} of [ molecules ] has no atom table "
                            f"(stored moleculetypes: {sorted(self.moleculetypes)})")
        return self.moleculetypes[stored]

    def _expand(self):
        columns = {key: [] for key in COLUMNS}
        resid_so_far = 0
        for name, count in self.molecules:
            table = self._table(name)
            n = len(table["name"])
            for key in ("type", "resname", "name", "charge", "element", "mass"):
                columns[key].append(np.tile(table[key], count))
            columns["mol"].append(np.full(n * count, name, dtype=object))
            # residue ids restart for every molecule and continue from the previous one
            local = table["resid"] - table["resid"][0] + 1 if n else table["resid"]
            for _ in range(count):
                shifted = local + resid_so_far
                columns["resid"].append(shifted)
                if n:
                    resid_so_far = int(shifted[-1])
        out = {}
        for key, parts in columns.items():
            if not parts:
                out[key] = np.array([], dtype=object if key in ("type", "resname", "name", "element", "mol")
                                    else float)
                continue
            array = np.concatenate(parts)
            out[key] = array.astype(str) if array.dtype == object else array
        return out

    def __getitem__(self, key):
        try:
            return self._columns[key]
        except KeyError:
            raise KeyError(f"{key!r}: an .mpt topology has the columns {list(COLUMNS)}") from None

    def __iter__(self):
        return iter(self._columns)

    def __len__(self):
        return len(self._columns)

    @functools.cached_property
    def atomic_numbers(self):
        """Atomic numbers (int32 array) of the ``'element'`` column.

        Raises:
            DataError: an element symbol that is not a chemical element (a
                virtual site or a guess MiMiCPy could not make), naming the atom.
        """
        from ase.data import atomic_numbers
        symbols = self._columns["element"]
        unique, inverse = np.unique(symbols, return_inverse=True)
        numbers = []
        for symbol in unique:
            z = atomic_numbers.get(str(symbol).strip().capitalize())
            if not z:
                first = int(np.flatnonzero(symbols == symbol)[0])
                raise DataError(f"{self.path}: atom {first + 1} ({self._columns['resname'][first]} "
                                f"{self._columns['name'][first]}) has element {symbol!r}, not a chemical "
                                "element")
            numbers.append(z)
        return np.asarray(numbers, np.int32)[inverse].reshape(-1)

    def __repr__(self):
        mols = ", ".join(f"{name} {count}" for name, count in self.molecules)
        return f"MPTTopology({self.path!r}, {self.natoms} atoms: {mols})"


class _XDR:
    """Sequential decoder over the 32-bit words of an XDR buffer."""

    def __init__(self, data, path):
        if len(data) % 4:
            raise DataError(f"{path}: not an .mpt file: {len(data)} bytes is not a multiple of 4 (XDR)")
        self.data = data
        self.words = np.frombuffer(data, dtype=">u4")
        self.pos = 0  # in words
        self.path = path

    def done(self):
        return self.pos >= len(self.words)

    def _need(self, n, what):
        if self.pos + n > len(self.words):
            raise DataError(f"{self.path}: truncated or not an .mpt file: the file ends inside {what} "
                            f"(byte {4 * self.pos})")

    def uint(self, what):
        self._need(1, what)
        self.pos += 1
        return int(self.words[self.pos - 1])

    def string(self, what):
        n = self.uint(what)
        words = (n + 3) // 4
        self._need(words, what)
        start = 4 * self.pos
        self.pos += words
        try:
            return self.data[start:start + n].decode("utf-8")
        except UnicodeDecodeError:
            raise DataError(f"{self.path}: not an .mpt file: {what} at byte {start} is not text") from None

    def strlist(self, what):
        text = self.string(what)
        return text.split(",") if text else []

    def numbers(self, dtype, what):
        """A list of 4-byte numbers: markers 1 before each value, 0 at the end."""
        markers = self.words[self.pos::2]
        stop = np.flatnonzero(markers != 1)
        if not len(stop):
            self._need(len(self.words) + 1, what)
        n = int(stop[0])
        if markers[n] != 0:
            raise DataError(f"{self.path}: corrupt .mpt file: list marker {int(markers[n])} in {what} "
                            f"(byte {4 * (self.pos + 2 * n)}), expected 0 or 1")
        values = self.words[self.pos + 1:self.pos + 2 * n:2].view(dtype).astype(dtype.newbyteorder("="))
        self.pos += 2 * n + 1
        return values


def read_mpt(path):
    """Read a MiMiCPy ``.mpt`` topology.

    Args:
        path: the ``.mpt`` file (as written by ``mimicpy`` 0.1–0.2, or by
            ``mimicpy getmpt``).

    Returns:
        :class:`MPTTopology`, a mapping of per-atom arrays in GROMACS atom
        order: ``read_mpt(path)['element']`` gives the element symbols, as
        mimicpy's ``Mpt.from_file(path)['element']`` does.

    Raises:
        DataError: missing, empty, truncated or malformed file; molecule
            names without a table; columns of different lengths.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise DataError(f"{path}: no such file")
    with open(path, "rb") as f:
        data = f.read()
    if not data:
        raise DataError(f"{path}: file is empty")
    xdr = _XDR(data, path)
    names = xdr.strlist("the molecule names")
    counts = xdr.numbers(np.dtype(">i4"), "the molecule counts")
    if len(names) != len(counts):
        raise DataError(f"{path}: not an .mpt file or corrupt: {len(names)} molecule names but "
                        f"{len(counts)} molecule counts")
    keys = xdr.strlist("the repeating-molecule keys")
    values = xdr.strlist("the repeating-molecule values")
    if len(keys) != len(values):
        raise DataError(f"{path}: corrupt .mpt file: {len(keys)} repeating keys, {len(values)} values")
    tables = {}
    while not xdr.done():
        name = xdr.string("a moleculetype name")
        what = f"the atom table of {name!r}"
        table = {
            "number": xdr.numbers(np.dtype(">i4"), what), "type": xdr.strlist(what),
            "resid": xdr.numbers(np.dtype(">i4"), what), "resname": xdr.strlist(what),
            "name": xdr.strlist(what), "charge": xdr.numbers(np.dtype(">f4"), what),
            "element": xdr.strlist(what), "mass": xdr.numbers(np.dtype(">f4"), what),
        }
        lengths = {key: len(col) for key, col in table.items()}
        if len(set(lengths.values())) != 1:
            raise DataError(f"{path}: corrupt .mpt file: columns of moleculetype {name!r} have different "
                            f"lengths {lengths}")
        table = {key: (np.asarray(col, dtype=object) if key in ("type", "resname", "name", "element")
                       else col.astype(np.int64) if col.dtype.kind == "i" else col.astype(np.float64))
                 for key, col in table.items()}
        tables[name] = table
    molecules = [(name, int(count)) for name, count in zip(names, counts)]
    bad = [(n, c) for n, c in molecules if c < 0]
    if bad:
        raise DataError(f"{path}: negative molecule counts {bad}")
    return MPTTopology(path, molecules, tables, dict(zip(keys, values)))


def write_mpt(path, molecules, moleculetypes, repeating=None):
    """Write a MiMiCPy ``.mpt`` topology (the layout :func:`read_mpt` reads and mimicpy 0.1–0.2 write).

    Args:
        path: file to write (replaced).
        molecules: ``[(name, count), ...]`` in ``[ molecules ]`` order.
        moleculetypes: dict name → atom table of one molecule, a dict of
            equal-length sequences ``number`` (1-based), ``type``, ``resid``,
            ``resname``, ``name``, ``charge`` (e), ``element``, ``mass`` (g/mol).
        repeating: dict name → name of the stored moleculetype it reuses.

    Returns:
        ``path``.
    """
    import struct
    out = bytearray()

    def uint(value):
        out.extend(struct.pack(">I", value))

    def string(text):
        data = str(text).encode("utf-8")
        uint(len(data))
        out.extend(data + b"\0" * (-len(data) % 4))

    def numbers(values, fmt):
        for value in values:
            uint(1)
            out.extend(struct.pack(fmt, value))
        uint(0)

    repeating = repeating or {}
    string(",".join(name for name, _ in molecules))
    numbers([int(count) for _, count in molecules], ">i")
    string(",".join(repeating))
    string(",".join(repeating.values()))
    for name, table in moleculetypes.items():
        string(name)
        numbers([int(v) for v in table["number"]], ">i")
        string(",".join(map(str, table["type"])))
        numbers([int(v) for v in table["resid"]], ">i")
        string(",".join(map(str, table["resname"])))
        string(",".join(map(str, table["name"])))
        numbers([float(v) for v in table["charge"]], ">f")
        string(",".join(map(str, table["element"])))
        numbers([float(v) for v in table["mass"]], ">f")
    with open(path, "wb") as f:
        f.write(bytes(out))
    return path
