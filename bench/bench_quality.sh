#!/usr/bin/env bash
# bench/bench_quality.sh — TAPP search quality (placer engineer). Not a test.
#
# Part A (simulate): for alexnet, vgg16, inception_v3 at ImageNet sizes (batch
# 32) on the example clusters, `tapp-cli optimize --json` with default options;
# prints the policy's best (no warm start; its choices include data
# parallelism), after local refinement, the best classical planner (BSP
# included; HOGWILD is asynchronous and left out; random search and annealing
# get TAPP's budget, policy + refinement), the DP planner, the exhaustive
# optimum where it was feasible, BSP, the job's result, whether the policy's
# plan is a pipeline or data parallel, and the time the policy took to come
# within 5% of its own final best.
# Part B (measured, in kind with the paper's table): the same models at a small
# input size on examples/cluster_4equal.json (emulated devices): SingleCPU,
# Pipe-Torch (= the DP planner), BSP and TAPP measured by `tapp-cli run`, in
# ROUNDS (default 3) interleaved rounds.
#
# Usage: bench/bench_quality.sh [BUILD_DIR] [a|b|ab]   (default: build, ab; env SEED=1 for part A, ROUNDS=3 BATCH=16 BSPECS=... for part B)
set -euo pipefail
BUILD=${1:-build}
PARTS=${2:-ab}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CLI="$ROOT/$BUILD/bin/tapp-cli"
[ -x "$CLI" ] || CLI="$BUILD/bin/tapp-cli"
OUT=${TAPP_BENCH_OUT:-$(mktemp -d)}
mkdir -p "$OUT"
MODELS=${MODELS:-"alexnet vgg16 inception_v3"}
CLUSTERS=${CLUSTERS:-"cluster_4equal cluster_4hetero cluster_device_server cluster_8equal"}
SEED=${SEED:-1}

if [[ $PARTS == *a* ]]; then
  echo "## Part A: simulate, ImageNet sizes, batch 32, seed $SEED (results in $OUT)"
  echo
  echo "| model | cluster | TAPP policy ms | policy's plan | +refine ms | best classical planner ms | policy vs it | +refine vs it | DP ms | exhaustive ms | TAPP vs exhaustive | BSP ms | TAPP vs BSP | job result (source) | to 5% of final (s) | search (s) |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
  for m in $MODELS; do
    for c in $CLUSTERS; do
      f="$OUT/$m-$c.json"
      "$CLI" optimize "$m" --devices "$ROOT/examples/$c.json" --seed "$SEED" --json >"$f" 2>"$OUT/$m-$c.log" || { echo "| $m | $c | failed: $(tail -1 "$OUT/$m-$c.log") |"; continue; }
      python3 - "$f" "$m" "$c" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); m, c = sys.argv[2], sys.argv[3]
p = r["policy"]; tapp = p["step_ms"]; refined = p.get("refined_step_ms")
rows = {b["name"]: b for b in r["baselines"]}
ok = {n: b["step_ms"] for n, b in rows.items() if b.get("ok")}
classical = {n: v for n, v in ok.items() if n != "hogwild"}
best_name = min(classical, key=classical.get) if classical else None
pl = p.get("placement") or {}
n = len(pl.get('groups', []))
plan = f"{n} replica{'s' if n != 1 else ''}" if pl.get("data_parallel") else f"{n} stage{'s' if n != 1 else ''} x {pl.get('micro_batches', '?')}"
def f(x): return "-" if x is None else f"{x:,.0f}"
def pct(a, b): return "-" if a is None or b is None else f"{100 * (a / b - 1):+.1f}%"
ex = ok.get("exhaustive")
print(f"| {m} | {c} | {f(tapp)} | {plan} | {f(refined)} | {best_name} {f(ok.get(best_name))} | {pct(tapp, ok.get(best_name))} | "
      f"{pct(refined, ok.get(best_name))} | {f(ok.get('dp'))} | "
      f"{f(ex) if ex else 'infeasible'} | {pct(tapp, ex)} | {f(ok.get('bsp'))} | {pct(tapp, ok.get('bsp'))} | "
      f"{f(r['step_ms'])} ({r['source']}) | "
      f"{p['time_to_within_5pct_s']:.1f} | {p['elapsed_s']:.1f} |")
PY
    done
  done
  echo
fi

if [[ $PARTS == *b* ]]; then
  CL="$ROOT/examples/cluster_4equal.json"
  BATCH=${BATCH:-16}
  ROUNDS=${ROUNDS:-3}
  echo "## Part B: measured on the emulated 4-device cluster (batch $BATCH, small inputs): each run the median of 3 steps, then the median of $ROUNDS interleaved rounds"
  echo
  echo "| model (input) | SingleCPU ms | Pipe-Torch (DP) ms | BSP ms | TAPP ms | TAPP vs BSP | TAPP vs DP | TAPP's plan, predicted ms | per round: single / DP / BSP / TAPP |"
  echo "|---|---|---|---|---|---|---|---|---|"
  BSPECS=${BSPECS:-"alexnet:64 vgg16:64 inception_v3:150"}
  for spec in $BSPECS; do
    m=${spec%%:*}; s=${spec##*:}
    f="$OUT/b-$m.json"
    "$CLI" optimize "$m" --devices "$CL" --input-size "$s" --batch "$BATCH" --seed 1 --json >"$f" 2>"$OUT/b-$m.log"
    plan=$(python3 - "$f" "$OUT/b-$m" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); base = sys.argv[2]
p = r["policy"]["placement"]
json.dump(p, open(base + "-tapp.json", "w"))
dp = [b for b in r["baselines"] if b["name"] == "dp" and b.get("placement")]
json.dump(dp[0]["placement"], open(base + "-dp.json", "w"))
n = len(p["groups"])
kind = f"{n} replicas" if p.get("data_parallel") else f"{n} stage{'s' if n != 1 else ''} x {p['micro_batches']}"
print(f"{kind}, {r['policy']['step_ms']:,.0f}")
PY
)
    run() { { "$CLI" run "$m" --devices "$CL" --input-size "$s" --batch "$BATCH" --steps 3 --warmup 1 --json "$@" 2>>"$OUT/b-$m.log" || true; } |
            python3 -c "
import json, sys
try:
    r = json.load(sys.stdin); print(r['step_ms'] if r.get('ok') else 'nan')
except Exception:
    print('nan')"; }
    # Interleaved rounds: on a shared VM the same plan drifts by tens of percent
    # within minutes, so each configuration is measured once per round, in turn.
    rounds=()
    for ((k = 0; k < ROUNDS; k++)); do
      rounds+=("$(run --strategy single),$(run --placement "$OUT/b-$m-dp.json"),$(run --strategy bsp),$(run --placement "$OUT/b-$m-tapp.json")")
    done
    python3 - "$m" "$s" "$plan" "${rounds[@]}" <<'PY'
import statistics, sys
m, s, plan, rounds = sys.argv[1], sys.argv[2], sys.argv[3], [list(map(float, r.split(","))) for r in sys.argv[4:]]
med = [statistics.median([r[k] for r in rounds if r[k] == r[k]] or [float("nan")]) for k in range(4)]
single, dp, bsp, tapp = med
f = lambda x: "failed" if x != x else f"{x:,.0f}"
r = lambda a, b: "-" if a != a or b != b else f"{a / b:.2f}x"
per = "; ".join(" / ".join(f(x) for x in rr) for rr in rounds)
print(f"| {m} ({s}) | {f(single)} | {f(dp)} | {f(bsp)} | {f(tapp)} | {r(bsp, tapp)} | {r(dp, tapp)} | {plan} | {per} |")
PY
  done
fi
