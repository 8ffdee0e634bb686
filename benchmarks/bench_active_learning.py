"""One round of active learning on EMT copper (pinn.demo.active_learning_demo): how far labelling the
configurations where a committee disagrees brings down its deviation and its true force error there,
and how well the deviation ranks the error on held-back configurations (Spearman).

Usage:  python benchmarks/bench_active_learning.py [--repeat 3]     (one JSON line per round, seeds 0, 1, ...)
"""
import argparse
import tempfile

from common import emit


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3, help="rounds, each with its own seed")
    args = ap.parse_args()
    from pinn.demo import active_learning_demo
    for seed in range(args.repeat):
        with tempfile.TemporaryDirectory() as directory:
            figures = active_learning_demo(directory, seed=seed)
        emit(benchmark="active_learning", seed=seed, members=3, picked=20,
             **{k: round(v, 4) for k, v in figures.items()})


if __name__ == "__main__":
    main()
