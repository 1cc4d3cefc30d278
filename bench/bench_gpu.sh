#!/usr/bin/env bash
# bench/bench_gpu.sh — TAPP on a GPU (a CUDA build, scripts/build_gpu.sh). Not a test.
#
# For alexnet, vgg16 and resnet50 at 224x224: the per-layer profile on cuda:0
# (`tapp-cli profile --device cuda:0 --json --no-cache`) and its whole training
# step (forward + loss + backward, synchronized), against PyTorch's own eager
# step of torchvision's model on the same GPU, batch and data shape
# (bench/gpu_step_peer.py), in ROUNDS interleaved rounds; prints the medians,
# their ratio and the profile's self-check (sum of per-layer times / step).
# Writes each round's library JSON to $TAPP_BENCH_OUT when set.
#
# Usage: bench/bench_gpu.sh [BUILD_DIR]   (env: MODELS="alexnet vgg16 resnet50" BATCH=32 ROUNDS=3)
set -euo pipefail
BUILD=${1:-build-gpu}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CLI="$ROOT/$BUILD/bin/tapp-cli"
[ -x "$CLI" ] || CLI="$BUILD/bin/tapp-cli"
MODELS=${MODELS:-alexnet vgg16 resnet50}
BATCH=${BATCH:-32}
ROUNDS=${ROUNDS:-3}
PY=${TAPP_PYTHON:-python3}
OUT=${TAPP_BENCH_OUT:-$(mktemp -d)}
mkdir -p "$OUT"
"$PY" -c 'import torch; assert torch.cuda.is_available(), "no GPU"; print("GPU:", torch.cuda.get_device_name(0), "| torch", torch.__version__)'
for r in $(seq "$ROUNDS"); do
  for m in $MODELS; do
    "$CLI" profile "$m" --device cuda:0 --batch "$BATCH" --json --no-cache >"$OUT/$m.tapp.$r.json"
    "$PY" "$ROOT/bench/gpu_step_peer.py" "$m" --batch "$BATCH" >"$OUT/$m.peer.$r.json"
  done
done
"$PY" - "$OUT" "$ROUNDS" $MODELS <<'PY'
import json, statistics, sys
out, rounds, models = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
print(f"{'model':10} {'TAPP step ms':>13} {'PyTorch ms':>11} {'TAPP/PyTorch':>13} {'sum/step':>9}  params TAPP / torchvision")
for m in models:
    libs = [json.load(open(f"{out}/{m}.tapp.{r}.json")) for r in range(1, rounds + 1)]
    peers = [json.load(open(f"{out}/{m}.peer.{r}.json")) for r in range(1, rounds + 1)]
    ours = statistics.median(l["whole_step_ms"] for l in libs)
    theirs = statistics.median(p["step_ms"] for p in peers)
    ratio = statistics.median(l["whole_step_ms"] / p["step_ms"] for l, p in zip(libs, peers))
    check = statistics.median(l["sum_to_step_ratio"] for l in libs)
    params = sum(row.get("params", 0) for row in libs[0]["rows"])
    print(f"{m:10} {ours:13.2f} {theirs:11.2f} {ratio:13.3f} {check:9.3f}  {params:,} / {peers[0]['params']:,}"
          f"  ({libs[0].get('device_name', '?')})")
PY
