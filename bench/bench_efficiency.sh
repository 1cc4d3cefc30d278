#!/usr/bin/env bash
# bench/bench_efficiency.sh — the runtime against its own bound. Not a test.
#
# For alexnet_cifar and vgg5, 2- and 4-stage pipelines (balance-by-time split
# over 2 or 4 equal one-thread local devices, M micro-batches), `tapp-cli run`
# measures the step and reports the pipeline efficiency = ideal step (the
# largest stage's compute x (M + S - 1) / M, from the same run's per-task
# timeline) / measured step (core/pipeline_efficiency.h). Each case runs
# ROUNDS times, interleaved; the median efficiency is printed.
# Four one-thread devices on a 2-core machine share cores: the 4-stage figures
# measure contention too, and the script says how many cores it had.
#
# Usage: bench/bench_efficiency.sh [BUILD_DIR]   (env: ROUNDS=3 BATCH=32 M=4 STEPS=10)
set -euo pipefail
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CLI="$ROOT/$BUILD/bin/tapp-cli"
[ -x "$CLI" ] || CLI="$BUILD/bin/tapp-cli"
ROUNDS=${ROUNDS:-3}
BATCH=${BATCH:-32}
M=${M:-4}
STEPS=${STEPS:-10}
OUT=$(mktemp -d)
for n in 2 4; do
  python3 - "$n" >"$OUT/cluster$n.json" <<'PY'
import json, sys
n = int(sys.argv[1])
print(json.dumps({"name": f"{n} equal one-thread devices",
                  "devices": [{"name": f"cpu{i}", "threads": 1, "memory_mb": 4096} for i in range(n)]}))
PY
done
echo "cores: $(nproc); batch $BATCH, $M micro-batches, median of $STEPS steps per run, $ROUNDS interleaved rounds"
for model in alexnet_cifar vgg5; do
  for n in 2 4; do
    "$CLI" plan "$model" --devices "$OUT/cluster$n.json" --planner time --batch "$BATCH" --micro-batches "$M" \
      --out "$OUT/$model-$n.json" >/dev/null
  done
done
for r in $(seq 1 "$ROUNDS"); do
  for model in alexnet_cifar vgg5; do
    for n in 2 4; do
      "$CLI" run "$model" --devices "$OUT/cluster$n.json" --placement "$OUT/$model-$n.json" --batch "$BATCH" \
        --steps "$STEPS" --json >"$OUT/run-$model-$n-$r.json"
    done
  done
done
echo
echo "| model | stages | efficiency (median) | per round | ideal ms | measured ms |"
echo "|---|---|---|---|---|---|"
for model in alexnet_cifar vgg5; do
  for n in 2 4; do
    python3 - "$OUT" "$model" "$n" "$ROUNDS" <<'PY'
import json, statistics, sys
out, model, n, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
runs = [json.load(open(f"{out}/run-{model}-{n}-{r}.json")) for r in range(1, rounds + 1)]
eff = [r["pipeline_efficiency"] for r in runs if "pipeline_efficiency" in r]
if not eff:
    print(f"| {model} | {n} | failed | | | |")
    sys.exit()
med = sorted(eff, key=lambda e: e["efficiency"])[len(eff) // 2]
per = " / ".join(f"{e['efficiency']:.3f}" for e in eff)
print(f"| {model} | {med['stages']} | {med['efficiency']:.3f} | {per} | {med['ideal_step_ms']:.1f} | "
      f"{med['ideal_step_ms'] / med['efficiency']:.1f} |")
PY
  done
done
