#!/usr/bin/env python3
"""How far the best classical plan is from the step-time lower bound, and what
the bound's shares and synchronous terms add (planners/lower_bound.h).

usage: bench/bound_report.py DIR   (DIR holds, one per file, `tapp-cli plan M
       --devices C --planner all --json` outputs or `optimize --json` results,
       as bench_random_clusters.sh writes them: *.json, also one folder down)

Per run: the best row's step (every row but hogwild, as the results' best
classical plan), the bound without the shares term (the larger of work and
chain, plus the same per-step overhead), with it (`ms`), and for synchronous
plans (`synchronous_ms`). Prints, for the shares term and then for the
synchronous terms, the runs whose bound they raise, the median gap of the best
plan to the bound, and in how many runs the best plan is within 1/0.9 of the
bound, where no plan can be 10% faster than it.
"""
import glob
import json
import os
import sys
from collections import namedtuple

# One run: its name, the best classical step and its bound (ms) without the
# shares term (`plain`), with it (`ms`) and for synchronous plans.
Run = namedtuple("Run", "name best plain ms synchronous")


def classical_steps(j):
    """Every classical row's step but hogwild's: plan's rows, or optimize's baselines."""
    if "rows" in j:
        return [r["report"]["step_ms"] for r in j["rows"]
                if r.get("planner") != "hogwild" and r.get("report", {}).get("ok")]
    return [b["step_ms"] for b in j.get("baselines", []) if b.get("name") != "hogwild" and b.get("ok")]


def runs(folder):
    """The Runs of DIR's plan and optimize outputs that have a bound."""
    files = glob.glob(os.path.join(folder, "*.json")) + glob.glob(os.path.join(folder, "*", "*.json"))
    for f in sorted(files):
        try:
            j = json.load(open(f))
        except (OSError, ValueError):
            continue
        if not isinstance(j, dict):
            continue
        b = j.get("lower_bound") or {}
        steps = classical_steps(j)
        if "ms" not in b or not steps:
            continue
        plain = max(b["work_ms"], b["chain_ms"])
        overhead = b["ms"] - max(plain, b.get("shares_ms", 0))
        yield Run(os.path.relpath(f, folder)[:-5], min(steps), plain + overhead, b["ms"], b.get("synchronous_ms", b["ms"]))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    rows = list(runs(sys.argv[1]))
    if not rows:
        sys.exit(f"{sys.argv[1]}: no plan outputs with a bound")
    compare(rows, "plain", "ms", "the shares term raises")
    compare(rows, "ms", "synchronous", "the synchronous terms (every classical row is synchronous) raise")


def compare(rows, lower, higher, what):
    """What each Run's bound `higher` (a field name) adds to its bound `lower`."""
    pairs = [(r, getattr(r, lower), getattr(r, higher)) for r in rows]
    raised = [(r, before, after) for r, before, after in pairs if after > before * 1.0001]
    print(f"{len(rows)} runs; {what} the bound in {len(raised)}")
    for r, before, after in raised:
        print(f"  {r.name:28s} best {r.best:12.1f}  bound {before:12.1f} -> {after:12.1f} (+{100 * (after / before - 1):.1f}%)"
              f"  gap {100 * (r.best / before - 1):.1f}% -> {100 * (r.best / after - 1):.1f}%")
    before = sorted(r.best / b - 1 for r, b, _ in pairs)
    after = sorted(r.best / a - 1 for r, _, a in pairs)
    mid = len(rows) // 2
    print(f"median gap of the best classical plan to the bound: {100 * before[mid]:.1f}% -> {100 * after[mid]:.1f}%")
    room = 1 / 0.9 - 1
    print(f"best classical within {100 * room:.1f}% of the bound (no plan can be 10% faster): "
          f"{sum(g < room for g in before)} -> {sum(g < room for g in after)} of {len(rows)}")


if __name__ == "__main__":
    main()
