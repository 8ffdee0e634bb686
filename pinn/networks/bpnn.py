"""Behler–Parrinello network: atom-centred symmetry functions and per-element subnetworks.

Symmetry functions, named as upstream PiNN names them (after Behler, Int. J. Quantum
Chem. 115, 1032 (2015)), for a centre atom i of element ``i`` and neighbors of
elements ``j`` (and ``k``):

- G2 = Σ_j exp(-eta (r_ij - Rs)²) fc(r_ij)
- G3 = 2^(1-zeta) Σ_{j≠k} (1 + lambda cos θ_ijk)^zeta exp(-eta (r_ij² + r_ik² + r_jk²)) fc(r_ij) fc(r_ik) fc(r_jk)
- G4 = 2^(1-zeta) Σ_{j≠k} (1 + lambda cos θ_ijk)^zeta exp(-eta (r_ij² + r_ik²)) fc(r_ij) fc(r_ik)

(the angular sums run over ordered pairs (j, k), so each pair of neighbors counts twice,
as in upstream PiNN and Behler's definitions).  ``sf_spec`` is a list of dicts, e.g.
``{'type': 'G2', 'i': 'ALL', 'j': 1, 'eta': [0.5, 1.0], 'Rs': [0.0, 0.0]}`` or
``{'type': 'G3', 'i': 'ALL', 'j': 'ALL', 'k': 'ALL', 'eta': [0.01], 'lambd': [1.0], 'zeta': [1.0]}``;
the lists are zipped (one function per position).  ``'ALL'`` matches every
element.  Each element in ``atom_types`` (default: the keys of ``nn_spec``) then has its
own feed-forward subnetwork (``nn_spec``: a list of sizes for all, or a dict element →
sizes) mapping the symmetry functions to an atomic energy.  With ``fp_scale`` the
functions of entry n are first mapped from ``fp_range[n]`` = [min, max] to [-1, 1]
(upstream's pre-conditioning); ``fp_multiplier`` multiplies them all.
"""
import numpy as np
import tensorflow as tf

from pinn import keys as K
from pinn.networks.base import Network
from pinn.networks.layers import (ACTIVATIONS, CUTOFFS, POOLS, Dense, ElementIndex, FeedForward, atomic_number,
                                  cutoff)
from pinn.schema import Option, ParamsError, positive, positive_int_list


def _check_sf_spec(spec):
    for n, sf in enumerate(spec):
        if not isinstance(sf, dict) or sf.get("type") not in ("G2", "G3", "G4"):
            return f"entry {n} must be a dict with 'type' G2, G3 or G4"
        need = ("eta", "Rs") if sf["type"] == "G2" else ("eta", "lambd", "zeta")
        allowed = set(need) | {"type", "i", "j"} | ({"k"} if sf["type"] != "G2" else set())
        if set(sf) - allowed:
            return f"entry {n} has unknown keys {sorted(set(sf) - allowed)} (allowed {sorted(allowed)})"
        lengths = {len(sf[key]) if isinstance(sf.get(key), list) else None for key in need}
        if None in lengths or len(lengths) != 1:
            return f"entry {n} needs lists {list(need)} of equal length"
    return None


def _check_ranges(value):
    for n, pair in enumerate(value):
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2):
            return f"entry {n} must be [min, max]"
        try:
            low = np.asarray(pair[0], float)
            high = np.asarray(pair[1], float)
        except (TypeError, ValueError):
            return f"entry {n} must be [min, max] of numbers or of lists of numbers"
        if low.shape != high.shape or low.ndim > 1 or not np.all(high > low):
            return f"entry {n} must be [min, max] (numbers, or one per function of the entry) with max > min"
    return None


DEFAULT_SF = [
    {"type": "G2", "i": "ALL", "j": "ALL", "eta": [0.05, 0.2, 0.5, 1.0, 2.0, 4.0], "Rs": [0.0] * 6},
    {"type": "G3", "i": "ALL", "j": "ALL", "k": "ALL", "eta": [0.005, 0.005, 0.05, 0.05],
     "lambd": [1.0, -1.0, 1.0, -1.0], "zeta": [1.0, 1.0, 4.0, 4.0]},
]

PARAMS = {
    "atom_types": Option((list, None), None, "atomic numbers the network knows (default: the elements of nn_spec, "
                         "which must then be a dict, as upstream PiNN's)", check=positive_int_list),
    "rc": Option(float, 5.0, "cutoff radius, Å", check=positive),
    "sf_spec": Option(list, DEFAULT_SF, "symmetry functions (see the module docs)", check=_check_sf_spec),
    "nn_spec": Option((list, dict), [35, 35], "hidden sizes of the subnetworks: a list, or {element: list}"),
    "act": Option(str, "tanh", "activation function", choices=tuple(ACTIVATIONS)),
    "cutoff_type": Option(str, "f1", "cutoff function", choices=tuple(CUTOFFS)),
    "fp_scale": Option(bool, False, "map each sf_spec entry's functions from its fp_range [min, max] to [-1, 1] "
                       "(upstream PiNN's)"),
    "fp_range": Option(list, [], "with fp_scale: one [min, max] per sf_spec entry, each a number or a list with "
                       "one value per function of the entry (what `pinn train --init` writes)", check=_check_ranges),
    "fp_multiplier": Option(float, 1.0, "the symmetry functions are multiplied by this before the subnetworks "
                            "(pinn's; the fp_scale of pinn < 0.14)", check=positive),
    "out_pool": Option((bool, str), False, "false: one output per atom; 'sum', 'max' or 'min': pooled per "
                       "structure (the network on its own; the models sum atomic outputs)",
                       check=lambda v: None if v in (False, "sum", "max", "min") else "false, 'sum', 'max' or 'min'"),
    "out_units": Option(int, 1, "outputs per atom", check=positive),
    "use_jacobian": Option(bool, True, "upstream PiNN's switch between its hand-made Jacobian of the symmetry "
                           "functions and TensorFlow's gradient; pinn takes TensorFlow's exact gradient either "
                           "way, so both values give the same forces"),
}


def _match(elems, which):
    if which in (None, "ALL"):
        return tf.ones_like(elems, dtype=tf.bool)
    return tf.equal(elems, int(which))


def triplets(ind_2, n_atoms):
    """Pairs of pairs sharing their centre atom: ``(p_ij, p_ik)`` with p_ij != p_ik.

    ``ind_2`` must be sorted by its first column (as the neighbor lists are).
    """
    centre = ind_2[:, 0]
    counts = tf.math.bincount(centre, minlength=n_atoms, maxlength=n_atoms, dtype=tf.int32)
    starts = tf.cumsum(counts, exclusive=True)
    per_pair = tf.gather(counts, centre)
    p_ij = tf.repeat(tf.range(tf.shape(ind_2)[0]), per_pair)
    first = tf.gather(starts, centre)
    p_ik = tf.ragged.range(first, first + per_pair).flat_values
    keep = tf.not_equal(p_ij, p_ik)
    return tf.boolean_mask(p_ij, keep), tf.boolean_mask(p_ik, keep)


class BPNN(Network):
    """Behler–Parrinello network: ``net.atomic_outputs(tensors) -> [n_atoms, out_units]`` from ``elems``,
    ``ind_2``, ``diff`` and ``dist``; ``net(tensors)`` as upstream calls it.

    Built from params (``BPNN(params, dtype=..., seed=...)``) or with upstream PiNN's arguments
    (``BPNN(sf_spec, nn_spec, rc=5.0)``); see :class:`pinn.networks.base.Network`.
    """

    PARAMS = PARAMS
    UPSTREAM_ARGS = ("sf_spec", "nn_spec", "rc", "act", "cutoff_type", "fp_range", "fp_scale", "preprocess",
                     "use_jacobian", "out_units", "out_pool")
    #: the angular triplets have data-dependent shapes: no XLA
    JIT_COMPATIBLE = False

    @classmethod
    def atom_types_of(cls, params):
        """The atomic numbers a BPNN of these network params knows: ``atom_types``, else the elements of
        ``nn_spec`` (a dict by element); a ParamsError where neither says."""
        if params["atom_types"] is not None:
            return [int(z) for z in params["atom_types"]]
        if not isinstance(params["nn_spec"], dict):
            raise ParamsError("network.params.atom_types: needed when nn_spec is a list (or give nn_spec as "
                              "{element: sizes})")
        return sorted(atomic_number(z, "network.params.nn_spec") for z in params["nn_spec"])

    def build(self, params, dtype, rng):
        self.rc = params["rc"]
        nn_spec = params["nn_spec"]
        self.atom_types = self.atom_types_of(params)
        if params["fp_scale"] and len(params["fp_range"]) != len(params["sf_spec"]):
            raise ParamsError(f"network.params.fp_range: fp_scale needs one [min, max] per sf_spec entry "
                              f"({len(params['sf_spec'])}), got {len(params['fp_range'])}")
        self.element_index = ElementIndex(self.atom_types)
        self.n_fp = sum(len(sf["eta"]) for sf in params["sf_spec"])
        self.subnets = []
        by_element = ({atomic_number(z, "network.params.nn_spec"): nodes for z, nodes in nn_spec.items()}
                      if isinstance(nn_spec, dict) else None)
        for z in self.atom_types:
            nodes = by_element.get(z) if by_element is not None else nn_spec
            if nodes is None:
                raise ValueError(f"network.params.nn_spec: no subnetwork sizes for element {z}")
            ff = FeedForward(self.n_fp, nodes, rng, params["act"], dtype=dtype, name=f"subnet_{z}")
            self.subnets.append((ff, Dense(ff.n_out, params["out_units"], rng, dtype=dtype, name=f"out_{z}",
                                                    output=True)))

    def regularized_weights(self):
        """The weight matrices of the element subnetworks' hidden layers (no biases, no output layers):
        what upstream PiNN's ``use_l2`` regularises."""
        return [v for ff, _ in self.subnets for v in ff.trainable_variables if v.name.startswith("kernel")]

    @tf.autograph.experimental.do_not_convert
    def preprocess(self, tensors):
        """Upstream PiNN's ``BPNN.preprocess``: the batch with its neighbor list and pair geometry
        (:meth:`pinn.networks.base.Network.preprocess`) and ``fp_{n}`` for each ``sf_spec`` entry n:
        its symmetry functions, unscaled, [n_i, n_functions] for the n_i atoms of the entry's
        element ``i`` (every atom for ``'ALL'``), in batch order, as upstream's layer gives them."""
        tensors = super().preprocess(tensors)
        elems = tensors[K.ELEMS]
        for n, (sf, entry) in enumerate(zip(self.params["sf_spec"], self.symmetry_functions(tensors))):
            tensors[f"fp_{n}"] = tf.boolean_mask(tf.stack(entry, axis=1), _match(elems, sf.get("i")))
        return tensors

    def fingerprints(self, tensors):
        """The subnetworks' input [n_atoms, n_fp]: the symmetry functions of every entry (zero for atoms
        whose element the entry does not centre on), scaled by ``fp_range`` with ``fp_scale``, times
        ``fp_multiplier``."""
        p = self.params
        columns = []
        for n, entry in enumerate(self.symmetry_functions(tensors)):
            if p["fp_scale"]:  # fp_range[n]: [min, max] of the entry, or of each of its functions
                low, high = (np.broadcast_to(np.asarray(x, float), len(entry)) for x in p["fp_range"][n])
                entry = [(g - lo) / (hi - lo) * 2.0 - 1.0 for g, lo, hi in zip(entry, low, high)]
            columns.extend(entry)
        return tf.stack(columns, axis=1) * p["fp_multiplier"]

    def fingerprint_range(self, batches):
        """Upstream's ``pinn train --init`` for ``fp_scale``: the ``fp_range`` of these structures.

        Args:
            batches: an iterable of sparse batches (dicts of tensors or arrays with ``elems``, ``coord``
                in Å and ``ind_1``; neighbor lists are made at this network's cutoff where they lack them).

        Returns:
            [[min per function], [max per function]] for each ``sf_spec`` entry, of the unscaled symmetry
            functions (a function constant over the data gets max = min + 1, so that any scaling keeps it
            inside [-1, 1]).

        Raises:
            ValueError: no batch.
        """
        low = high = None
        for batch in batches:
            columns = [g for entry in self.symmetry_functions(self.preprocess(batch)) for g in entry]
            fp = tf.stack(columns, axis=1).numpy()
            low = fp.min(0) if low is None else np.minimum(low, fp.min(0))
            high = fp.max(0) if high is None else np.maximum(high, fp.max(0))
        if low is None:
            raise ValueError("fp_range: no training structures to take it from")
        out = []
        start = 0
        for sf in self.params["sf_spec"]:
            width = len(sf["eta"])
            lo = low[start:start + width]
            hi = high[start:start + width]
            hi = np.where(hi > lo, hi, lo + 1.0)
            out.append([lo.tolist(), hi.tolist()])
            start += width
        return out

    def symmetry_functions(self, tensors):
        """For each ``sf_spec`` entry, the list of its functions, each [n_atoms] (zero where the entry
        does not centre on the atom's element), unscaled."""
        elems = tensors[K.ELEMS]
        ind_2 = tensors[K.IND_2]
        diff = tensors[K.DIFF]
        dist = tensors[K.DIST]
        n_atoms = tf.shape(elems)[0]
        ctype = self.params["cutoff_type"]
        fc = cutoff(dist, self.rc, ctype)
        e_i = tf.gather(elems, ind_2[:, 0])
        e_j = tf.gather(elems, ind_2[:, 1])
        need_triplets = any(sf["type"] != "G2" for sf in self.params["sf_spec"])
        if need_triplets:
            p_ij, p_ik = triplets(ind_2, n_atoms)
            d_ij = tf.gather(diff, p_ij)
            d_ik = tf.gather(diff, p_ik)
            r_ij = tf.gather(dist, p_ij)
            r_ik = tf.gather(dist, p_ik)
            r_jk = tf.norm(d_ik - d_ij, axis=1)
            cos = tf.reduce_sum(d_ij * d_ik, axis=1) / (r_ij * r_ik)
            fc2 = tf.gather(fc, p_ij) * tf.gather(fc, p_ik)
            fc3 = fc2 * cutoff(r_jk, self.rc, ctype)
            r2 = r_ij ** 2 + r_ik ** 2 + r_jk ** 2
            t_i = tf.gather(e_i, p_ij)
            t_j = tf.gather(e_j, p_ij)
            t_k = tf.gather(e_j, p_ik)
            centre = tf.gather(ind_2[:, 0], p_ij)
        entries = []
        for sf in self.params["sf_spec"]:
            entry = []
            if sf["type"] == "G2":
                mask = tf.cast(_match(e_i, sf.get("i")) & _match(e_j, sf.get("j")), dist.dtype)
                for eta, rs in zip(sf["eta"], sf["Rs"]):
                    g = tf.exp(-eta * (dist - rs) ** 2) * fc * mask
                    entry.append(tf.math.unsorted_segment_sum(g, ind_2[:, 0], n_atoms))
            else:
                mask = tf.cast(_match(t_i, sf.get("i")) & _match(t_j, sf.get("j")) & _match(t_k, sf.get("k")),
                               dist.dtype)
                radial, cut = (r2, fc3) if sf["type"] == "G3" else (r2 - r_jk ** 2, fc2)
                for eta, lambd, zeta in zip(sf["eta"], sf["lambd"], sf["zeta"]):
                    base = tf.maximum(1.0 + lambd * cos, 0.0)
                    g = 2.0 ** (1.0 - zeta) * base ** zeta * tf.exp(-eta * radial) * cut * mask
                    entry.append(tf.math.unsorted_segment_sum(g, centre, n_atoms))
            entries.append(entry)
        return entries

    def atomic_outputs(self, tensors):
        """[n_atoms, out_units] (per structure with ``out_pool``)."""
        fp = self.fingerprints(tensors)
        idx = self.element_index(tensors[K.ELEMS])
        parts = tf.dynamic_partition(fp, idx, len(self.atom_types))
        positions = tf.dynamic_partition(tf.range(tf.shape(fp)[0]), idx, len(self.atom_types))
        outs = [dense(ff(part)) for (ff, dense), part in zip(self.subnets, parts)]
        output = tf.dynamic_stitch(positions, outs)
        if self.params["out_pool"]:
            return POOLS[self.params["out_pool"]](output, tensors[K.IND_1][:, 0], tf.reduce_max(tensors[K.IND_1]) + 1)
        return output
