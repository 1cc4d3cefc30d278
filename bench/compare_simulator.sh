#!/usr/bin/env bash
# bench/compare_simulator.sh — two bench_simulator builds in interleaved rounds (this machine is
# shared and noisy: compare ratios within one run, never figures from different hours). Not a test.
#
# Usage: bench/compare_simulator.sh OLD_BINARY NEW_BINARY [FILTER] [ROUNDS]
#   FILTER: a Google Benchmark filter for one benchmark (default BM_inception_v3_4dev_branch_parallel$)
#   ROUNDS: rounds, each running OLD then NEW for 0.5 s (default 10)
# Prints each binary's median and best evaluations/s over the rounds, and the ratio of the medians.
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
OLD=$1 NEW=$2 FILTER=${3:-'BM_inception_v3_4dev_branch_parallel$'} ROUNDS=${4:-10}
[ "$OLD" != "$NEW" ] || { echo "compare_simulator.sh: OLD and NEW are the same file" >&2; exit 2; }
for b in "$OLD" "$NEW"; do [ -x "$b" ] || { echo "compare_simulator.sh: no executable '$b'" >&2; exit 2; }; done
for _ in $(seq "$ROUNDS"); do
  for b in "$OLD" "$NEW"; do
    v=$("$b" --benchmark_filter="$FILTER" --benchmark_min_time=0.5 2>&1 | grep -o 'items_per_second=[0-9.]*[kM]*' | head -1 | cut -d= -f2)
    echo "$b $v"
  done
done | python3 -c '
import statistics, sys
runs = {}
for line in sys.stdin:
    b, v = line.split()
    scale = {"k": 1e3, "M": 1e6}.get(v[-1], 1)
    runs.setdefault(b, []).append(float(v.rstrip("kM")) * scale)
med = {b: statistics.median(v) for b, v in runs.items()}
for b, v in runs.items():
    print(f"{b}: median {med[b]:,.0f}/s, best {max(v):,.0f}/s over {len(v)} rounds")
old, new = list(med)
print(f"new / old (medians): {med[new] / med[old]:.3f}")
'
