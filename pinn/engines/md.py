"""The MD engine: energy, forces and stress of a PiNet or PiNet2 potential in Numba kernels.

:class:`FastPiNet` holds a potential's weights as the arrays of
:func:`pinn.engines.lowering.pinet_arrays` and calls the kernels of
:mod:`pinn.engines.numba.md_kernels` (PiNet; how they work, their accuracy and their
compilation are described there) or :mod:`pinn.engines.numba.pinet2_kernels` (PiNet2).  The ASE
calculator uses it by default for PiNet and PiNet2 potentials on CPUs (:mod:`pinn.calculator`).
"""
import numpy as np

from pinn.engines.heap import keep_heap
from pinn.engines.lowering import capability, pinet_arrays, potential_of
from pinn.engines.numba import pinet2_kernels
from pinn.engines.numba.layout import B2_UNITS, BLOCK_UNITS, CODE_NETWORK, NETWORK_CODES
from pinn.engines.numba.md_kernels import (PARALLEL_MIN_PAIRS, TILE, _evaluate, _evaluate_serial, _forces_virial,
                                           available, find_pairs, numba, numba_threads)
from pinn.engines.spec import ARRAY_KEYS
from pinn.io.geometry import refuse_coincident

__all__ = ["FastPiNet", "ARRAY_KEYS", "PARALLEL_MIN_PAIRS", "TILE"]


class FastPiNet:
    """Energy, forces and stress of one structure from a PiNet or PiNet2 potential, in Numba kernels.

    Args:
        model: a PiNet or PiNet2 potential that :func:`pinn.engines.lowering.capability` accepts for
            ``'md'``: a :class:`~pinn.physics.potential.PotentialModel`, the
            :class:`pinn.training.trainer.Trainer` holding one or its inference handle; its
            current weights are copied (the calculator copies them inside
            ``averaged_weights()``); call :meth:`load_weights` after they change.  Or the
            arrays of :meth:`pinn.engines.spec.PiNetSpec.arrays` (e.g. read from a file by
            :func:`pinn.engines.exported.load_engine_weights`), which need no TensorFlow.
        threads: threads for the pair work (default: Numba's, i.e. the CPU cores); structures
            with fewer than :data:`PARALLEL_MIN_PAIRS` pairs (PiNet2:
            :data:`pinn.engines.numba.pinet2_kernels.PARALLEL_MIN_PAIRS`) run on one.

    Call with positions, the candidate pairs of a Verlet list and the cell
    (:meth:`__call__`).
    """

    def __init__(self, model, threads=None):
        if not available():
            raise ImportError("the fast PiNet engine needs Numba (pip install numba)")
        arrays = model
        self.model = None
        if not isinstance(model, dict):
            answer = capability(model, "md")
            if not answer:
                raise ValueError(answer.reason)
            arrays = answer.spec.arrays()
            self.model = potential_of(model)
        self.threads = int(threads or numba.config.NUMBA_NUM_THREADS)
        if not 1 <= self.threads <= numba.config.NUMBA_NUM_THREADS:
            raise ValueError(f"threads must be in 1..{numba.config.NUMBA_NUM_THREADS} (NUMBA_NUM_THREADS), "
                             f"got {threads}")
        keep_heap()
        self.calls = 0  # searches for pairs (each call of __call__ makes one)
        self.weights_version = 0  # counts the weights this engine has held (a committee's copy checks it)
        self._set_arrays(arrays)

    # -- weights
    def load_weights(self):
        """Copy the model's current weights (and per-element energy offsets) again."""
        if self.model is None:
            raise ValueError("this engine was made from arrays, not a model: there is nothing to reload")
        self._set_arrays(pinet_arrays(self.model))

    def _set_arrays(self, arrays):
        missing = [key for key in ARRAY_KEYS if key not in arrays]
        if missing:
            raise ValueError(f"FastPiNet: the weight arrays lack {missing}")
        self.arrays = {key: np.ascontiguousarray(arrays[key]) for key in ARRAY_KEYS}
        self.weights_version += 1
        a = self.arrays
        self.dtype = a["flat"].dtype
        if self.dtype not in (np.float32, np.float64):
            raise ValueError(f"FastPiNet: weights must be float32 or float64, not {self.dtype}")
        self.rc = float(a["scal"][0])
        self.n_basis = int(a["codes"][3])
        self._flat = a["flat"]
        self._table = a["table"]
        self._layers = a["layers"]
        self._blocks = a["blocks"]
        self._codes_array = a["codes"]
        self._scal = a["scal"]
        self._type_of = a["type_of"]
        self._e_dress = a["e_dress"]
        self._zpair_rows, self._zatom_cols, self._n_first = (int(v) for v in a["workspace"])
        self._max_width = int(self._codes_array[4])
        codes = self._codes_array
        #: the network the arrays hold: 'PiNet' or 'PiNet2'
        self.network = "PiNet2" if len(codes) > CODE_NETWORK and codes[CODE_NETWORK] == NETWORK_CODES["PiNet2"] \
            else "PiNet"
        units = self._layers[self._blocks[0, B2_UNITS if self.network == "PiNet2" else BLOCK_UNITS], 0]
        #: outputs per atom (2: an electrostatic embedding's energy and charge)
        self.outputs = int(self._table[units, 2])
        self._capacity = (0, 0)
        self._pinet2_work = None  # PiNet2's workspace, kept while the atom count and tiles stay

    def same_layout(self, other):
        """Whether ``other`` (a :class:`FastPiNet`) has this network's layout: the same network, dtype and
        layers, so that only the weights' values (and the element order) differ, and a committee can run
        both in one kernel call."""
        mine, theirs = self.arrays, other.arrays
        return (self.network == other.network and self.dtype == other.dtype
                and all(np.array_equal(mine[key], theirs[key])
                        for key in ("table", "layers", "blocks", "codes", "workspace"))
                and mine["flat"].shape == theirs["flat"].shape and mine["scal"].shape == theirs["scal"].shape)

    @property
    def atom_types(self):
        """The atomic numbers the model knows, in its order."""
        return np.flatnonzero(self._type_of >= 0)[np.argsort(self._type_of[self._type_of >= 0])].tolist()

    def _workspace(self, n_atoms, n_cand):
        """The pairs' arrays and :meth:`pinet_work` for ``n_atoms`` atoms and up to ``n_cand`` pairs, kept
        between calls (made anew when the atom count changes or the pairs outgrow them)."""
        if n_atoms == self._capacity[0] and n_cand <= self._capacity[1]:
            return
        n_cand = max(n_cand, int(1.25 * self._capacity[1]) if n_atoms == self._capacity[0] else 0, 1)
        self._pair_i = np.zeros(n_cand, np.int32)
        self._pair_j = np.zeros(n_cand, np.int32)
        self._diff = np.zeros((n_cand, 3))
        self._dist = np.ones(n_cand)
        self._dist_dt = np.ones(n_cand, self.dtype)
        work = self.pinet_work(n_atoms, n_cand)
        for name, array in work.items():
            setattr(self, "_" + name, array)
        self._capacity = (n_atoms, n_cand)

    def pinet_work(self, n_atoms, n_pairs, members=None):
        """PiNet's per-structure workspace for ``n_atoms`` atoms and up to ``n_pairs`` pairs (arguments of
        :func:`pinn.engines.numba.md_kernels._evaluate`): dict of ``basis``, ``dbasis``, ``zpair``, ``zatom``,
        ``pa``, ``pb``, ``buf`` (one slice per thread), ``grad_r``, ``atomic``, ``charge``, ``charge_seed``,
        zeros of this engine's dtype.  Per-atom arrays have the exact atom count, so that their rows are
        contiguous and the per-atom loops vectorise.

        Args:
            members: ``None``, or a count M: every array then has a leading axis of M (one workspace per
                member of a committee of this architecture) and ``buf`` one thread's slice.
        """
        tile = min(TILE, 16 * ((n_pairs + 15) // 16))  # a small molecule: one tile of its own size
        n_tiles = (n_pairs + tile - 1) // tile
        depth = len(self._blocks)
        lead = () if members is None else (int(members),)
        threads = self.threads if members is None else 1
        shapes = {"basis": (n_tiles, self.n_basis, tile), "dbasis": (n_tiles, self.n_basis, tile),
                  "zpair": (depth, n_tiles, self._zpair_rows, tile), "zatom": (depth, self._zatom_cols, n_atoms),
                  "pa": (depth, n_atoms, self._n_first), "pb": (depth, n_atoms, self._n_first),
                  "buf": (threads, 2 * n_atoms, self._max_width), "grad_r": (n_pairs,), "atomic": (n_atoms,),
                  "charge": (n_atoms,), "charge_seed": (n_atoms,)}
        return {name: np.zeros(lead + shape, self.dtype) for name, shape in shapes.items()}

    def pinet2_work(self, n_atoms, tiling, members=None):
        """PiNet2's per-structure workspace (arguments of :func:`pinn.engines.numba.pinet2_kernels.evaluate`):
        ``(kept, geometry, grads, sums, backs)`` for ``n_atoms`` atoms and ``tiling`` = (tile, n_tiles,
        chunks) of :func:`pinn.engines.numba.pinet2_kernels.tiling`; ``members``: as for :meth:`pinet_work`
        (a leading axis of M, one chunk each)."""
        tile, n_tiles, chunks = tiling
        lead = () if members is None else (int(members),)
        chunks = chunks if members is None else 1
        kept, geometry, grads, inter, vector, tensor, first = (int(r) for r in pinet2_kernels.workspace_rows(
            self._layers, self._blocks, self.n_basis))

        def zeros(*shape):
            return np.zeros(lead + shape, self.dtype)
        return (zeros(len(self._blocks), n_tiles, kept, tile), zeros(n_tiles, geometry, tile),
                zeros(n_tiles, grads, tile), tuple(zeros(chunks, n_atoms, w) for w in (inter, vector, tensor)),
                tuple(zeros(chunks, n_atoms, w) for w in (first, first, vector, vector, tensor, tensor)))

    def __call__(self, numbers, coord, cand_i, cand_j, cand_offset, cell=None, pbc=None, charge_seed=None):
        """Energy, forces and stress of one structure.

        Args:
            numbers: [n_atoms] atomic numbers (all in the model's ``atom_types``).
            coord: [n_atoms, 3] positions, Å.
            cand_i, cand_j, cand_offset: candidate pairs (int32 atoms, [n, 3] float64 image offsets
                shift · cell in Å), a superset of the pairs within the cutoff, e.g. a Verlet list;
                pairs at or beyond ``rc`` are dropped here.
            cell, pbc: the cell (rows a, b, c, Å) and periodicity; the stress needs a periodic cell.
            charge_seed: for a network of two outputs per atom (an electrostatic embedding): [n_atoms]
                ∂E/∂q̃ of each atom's second output (eV/e), whose term Σ_a charge_seed_a q̃_a the forces and
                virial then include, not the energy (the caller adds the Coulomb energy:
                :class:`pinn.engines.embedded.FastEmbeddedPiNet`); ``None``: 0 (the second output unused).

        Returns:
            dict with ``energy`` (float, eV, e_dress included), ``energies`` [n_atoms] (eV, each atom's:
            e_scale × its atomic energy + its element's e_dress; they sum to ``energy`` to rounding),
            ``forces`` [n_atoms, 3] (eV/Å)
            and ``virial`` [3, 3] (eV, Σ_pairs diff ⊗ ∂E/∂diff) and, for a periodic cell,
            ``stress`` [3, 3] (eV/Å³, virial / volume, ASE's sign), all float64 NumPy; with two outputs per
            atom also ``charges_raw`` [n_atoms] (e), the second output.

        Raises:
            ValueError: two atoms closer than :data:`pinn.io.geometry.MIN_DISTANCE` (by the distances of
                the pairs found, naming the atoms), before the network runs.
        """
        types, n_pairs = self.search(numbers, coord, cand_i, cand_j, cand_offset)
        return self._on_pairs(types, n_pairs, self._pair_i, self._pair_j, self._diff, self._dist, cell, pbc,
                              charge_seed)

    def search(self, numbers, coord, cand_i, cand_j, cand_offset):
        """Find the pairs within the cutoff among the candidates (see :meth:`__call__` for the arguments),
        kept for :meth:`pairs` until the next search, without evaluating the network.

        Returns:
            (types, n_pairs): the model's type index of each atom, the pairs found.

        Raises:
            ValueError: as :meth:`__call__`.
        """
        coord = np.ascontiguousarray(coord, dtype=np.float64)
        types = self.types_of(numbers)
        self._workspace(len(coord), len(cand_i))
        n_pairs = find_pairs(coord, cand_i, cand_j, cand_offset, self.rc, self._pair_i, self._pair_j,
                             self._diff, self._dist)
        refuse_coincident(self._pair_i[:n_pairs], self._pair_j[:n_pairs], self._dist[:n_pairs], coord)
        self.last_pairs = n_pairs  # the pairs within the cutoff, first in _pair_i, _pair_j, _diff, _dist
        self.calls += 1  # which search found them (a committee checks that they are still its own)
        return types, n_pairs

    def pairs(self):
        """The pairs within the cutoff of the last call: ``(pair_i, pair_j, diff, dist)`` (int32, int32,
        [n, 3] Å, [n] Å), views of this engine's arrays that the next call overwrites."""
        n = self.last_pairs
        return self._pair_i[:n], self._pair_j[:n], self._diff[:n], self._dist[:n]

    def on_pairs(self, numbers, pair_i, pair_j, diff, dist, cell=None, pbc=None, charge_seed=None):
        """Energy, forces and stress of one structure from its pairs within the cutoff (e.g. another
        engine's :meth:`pairs` of the same structure, for a committee: one neighbor search for all).

        Args:
            numbers: [n_atoms] atomic numbers.
            pair_i, pair_j: [n_pairs] int32 atoms of each pair (every pair within ``rc``, both ways).
            diff: [n_pairs, 3] r_j + offset − r_i (Å); dist: [n_pairs] its length (Å), < ``rc``.
            cell, pbc, charge_seed: as for :meth:`__call__`.

        Returns:
            as :meth:`__call__`.
        """
        types = self.types_of(numbers)
        n_pairs = len(pair_i)
        self._workspace(len(types), n_pairs)
        return self._on_pairs(types, n_pairs, pair_i, pair_j, diff, dist, cell, pbc, charge_seed)

    def types_of(self, numbers):
        """The model's type index of each atomic number (int array).

        Raises:
            ValueError: an element the model does not know."""
        numbers = np.asarray(numbers)
        types = self._type_of[np.clip(numbers, 0, len(self._type_of) - 1)]
        if len(numbers) and (types.min() < 0 or numbers.max() >= len(self._type_of)):
            known = np.flatnonzero(self._type_of >= 0).tolist()
            unknown = sorted(set(numbers.tolist()) - set(known))
            raise ValueError(f"FastPiNet: elements {unknown} are not in the model's atom_types {known}")
        return types

    def _on_pairs(self, types, n_pairs, pair_i, pair_j, diff, dist_f64, cell, pbc, charge_seed=None):
        n_atoms = len(types)
        two = self.outputs == 2
        if two:  # no seed: the second output does not enter the energy (a mechanical model's second output)
            self._charge_seed[:] = 0.0 if charge_seed is None else charge_seed
        if self.network == "PiNet2":
            forces, virial = self._pinet2(types, n_pairs, pair_i, pair_j, diff, dist_f64)
        else:
            forces, virial = self._pinet(types, n_pairs, pair_i, pair_j, diff, dist_f64)
        energies = self._atomic[:n_atoms].astype(np.float64) + self._e_dress[types]
        energy = float(np.sum(self._atomic[:n_atoms], dtype=np.float64)) + float(np.sum(self._e_dress[types]))
        out = {"energy": energy, "energies": energies, "forces": forces, "virial": virial}
        if two:
            out["charges_raw"] = self._charge.astype(np.float64)
        if pbc is not None and np.any(pbc):
            cell = np.asarray(cell, np.float64)
            volume = abs(np.dot(cell[0], np.cross(cell[1], cell[2])))
            out["stress"] = virial / volume
        return out

    def _pinet2(self, types, n_pairs, pair_i, pair_j, diff, dist):
        """PiNet2's kernel (:mod:`pinn.engines.numba.pinet2_kernels`): forces [n_atoms, 3] and virial [3, 3]."""
        tile, n_tiles, chunks = pinet2_kernels.tiling(n_pairs, self.threads)
        key = (len(types), n_tiles, tile, chunks)
        if self._pinet2_work is None or self._pinet2_work[0] != key:
            self._pinet2_work = (key, *self.pinet2_work(len(types), (tile, n_tiles, chunks)),
                                 np.zeros(n_tiles * tile, np.int32), np.zeros(n_tiles * tile, np.int32))
        _, kept, geometry, grads, forward, backward, padded_i, padded_j = self._pinet2_work
        padded_i[:n_pairs] = pair_i[:n_pairs]
        padded_j[:n_pairs] = pair_j[:n_pairs]
        padded_i[n_pairs:] = 0  # any atom: the kernels read these, and add nothing from them
        padded_j[n_pairs:] = 0
        g_diff = np.zeros((n_pairs, 3))
        diff = np.ascontiguousarray(diff[:n_pairs], np.float64)
        dist = np.ascontiguousarray(dist[:n_pairs], np.float64)
        args = (types, padded_i, padded_j, diff, dist, self._flat, self._table, self._layers, self._blocks,
                self._codes_array, self._scal, self._charge_seed, self._atomic, self._charge, g_diff, tile, kept,
                geometry, grads, forward, backward)
        if chunks > 1:
            with numba_threads(self.threads):
                pinet2_kernels.evaluate(*args)
        else:
            pinet2_kernels.evaluate_serial(*args)
        forces = np.zeros((len(types), 3))
        virial = np.zeros((3, 3))
        pinet2_kernels.forces_virial(n_pairs, padded_i, padded_j, diff, g_diff, forces, virial)
        return forces, virial

    def _pinet(self, types, n_pairs, pair_i, pair_j, diff, dist_f64):
        """PiNet's kernels (:mod:`pinn.engines.numba.md_kernels`): forces [n_atoms, 3] and virial [3, 3]."""
        dist = self._dist_dt
        dist[:n_pairs] = dist_f64[:n_pairs]
        args = (types, n_pairs, pair_i, pair_j, dist, self._flat, self._table, self._layers,
                self._blocks, self._codes_array, self._scal)
        work = (self._basis, self._dbasis, self._zpair, self._zatom, self._pa, self._pb, self._buf,
                self._grad_r, self._atomic, self._charge_seed, self._charge)
        if self.threads > 1 and n_pairs >= PARALLEL_MIN_PAIRS:
            with numba_threads(self.threads):
                _evaluate(*args, self.threads, *work)
        else:  # a parallel region costs more than it saves (and the serial build skips its set-up)
            _evaluate_serial(*args, 1, *work)
        forces = np.zeros((len(types), 3))
        virial = np.zeros((3, 3))
        _forces_virial(n_pairs, pair_i, pair_j, diff, dist_f64, self._grad_r, forces, virial)
        return forces, virial
