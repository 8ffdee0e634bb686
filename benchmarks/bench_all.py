"""The figures of the performance targets (issue 7) in one command.

Usage:  python benchmarks/bench_all.py

Runs, one after the other, each in its own process (so that each peak RSS is its own):

- ``bench_train.py ethanol cu108``: training throughput and peak memory, reference configuration;
- ``bench_md.py ethanol cu108 cu864``: MD ms/step and peak memory, the calculator's defaults;
- ``bench_accuracy.py ethanol``: validation force and energy MAE after 5 000 steps with pinn's
  default settings.

Their JSON lines go to stdout as they come (data are generated on first use, see
benchmarks/README.md); at the end, one more line (``"benchmark": "summary"``) gathers the
figures of the table in docs/benchmarks.md's summary.  About 7 minutes on 2 cores once the
data exist.
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
RUNS = [["bench_train.py", "ethanol", "cu108"],
        ["bench_md.py", "ethanol", "cu108", "cu864"],
        ["bench_accuracy.py", "ethanol"]]


def run(args):
    """Run one benchmark script; return the JSON records it printed (its other output passes through)."""
    records = []
    with subprocess.Popen([sys.executable, os.path.join(HERE, args[0])] + args[1:], stdout=subprocess.PIPE,
                          text=True, cwd=HERE) as proc:
        for line in proc.stdout:
            print(line, end="", flush=True)
            if line.startswith("{"):
                records.append(json.loads(line))
    if proc.returncode:
        raise SystemExit(f"{args[0]} failed with exit status {proc.returncode}")
    return records


def summary(records):
    """The figures of issue 7's table from the records, keyed by benchmark."""
    out = {}
    for r in records:
        if r.get("benchmark") == "train":
            out[f"train_{r['dataset']}_structures_per_s"] = r.get("structures_per_s")
            out[f"train_{r['dataset']}_peak_rss_mb"] = r.get("peak_rss_mb")
        elif r.get("benchmark") == "md":
            out[f"md_{r['system']}_ms_per_step"] = r.get("ms_per_step")
            out[f"md_{r['system']}_peak_rss_mb"] = r.get("peak_rss_mb")
        elif r.get("benchmark") == "accuracy":
            out[f"accuracy_{r['dataset']}_F_MAE_meV_per_A"] = r.get("F_MAE_meV_per_A")
            out[f"accuracy_{r['dataset']}_E_MAE_meV"] = r.get("E_MAE_meV")
    return out


def main():
    records = []
    for args in RUNS:
        records += run(args)
    print(json.dumps({"benchmark": "summary", **summary(records)}), flush=True)


if __name__ == "__main__":
    main()
