"""The training engine: the loss of a PiNet or PiNet2 potential and its weight gradients in Numba kernels.

:class:`TrainingEngine` runs the three passes of :mod:`pinn.engines.numba.train_kernels` (PiNet; the
derivation is there) or the two of :mod:`pinn.engines.pinet2_passes` (PiNet2) on a NumPy batch and returns
the loss, the errors and the gradient; :func:`tensorflow_gradients` wraps one call as a TensorFlow op for
the TensorFlow step of a parallel run.  ``model.params.engine: numba`` selects it
(:mod:`pinn.training.backends`).
"""
import numpy as np

from pinn import keys as K
from pinn.engines.heap import keep_heap
from pinn.engines.lowering import capability
from pinn.engines.numba.layout import (CODE_N_BASIS, CODE_WIDTH, BLOCK_PP, BLOCK_N_PP, BLOCK_PI, BLOCK_N_PI,
                                       BLOCK_II, BLOCK_N_II, BLOCK_OUT, BLOCK_N_OUT, BLOCK_WIDTH_IN,
                                       BLOCK_WIDTH_OUT)
from pinn.engines.numba.md_kernels import _forces_virial, find_pairs, numba, numba_threads
from pinn.engines.pinet2_passes import PiNet2Passes
from pinn.engines.spec import PiNet2Spec
from pinn.engines.numba.train_kernels import (_distance_tangents, _energies_forces, _image_offsets,
                                              _weight_gradients, balanced_tiles, pair_slots)


def _penalty_and_slope(err, loss_type, delta):
    """The penalty of each error and its derivative (see :meth:`pinn.physics.base.Model.penalty`)."""
    if loss_type == "mse":
        return err * err, 2.0 * err
    size = np.abs(err)
    inside = size <= delta
    return (np.where(inside, err * err, 2.0 * delta * size - delta * delta),
            np.where(inside, 2.0 * err, 2.0 * delta * np.sign(err)))


class TrainingEngine:
    """The loss of a PiNet or PiNet2 potential and its gradient with respect to the weights, in Numba kernels.

    Args:
        model: a :class:`~pinn.physics.potential.PotentialModel` with a PiNet or PiNet2 network that
            :func:`pinn.engines.lowering.capability` accepts for ``'training'``.
        threads: threads of its parallel loops (default: Numba's, i.e. the CPU cores; at most
            ``NUMBA_NUM_THREADS``); a rank of a parallel run gets its share of the cores.

    Call it with a NumPy batch and the current weights (:meth:`__call__`); it computes what
    the TensorFlow step's ``part_gradients`` computes
    (:meth:`pinn.training.backends.TensorFlowBackend.part_gradients`).
    """

    def __init__(self, model, threads=None):
        answer = capability(model, "training")
        if not answer:
            raise ValueError(answer.reason)
        keep_heap()
        self.model = model
        self.variables = list(model.trainable_variables)
        arrays = answer.spec.arrays()
        sources = answer.spec.sources()
        self.threads = int(threads or numba.config.NUMBA_NUM_THREADS)
        if not 1 <= self.threads <= numba.config.NUMBA_NUM_THREADS:
            raise ValueError(f"threads must be in 1..{numba.config.NUMBA_NUM_THREADS} (NUMBA_NUM_THREADS), "
                             f"got {threads}")
        position = {id(v): k for k, v in enumerate(self.variables)}
        table = arrays["table"]
        #: (variable index, offset in flat, size) of each trainable tensor
        self.slots = []
        for tid, source in enumerate(sources):
            if source is None:
                continue
            if id(source) not in position:
                raise ValueError(f"the numba training engine: weight {source.name} is not a trainable variable")
            self.slots.append((position[id(source)], int(table[tid, 0]), int(table[tid, 1] * table[tid, 2])))
        if sorted(s[0] for s in self.slots) != list(range(len(self.variables))):
            raise ValueError("the numba training engine: the network's trainable variables are not all weights of "
                             "the layers it lowers")
        #: positions in ``flat`` of the variables' values, concatenated in variable order
        self.variable_index = np.concatenate([np.arange(offset, offset + size) for _, offset, size in
                                              sorted(self.slots)]) if self.slots else np.zeros(0, np.int64)
        a = arrays
        self.flat = arrays["flat"].copy()
        self.dtype = self.flat.dtype
        self.rc = float(arrays["scal"][0])
        self.table = a["table"]
        self.layers = a["layers"]
        self.blocks = a["blocks"]
        self.codes = a["codes"]
        self.scal = a["scal"]
        self.type_of = a["type_of"]
        self._shape = None
        #: PiNet2's passes (:mod:`pinn.engines.pinet2_passes`); ``None`` for PiNet
        self.pinet2 = PiNet2Passes({**arrays, "flat": self.flat}, self.threads) \
            if isinstance(answer.spec, PiNet2Spec) else None
        if self.pinet2 is None:
            self._pinet_rows()

    def _pinet_rows(self):
        """The row counts of PiNet's per-atom and per-pair workspace."""
        width = int(self.codes[CODE_WIDTH])
        self.atom_rows = max(b[BLOCK_WIDTH_IN] + sum(self.layers[b[BLOCK_PP]:b[BLOCK_PP] + b[BLOCK_N_PP], 3])
                             + b[BLOCK_WIDTH_OUT] + sum(self.layers[b[BLOCK_OUT]:b[BLOCK_OUT] + b[BLOCK_N_OUT], 3])
                             for b in self.blocks)
        self.pair_rows = max(sum(self.layers[b[BLOCK_PI]:b[BLOCK_PI] + b[BLOCK_N_PI] - 1, 3])
                             + self.layers[b[BLOCK_PI] + b[BLOCK_N_PI] - 1, 3] // int(self.codes[CODE_N_BASIS])
                             + sum(self.layers[b[BLOCK_II]:b[BLOCK_II] + b[BLOCK_N_II], 3]) for b in self.blocks)
        self.n_first = max(int(self.layers[b[BLOCK_PI], 3]) for b in self.blocks)
        self.width = max(width, self.atom_rows)

    def set_weights(self, values):
        """Copy the current weights: ``values`` in the order of ``model.trainable_variables`` (arrays)."""
        for k, offset, size in self.slots:
            self.flat[offset:offset + size] = np.asarray(values[k], self.dtype).ravel()

    def set_flat_weights(self, values):
        """Copy the current weights from one vector: the variables' values, flattened and concatenated in
        the order of ``model.trainable_variables``."""
        self.flat[self.variable_index] = values

    def flat_gradient(self):
        """The last call's gradient as one vector, in the layout of :meth:`set_flat_weights`."""
        return self.gflat[self.variable_index]

    def loss_counts(self, batch, terms):
        """The values each loss term of one NumPy batch counts (padding not counted), as
        :meth:`pinn.physics.potential.PotentialModel.loss_counts` counts them."""
        struct = np.asarray(batch[K.IND_1])[:, 0]
        real = np.asarray(batch[K.REAL], np.float64) if K.REAL in batch else np.ones(len(batch[K.CELL]))
        counts = {"energy": float(np.sum(real))}
        if "forces" in terms:
            counts["forces"] = 3.0 * float(np.sum(real[struct]))
        return counts

    def _workspace(self, n_atoms, n_cand):
        """Arrays for ``n_atoms`` atoms and up to ``n_cand`` pairs, kept between calls (made anew when the
        atom count changes or the pairs outgrow them)."""
        if self._shape is None or self._shape[0] != n_atoms:
            self.gflat = np.zeros(len(self.flat), self.dtype)
            self._shape = (n_atoms, 0)
            if self.pinet2 is None:
                self._atom_workspace(n_atoms)
        if n_cand > self._shape[1]:
            n_cand = max(n_cand, int(1.25 * self._shape[1]))
            self.pair_i = np.zeros(n_cand, np.int32)
            self.pair_j = np.zeros(n_cand, np.int32)
            self.diff = np.zeros((n_cand, 3))
            self.dist = np.ones(n_cand)
            self.offset = np.zeros((n_cand, 3))
            self._shape = (n_atoms, n_cand)
            if self.pinet2 is None:
                self._pair_workspace(n_cand)

    def _atom_workspace(self, n_atoms):
        """PiNet's per-atom values, tangents and adjoints: each thread's run of atoms (_chunk_atoms), features by
        atoms."""
        depth = len(self.blocks)
        dt = self.dtype
        columns = (n_atoms + self.threads - 1) // self.threads
        self.aty, self.atd, self.ata = (np.zeros((self.threads, depth, self.atom_rows, columns), dt)
                                        for _ in range(3))
        self.pa, self.pb, self.pad, self.pbd = (np.zeros((depth, n_atoms, self.n_first), dt) for _ in range(4))
        self.pa1, self.pb1 = (np.zeros((self.threads, depth, self.n_first, columns), dt) for _ in range(2))
        self.buf = np.zeros((self.threads, 2, n_atoms, self.width), dt)
        self.gchunk = np.zeros((self.threads, len(self.flat)), dt)
        self.atomic = np.zeros(n_atoms, dt)

    def _pair_workspace(self, n_cand):
        """PiNet's per-pair arrays for up to ``n_cand`` pairs."""
        dt = self.dtype
        self.rdot = np.zeros(n_cand, dt)
        self.dist_dt = np.ones(n_cand, dt)
        self.grad_r = np.zeros(n_cand, dt)
        # the tile arrays as flat buffers, viewed per call with that call's tiling (_tiles)
        slots = pair_slots(n_cand, self.threads)
        self._basis_buf, self._dbasis_buf = (np.zeros(int(self.codes[CODE_N_BASIS]) * slots, dt) for _ in range(2))
        self._pair_bufs = [np.zeros(len(self.blocks) * self.pair_rows * slots, dt) for _ in range(3)]

    def _tiles(self, n_pairs):
        """Views of the tile arrays for ``n_pairs`` pairs in :func:`balanced_tiles`:
        basis, dbasis [n_tiles, n_basis, tile] and keep, tang, adj [depth, n_tiles, rows, tile]."""
        tile, n_tiles = balanced_tiles(n_pairs, self.threads)
        n_basis = int(self.codes[CODE_N_BASIS])
        depth = len(self.blocks)
        basis, dbasis = (b[:n_tiles * n_basis * tile].reshape(n_tiles, n_basis, tile)
                         for b in (self._basis_buf, self._dbasis_buf))
        keep, tang, adj = (b[:depth * n_tiles * self.pair_rows * tile].reshape(depth, n_tiles, self.pair_rows, tile)
                           for b in self._pair_bufs)
        return basis, dbasis, keep, tang, adj

    def __call__(self, batch, weights, counts, e_dress=None):
        """Loss, gradients and error sums of one sparse batch.

        Args:
            batch: dict of NumPy arrays of a sparse batch with its neighbor list (``elems``,
                ``coord``, ``cell``, ``ind_1``, ``ind_2``, ``shift``, ``e_data``, ``f_data`` when
                the forces are trained; ``real`` in a padded batch).
            weights: dict loss term → weight.
            counts: dict loss term → the number of values the loss is normalised by (all ranks'
                and parts', see :meth:`~pinn.physics.potential.PotentialModel.loss_counts`).
            e_dress: per-element energy offsets (eV, in atom_types order; default: the model's).

        Returns:
            dict with ``loss`` (float), ``energy`` [n_struct] (eV), ``forces`` [n_atoms, 3] (eV/Å),
            ``sums`` (term → penalty sum), ``errors`` (``E`` and, with forces, ``F`` → (Σ w|err|,
            Σ w err², Σ w), w: 1 for real structures and their atoms, 0 for padding) and ``finite``
            (whether the loss and the gradients are).  The gradients: :meth:`gradients` or
            :meth:`flat_gradient`.
        """
        with numba_threads(self.threads):
            return self._passes(batch, weights, counts, e_dress)

    def _passes(self, batch, weights, counts, e_dress):
        """:meth:`__call__` on the engine's threads."""
        model = self.model
        p = model.params
        elems = np.asarray(batch[K.ELEMS])
        coord = np.asarray(batch[K.COORD], np.float64)
        n_atoms = len(elems)
        struct = np.asarray(batch[K.IND_1])[:, 0]
        cell = np.asarray(batch[K.CELL], np.float64)
        n_struct = len(cell)
        ind_2 = np.asarray(batch[K.IND_2])
        shift = np.asarray(batch[K.SHIFT], np.float64)
        cand_i = np.ascontiguousarray(ind_2[:, 0], np.int32)
        cand_j = np.ascontiguousarray(ind_2[:, 1], np.int32)
        types = self.type_of[np.clip(elems, 0, len(self.type_of) - 1)]
        if n_atoms and (types.min() < 0 or elems.max() >= len(self.type_of)):
            known = np.flatnonzero(self.type_of >= 0).tolist()
            raise ValueError(f"elements {sorted(set(elems.tolist()) - set(known))} are not in the model's "
                             f"atom_types {known}")
        self._workspace(n_atoms, len(cand_i))
        offset = self.offset[:len(cand_i)]
        _image_offsets(shift, cell, struct, cand_i, offset)
        n_pairs = find_pairs(coord, cand_i, cand_j, offset, self.rc, self.pair_i, self.pair_j, self.diff, self.dist)
        if self.pinet2 is None:
            atomic, forces = self._pinet_energies_forces(types, n_pairs)
        else:
            atomic, forces = self.pinet2.energies_forces(elems, n_pairs, self.pair_i, self.pair_j, self.diff,
                                                         self.dist)
        dress = np.asarray(model.e_dress.numpy() if e_dress is None else e_dress, np.float64)[types]
        energy = (np.bincount(struct, atomic, minlength=n_struct) + np.bincount(struct, dress, minlength=n_struct))
        real = np.asarray(batch[K.REAL], np.float64) if K.REAL in batch else np.ones(n_struct)
        atom_w = real[struct]
        loss_type = p["loss_type"]
        delta = p["huber_delta"]

        def delta_of(term):
            return float(delta.get(term, 1.0) if isinstance(delta, dict) else delta)

        e_err = energy - np.asarray(batch[K.E_DATA], np.float64)
        errors = {"E": _abs_sq_count(e_err, real)}
        sums = {}
        loss = 0.0
        unit = float(p["e_scale"])  # the loss is computed on errors in training units (eV × e_scale)
        per_atom = unit
        if p["use_e_per_atom"]:
            per_atom = unit / np.bincount(struct, minlength=n_struct)
        pen, slope = _penalty_and_slope(e_err * per_atom, loss_type, delta_of("energy"))
        sums["energy"] = float(np.sum(real * pen))
        c_struct = np.zeros(n_struct)
        if counts["energy"] > 0:
            loss += weights["energy"] * sums["energy"] / counts["energy"]
            c_struct = weights["energy"] / counts["energy"] * real * slope * per_atom
        w = np.zeros((n_atoms, 3))
        if "forces" in counts:
            f_err = forces - np.asarray(batch[K.F_DATA], np.float64)
            errors["F"] = _abs_sq_count(f_err, atom_w)
            pen, slope = _penalty_and_slope(f_err * unit, loss_type, delta_of("forces"))
            sums["forces"] = float(np.sum(atom_w[:, None] * pen))
            if counts["forces"] > 0:
                loss += weights["forces"] * sums["forces"] / counts["forces"]
                w = -(weights["forces"] / counts["forces"]) * atom_w[:, None] * slope * unit
        if self.pinet2 is None:
            self._pinet_gradients(types, n_pairs, w, c_struct[struct])
        else:
            self.pinet2.gradients(types, n_pairs, self.pair_i, self.pair_j, self.diff, self.dist, w,
                                  c_struct[struct], self.gflat)
        finite = bool(np.isfinite(loss) and np.isfinite(self.gflat).all())
        return {"loss": loss, "energy": energy, "forces": forces, "sums": sums, "errors": errors, "finite": finite}

    def _pinet_energies_forces(self, types, n_pairs):
        """PiNet's pass 1: (e_scale × the atomic energies, eV [n_atoms]; forces [n_atoms, 3], eV/Å), float64;
        keeps what passes 2 and 3 need."""
        self.dist_dt[:n_pairs] = self.dist[:n_pairs]
        self._tiling = self._tiles(n_pairs)
        basis, dbasis, keep, tang, adj = self._tiling
        work = (basis, dbasis, keep, adj, self.aty, self.ata, self.pa, self.pb, self.pa1,
                self.pb1, self.buf)
        _energies_forces(types, n_pairs, self.pair_i, self.pair_j, self.dist_dt, self.flat, self.table, self.layers,
                         self.blocks, self.codes, self.scal, self.threads, *work, self.grad_r, self.atomic)
        forces = np.zeros((len(types), 3))
        _forces_virial(n_pairs, self.pair_i, self.pair_j, self.diff, self.dist, self.grad_r, forces, np.zeros((3, 3)))
        return self.atomic.astype(np.float64), forces

    def _pinet_gradients(self, types, n_pairs, w, c_atom):
        """PiNet's passes 2 and 3: ṙ along ``w``, then the gradients into ``gflat``."""
        basis, dbasis, keep, tang, adj = self._tiling
        rdot = self.rdot
        _distance_tangents(n_pairs, self.pair_i, self.pair_j, self.diff, self.dist, w, rdot)
        _weight_gradients(types, n_pairs, self.pair_i, self.pair_j, rdot, self.flat, self.table, self.layers,
                          self.blocks, self.codes, self.scal, self.threads, basis, dbasis,
                          c_atom.astype(self.dtype), keep, tang, adj, self.aty, self.atd,
                          self.ata, self.pa, self.pb, self.pa1, self.pb1, self.pad, self.pbd, self.buf, self.gchunk,
                          self.gflat)

    def gradients(self):
        """The last call's gradient, one array per trainable variable (∂loss/∂weight, in the order and
        shapes of ``model.trainable_variables``)."""
        out = [None] * len(self.variables)
        for k, offset, size in self.slots:
            out[k] = self.gflat[offset:offset + size].reshape(self.variables[k].shape).copy()
        return out


def _abs_sq_count(err, weights):
    """(Σ w|err|, Σ w err², Σ w over all values), w per row (:func:`pinn.physics.base.abs_sq_count`)."""
    w = np.broadcast_to(weights.reshape((-1,) + (1,) * (err.ndim - 1)), err.shape)
    return float(np.sum(w * np.abs(err))), float(np.sum(w * err * err)), float(np.sum(w))


#: the batch keys the engine reads
BATCH_KEYS = (K.ELEMS, K.COORD, K.CELL, K.IND_1, K.IND_2, K.SHIFT, K.E_DATA, K.F_DATA, K.REAL)


def step_stats(out, metric_keys, one_hot_rank, dtype):
    """The trainer's stats vector of one engine call ``out``: [loss, structures, (Σ|err|, Σerr², count)
    per metric in ``metric_keys``, one_hot_rank × not finite]."""
    stats = [out["loss"], out["errors"]["E"][2]]
    for key in metric_keys:
        stats.extend(out["errors"][key])
    stats.extend(np.asarray(one_hot_rank) * (0.0 if out["finite"] else 1.0))
    return np.asarray(stats, dtype)


def tensorflow_gradients(engine, batch, variables, terms, weights, counts, metric_keys, one_hot_rank, dtype):
    """The training step's gradients and statistics from ``engine``, as TensorFlow ops (one
    ``tf.numpy_function`` call): what the function that
    :meth:`pinn.training.backends.TensorFlowBackend.part_gradients` makes returns.

    Args:
        engine: a :class:`TrainingEngine`.
        batch: dict of tensors of a sparse batch.
        variables: the trainable variables (their current values are the weights).
        terms: the enabled loss terms, in order; weights, counts: float64 tensors [len(terms)].
        metric_keys: the error metrics of the stats (``E``, ``F``).
        one_hot_rank: [ranks] tensor, 1 at this rank.
        dtype: float dtype of the stats.

    Returns:
        (gradients, stats): the list of gradient tensors and the stats vector [loss, structures,
        (Σ|err|, Σerr², count) per metric, one_hot_rank × not finite].
    """
    import tensorflow as tf
    keys = [k for k in BATCH_KEYS if k in batch]
    n_vars = len(variables)
    n_ranks = int(one_hot_rank.shape[0])
    np_dtype = np.dtype(dtype.as_numpy_dtype)

    def run(w, c, rank, e_dress, *arrays):
        engine.set_weights(arrays[:n_vars])
        out = engine(dict(zip(keys, arrays[n_vars:])), dict(zip(terms, w)), dict(zip(terms, c)), e_dress)
        return engine.gradients() + [step_stats(out, metric_keys, rank, np_dtype)]

    results = tf.numpy_function(run, [weights, counts, one_hot_rank, engine.model.e_dress] + list(variables)
                                + [batch[k] for k in keys], [v.dtype for v in variables] + [dtype], stateful=True,
                                name="numba_gradients")
    grads = [tf.ensure_shape(g, v.shape) for g, v in zip(results[:-1], variables)]
    stats = tf.ensure_shape(results[-1], [2 + 3 * len(metric_keys) + n_ranks])
    return grads, stats

