#!/usr/bin/env bash
# bench/sim_accuracy.sh — how well the simulator predicts the runtime on this machine.
#
# For a CIFAR-size alexnet, a CIFAR-size VGG (vgg5) and a model with branches
# (tiny_inception), on 2 and 3 local devices: profile the model (fresh, in a
# private cache), measure SAMPLES random placements with the runtime
# (`tapp-cli calibrate`: median of STEPS timed steps after WARMUP), fit the
# simulator's calibration and report the leave-one-out median
# |predicted - measured| / measured and Spearman's rank correlation, per case
# and over all cases. Emulated devices: speeds sum below the physical cores.
# With HYBRID=1 (default), each model also gets a "_3dev_hybrid" case on the
# 3-device cluster: half of its contiguous placements have replicated stages
# (gradients all-reduced between replicas) and a quarter are layer runs on
# random devices (branches on different devices for tiny_inception).
#
# Usage: bench/sim_accuracy.sh [BUILD_DIR]
#   env: SAMPLES=20 BATCH=32 STEPS=5 WARMUP=2 SEED=1 MODELS="..." HYBRID=1 OUT=BUILD_DIR/sim_accuracy
#   Measurements are kept in OUT/samples_*.json and reused on the next run
#   (refits only); REMEASURE=1 measures again.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-${BUILD:-build}}
CLI="$BUILD/bin/tapp-cli"
SAMPLES=${SAMPLES:-20}
BATCH=${BATCH:-32}
STEPS=${STEPS:-5}
WARMUP=${WARMUP:-2}
SEED=${SEED:-1}  # which random placements
MODELS=${MODELS:-"alexnet_cifar vgg5 tiny_inception"}
OUT=${OUT:-$BUILD/sim_accuracy}
mkdir -p "$OUT"
export XDG_CACHE_HOME="$OUT/cache"  # profiles measured now, on this machine's current load

cat > "$OUT/cluster_2.json" <<'JSON'
{"name": "2 local devices (speeds 1, 0.5)",
 "devices": [{"name": "a", "kind": "cpu", "threads": 1, "memory_mb": 4096, "speed": 1.0},
             {"name": "b", "kind": "cpu", "threads": 1, "memory_mb": 4096, "speed": 0.5}],
 "default_link": {"bandwidth_mbps": 1000, "latency_ms": 0.2}}
JSON
cat > "$OUT/cluster_3.json" <<'JSON'
{"name": "3 local devices (speeds 0.8, 0.6, 0.4)",
 "devices": [{"name": "a", "kind": "cpu", "threads": 1, "memory_mb": 4096, "speed": 0.8},
             {"name": "b", "kind": "cpu", "threads": 1, "memory_mb": 4096, "speed": 0.6},
             {"name": "c", "kind": "cpu", "threads": 1, "memory_mb": 4096, "speed": 0.4}],
 "links": [{"from": "a", "to": "b", "bandwidth_mbps": 500, "latency_ms": 0.5},
           {"from": "b", "to": "a", "bandwidth_mbps": 2000, "latency_ms": 0.1}],
 "default_link": {"bandwidth_mbps": 1000, "latency_ms": 0.2}}
JSON

CASES="2 3"
[[ ${HYBRID:-1} == 1 ]] && CASES="$CASES 3_hybrid"
for model in $MODELS; do
  for n in $CASES; do
    case="${model}_${n/_/dev_}"
    [[ $n == *_* ]] || case="${case}dev"
    samples="$OUT/samples_$case.json"
    if [[ -s "$samples" && -z "${REMEASURE:-}" ]]; then load=(--load "$samples"); else load=(--save "$samples"); fi
    mix=()
    [[ $n == *_hybrid ]] && mix=(--replicated 0.5)
    "$CLI" calibrate "$model" --devices "$OUT/cluster_${n%_hybrid}.json" --samples "$SAMPLES" --batch "$BATCH" \
      --steps "$STEPS" --warmup "$WARMUP" --seed "$SEED" --costs profile --no-store "${mix[@]}" "${load[@]}" --json \
      > "$OUT/accuracy_$case.json"
    echo "measured $case" >&2
  done
done

# Summary: per case and pooled (leave-one-out predictions against measurements).
node - "$OUT" <<'JS'
const fs = require('fs'), path = require('path');
const dir = process.argv[2];
const files = fs.readdirSync(dir).filter(f => f.startsWith('accuracy_') && f.endsWith('.json')).sort();
const ranks = v => { const idx = v.map((x, i) => [x, i]).sort((a, b) => a[0] - b[0]); const r = new Array(v.length);
  for (let i = 0; i < idx.length;) { let j = i; while (j + 1 < idx.length && idx[j + 1][0] === idx[i][0]) j++;
    for (let k = i; k <= j; k++) r[idx[k][1]] = (i + j) / 2 + 1; i = j + 1; } return r; };
const spearman = (a, b) => { const ra = ranks(a), rb = ranks(b), n = a.length, ma = (n + 1) / 2;
  let s = 0, sa = 0, sb = 0; for (let i = 0; i < n; i++) { s += (ra[i] - ma) * (rb[i] - ma); sa += (ra[i] - ma) ** 2; sb += (rb[i] - ma) ** 2; }
  return s / Math.sqrt(sa * sb); };
const median = v => { const s = [...v].sort((a, b) => a - b), n = s.length; return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2; };
const pct = x => (100 * x).toFixed(1) + '%';
let allP = [], allM = [], allU = [];
console.log('| case | placements | median error (uncalibrated) | median error (calibrated, leave-one-out) | Spearman (leave-one-out) |');
console.log('| --- | ---: | ---: | ---: | ---: |');
for (const f of files) {
  const j = JSON.parse(fs.readFileSync(path.join(dir, f)));
  const m = j.placements.map(p => p.measured_ms), p = j.placements.map(p => p.predicted_leave_one_out_ms),
        u = j.placements.map(p => p.predicted_uncalibrated_ms);
  allP.push(...p); allM.push(...m); allU.push(...u);
  console.log(`| ${f.slice(9, -5)} | ${m.length} | ${pct(j.uncalibrated.median_abs_rel_error)} | ${pct(j.calibrated_leave_one_out.median_abs_rel_error)} | ${j.calibrated_leave_one_out.spearman.toFixed(3)} |`);
}
const err = (p, m) => median(p.map((x, i) => Math.abs(x - m[i]) / m[i]));
console.log(`| all | ${allM.length} | ${pct(err(allU, allM))} | ${pct(err(allP, allM))} | ${spearman(allP, allM).toFixed(3)} |`);
JS
