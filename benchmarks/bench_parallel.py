"""Data-parallel scaling: 1 rank with all threads against N ranks with their share, same data and global batch.

Usage:  python benchmarks/bench_parallel.py [cu108|ethanol] [--np 2] [--steps 300] [--warmup 50] [--batch 32]
                                          [--repeat 1] [--host-exchange auto|mpi|tcp|horovod]

Runs the reference configuration three ways and prints one JSON line each,
then a summary line per parallel launcher.  With ``--repeat R`` the three runs
alternate R times (a shared machine's speed drifts by tens of percent between
minutes) and the summary compares the medians, and gives the median and range of
the paired efficiencies (each N-rank run over the 1-rank run of its own repeat).

- ``1 rank``: one process (``parallel`` off), TensorFlow's default threads (all cores);
- ``N ranks (gloo)``: ``horovodrun -np N --gloo``, batch/N per rank, each rank its share of the cores;
- ``N ranks (mpi)``: ``mpirun -np N``, the same, when Horovod has MPI.

Throughput is structures per second over the measured steps (after warm-up),
from the trainer's own progress line; the communication share is the part of
each rank's step spent in the allreduce of loss counts and gradients
(waiting for the slower rank included).  Parallel efficiency = N-rank
throughput / 1-rank throughput on the same cores.  ``step_ms`` is the wall time of a step
(global batch / throughput); ``step_split_ms`` splits a parallel step, in ms, the slowest
rank's: ``compute`` (this rank's gradients, and the loss counts of its next batches),
``exchange`` (the step's one allreduce, waiting for the slower rank included) and
``update`` (clipping, Adam and the weight average, on every rank).  ``cpu_ms_per_step`` is each
process's CPU time (user + system, all its threads) per measured step: N ranks that spend more
CPU per structure than one process do extra work; ones that spend the same but run slower wait.
``--host-exchange`` sets ``parallel_params.host_exchange`` (what carries that
allreduce; ``horovod`` gives the figures of 0.11.0).
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def worker(args):
    import numpy as np
    from common import REFERENCE_MODEL, REFERENCE_NETWORK, dataset_path

    from pinn.io import add_neighbors, ase_files, load_ase, sparse_batch
    from pinn.models import potential_model
    path = dataset_path(args.dataset)
    types = sorted(set(ase_files.read(path, 0).numbers.tolist()))
    mp = dict(REFERENCE_MODEL, data_resume="none", log_every_n_steps=args.steps - args.warmup)
    params = {"model_dir": args.model_dir, "parallel": args.parallel,
              "network": {"name": "PiNet", "params": dict(REFERENCE_NETWORK, atom_types=types)},
              "model": {"name": "potential_model", "params": mp},
              "parallel_params": {"lr_scaling": "none", "host_exchange": args.host_exchange}}
    model = potential_model(params)
    rank, size = model.world.rank, model.world.size
    splits = load_ase(path, split={"train": 9, "val": 1}, seed=0)
    per_rank = args.batch // size
    # the documented pipeline (as bench_train.py): this rank's share, neighbor lists once per structure,
    # before the cache.  The cache is filled by one pass here, before any step, so that both train()
    # calls read it and the measured steps are the steady state.  Before 0.12.0 the lists were
    # computed at every step, and the measured steps paid them.
    structures = splits["train"].shard(size, rank).apply(add_neighbors(model.rc)).cache()
    for _ in structures:
        pass
    train = lambda: structures.repeat().shuffle(1000, seed=rank).apply(sparse_batch(per_rank))
    model.train(train, max_steps=args.warmup)
    start = os.times()
    model.train(train, max_steps=args.steps)
    end = os.times()
    # CPU time of each process over the measured steps (user + system, all its threads)
    cpu = model.world.allgather_numpy(np.array([end.user - start.user + end.system - start.system]))[:, 0]
    if rank == 0:
        log = open(os.path.join(args.model_dir, "train.log")).read()
        line = [l for l in log.splitlines() if f"step {args.steps}/{args.steps}" in l][-1]
        total = float(re.search(r"([\d.]+) structures/s", line).group(1))
        comm = re.search(r"communication ([\d%, ]+)", line)
        shares = [float(x) / 100 for x in re.findall(r"(\d+)%", comm.group(1))] if comm else [0.0]
        from pinn.training.metrics import read_metrics
        last = read_metrics(args.model_dir, "train")[-1]
        split = {k[len("step_ms_"):]: v for k, v in last.items() if k.startswith("step_ms_")}
        print("RESULT " + json.dumps({"structures_per_s": total, "comm_share": shares, "ranks": size,
                                      "batch_per_rank": per_rank, "step_ms": round(1e3 * args.batch / total, 3),
                                      "cpu_ms_per_step": [round(1e3 * c / (args.steps - args.warmup), 3) for c in cpu],
                                      "step_split_ms": split}), flush=True)


def run(command, args, model_dir, parallel):
    cmd = command + [sys.executable, os.path.abspath(__file__), "--worker", args.dataset, "--steps", str(args.steps),
                     "--warmup", str(args.warmup), "--batch", str(args.batch), "--model-dir", model_dir,
                                   "--host-exchange", args.host_exchange] + \
        (["--parallel"] if parallel else [])
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    found = [l for l in (out.stdout + out.stderr).splitlines() if "RESULT " in l]
    if out.returncode != 0 or not found:
        print((out.stdout + out.stderr)[-3000:], file=sys.stderr)
        return None
    # the line may run on into another rank's output (mpirun interleaves the ranks' streams)
    return json.JSONDecoder().raw_decode(found[-1].split("RESULT ", 1)[1])[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dataset", nargs="?", default="cu108")
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--batch", type=int, default=32, help="global batch (structures per step, all ranks)")
    ap.add_argument("--repeat", type=int, default=1, help="alternate the runs this many times; compare medians")
    ap.add_argument("--host-exchange", default="auto", choices=("auto", "mpi", "tcp", "horovod"),
                    help="parallel_params.host_exchange of the parallel runs")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--parallel", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model-dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    from common import REFERENCE_NETWORK, emit
    results = {}
    # horovodrun beside this interpreter (a virtual environment that is not activated) or on PATH
    beside = os.path.join(os.path.dirname(sys.executable), "horovodrun")
    horovodrun = beside if os.path.exists(beside) else (shutil.which("horovodrun") or "horovodrun")
    launchers = [("1 rank", [], False),
                 (f"{args.np} ranks (gloo)", [horovodrun, "-np", str(args.np), "--gloo"], True)]
    if shutil.which("mpirun"):
        launchers.append((f"{args.np} ranks (mpi)", ["mpirun", "-np", str(args.np), "--bind-to", "none"], True))
    for repeat in range(args.repeat):
        for name, command, parallel in launchers:
            with tempfile.TemporaryDirectory() as tmp:
                result = run(command, args, os.path.join(tmp, "model"), parallel)
            if result is None:
                print(f"{name}: failed", file=sys.stderr)
                continue
            results.setdefault(name, []).append(dict(result, repeat=repeat))
            emit(benchmark="parallel", dataset=args.dataset, run=name, repeat=repeat, global_batch=args.batch,
                 measured_steps=args.steps - args.warmup, host_exchange=args.host_exchange if parallel else None,
                 **result)
    median = {name: statistics.median(r["structures_per_s"] for r in runs) for name, runs in results.items()}
    base = median.get("1 rank")
    for name, runs in results.items():
        if base and name != "1 rank":
            # each N-rank run against the 1-rank run of its own repeat (minutes apart, not tens of minutes)
            pairs = [r["structures_per_s"] / one["structures_per_s"] for r in runs for one in results["1 rank"]
                     if one["repeat"] == r["repeat"]]
            emit(benchmark="parallel-summary", dataset=args.dataset, run=name, host_exchange=args.host_exchange,
                 structures_per_s_median=median[name], one_rank_median=base, runs=len(runs),
                 parallel_efficiency=round(median[name] / base, 3),
                 paired_efficiency_median=round(statistics.median(pairs), 3) if pairs else None,
                 paired_efficiency_range=[round(min(pairs), 3), round(max(pairs), 3)] if pairs else None,
                 network=REFERENCE_NETWORK,
                 note="parallel_efficiency: median N-rank / median 1-rank structures/s on the same cores and global "
                      "batch, the runs alternating; paired: each N-rank run / the 1-rank run of its repeat")

if __name__ == "__main__":
    main()
