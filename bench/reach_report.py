#!/usr/bin/env python3
"""Where a plan 10% ahead of the best classical planner is known to exist at all.

usage: bench/reach_report.py [-v] OUTDIR [OUTDIR ...]   (optimize --json results as
       optimize_grid.sh and bench_random_clusters.sh write them: OUTDIR/s<SEED>/<case>.json)

A case is one file name (model, cluster, batch) across every seed folder of
every OUTDIR. Its best known plan is the fastest that any of its runs found:
the policy's own, the final plan, or any classical row (hogwild, asynchronous,
is not one). Per run: is that plan at least 10% ahead of the run's own best
classical plan (then such a plan exists: a search could reach it), and are the
run's policy alone and final plan. Where the best known plan is not 10% ahead,
no search we have found one, however many seeds ran; the lower bound
(bound_report.py) is often too loose to say so. -v lists every case as a
Markdown table: per run (by folder, then seed) the policy alone's and the final
plan's step over the run's best classical step, and that step over the
lower bound (only above 1.1 can a plan be 10% ahead of it, at most 1/1.1 of the row).
"""
import glob
import json
import os
import sys
from collections import defaultdict, namedtuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bound_report import classical_steps  # noqa: E402

AHEAD = 1 / 1.1  # at least 10% ahead: step at most this share of the best classical step


# One run's steps (ms): the policy alone's, the final plan's, the best classical row's; its lower bound or None.
Run = namedtuple("Run", "policy final classical bound")


def load(folders):
    """Per case, its Runs."""
    cases = defaultdict(list)
    for folder in folders:
        for f in sorted(glob.glob(os.path.join(folder, "s*", "*.json"))):
            try:
                r = json.load(open(f))
            except (OSError, ValueError):
                continue
            steps = classical_steps(r)
            policy = (r.get("policy") or {}).get("step_ms")
            if not steps or not policy or not r.get("step_ms"):
                continue
            cases[os.path.basename(f)[:-5]].append(Run(policy, r["step_ms"], min(steps), r.get("lower_bound_ms")))
    return cases


def spread(xs):
    """'0.912' where every value rounds alike, else 'lowest-highest'."""
    lo, hi = f"{min(xs):.3f}", f"{max(xs):.3f}"
    return lo if lo == hi else f"{lo}-{hi}"


def main():
    verbose = "-v" in sys.argv[1:]
    args = [a for a in sys.argv[1:] if a != "-v"]
    if not args:
        sys.exit(__doc__)
    cases = load(args)
    if not cases:
        sys.exit("no optimize results with a classical plan")
    runs = reachable = policy = final = 0
    if verbose:
        print("| case | runs | best known / best classical | policy alone / best classical | "
              "final / best classical | best classical / lower bound |")
        print("|---|---|---|---|---|---|")
    for case, rs in sorted(cases.items()):
        known = min(min(r.policy, r.final, r.classical) for r in rs)
        for r in rs:
            runs += 1
            reachable += known <= AHEAD * r.classical
            policy += r.policy <= AHEAD * r.classical
            final += r.final <= AHEAD * r.classical
        if verbose:
            bounds = [r.classical / r.bound for r in rs if r.bound]
            print(f"| {case} | {len(rs)} | {spread([known / r.classical for r in rs])} | "
                  f"{' '.join(f'{r.policy / r.classical:.3f}' for r in rs)} | "
                  f"{' '.join(f'{r.final / r.classical:.3f}' for r in rs)} | {spread(bounds) if bounds else '-'} |")
    print(f"{runs} runs of {len(cases)} cases; a plan at least 10% ahead of the run's best classical plan is "
          f"known in {reachable}; the policy alone found one in {policy}, the final plan in {final}")


if __name__ == "__main__":
    main()
