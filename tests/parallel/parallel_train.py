"""A parallel training script for the tests in test_parallel.py: the same file runs with 1 process and with N.

Usage:  python parallel_train.py WORKDIR TAG [--steps N] [--lr X] [--decay-step N] [--nan-steps ...] ...
        horovodrun -np 2 --gloo python parallel_train.py ...   /   mpirun -np 2 python parallel_train.py ...
        mpirun -np 2 python parallel_train.py ... --backend mpi   (MPI through mpi4py, no Horovod)
        python parallel_train.py ... --backend mirrored   (one process, the CPU split into 2 devices)

The data are files on disk, read as users read them: rank 0 writes extended XYZ files of
EMT Cu/Au cells of different sizes (``--model AD_BC_R_dipole_model``: QEq water clusters of
1 to 3 molecules with their dipole) where they are missing — 4 training files of 7, 3, 5
and 4 frames, 2 validation files of 5 and 3 — and after the model is built (the parallel
world started) each rank takes its files with ``distribute_data`` and reads them with
``load_ase``; one process takes both ranks' shares by the same assignment.  Every step s
has one "union" batch cut into 2 unequal parts: rank r's part is the next 2-4 (rank 0) or
1-4 (rank 1) frames of its own files, cycling; with 1 process the step's batch is both
parts.  So a 2-rank run and a 1-process run see the same structures at every step and must
end with the same weights.  Validation is each rank's validation file(s); it is also
evaluated during training (every 5 steps: metrics.jsonl, eval_predictions.npz, the best
checkpoint), with a weight average (``ema_decay``).  ``--nan-steps`` put a NaN energy into
part 1 (rank 1) of those steps; ``--jump-steps`` multiply the labels of those steps by 1000.

Each rank writes WORKDIR/TAG.rank{r}.npz with its variables, validation
metrics, every write it made inside model_dir (seen by an audit hook and
by wrapping the checkpoint writer) and what it read (its files; the count,
atoms and a checksum of positions of the frames load_ase gave; the same of a
plain ``ase.io.read`` of each file), and WORKDIR/TAG.rank{r}.pid.
"""
import argparse
import json
import os
import sys

import numpy as np

parser = argparse.ArgumentParser()
parser.add_argument("workdir")
parser.add_argument("tag")
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--lr", type=float, default=1e-3)
parser.add_argument("--decay-step", type=int, default=20)
parser.add_argument("--lr-scaling", default="linear")
parser.add_argument("--nan-steps", type=int, nargs="*", default=[])
parser.add_argument("--jump-steps", type=int, nargs="*", default=[],
                    help="labels × 1000 in both parts of these steps' batches (a loss jump); watched over a window "
                    "of 1 step with loss_jump_factor 100")
parser.add_argument("--accumulate", type=int, default=1)
parser.add_argument("--save-every", type=int, default=10)
parser.add_argument("--stall-timeout", type=float, default=600.0)
parser.add_argument("--compression", default="none")
parser.add_argument("--fusion-mb", type=float, default=None)
parser.add_argument("--backend", default="auto", help="parallel_params.backend: auto, horovod, mpi, or mirrored "
                    "(one process on 2 logical CPU devices, each taking one rank's part of a step)")
parser.add_argument("--host-exchange", default="auto", help="parallel_params.host_exchange")
parser.add_argument("--model-dir", default=None)
parser.add_argument("--data-dir", default=None, help="where the data files are (written there by rank 0 where missing); "
                    "default WORKDIR/data-cuau or data-water")
parser.add_argument("--jit", choices=("auto", "off"), default="auto",
                    help="model.params.jit: auto (XLA for PiNet) or off (the tests of launching and stopping)")
parser.add_argument("--perturb-rank1", action="store_true", help="train half the steps, change a weight on "
                    "rank 1 alone, train on: the ranks' weight checksums must catch it")
parser.add_argument("--engine", default="auto", help="model.params.engine; numba: a PiNet it trains (a hidden PI "
                    "layer, no stress loss)")
parser.add_argument("--arch", choices=("PiNet", "PiNet2"), default="PiNet",
                    help="the network (not --network: horovodrun would take it as its --network-interface); "
                    "PiNet2: rank 3 (vector features), the same small sizes")
parser.add_argument("--precision", choices=("float32", "float64", "mixed_float16"), default="float32",
                    help="mixed_float16: loss scale 64 (PINN_TEST_OVERFLOW overflows it)")
parser.add_argument("--max-oom-skips", type=int, default=10, help="model.params.max_oom_skips (with PINN_TEST_OOM)")
parser.add_argument("--model", choices=("potential_model", "AD_BC_R_dipole_model", "pol_acks2_model"),
                    default="potential_model",
                    help="AD_BC_R_dipole_model: on PiNet2 with out_extra {p3: 1, i1: 1, i3: 1} (atomic dipoles and bond "
                    "charges), trained on QEq water clusters (pinn.demo) instead of EMT cells; pol_acks2_model: "
                    "on PiNet2, the same clusters with a polarizability tensor, in QM7b files read by load_qm7b")
parser.add_argument("--embedding", choices=("mechanical", "electrostatic"), default="mechanical",
                    help="model.params.embedding of the potential model; electrostatic: on QM/MM frames (1 to 3 QM "
                    "water molecules among charged MM atoms, pinn's convention), without stress")
parser.add_argument("--max-time", default=None, help="train(max_time=): a time budget (pinn.training.budget)")
args = parser.parse_args()

MODEL_DIR = os.path.abspath(args.model_dir or os.path.join(args.workdir, "model"))
writes = []


def audit(event, event_args):
    """Record file writes inside model_dir made from Python on this rank."""
    if event == "open":
        path, mode, flags = event_args
        writing = (mode is not None and any(c in str(mode) for c in "wax+")) or \
                  (mode is None and isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))
        if writing and isinstance(path, (str, bytes)) and os.path.abspath(os.fsdecode(path)).startswith(MODEL_DIR):
            writes.append(f"open {os.fsdecode(path)}")
    elif event in ("os.rename", "os.replace", "os.remove", "os.mkdir"):
        path = os.fsdecode(event_args[0]) if isinstance(event_args[0], (str, bytes)) else ""
        if os.path.abspath(path).startswith(MODEL_DIR):
            writes.append(f"{event} {path}")


sys.addaudithook(audit)

import ase.io  # noqa: E402
import tensorflow as tf  # noqa: E402
from ase.build import bulk  # noqa: E402
from ase.calculators.emt import EMT  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/: launching.py
from launching import checksum  # noqa: E402
from settings import qmmm_frame  # noqa: E402
from pinn import keys as K  # noqa: E402
from pinn.io import ase_files, distribute_data, load_ase, load_qm7b  # noqa: E402
from pinn.io.batch import batch_from_atoms  # noqa: E402
from pinn.models import get_model  # noqa: E402

RC = 4.0
_write = tf.train.Checkpoint.write


def _recording_write(self, *a, **kw):
    writes.append("Checkpoint.write")
    return _write(self, *a, **kw)


tf.train.Checkpoint.write = _recording_write

params = {
    "model_dir": MODEL_DIR,
    "network": {"name": "PiNet", "params": {"atom_types": [29, 79], "rc": RC, "depth": 2, "pp_nodes": [8],
                                            "pi_nodes": [8], "ii_nodes": [8], "out_nodes": [8], "n_basis": 4}},
    "model": {"name": "potential_model",
              "params": {"use_force": True, "use_stress": True, "fit_e_dress": True, "fit_e_dress_batches": 3,
                         "f_loss_multiplier": 10.0, "s_loss_multiplier": 100.0, "learning_rate": args.lr,
                         "lr_schedule": "exponential", "lr_warmup_steps": 0,  # with a weight average, below
                         "decay_step": args.decay_step, "decay_rate": 0.5, "log_every_n_steps": 5,
                         "save_checkpoint_steps": args.save_every, "max_nonfinite_steps": 3,
                         "accumulate_batches": args.accumulate, "ema_decay": 0.9, "eval_every_n_steps": 5,
                         "tensorboard": False}},
    "precision": args.precision,
    "parallel": True,
    "parallel_params": {"lr_scaling": args.lr_scaling, "stall_timeout_s": args.stall_timeout,
                        "compression": args.compression, "fusion_threshold_mb": args.fusion_mb,
                        "host_exchange": args.host_exchange, "backend": args.backend},
}
params["model"]["params"].update(engine=args.engine, max_oom_skips=args.max_oom_skips)
if args.precision == "mixed_float16":
    params["model"]["params"]["loss_scale_initial"] = 64.0
if args.jump_steps:
    params["model"]["params"].update(loss_jump_window=1, loss_jump_factor=100.0)
params["model"]["params"]["jit"] = None if args.jit == "auto" else False
if args.engine == "numba":
    params["network"]["params"]["pi_nodes"] = [8, 8]
    params["model"]["params"]["use_stress"] = False
DIPOLE = args.model != "potential_model"
POLARIZABILITY = args.model.startswith("pol_")
if args.arch == "PiNet2":
    params["network"] = {"name": "PiNet2", "params": dict(params["network"]["params"], rank=3)}
if DIPOLE:  # water (H, O); the magnitude loss and the bond charges' regularisation (upstream's defaults)
    params["network"]["params"].update(atom_types=[1, 8], out_units=2, out_extra={"p3": 1, "i1": 1, "i3": 1})
    if POLARIZABILITY:  # one atomic output; the model sets out_extra (i1, i3)
        params["network"]["params"].update(out_units=1)
    potential_only = ("use_force", "use_stress", "fit_e_dress", "fit_e_dress_batches", "f_loss_multiplier",
                      "s_loss_multiplier")
    params["model"] = {"name": args.model, "params": {k: v for k, v in params["model"]["params"].items()
                                                      if k not in potential_only}}
QMMM = args.embedding != "mechanical"
if QMMM:  # the QM water's energy and charge; no stress of a region in its environment
    params["network"]["params"].update(atom_types=[1, 8], out_units=2)
    params["model"]["params"].update(embedding=args.embedding, use_stress=False)
MIRRORED = args.backend == "mirrored"
if MIRRORED:  # the CPU as 2 devices, before TensorFlow starts
    tf.config.set_logical_device_configuration(tf.config.list_physical_devices("CPU")[0],
                                               [tf.config.LogicalDeviceConfiguration()] * 2)
model = get_model(params)  # starts Horovod (before any other TensorFlow work)
rank, size = model.world.rank, model.world.size
with open(os.path.join(args.workdir, f"{args.tag}.rank{rank}.pid"), "w") as f:
    f.write(str(os.getpid()))


#: frames per data file (unequal lengths; each frame has 4, 8 or 12 atoms, or 1 to 3 water molecules)
TRAIN_FRAMES, VALI_FRAMES = (7, 3, 5, 4), (5, 3)
DATA_DIR = os.path.abspath(args.data_dir or os.path.join(
    args.workdir, "data-qm7b" if POLARIZABILITY else "data-water" if DIPOLE else "data-qmmm" if QMMM else "data-cuau"))


def structure(seed):
    """An EMT-labelled periodic Cu/Au cell of 4, 8 or 12 atoms, strained and rattled (eV, eV/Å, eV/Å³)."""
    from ase.calculators.singlepoint import SinglePointCalculator
    rng = np.random.RandomState(seed)
    atoms = bulk("Cu", "fcc", a=3.7, cubic=True).repeat((1 + seed % 3, 1, 1))
    atoms.numbers[rng.rand(len(atoms)) < 0.3] = 79
    atoms.set_cell(atoms.cell[:] @ (np.eye(3) + 0.02 * rng.randn(3, 3)), scale_atoms=True)
    atoms.rattle(0.1, seed=seed)
    atoms.calc = EMT()
    results = {"energy": atoms.get_potential_energy(), "forces": atoms.get_forces(), "stress": atoms.get_stress()}
    atoms.calc = SinglePointCalculator(atoms, **results)
    return atoms


def water(seed):
    """A cluster of 1 to 3 distorted water molecules and its QEq dipole (e·Å; pinn.demo's reference)."""
    from pinn.demo import water_dipole_frames
    return water_dipole_frames(1, seed=seed, max_molecules=3)[0]


def qm7b_text(clusters):
    """QM7b-format frames of water clusters with a polarizability tensor (bohr³): atomic terms and the
    clusters' spread, something a model can learn."""
    lines = []
    for atoms in clusters:
        centred = atoms.positions - atoms.positions.mean(axis=0)
        alpha = np.eye(3) * 5.0 * len(atoms) + 2.0 * centred.T @ centred
        values = [alpha[0, 0], alpha[1, 1], alpha[2, 2], alpha[0, 1], alpha[0, 2], alpha[1, 2]]
        lines += [str(len(atoms)), 'Properties=species:S:1:pos:R:3 b3lyp_pol="' +
                  " ".join(f"{v:.10f}" for v in values) + '"']
        lines += [f"{s} {x:.10f} {y:.10f} {z:.10f}" for s, (x, y, z) in zip(atoms.get_chemical_symbols(),
                                                                             atoms.positions)]
    return "\n".join(lines) + "\n"


def data_files():
    """(train files, validation files) in DATA_DIR: extended XYZ written by rank 0 where missing (through
    pinn.io.ase_files, like a user's script; QM7b text for the polarizability model), then read by every
    rank."""
    make = water if DIPOLE else qmmm_frame if QMMM else structure
    files = {}
    for kind, lengths, first_seed in (("train", TRAIN_FRAMES, 0), ("vali", VALI_FRAMES, 10 ** 6)):
        seeds = first_seed + np.cumsum((0,) + lengths)
        files[kind] = [os.path.join(DATA_DIR, f"{kind}{i}.xyz") for i in range(len(lengths))]
        for path, begin, end in zip(files[kind], seeds[:-1], seeds[1:]):
            if rank == 0 and not os.path.exists(path):
                os.makedirs(DATA_DIR, exist_ok=True)
                frames = [make(int(seed)) for seed in range(begin, end)]
                if POLARIZABILITY:
                    with open(path + ".part", "w") as f:
                        f.write(qm7b_text(frames))
                else:
                    ase_files.write(path + ".part", frames, format="extxyz")
                os.replace(path + ".part", path)
    model.world.barrier()
    return files["train"], files["vali"]


def frames_of(files):
    """The frames of ``files`` as pinn.io.load_ase (load_qm7b) gives them (in file order): (Atoms, labels) tuples."""
    from ase import Atoms
    out = []
    if POLARIZABILITY:
        for s in load_qm7b(files).as_numpy_iterator():
            out.append((Atoms(numbers=s[K.ELEMS], positions=s[K.COORD]), s["ptensor"]))
        return out
    for s in load_ase(files, shuffle=False).as_numpy_iterator():
        atoms = Atoms(numbers=s[K.ELEMS], positions=s[K.COORD], cell=s[K.CELL], pbc=s[K.PBC])
        if QMMM:
            out.append((atoms, s[K.E_DATA], s[K.F_DATA], s[K.QM], s[K.MM_CHARGE], s[K.QM_CHARGE]))
            continue
        out.append((atoms, s[K.D_DATA]) if DIPOLE else (atoms, s[K.E_DATA], s[K.F_DATA], s[K.S_DATA]))
    return out


def what_was_read(share, frames):
    """This rank's files, what load_ase gave, and what a plain ase.io.read of each file gives on this rank."""
    plain = []
    for path in share:
        # as a user's script would, after the parallel world started
        atoms = ase.io.read(path, ":", format="xyz" if POLARIZABILITY else None)
        plain.append([os.path.basename(path), len(atoms), [len(a) for a in atoms],
                      checksum([a.positions for a in atoms])])
    return {"share": [os.path.basename(p) for p in share], "count": len(frames),
            "atoms": [len(f[0]) for f in frames], "checksum": checksum([f[0].positions for f in frames]),
            "plain": plain}


def batch(structures, nan=False, scale=1.0):
    out = batch_from_atoms([s[0] for s in structures], RC)
    if POLARIZABILITY:
        out["ptensor"] = scale * np.stack([s[1] for s in structures]).astype(np.float32)
        if nan:
            out["ptensor"][-1] = np.nan
        return out
    if DIPOLE:
        out[K.D_DATA] = scale * np.stack([s[1] for s in structures]).astype(np.float32)
        if nan:
            out[K.D_DATA][-1] = np.nan
        return out
    out[K.E_DATA] = scale * np.array([s[1] for s in structures], np.float32)
    out[K.F_DATA] = scale * np.concatenate([s[2] for s in structures]).astype(np.float32)
    if QMMM:  # the model takes the pairs among the QM atoms of batch_from_atoms' list
        out[K.QM] = np.concatenate([s[3] for s in structures])
        out[K.MM_CHARGE] = np.concatenate([s[4] for s in structures]).astype(np.float32)
        out[K.QM_CHARGE] = np.array([s[5] for s in structures], np.float32)
    else:
        out[K.S_DATA] = scale * np.stack([s[3] for s in structures]).astype(np.float32)
    if nan:
        out[K.E_DATA][-1] = np.nan
    return out


train_files, vali_files = data_files()
# the documented order: the model (the parallel world) first, then distribute_data and load_ase on this rank's
# files; one process takes both ranks' shares (the union), by the same assignment
RANKS = (0, 1) if size == 1 else (rank,)


def shares_of(files):
    if size == 1:
        return [distribute_data(files, rank=r, size=2)[0] for r in RANKS]
    return [distribute_data(files)[0]]


train_shares, vali_shares = shares_of(train_files), shares_of(vali_files)
streams = [frames_of(share) for share in train_shares]
read_record = [what_was_read(share, stream) for share, stream in zip(train_shares, streams)]
#: structures each rank takes at step s (rank 0: 2, 3, 4, ...; rank 1: 1, 4, 3, 2, ...): unequal parts
PART_SIZES = ((2, 3, 4), (1, 4, 3, 2))


def part(r, step, stream):
    """Rank r's part of the union batch of ``step``: the next PART_SIZES[r] frames of its files, cycling."""
    sizes = PART_SIZES[r]
    full, rest = divmod(step, len(sizes))
    start = full * sum(sizes) + sum(sizes[:rest])
    return [stream[(start + i) % len(stream)] for i in range(sizes[step % len(sizes)])]


def step_batch(step):
    structures = [s for r, stream in zip(RANKS, streams) for s in part(r, step, stream)]
    nan = step in args.nan_steps and RANKS[-1] == 1  # the union's last structure: rank 1's part
    return batch(structures, nan=nan, scale=1000.0 if step in args.jump_steps else 1.0)


spec = {k: tf.TensorSpec((None,) + v.shape[1:], tf.as_dtype(v.dtype)) for k, v in step_batch(0).items()}


def device_batches(step):
    """A mirrored run's batches of ``step``: rank 0's part (device 0), then rank 1's (device 1)."""
    scale = 1000.0 if step in args.jump_steps else 1.0
    return [batch(part(r, step, stream), nan=r == 1 and step in args.nan_steps, scale=scale)
            for r, stream in zip(RANKS, streams)]


def train_input():
    def gen():
        step = 0
        while True:
            yield from device_batches(step) if MIRRORED else [step_batch(step)]
            step += 1
    return tf.data.Dataset.from_generator(gen, output_signature=spec)


validation = [s for share in vali_shares for s in frames_of(share)]


def vali_input():
    batches = [batch(validation[i:i + 2]) for i in range(0, len(validation), 2)]
    return tf.data.Dataset.from_generator(lambda: iter(batches), output_signature=spec)


# the world's broadcast (through the host exchange in use): rank 1's weights made different must come back
# as rank 0's, or the ranks' weights (and the 1-process equivalence) differ
if rank == 1:
    for variable in model.model.trainable_variables:
        variable.assign(variable + 0.01)
model.world.broadcast_variables(model.model.variables)
if args.perturb_rank1:
    model.train(train_input, max_steps=args.steps // 2)
    if rank == 1:
        variable = model.model.trainable_variables[0]
        variable.assign(variable + 1e-6)
model.train(train_input, max_steps=args.steps, eval_fn=vali_input, max_time=args.max_time)
metrics = model.evaluate(vali_input)
np.savez(os.path.join(args.workdir, f"{args.tag}.rank{rank}.npz"),
         weights=np.array([v.numpy() for v in model.model.variables], dtype=object),
         average=np.array([v.numpy() for v in model.ema.shadow], dtype=object),
         optimizer=np.array([v.numpy() for v in model.optimizer.variables], dtype=object),
         step=int(model.step.numpy()), lr=float(model.current_learning_rate()), size=size,
         metrics=json.dumps(metrics), writes=json.dumps(writes), read=json.dumps(read_record))
