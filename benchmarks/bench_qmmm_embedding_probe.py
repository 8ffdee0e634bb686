"""A design probe for electrostatic embedding (issue 59): on QM/MM frames of the PySCF water reference
(pinn.qmmm_reference), how far does each form of the QM region's energy in the MM charges' field get?

- ``mechanical``: a PiNet of the QM atoms alone (what pinn's models do today);
- ``charges``: the same plus the Coulomb energy of neutral QM atomic charges, predicted by the network from the
  QM geometry, with every MM charge (a fixed-charge embedding: no response to the field);
- ``charges+polarizability``: the fixed charges plus induced dipoles, −½ α |E|² with the MM charges' field E
  at each QM atom and a polarizability α ≥ 0 the network predicts per atom;
- ``neighbours+charges``: the fixed charges, and the MM atoms within the cutoff join the network's graph as
  elements of their own (Z + 100; pairs QM–QM and QM–MM, never MM–MM), the energy summed over the QM atoms;
- ``qeq``: the same network predicting each QM atom's electronegativity χ and hardness η (> 0), the QM
  charges minimising Σ χq + ½ηq² + q φ at the region's total charge (φ: the MM charges' potential at the
  atom), so that they respond to the field (charge-equilibration embedding).

All three are trained on the same frames (energies and the QM atoms' forces; the embedded ones also on the MM
atoms' forces, −∇ of their energy with respect to the MM positions) and tested on held-out frames.

Usage:  python benchmarks/bench_qmmm_embedding_probe.py FRAMES.xyz [--train 160] [--steps 3000] [--seed 0]

Prints one JSON line per form: test RMSE of the energy (meV), of the forces on the QM atoms and on the MM atoms
within 5 Å of a QM atom (eV/Å), and seconds of training.
"""
import argparse
import sys
import time

import numpy as np

from common import emit

COULOMB = 14.399645  # eV Å / e²
FORMS = ("mechanical", "charges", "charges+polarizability", "qeq", "neighbours+charges")


def _batches(frames, rc):
    """Per frame: QM elements, positions, MM positions, MM charges, energy, forces, QM pair list, near-MM mask."""
    out = []
    for atoms in frames:
        qm = atoms.arrays["qm"]
        q_pos, m_pos = atoms.positions[qm], atoms.positions[~qm]
        n = len(q_pos)
        pairs = np.array([(i, j) for i in range(n) for j in range(n)
                          if i != j and np.linalg.norm(q_pos[i] - q_pos[j]) < rc], dtype=np.int32).reshape(-1, 2)
        to_qm = np.min(np.linalg.norm(m_pos[:, None] - q_pos[None], axis=2), axis=1)
        near = to_qm < 5.0
        mm_in = np.flatnonzero(to_qm < rc).astype(np.int32)  # MM atoms the network sees as neighbours
        graph = np.vstack([q_pos, m_pos[mm_in]])
        graph_pairs = np.array([(i, j) for i in range(len(graph)) for j in range(len(graph))
                                if i != j and (i < n or j < n) and np.linalg.norm(graph[i] - graph[j]) < rc],
                               dtype=np.int32).reshape(-1, 2)
        forces = atoms.get_forces()
        out.append(dict(elems=atoms.numbers[qm].astype(np.int32), q_pos=q_pos, m_pos=m_pos,
                        m_charge=atoms.get_initial_charges()[~qm], energy=atoms.get_potential_energy(),
                        f_qm=forces[qm], f_mm=forces[~qm], pairs=pairs, near=near, mm_in=mm_in,
                        mm_elems=(100 + atoms.numbers[~qm][mm_in]).astype(np.int32), graph_pairs=graph_pairs,
                        charge=float(atoms.info.get("charge", 0))))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("frames")
    ap.add_argument("--train", type=int, default=160)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--forms", nargs="+", default=list(FORMS), choices=FORMS)
    args = ap.parse_args()
    import tensorflow as tf
    from pinn.io import ase_files
    from pinn.networks import PiNet
    frames = ase_files.read(args.frames, index=":")
    rng = np.random.default_rng(args.seed)
    order = rng.permutation(len(frames))
    data = _batches([frames[i] for i in order], rc=4.5)
    train, test = data[:args.train], data[args.train:]
    counts = np.array([[np.sum(d["elems"] == z) for z in (1, 8)] for d in train], dtype=float)
    dress = np.linalg.lstsq(counts, np.array([d["energy"] for d in train]), rcond=None)[0]
    for d in data:
        d["e_rel"] = d["energy"] - np.array([np.sum(d["elems"] == z) for z in (1, 8)]) @ dress
    e_scale = float(np.std([d["e_rel"] for d in train]))

    def energy_of(net, form, t, q_pos, m_pos):
        n = tf.shape(t["elems"])[0]
        if form.startswith("neighbours"):  # the MM atoms within rc join the graph as elements of their own
            positions = tf.concat([q_pos, tf.gather(m_pos, t["mm_in"])], axis=0)
            elems, pairs = tf.concat([t["elems"], t["mm_elems"]], axis=0), t["graph_pairs"]
        else:
            positions, elems, pairs = q_pos, t["elems"], t["pairs"]
        diff = tf.gather(positions, pairs[:, 1]) - tf.gather(positions, pairs[:, 0])
        tensors = {"elems": elems, "ind_1": tf.zeros([tf.shape(elems)[0], 1], tf.int32), "ind_2": pairs,
                   "diff": diff, "dist": tf.norm(diff, axis=1)}
        out = net.atomic_outputs(tensors)[:n]  # the QM atoms' outputs
        energy = tf.reduce_sum(out[:, 0]) * e_scale
        if form == "mechanical":
            return energy
        r = tf.norm(q_pos[:, None, :] - m_pos[None, :, :], axis=2)
        phi = COULOMB * tf.reduce_sum(t["m_charge"][None, :] / r, axis=1)  # eV/e at each QM atom
        if form in ("charges", "charges+polarizability", "neighbours+charges"):
            q = out[:, 1] - tf.reduce_mean(out[:, 1]) + t["charge"] / tf.cast(n, tf.float64)
            energy += tf.reduce_sum(q * phi)
            if form in ("charges", "neighbours+charges"):
                return energy
            # induced dipoles: -1/2 α |E|², α ≥ 0 per QM atom (e² Å² / eV; water's 1.45 Å³ is 0.1)
            d = q_pos[:, None, :] - m_pos[None, :, :]
            field = COULOMB * tf.reduce_sum(t["m_charge"][None, :, None] * d / r[:, :, None] ** 3, axis=1)
            alpha = tf.nn.softplus(out[:, 2]) * 0.1
            return energy - 0.5 * tf.reduce_sum(alpha * tf.reduce_sum(field ** 2, axis=1))
        chi, eta = out[:, 1] * 5.0, tf.nn.softplus(out[:, 2]) * 10.0 + 1.0
        lam = (t["charge"] + tf.reduce_sum((chi + phi) / eta)) / tf.reduce_sum(1.0 / eta)
        q = (lam - chi - phi) / eta
        return energy + tf.reduce_sum(chi * q + 0.5 * eta * q * q + q * phi)

    spec = {"elems": tf.TensorSpec([None], tf.int32), "q_pos": tf.TensorSpec([None, 3], tf.float64),
            "m_pos": tf.TensorSpec([None, 3], tf.float64), "m_charge": tf.TensorSpec([None], tf.float64),
            "pairs": tf.TensorSpec([None, 2], tf.int32), "e_rel": tf.TensorSpec([], tf.float64),
            "f_qm": tf.TensorSpec([None, 3], tf.float64), "f_mm": tf.TensorSpec([None, 3], tf.float64),
            "near": tf.TensorSpec([None], tf.bool), "charge": tf.TensorSpec([], tf.float64),
            "mm_in": tf.TensorSpec([None], tf.int32), "mm_elems": tf.TensorSpec([None], tf.int32),
            "graph_pairs": tf.TensorSpec([None, 2], tf.int32)}

    def tensors_of(d):
        return {k: tf.constant(d[k], dtype=v.dtype) for k, v in spec.items()}

    def predict(net, form, t):
        q_pos, m_pos = t["q_pos"], t["m_pos"]
        with tf.GradientTape() as tape:
            tape.watch([q_pos, m_pos])
            energy = energy_of(net, form, t, q_pos, m_pos)
        g_qm, g_mm = tape.gradient(energy, [q_pos, m_pos])
        g_mm = tf.zeros_like(m_pos) if g_mm is None else tf.convert_to_tensor(g_mm)
        return energy, -tf.convert_to_tensor(g_qm), -g_mm

    train_t, test_t = [tensors_of(d) for d in train], [tensors_of(d) for d in test]
    for form in args.forms:
        tf.random.set_seed(args.seed)
        units = {"mechanical": 1, "charges": 2, "neighbours+charges": 2}.get(form, 3)
        params = {"atom_types": [1, 8, 101, 108] if form.startswith("neighbours") else [1, 8], "rc": 4.5,
                  "depth": 3, "pp_nodes": [16], "pi_nodes": [16], "ii_nodes": [16, 16], "out_nodes": [16],
                  "out_units": units}
        net = PiNet(params, dtype="float64", seed=args.seed)
        optimizer = tf.keras.optimizers.Adam(tf.keras.optimizers.schedules.ExponentialDecay(3e-3, args.steps, 0.05))

        @tf.function(input_signature=[spec])
        def train_step(t):
            with tf.GradientTape() as tape:
                energy, f_qm, f_mm = predict(net, form, t)
                n = tf.cast(tf.shape(t["elems"])[0], tf.float64)
                loss = ((energy - t["e_rel"]) / 0.05) ** 2 / n + tf.reduce_mean((f_qm - t["f_qm"]) ** 2) * 20
                if form != "mechanical":
                    loss += tf.reduce_mean(tf.boolean_mask(f_mm - t["f_mm"], t["near"]) ** 2) * 20
            variables = net.trainable_variables
            optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
            return loss

        evaluate = tf.function(lambda t: predict(net, form, t), input_signature=[spec])

        start = time.perf_counter()
        for step in range(args.steps):
            train_step(train_t[rng.integers(len(train_t))])
        seconds = time.perf_counter() - start
        e_err, f_qm_err, f_mm_err = [], [], []
        for d, t in zip(test, test_t):
            energy, f_qm, f_mm = evaluate(t)
            e_err.append(float(energy) - d["e_rel"])
            f_qm_err.append((f_qm.numpy() - d["f_qm"]).ravel())
            f_mm_err.append((f_mm.numpy() - d["f_mm"])[d["near"]].ravel())
        rms = lambda x: float(np.sqrt(np.mean(np.square(np.concatenate(x) if isinstance(x[0], np.ndarray) else x))))
        emit(benchmark="qmmm_embedding_probe", form=form, frames=args.frames.rsplit("/", 1)[-1], train=len(train),
             test=len(test), steps=args.steps, seed=args.seed, e_rmse_mev=round(1000 * rms(e_err), 2),
             f_qm_rmse_ev_a=round(rms(f_qm_err), 4), f_mm_near_rmse_ev_a=round(rms(f_mm_err), 4),
             f_qm_label_rms_ev_a=round(rms([d["f_qm"].ravel() for d in test]), 4),
             f_mm_near_label_rms_ev_a=round(rms([d["f_mm"][d["near"]].ravel() for d in test]), 4),
             train_s=round(seconds, 1), python=sys.version.split()[0])


if __name__ == "__main__":
    main()
