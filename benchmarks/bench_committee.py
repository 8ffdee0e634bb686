"""What a committee's step costs on the Numba engine, and what bounds it: the engine calls alone, no MD.

Usage:  python benchmarks/bench_committee.py MODEL_DIR [--system ethanol|cu108] [--calls 200] [--members 4]

Times, as the median of ``--calls`` calls on the system rattled by 0.05 Å (candidate pairs from one
neighbor list, the search for pairs within the cutoff included in every call): one model's
:class:`pinn.engines.md.FastPiNet` on one thread and on all (``single_1_thread_ms``,
``single_ms``); :class:`pinn.engines.committee.FastCommittee` of 1 … ``--members`` copies of the
model (``committee_ms``: {M: ms}), which runs members of one layout a member per thread in one
kernel call where that pays (``stacked``: {M: whether it did}).  Members that share no arithmetic
cost at least the smaller of ⌈M / threads⌉ one-thread evaluations (a member per thread) and M
evaluations on all threads (one after another): ``floor_ms``; its ratio to ``single_ms`` says how
close to "2 × one model" a committee can come on this machine.
One JSON line.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import ENGINE_SYSTEMS, emit, engine_system, median_ms  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", help="a PiNet or PiNet2 potential's model directory")
    ap.add_argument("--system", default="ethanol", choices=list(ENGINE_SYSTEMS))
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--members", type=int, default=4)
    args = ap.parse_args()
    from pinn.engines.committee import FastCommittee
    from pinn.engines.exported import load_engine_weights
    from pinn.engines.md import FastPiNet
    from pinn.io.neighbors import neighbor_list
    arrays = load_engine_weights(args.model)
    if arrays is None:
        raise SystemExit(f"{args.model}: no engine weights file (run the model once with get_calc, or pinn export)")
    atoms = engine_system(args.system)
    atoms.rattle(0.05, seed=0)
    single = FastPiNet(arrays)
    ind, shift = neighbor_list(atoms.positions, atoms.cell[:], atoms.pbc, single.rc + 0.5)
    inputs = (atoms.numbers, atoms.positions, ind[:, 0].copy(), ind[:, 1].copy(), shift @ atoms.cell[:],
              atoms.cell[:], atoms.pbc)
    one = FastPiNet(arrays, threads=1)
    one_thread = median_ms(lambda: one(*inputs), args.calls, digits=4)
    single_ms = median_ms(lambda: single(*inputs), args.calls, digits=4)
    committee_ms, stacked = {}, {}
    for count in range(1, args.members + 1):
        committee = FastCommittee([FastPiNet(arrays) for _ in range(count)])
        committee_ms[count] = median_ms(lambda: committee(*inputs), args.calls, digits=4)
        stacked[count] = committee.in_one_call(count, single.last_pairs)
    threads = single.threads
    floor = {count: round(min(-(-count // threads) * one_thread, count * single_ms), 4) for count in committee_ms}
    emit(benchmark="committee_engine", system=args.system, atoms=len(atoms), pairs=int(single.last_pairs),
         network=single.network, dtype=str(single.dtype), threads=threads, model=args.model,
         single_1_thread_ms=one_thread, single_ms=single_ms, committee_ms=committee_ms, stacked=stacked,
         floor_ms=floor, ratio_to_single={count: round(ms / single_ms, 2) for count, ms in committee_ms.items()},
         floor_ratio={count: round(ms / single_ms, 2) for count, ms in floor.items()})


if __name__ == "__main__":
    main()
