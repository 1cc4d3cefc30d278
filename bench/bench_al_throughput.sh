#!/usr/bin/env bash
# bench/bench_al_throughput.sh — Associated Learning (AL-FM, schedule al) against GPipe and 1F1B on
# the same devices and placement, measured by `tapp-cli run` with the simulator's prediction
# beside each (issue 20, item 5). Not a test.
#
# For L in BLOCKS: an emulated cluster of L one-thread devices at speed 1/L (together one core of
# this machine, so the emulation stays faithful on 2 cores), the balance-by-time planner's L
# stages (`tapp-cli plan --planner time --micro-batches M`), then in ROUNDS interleaved rounds
# each schedule measured (median of STEPS steps); prints the median over rounds, the prediction
# (`tapp-cli plan --placement`, for al `--schedule al`) and their ratio.
#
# Usage: bench/bench_al_throughput.sh [BUILD_DIR]
#   (env: MODEL=alexnet_cifar BATCH=32 MICRO=4 BLOCKS="2 3 4" ROUNDS=3 STEPS=5 OUT=dir)
set -euo pipefail
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CLI="$ROOT/$BUILD/bin/tapp-cli"
[ -x "$CLI" ] || CLI="$BUILD/bin/tapp-cli"
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
MODEL=${MODEL:-alexnet_cifar}
BATCH=${BATCH:-32}
MICRO=${MICRO:-4}
BLOCKS=${BLOCKS:-"2 3 4"}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-5}
SCHEDULES="gpipe 1f1b al"
for L in $BLOCKS; do
  python3 - "$OUT/cluster$L.json" "$L" <<'PY'
import json, sys
path, n = sys.argv[1], int(sys.argv[2])
json.dump({"name": f"{n} devices at speed 1/{n}",
           "devices": [{"name": f"dev{i}", "kind": "cpu", "threads": 1, "memory_mb": 4096, "speed": 1.0 / n} for i in range(n)],
           "default_link": {"bandwidth_mbps": 1000, "latency_ms": 0.2}}, open(path, "w"))
PY
  "$CLI" plan "$MODEL" --devices "$OUT/cluster$L.json" --planner time --batch "$BATCH" --micro-batches "$MICRO" \
    --out "$OUT/time$L.json" --json >"$OUT/plan$L.json" 2>"$OUT/plan$L.log"
  for s in gpipe 1f1b; do
    python3 - "$OUT/time$L.json" "$s" "$OUT/placement$L-$s.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1])); p["schedule"] = sys.argv[2]; json.dump(p, open(sys.argv[3], "w"))
PY
    "$CLI" plan "$MODEL" --devices "$OUT/cluster$L.json" --batch "$BATCH" --placement "$OUT/placement$L-$s.json" --json \
      >"$OUT/predicted$L-$s.json" 2>>"$OUT/plan$L.log"
  done
  cp "$OUT/placement$L-gpipe.json" "$OUT/placement$L-al.json"
  "$CLI" plan "$MODEL" --devices "$OUT/cluster$L.json" --batch "$BATCH" --placement "$OUT/placement$L-gpipe.json" \
    --schedule al --json >"$OUT/predicted$L-al.json" 2>>"$OUT/plan$L.log"
done
for r in $(seq 1 "$ROUNDS"); do
  for L in $BLOCKS; do
    for s in $SCHEDULES; do
      extra=(); [ "$s" = al ] && extra=(--schedule al)
      "$CLI" run "$MODEL" --devices "$OUT/cluster$L.json" --placement "$OUT/placement$L-$s.json" "${extra[@]}" \
        --batch "$BATCH" --steps "$STEPS" --json >"$OUT/run$L-$s-r$r.json" 2>"$OUT/run$L-$s-r$r.log"
    done
  done
done
python3 - "$OUT" "$ROUNDS" "$MODEL" "$BATCH" "$MICRO" $BLOCKS <<'PY'
import json, statistics, sys
out, rounds, model, batch, micro, blocks = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6:]
print(f"## {model}, batch {batch}, {micro} micro-batches, L stages (blocks) on L devices at speed 1/L; median of {rounds} interleaved rounds (results in {out})")
print()
print("| L | schedule | measured step ms (rounds) | predicted ms | predicted / measured | vs GPipe measured |")
print("|---|---|---|---|---|---|")
for L in blocks:
    gpipe = None
    for s in ["gpipe", "1f1b", "al"]:
        steps = [json.load(open(f"{out}/run{L}-{s}-r{r}.json"))["step_ms"] for r in range(1, rounds + 1)]
        m = statistics.median(steps)
        pred = json.load(open(f"{out}/predicted{L}-{s}.json"))
        p = (pred["al"] if s == "al" else pred)["report"]["step_ms"]
        if s == "gpipe": gpipe = m
        print(f"| {L} | {s} | {m:,.1f} ({', '.join(f'{x:,.0f}' for x in steps)}) | {p:,.1f} | {p / m:.2f} | {gpipe / m:.2f}x |")
PY
