"""What every network shares: built from pinn's params or as upstream PiNN builds it, called as upstream calls it.

A network is built either from its resolved params, as :func:`pinn.networks.get_network` does::

    PiNet({'atom_types': [1, 8], 'rc': 4.5, ...}, dtype=tf.float64, seed=1)

or with upstream PiNN's keyword (or positional) arguments and upstream's defaults::

    PiNet(atom_types=[1, 8], rc=4.5)        # upstream: 4 polynomial basis functions
    BPNN(sf_spec, nn_spec, rc=5.0)           # upstream's order of the positional arguments

Called as upstream calls it, ``net(tensors)`` takes a sparse batch with or without neighbor list
(:meth:`Network.preprocess` adds it) and returns upstream's shapes: the atomic outputs
[n_atoms] (``out_units`` 1; [n_atoms, out_units] otherwise; per structure with ``out_pool``),
and with ``out_extra`` the pair ``(outputs, extras)``.  pinn's models call
:meth:`Network.atomic_outputs` ([n_atoms, out_units] always) and
:meth:`Network.call_with_extras` instead.
"""
import copy

import numpy as np
import tensorflow as tf

from pinn import keys as K
from pinn.io.batch import batch_pairs, pair_geometry, with_cell_and_pbc
from pinn.networks.layers import computing_in
from pinn.schema import validate_section


class Network(tf.Module):
    """The common part of :class:`pinn.networks.PiNet`, ``PiNet2``, ``BPNN`` and ``LJ``.

    Args:
        *args: one dict, the network's params (pinn's defaults for the keys it lacks); or
            upstream PiNN's positional arguments, in the order of :attr:`UPSTREAM_ARGS`.
        dtype: float dtype of the weights.
        seed: seed of the weight initialisation.
        compute_dtype: the dtype of the layers' matrix products (mixed precision:
            :func:`pinn.networks.layers.computing_in`); ``None``: the weights'.
        name: the module's name (default: the class name).
        **kwargs: upstream PiNN's keyword arguments (with its defaults, :attr:`UPSTREAM_DEFAULTS`,
            where they differ from pinn's).

    Raises:
        pinn.schema.ParamsError: an unknown or ill-typed argument, named.
        TypeError: more positional arguments than upstream's constructor takes, or an argument
            given twice.
    """

    #: the network's options (:class:`pinn.schema.Option` by key)
    PARAMS = {}
    #: upstream's constructor arguments, in its order (for positional use)
    UPSTREAM_ARGS = ()
    #: upstream's constructor defaults where pinn's params defaults differ
    UPSTREAM_DEFAULTS = {}

    @classmethod
    def atom_types_of(cls, params):
        """The atomic numbers a network of these (resolved) network params knows, without building it.

        Args:
            params: the ``network.params`` section.

        Returns:
            list of int.
        """
        return [int(z) for z in params["atom_types"]]

    def __init__(self, *args, dtype=tf.float32, seed=0, name=None, compute_dtype=None, **kwargs):
        super().__init__(name=name or type(self).__name__)
        # a private deep copy, past TensorFlow's attribute tracking: tracking wraps nested lists and
        # dicts in place, which would reach into the caller's params (and break writing them as YAML)
        object.__setattr__(self, "params", self.arguments(args, kwargs))
        self.rc = self.params["rc"]
        #: the dtype of the layers' matrix products (mixed precision), or ``None``: the weights'
        self.compute_dtype = None if compute_dtype is None else tf.as_dtype(compute_dtype)
        if tf.inside_function():
            # built inside a traced function (upstream's scripts build a network in a dataset.map function to
            # call its preprocess, which needs no weights): the weights are made on first use
            object.__setattr__(self, "_pending_build", (dtype, seed, compute_dtype))
        else:
            with computing_in(compute_dtype):
                self.build(self.params, dtype, np.random.RandomState(seed))

    def __getattr__(self, name):
        """Make the weights of a network built inside a traced function when a part of it is first used."""
        pending = self.__dict__.get("_pending_build")
        if pending is None or name.startswith("_"):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        object.__setattr__(self, "_pending_build", None)
        with tf.init_scope(), computing_in(pending[2]):
            self.build(self.params, pending[0], np.random.RandomState(pending[1]))
        return getattr(self, name)

    @classmethod
    def arguments(cls, args, kwargs):
        """The resolved params of a construction (see the class docstring)."""
        where = "network.params"
        if len(args) == 1 and isinstance(args[0], dict) and not kwargs:
            return validate_section(copy.deepcopy(dict(args[0])), cls.PARAMS, where)
        if len(args) > len(cls.UPSTREAM_ARGS):
            raise TypeError(f"{cls.__name__}: takes at most {len(cls.UPSTREAM_ARGS)} positional arguments "
                            f"({', '.join(cls.UPSTREAM_ARGS)}), got {len(args)}")
        given = dict(zip(cls.UPSTREAM_ARGS, args))
        twice = sorted(set(given) & set(kwargs))
        if twice:
            raise TypeError(f"{cls.__name__}: {twice[0]!r} given both by position and by keyword")
        given.update(kwargs)
        values = {k: v for k, v in cls.UPSTREAM_DEFAULTS.items() if k not in given}
        values.update(given)
        return validate_section(copy.deepcopy(values), cls.PARAMS, where)

    def build(self, params, dtype, rng):
        """Create the weights from resolved ``params`` (float ``dtype``, NumPy random state ``rng``)."""
        raise NotImplementedError

    @property
    def out_extra(self):
        """Upstream's extra outputs: {key: channels} (PiNet2's ``out_extra``; none for the others)."""
        return dict(self.params.get("out_extra") or {})

    @tf.autograph.experimental.do_not_convert
    def preprocess(self, tensors):
        """Upstream PiNN's ``network.preprocess``: a sparse batch made ready for the network.

        Adds what the batch lacks: ``cell``/``pbc`` (:func:`pinn.io.with_cell_and_pbc`), the
        neighbor list at the network's cutoff (``ind_2``, ``shift``; :func:`pinn.io.batch.batch_pairs`)
        and the pair geometry ``diff`` and ``dist`` (Å).  Works in ``tf.data`` maps (upstream's
        ``dataset.map(network.preprocess)``) and in functions.

        Args:
            tensors: dict with ``elems``, ``coord`` (Å) and ``ind_1`` (a sparse batch).

        Returns:
            a new dict with every key of ``tensors`` and the ones above.
        """
        tensors = dict(tensors)
        tensors[K.ELEMS] = tf.reshape(tensors[K.ELEMS], [-1])
        if K.IND_2 not in tensors:
            tensors.update(batch_pairs(tensors, self.params["rc"]))
        elif K.DIFF not in tensors or K.DIST not in tensors:
            if K.SHIFT not in tensors:
                tensors[K.SHIFT] = tf.zeros([tf.shape(tensors[K.IND_2])[0], 3], tensors[K.COORD].dtype)
            tensors = pair_geometry(with_cell_and_pbc(tensors))
        return tensors

    def atomic_outputs(self, tensors):
        """The network's outputs [n_atoms, out_units] (per structure with ``out_pool``).

        Args:
            tensors: a sparse batch with ``elems``, ``ind_1``, ``ind_2``, ``diff`` and ``dist`` (Å).
        """
        raise NotImplementedError

    def call_with_extras(self, tensors):
        """``(atomic_outputs(tensors), {})``: the networks without ``out_extra``; PiNet2 gives its extras."""
        return self.atomic_outputs(tensors), {}

    def __call__(self, tensors):
        """Upstream PiNN's call: ``net(tensors)`` on a sparse batch, with or without neighbor list.

        Returns:
            the outputs with upstream's shapes: [n_atoms] for ``out_units`` 1 ([n_struct] with
            ``out_pool``), [n_atoms, out_units] otherwise; with ``out_extra`` the pair
            ``(outputs, {key: extra output})``.
        """
        tensors = self.preprocess(tensors)
        if self.out_extra:
            outputs, extras = self.call_with_extras(tensors)
        else:
            outputs = self.atomic_outputs(tensors)
            extras = None
        if outputs.shape.rank == 2 and outputs.shape[1] == 1:
            outputs = outputs[:, 0]
        return outputs if extras is None else (outputs, extras)

