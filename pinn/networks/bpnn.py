"""Behler–Parrinello network: atom-centred symmetry functions and per-element subnetworks.

Symmetry functions (Behler, J. Chem. Phys. 134, 074106 (2011)), for a centre
atom i of element ``i`` and neighbors of elements ``j`` (and ``k``):

- G2 = sum_j exp(-eta (r_ij - Rs)^2) fc(r_ij)
- G4 = 2^(1-zeta) sum_{j<k} (1 + lambda cos theta_ijk)^zeta
  exp(-eta (r_ij^2 + r_ik^2 + r_jk^2)) fc(r_ij) fc(r_ik) fc(r_jk)

``sf_spec`` is a list of dicts, e.g.
``{'type': 'G2', 'i': 'ALL', 'j': 1, 'eta': [0.5, 1.0], 'Rs': [0.0, 0.0]}`` or
``{'type': 'G4', 'i': 'ALL', 'j': 'ALL', 'k': 'ALL', 'eta': [0.01], 'lambd': [1.0], 'zeta': [1.0]}``;
the lists are zipped (one function per position).  ``'ALL'`` matches every
element.  Each element in ``atom_types`` then has its own feed-forward
subnetwork (``nn_spec``: a list of sizes for all, or a dict element → sizes)
mapping the symmetry functions (optionally scaled by ``fp_scale``) to an
atomic energy.
"""
import copy

import numpy as np
import tensorflow as tf

from pinn import keys as K
from pinn.networks.layers import ACTIVATIONS, CUTOFFS, Dense, ElementIndex, FeedForward, cutoff
from pinn.schema import Option, positive, positive_int_list


def _check_sf_spec(spec):
    for n, sf in enumerate(spec):
        if not isinstance(sf, dict) or sf.get("type") not in ("G2", "G4"):
            return f"entry {n} must be a dict with 'type' G2 or G4"
        need = ("eta", "Rs") if sf["type"] == "G2" else ("eta", "lambd", "zeta")
        allowed = set(need) | {"type", "i", "j"} | ({"k"} if sf["type"] == "G4" else set())
        if set(sf) - allowed:
            return f"entry {n} has unknown keys {sorted(set(sf) - allowed)} (allowed {sorted(allowed)})"
        lengths = {len(sf[key]) if isinstance(sf.get(key), list) else None for key in need}
        if None in lengths or len(lengths) != 1:
            return f"entry {n} needs lists {list(need)} of equal length"
    return None


DEFAULT_SF = [
    {"type": "G2", "i": "ALL", "j": "ALL", "eta": [0.05, 0.2, 0.5, 1.0, 2.0, 4.0], "Rs": [0.0] * 6},
    {"type": "G4", "i": "ALL", "j": "ALL", "k": "ALL", "eta": [0.005, 0.005, 0.05, 0.05],
     "lambd": [1.0, -1.0, 1.0, -1.0], "zeta": [1.0, 1.0, 4.0, 4.0]},
]

PARAMS = {
    "atom_types": Option(list, [1, 6, 7, 8], "atomic numbers the network knows", check=positive_int_list),
    "rc": Option(float, 5.0, "cutoff radius, Å", check=positive),
    "sf_spec": Option(list, DEFAULT_SF, "symmetry functions (see the module docs)", check=_check_sf_spec),
    "nn_spec": Option((list, dict), [35, 35], "hidden sizes of the subnetworks: a list, or {element: list}"),
    "act": Option(str, "tanh", "activation function", choices=tuple(ACTIVATIONS)),
    "cutoff_type": Option(str, "f1", "cutoff function", choices=tuple(CUTOFFS)),
    "fp_scale": Option(float, 1.0, "symmetry functions are multiplied by this before the subnetworks",
                       check=positive),
    "out_units": Option(int, 1, "outputs per atom", check=positive),
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


class BPNN(tf.Module):
    """Behler–Parrinello network: ``net(tensors) -> [n_atoms, out_units]``.

    Call with ``elems``, ``ind_2``, ``diff`` and ``dist``.
    """

    PARAMS = PARAMS
    #: the angular triplets have data-dependent shapes: no XLA
    JIT_COMPATIBLE = False

    def __init__(self, params, dtype=tf.float32, seed=0, name="BPNN"):
        super().__init__(name=name)
        # a private deep copy, past TensorFlow's attribute tracking: tracking wraps nested lists and
        # dicts in place, which would reach into the caller's params (and break writing them as YAML)
        object.__setattr__(self, "params", copy.deepcopy(dict(params)))
        rng = np.random.RandomState(seed)
        self.rc = params["rc"]
        self.atom_types = [int(z) for z in params["atom_types"]]
        self.element_index = ElementIndex(self.atom_types)
        self.n_fp = sum(len(sf["eta"]) for sf in params["sf_spec"])
        nn_spec = params["nn_spec"]
        self.subnets = []
        for z in self.atom_types:
            nodes = nn_spec.get(z, nn_spec.get(str(z))) if isinstance(nn_spec, dict) else nn_spec
            if nodes is None:
                raise ValueError(f"network.params.nn_spec: no subnetwork sizes for element {z}")
            ff = FeedForward(self.n_fp, nodes, rng, params["act"], dtype=dtype, name=f"subnet_{z}")
            self.subnets.append((ff, Dense(ff.n_out, params["out_units"], rng, dtype=dtype, name=f"out_{z}")))

    def fingerprints(self, tensors):
        """Symmetry functions [n_atoms, n_fp]."""
        elems, ind_2, diff, dist = (tensors[K.ELEMS], tensors[K.IND_2], tensors[K.DIFF], tensors[K.DIST])
        n_atoms = tf.shape(elems)[0]
        ctype = self.params["cutoff_type"]
        fc = cutoff(dist, self.rc, ctype)
        e_i, e_j = tf.gather(elems, ind_2[:, 0]), tf.gather(elems, ind_2[:, 1])
        columns = []
        need_triplets = any(sf["type"] == "G4" for sf in self.params["sf_spec"])
        if need_triplets:
            p_ij, p_ik = triplets(ind_2, n_atoms)
            d_ij, d_ik = tf.gather(diff, p_ij), tf.gather(diff, p_ik)
            r_ij, r_ik = tf.gather(dist, p_ij), tf.gather(dist, p_ik)
            r_jk = tf.norm(d_ik - d_ij, axis=1)
            cos = tf.reduce_sum(d_ij * d_ik, axis=1) / (r_ij * r_ik)
            fc3 = tf.gather(fc, p_ij) * tf.gather(fc, p_ik) * cutoff(r_jk, self.rc, ctype)
            r2 = r_ij ** 2 + r_ik ** 2 + r_jk ** 2
            t_i = tf.gather(e_i, p_ij)
            t_j, t_k = tf.gather(e_j, p_ij), tf.gather(e_j, p_ik)
            centre = tf.gather(ind_2[:, 0], p_ij)
        for sf in self.params["sf_spec"]:
            if sf["type"] == "G2":
                mask = tf.cast(_match(e_i, sf.get("i")) & _match(e_j, sf.get("j")), dist.dtype)
                for eta, rs in zip(sf["eta"], sf["Rs"]):
                    g = tf.exp(-eta * (dist - rs) ** 2) * fc * mask
                    columns.append(tf.math.unsorted_segment_sum(g, ind_2[:, 0], n_atoms))
            else:
                j, k = sf.get("j"), sf.get("k")
                pair_ok = (_match(t_j, j) & _match(t_k, k)) | (_match(t_j, k) & _match(t_k, j))
                mask = tf.cast(_match(t_i, sf.get("i")) & pair_ok, dist.dtype)
                for eta, lambd, zeta in zip(sf["eta"], sf["lambd"], sf["zeta"]):
                    base = tf.maximum(1.0 + lambd * cos, 0.0)
                    g = 2.0 ** (1.0 - zeta) * base ** zeta * tf.exp(-eta * r2) * fc3 * mask
                    # ordered (j, k) pairs count each unordered pair twice
                    columns.append(0.5 * tf.math.unsorted_segment_sum(g, centre, n_atoms))
        return tf.stack(columns, axis=1) * self.params["fp_scale"]

    def __call__(self, tensors):
        fp = self.fingerprints(tensors)
        idx = self.element_index(tensors[K.ELEMS])
        parts = tf.dynamic_partition(fp, idx, len(self.atom_types))
        positions = tf.dynamic_partition(tf.range(tf.shape(fp)[0]), idx, len(self.atom_types))
        outs = [dense(ff(part)) for (ff, dense), part in zip(self.subnets, parts)]
        return tf.dynamic_stitch(positions, outs)
