#!/usr/bin/env bash
# bench/bench_efficiency.sh — the runtime against its own bound. Not a test.
#
# For alexnet_cifar and vgg5, 2- and 4-stage pipelines (balance-by-time split
# over 2 or 4 equal one-thread local devices, M micro-batches), `tapp-cli run`
# measures the step and reports the pipeline efficiency = ideal step (the
# largest stage's compute x (M + S - 1) / M, from the same run's per-task
# timeline) / measured step (core/pipeline_efficiency.h). Each case runs
# ROUNDS times, interleaved; the median efficiency is printed.
# Each device runs at speed min(1, cores / stages), so that the emulated cluster
# needs no more cores than the host has (the runtime's own rule for a faithful
# emulation: the sum of speed x threads of local devices <= cores); on 2 cores
# the 4-stage cluster is 4 devices at speed 0.5. SPEED=1 forces full-speed
# devices (4 on 2 cores then share them: that figure measures contention too).
# The last two columns replay the median round's step in GPipe's order from its
# own task durations with no communication and no waiting (the placements here
# are GPipe's): the efficiency this schedule could reach with these tasks.
#
# Usage: bench/bench_efficiency.sh [BUILD_DIR]   (env: ROUNDS=3 BATCH=32 M=4 STEPS=10 SPEED=auto)
set -euo pipefail
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CLI="$ROOT/$BUILD/bin/tapp-cli"
[ -x "$CLI" ] || CLI="$BUILD/bin/tapp-cli"
ROUNDS=${ROUNDS:-3}
BATCH=${BATCH:-32}
M=${M:-4}
STEPS=${STEPS:-10}
SPEED=${SPEED:-auto}
OUT=$(mktemp -d)
for n in 2 4; do
  python3 - "$n" "$(nproc)" "$SPEED" >"$OUT/cluster$n.json" <<'PY'
import json, sys
n, cores, speed = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
speed = min(1.0, cores / n) if speed == "auto" else float(speed)
print(json.dumps({"name": f"{n} equal one-thread devices at speed {speed:g}",
                  "devices": [{"name": f"cpu{i}", "threads": 1, "memory_mb": 4096, "speed": speed}
                              for i in range(n)]}))
PY
done
echo "cores: $(nproc); batch $BATCH, $M micro-batches, median of $STEPS steps per run, $ROUNDS interleaved rounds"
for n in 2 4; do python3 -c "import json,sys; print(sys.argv[1] + ' stages: ' + json.load(open(sys.argv[2]))['name'])" "$n" "$OUT/cluster$n.json"; done
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
        --steps "$STEPS" --json --timeline >"$OUT/run-$model-$n-$r.json"
    done
  done
done
echo
echo "| model | stages | efficiency (median) | per round | ideal ms | measured ms | GPipe replay ms | its efficiency |"
echo "|---|---|---|---|---|---|---|---|"
for model in alexnet_cifar vgg5; do
  for n in 2 4; do
    python3 - "$OUT" "$model" "$n" "$ROUNDS" <<'PY'
import json, statistics, sys
out, model, n, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
runs = [json.load(open(f"{out}/run-{model}-{n}-{r}.json")) for r in range(1, rounds + 1)]
eff = [r["pipeline_efficiency"] for r in runs if "pipeline_efficiency" in r]
if not eff:
    print(f"| {model} | {n} | failed | | | | | |")
    sys.exit()
order = sorted(range(len(eff)), key=lambda i: eff[i]["efficiency"])
mid = order[len(order) // 2]
med = eff[mid]

def gpipe_replay(run):
    """The median round's step replayed in GPipe's order from its own task
    durations, with no communication and no waiting: what this schedule could
    do with these tasks (the bound charges neither the links nor the wake-ups)."""
    dur = {}
    for e in run.get("timeline", []):
        k = e["task"].split()
        if k[0] in ("F", "B"):
            dur[(k[0], int(k[1][1:]), int(k[2][1:]))] = e["end_ms"] - e["start_ms"]
    if not dur:
        return None
    S = 1 + max(s for _, s, _ in dur)
    M = 1 + max(m for _, _, m in dur)
    end, free = {}, [0.0] * S
    for m in range(M):
        for s in range(S):
            end[("F", s, m)] = max(free[s], end.get(("F", s - 1, m), 0.0)) + dur[("F", s, m)]
            free[s] = end[("F", s, m)]
    for m in range(M):
        for s in reversed(range(S)):
            dep = end[("F", S - 1, m)] if s == S - 1 else end[("B", s + 1, m)]
            end[("B", s, m)] = max(free[s], dep) + dur[("B", s, m)]
            free[s] = end[("B", s, m)]
    return max(free)

replay = gpipe_replay(runs[mid])
per = " / ".join(f"{e['efficiency']:.3f}" for e in eff)
print(f"| {model} | {med['stages']} | {med['efficiency']:.3f} | {per} | {med['ideal_step_ms']:.1f} | "
      f"{med['ideal_step_ms'] / med['efficiency']:.1f} | {replay:.1f} | {med['ideal_step_ms'] / replay:.3f} |")
PY
  done
done
