"""The training engine's two passes for a PiNet2 network (:class:`pinn.engines.gradients.TrainingEngine`).

Pass 1 is the MD engine's kernel (:class:`pinn.engines.md.FastPiNet` on the same weight array): atomic energies
and forces.  Pass 2 is :func:`pinn.engines.numba.pinet2_train_kernels.loss_gradients`: the weight gradient of
Σ c_a E_a + Σ w_a · ∂E/∂x_a, i.e. of the loss (the derivation is in that module).
"""
import numpy as np

from pinn.engines.md import FastPiNet
from pinn.engines.numba import pinet2_kernels, pinet2_train_kernels
from pinn.engines.numba.layout import CODE_N_BASIS
from pinn.engines.numba.md_kernels import numba_threads
from pinn.engines.numba.train_kernels import balanced_tiles

#: pass 2's default memory for the tiles kept between its forward and reverse passes (bytes): 64 MiB, about
#: 11 000 pairs of a rank-3 PiNet2 with the reference sizes, depth 4, in float32 (5.6 KiB a pair).  Keeping a
#: tile saves computing its forward again but costs writing it out and reading it back: worth it while the kept
#: tiles stay near the cache (32 ethanol molecules, 2 304 pairs: 13 MB), not for a batch of 135 000 pairs (32
#: cells of 108 Cu atoms: 760 MB, whose memory traffic costs about what it saves), which keeps its first 64 MiB
KEPT_BYTES = 64 << 20


class PiNet2Passes:
    """Energies, forces and loss gradients of a PiNet2 potential on a batch's pairs.

    Args:
        arrays: :meth:`pinn.engines.spec.PiNet2Spec.arrays`; its ``flat`` is read at every call (the training
            engine writes the current weights into it).
        threads: threads of the parallel loops.
        kept_bytes: the most memory (bytes) that pass 2 may hold for the tiles' forward buffers, kept from its
            forward pass for its reverse pass (:data:`KEPT_BYTES` by default).  Tiles past it are computed
            forward again in the reverse pass: the same gradient, slower.
    """

    def __init__(self, arrays, threads, kept_bytes=None):
        self.arrays = arrays
        self.threads = threads
        self.kept_bytes = KEPT_BYTES if kept_bytes is None else int(kept_bytes)
        if self.kept_bytes < 0:
            raise ValueError(f"PiNet2Passes: kept_bytes must be >= 0, got {kept_bytes}")
        self.md = FastPiNet(arrays, threads)
        if self.md.arrays["flat"] is not arrays["flat"]:
            raise ValueError("PiNet2Passes: the MD engine must read the training engine's weight array")
        self._key = None
        self._kept = np.empty(0, arrays["flat"].dtype)  # the kept tiles' memory, grown to the most a batch used

    def energies_forces(self, numbers, n_pairs, pair_i, pair_j, diff, dist):
        """Pass 1: (each atom's network energy, e_scale × its atomic energy without e_dress (eV) [n_atoms];
        forces [n_atoms, 3] (eV/Å)), float64."""
        out = self.md.on_pairs(numbers, pair_i[:n_pairs], pair_j[:n_pairs], diff[:n_pairs], dist[:n_pairs])
        types = self.md.types_of(numbers)
        return out["energies"] - self.arrays["e_dress"][types], out["forces"]

    def tiling(self, n_pairs):
        """Pass 2's tiles: (pairs per tile, tiles, chunks).  The chunks are the MD kernel's
        (:func:`pinn.engines.numba.pinet2_kernels.tiling`); on several threads the tiles are PiNet's
        (:func:`pinn.engines.numba.train_kernels.balanced_tiles`), as many for each thread: a batch of 32 ethanol
        molecules (2 304 pairs) makes 10 tiles of 240, 5 a thread, not 9 of 256 (5 and 4)."""
        tile, n_tiles, chunks = pinet2_kernels.tiling(n_pairs, self.threads)
        if chunks > 1:
            tile, n_tiles = balanced_tiles(n_pairs, chunks)
        return tile, n_tiles, chunks

    def _workspace(self, n_atoms, n_pairs):
        """(tile, chunks, padded pair_i, padded pair_j, geometry, kept tiles, gchunk, atomic), kept while the
        shapes stay."""
        tile, n_tiles, chunks = self.tiling(n_pairs)
        key = (n_atoms, n_tiles, tile, chunks)
        if key != self._key:
            a = self.arrays
            dt = a["flat"].dtype
            n_basis = int(a["codes"][CODE_N_BASIS])
            rows = pinet2_train_kernels.tile_buffer_rows(a["layers"], a["blocks"], n_basis)
            depth = len(a["blocks"])
            per_tile = depth * rows * 2 * tile * dt.itemsize
            tiles_per_chunk = (n_tiles + chunks - 1) // chunks
            n_kept = min(tiles_per_chunk, self.kept_bytes // (per_tile * chunks))
            shape = (depth, chunks * n_kept, rows, 2 * tile)
            size = int(np.prod(shape))
            if self._kept.size < size:
                self._kept = np.empty(size, dt)  # grown, never shrunk: no fresh pages per batch
            self._work = (tile, chunks, np.zeros(n_tiles * tile, np.int32), np.zeros(n_tiles * tile, np.int32),
                          np.zeros((n_tiles, n_basis + 8, 2 * tile), dt), self._kept[:size].reshape(shape),
                          np.zeros((chunks, len(a["flat"])), dt), np.zeros(2 * n_atoms, dt))
            self._key = key
        return self._work

    def gradients(self, types, n_pairs, pair_i, pair_j, diff, dist, w, c_atom, gflat):
        """Pass 2: ``gflat`` = ∂/∂θ (Σ_a c_a E_a + Σ_a w_a · ∂E/∂x_a).

        Args:
            types: [n_atoms] type indices; pair_i, pair_j, diff, dist: the pairs within the cutoff (the first
                ``n_pairs``; Å).
            w: [n_atoms, 3] the displacements (−∂L/∂F, loss units per eV/Å).
            c_atom: [n_atoms] ∂L/∂E of each atom's structure (loss units per eV).
            gflat: [len(flat)] output.
        """
        tile, chunks, padded_i, padded_j, geometry, kept_tiles, gchunk, atomic = self._workspace(len(types), n_pairs)
        padded_i[:n_pairs] = pair_i[:n_pairs]
        padded_j[:n_pairs] = pair_j[:n_pairs]
        padded_i[n_pairs:] = 0  # any atom: read, never summed into
        padded_j[n_pairs:] = 0
        ddiff = np.ascontiguousarray(w[pair_j[:n_pairs]] - w[pair_i[:n_pairs]], np.float64)
        a = self.arrays
        args = (types, padded_i, padded_j, np.ascontiguousarray(diff[:n_pairs], np.float64),
                np.ascontiguousarray(dist[:n_pairs], np.float64), ddiff, a["flat"], a["table"], a["layers"],
                a["blocks"], a["codes"], a["scal"], np.asarray(c_atom, a["flat"].dtype), tile, chunks, geometry,
                kept_tiles, gchunk, gflat, atomic)
        if chunks > 1:
            with numba_threads(self.threads):
                pinet2_train_kernels.loss_gradients(*args)
        else:
            pinet2_train_kernels.loss_gradients_serial(*args)
        return atomic
