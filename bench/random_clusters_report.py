#!/usr/bin/env python3
"""Summary of bench_random_clusters.sh runs; with two folders, the second against the first.

usage: bench/random_clusters_report.py OUTDIR [OUTDIR_B]

Per run: the policy's own plan and the final plan (the best of the policy, its
refinement and the planners) over the best classical planner's step (the
result's best_baseline: HOGWILD, asynchronous, is not one). Summary: runs with
the policy alone more than 2% behind and at least 10% ahead, geometric means.
With two folders, only the runs both have, and each run that moved by more than
half a point.
"""
import glob
import json
import math
import os
import sys


def load(folder):
    runs = {}
    for f in sorted(glob.glob(os.path.join(folder, "s*", "*.json"))):
        key = os.path.relpath(f, folder)[:-5]
        try:
            r = json.load(open(f))
        except (OSError, ValueError):
            print(f"{key}: no result", file=sys.stderr)
            continue
        best = next((b for b in r.get("baselines", []) if b.get("ok") and b["name"] == r.get("best_baseline")), None)
        if not best:
            print(f"{key}: no classical plan", file=sys.stderr)
            continue
        policy = r["policy"].get("step_ms") or math.inf
        final = r.get("step_ms") or math.inf
        runs[key] = (policy / best["step_ms"], final / best["step_ms"])
    return runs


def summary(name, runs, keys):
    pol = [runs[k][0] for k in keys]
    fin = [runs[k][1] for k in keys]
    gm = lambda xs: math.exp(sum(math.log(x) for x in xs) / len(xs))
    print(f"{name}: {len(keys)} runs; policy alone >2% behind in {sum(x > 1.02 for x in pol)}, "
          f">=10% ahead in {sum(x <= 1 / 1.1 for x in pol)}, geometric mean {gm(pol):.4f}; "
          f"final plan >=10% ahead in {sum(x <= 1 / 1.1 for x in fin)}, geometric mean {gm(fin):.4f} "
          f"(step / best classical step)")


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    a = load(sys.argv[1])
    if len(sys.argv) == 2:
        if not a:
            sys.exit("no runs")
        for k, (p, f) in a.items():
            print(f"  {k:28s} policy {p:.3f}  final {f:.3f}")
        summary(sys.argv[1], a, sorted(a))
        return
    b = load(sys.argv[2])
    keys = sorted(set(a) & set(b))
    if not keys:
        sys.exit("no runs in both")
    summary(sys.argv[1], a, keys)
    summary(sys.argv[2], b, keys)
    for k in keys:
        if abs(a[k][0] - b[k][0]) > 0.005 or abs(a[k][1] - b[k][1]) > 0.005:
            print(f"  {k:28s} policy {a[k][0]:.3f} -> {b[k][0]:.3f}   final {a[k][1]:.3f} -> {b[k][1]:.3f}")


if __name__ == "__main__":
    main()
