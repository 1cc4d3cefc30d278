#!/usr/bin/env python3
"""Summary of bench_random_clusters.sh runs; with two folders, the second against the first.

usage: bench/random_clusters_report.py OUTDIR [OUTDIR_B]

Per run: the policy's own plan and the final plan (the best of the policy, its
refinement and the planners) over the best classical planner's step (the
result's best_baseline: HOGWILD, asynchronous, is not one). Summary: runs with
the policy alone more than 2% behind and at least 10% ahead, geometric means;
then, over every run (those without a classical plan too), the evaluations: the
policy's own (before the refinement) and how many failed, all of them, and how
many of those the measurer's moves made fit (core/memory_fit.h).
With two folders, only the runs both have, and each run that moved by more than
half a point.
"""
import glob
import json
import math
import os
import sys


def load(folder):
    """Per run with a classical plan: (policy, final) over its step; and over every run, the
    evaluation totals: the policy's own, failed and moved to fit, all, failed and moved to fit."""
    runs, totals = {}, [0, 0, 0, 0, 0, 0]
    for f in sorted(glob.glob(os.path.join(folder, "s*", "*.json"))):
        key = os.path.relpath(f, folder)[:-5]
        try:
            r = json.load(open(f))
        except (OSError, ValueError):
            print(f"{key}: no result", file=sys.stderr)
            continue
        p = r["policy"]
        own = p["evaluations"] - p.get("refine_evaluations", 0)
        counts = (own, p.get("policy_failures", 0), p.get("policy_moved_to_fit", 0), p["evaluations"], p["failures"],
                  p.get("moved_to_fit", 0))
        totals = [t + c for t, c in zip(totals, counts)]
        best = next((b for b in r.get("baselines", []) if b.get("ok") and b["name"] == r.get("best_baseline")), None)
        if not best:
            print(f"{key}: no classical plan", file=sys.stderr)
            continue
        policy = p.get("step_ms") or math.inf
        final = r.get("step_ms") or math.inf
        runs[key] = (policy / best["step_ms"], final / best["step_ms"])
    return runs, totals


def evaluations(folder, totals):
    own, own_failed, own_moved, every, failed, moved = totals
    print(f"{folder}: the policy's own evaluations {own:,}, failed {own_failed:,}, made to fit by moving layers "
          f"{own_moved:,}; all {every:,}, failed {failed:,}, made to fit by moving layers {moved:,}")


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
    a, a_totals = load(sys.argv[1])
    if len(sys.argv) == 2:
        if not a:
            sys.exit("no runs")
        for k, (p, f) in a.items():
            print(f"  {k:28s} policy {p:.3f}  final {f:.3f}")
        summary(sys.argv[1], a, sorted(a))
        evaluations(sys.argv[1], a_totals)
        return
    b, b_totals = load(sys.argv[2])
    keys = sorted(set(a) & set(b))
    if not keys:
        sys.exit("no runs in both")
    summary(sys.argv[1], a, keys)
    summary(sys.argv[2], b, keys)
    evaluations(sys.argv[1], a_totals)
    evaluations(sys.argv[2], b_totals)
    for k in keys:
        if abs(a[k][0] - b[k][0]) > 0.005 or abs(a[k][1] - b[k][1]) > 0.005:
            print(f"  {k:28s} policy {a[k][0]:.3f} -> {b[k][0]:.3f}   final {a[k][1]:.3f} -> {b[k][1]:.3f}")


if __name__ == "__main__":
    main()
