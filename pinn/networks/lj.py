"""Lennard-Jones pair potential as a network, for tests and as a baseline.

E = sum_{i<j} 4 epsilon [(sigma/r)^12 - (sigma/r)^6] - E(rc), with pairs beyond
``rc`` ignored: the same energy as ASE's ``LennardJones(smooth=False)``.
``epsilon`` (eV) and ``sigma`` (Å) are trainable variables.
"""
import tensorflow as tf
from ase.data import chemical_symbols

from pinn import keys as K
from pinn.networks.base import Network
from pinn.networks.layers import ElementIndex
from pinn.schema import Option, positive, positive_int_list

PARAMS = {
    "atom_types": Option((list, None), None, "atomic numbers accepted (all share one epsilon and sigma); "
                         "default: every element, as upstream PiNN's LJ", check=positive_int_list),
    "rc": Option(float, 3.0, "cutoff radius, Å", check=positive),
    "epsilon": Option(float, 1.0, "well depth, eV", check=positive),
    "sigma": Option(float, 1.0, "zero-crossing distance, Å", check=positive),
}


class LJ(Network):
    """Lennard-Jones network: ``net.atomic_outputs(tensors) -> [n_atoms, 1]`` atomic energies, eV;
    ``net(tensors)`` as upstream calls it.  ``LJ(rc=3.0, sigma=1.0, epsilon=1.0)`` as upstream builds it."""

    PARAMS = PARAMS
    UPSTREAM_ARGS = ("rc", "sigma", "epsilon")
    #: static shapes only (XLA): the calculator compiles it on padded batches
    JIT_COMPATIBLE = True

    @classmethod
    def atom_types_of(cls, params):
        """``atom_types``, else every element (LJ has one epsilon and sigma for all)."""
        return [int(z) for z in (params["atom_types"] or range(1, len(chemical_symbols)))]

    def build(self, params, dtype, rng):
        self.rc = params["rc"]
        self.atom_types = self.atom_types_of(params)
        self.element_index = ElementIndex(self.atom_types)
        self.epsilon = tf.Variable(params["epsilon"], dtype=dtype, name="epsilon")
        self.sigma = tf.Variable(params["sigma"], dtype=dtype, name="sigma")

    def regularized_weights(self):
        """None: epsilon and sigma are physical parameters, not weights to regularise."""
        return []

    def atomic_outputs(self, tensors):
        """[n_atoms, 1] atomic energies (eV) from ``elems``, ``ind_2`` and ``dist`` (Å)."""
        self.element_index(tensors[K.ELEMS])  # rejects unknown elements
        dist = tensors[K.DIST]
        inside = dist < self.rc
        r = tf.where(inside, dist, tf.ones_like(dist) * self.rc)

        def lj(x):
            s6 = (self.sigma / x) ** 6
            return 4.0 * self.epsilon * (s6 * s6 - s6)
        e_pair = tf.where(inside, lj(r) - lj(tf.constant(self.rc, dist.dtype)), tf.zeros_like(dist))
        n_atoms = tf.shape(tensors[K.ELEMS])[0]
        # each pair appears as (i, j) and (j, i): half to each atom
        return 0.5 * tf.math.unsorted_segment_sum(e_pair, tensors[K.IND_2][:, 0], n_atoms)[:, None]
