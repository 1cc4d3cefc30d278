#!/usr/bin/env bash
# bench/bench_scale.sh — planning at scale (issue 16 item 5). Not a test.
#
# gpt2_medium (24 blocks of 1024, 16 heads: 354,823,168 parameters, one layer
# per op) with Adam on examples/cluster_8x8gb.json and examples/cluster_16x8gb.json
# (devices of 8 GB), costs estimated from multiply-adds (profiling a 355M model
# at sequence length SEQ does not fit this 2-core host's time): every planner
# row of `tapp-cli plan --planner all` (each row's search time is its `plan s`
# column) and `tapp-cli optimize` with a SEARCH_S-second budget. Prints, per
# cluster, each row's predicted step, whether its plan fits memory, its search
# time, and the policy's.
#
# Usage: bench/bench_scale.sh [BUILD_DIR]   env: SEQ=1024 BATCH=8 SEARCH_S=60 OUT=dir
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
CLI="$BUILD/bin/tapp-cli"
SEQ=${SEQ:-1024}
BATCH=${BATCH:-8}
SEARCH_S=${SEARCH_S:-60}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
echo "## gpt2_medium, sequence $SEQ, batch $BATCH, Adam, costs estimated (results in $OUT)"
for n in 8 16; do
  cluster="examples/cluster_${n}x8gb.json"
  start=$(date +%s.%N)
  "$CLI" plan gpt2_medium --devices "$cluster" --input-size "$SEQ" --batch "$BATCH" --optimizer adam \
    --costs estimated --planner all --json > "$OUT/plan_$n.json" 2> "$OUT/plan_$n.log" || true
  plan_s=$(echo "$(date +%s.%N) - $start" | bc)
  start=$(date +%s.%N)
  "$CLI" optimize gpt2_medium --devices "$cluster" --input-size "$SEQ" --batch "$BATCH" --optimizer adam \
    --costs estimated --time-budget "$SEARCH_S" --no-verify --no-baselines --json \
    > "$OUT/optimize_$n.json" 2> "$OUT/optimize_$n.log" || true
  opt_s=$(echo "$(date +%s.%N) - $start" | bc)
  python3 - "$OUT" "$n" "$plan_s" "$opt_s" <<'PY'
import json, sys
out, n, plan_s, opt_s = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
print(f"\n### {n} devices of 8 GB (plan --planner all: {plan_s:.1f} s wall; optimize: {opt_s:.1f} s wall)\n")
print("| row | step ms | fits | search s | stages | micro-batches | note |")
print("|---|---:|---|---:|---:|---:|---|")
try:
    p = json.load(open(f"{out}/plan_{n}.json"))
    for r in p["rows"]:
        rep, pl = r.get("report") or {}, r.get("placement") or {}
        ok = rep.get("ok", False)
        print(f"| {r['planner']} | {rep.get('step_ms', 0):,.1f} | {'yes' if ok else 'no'} | {r.get('plan_s', 0):.2f} | "
              f"{len(pl.get('groups', []))} | {pl.get('micro_batches', '')} | {'' if ok else rep.get('message', '')[:140]} |")
except Exception as e:  # the plan log says why
    lines = open(f"{out}/plan_{n}.log").read().strip().splitlines()
    print(f"| plan | failed | | | | | {lines[-1] if lines else e} |")
try:
    o = json.load(open(f"{out}/optimize_{n}.json"))
    pol, pl = o["policy"], o["placement"]
    print(f"| TAPP (optimize: policy + refinement) | {o['predicted_step_ms']:,.1f} | yes | {pol['elapsed_s']:.1f} | "
          f"{len(pl.get('groups', []))} | {pl.get('micro_batches', '')} | {pol['evaluations']} evaluations; policy alone "
          f"{pol['step_ms']:,.1f} ms; stop: {pol.get('stop_reason', '')} |")
except Exception as e:
    lines = open(f"{out}/optimize_{n}.log").read().strip().splitlines()
    print(f"| TAPP (optimize) | failed | | | | | {lines[-1] if lines else e} |")
PY
done
