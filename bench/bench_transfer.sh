#!/usr/bin/env bash
# bench/bench_transfer.sh — a policy trained once, placing models and clusters it never saw (issue 17). Not a test.
#
# 1. Trains one policy (tapp-cli train-policy, simulated, batch 32) on the
#    training split: TRAIN_MODELS (alexnet, vgg16, alexnet_cifar, vgg5, mlp,
#    bert_base, vit_b_16, text_transformer), RANDOM_MODELS random CNNs and
#    RANDOM_TRANSFORMERS random transformers (default 0: docs/transfer.md), on
#    cluster_4hetero, cluster_8equal, cluster_2cpu and RANDOM_CLUSTERS random
#    clusters: CLONING_EPOCHS of behaviour cloning, then TRAIN_ITERATIONS
#    iterations (seed TRAIN_SEED, default 1; HIDDEN units).
# 2. On the held-out split — resnet50, inception_v3, tiny_inception, a
#    TorchScript resnet18 saved by PyTorch (100 classes, 64x64), gpt2 and
#    gpt2_medium (transformers: op classes no training model has), on cluster_4equal,
#    cluster_fast_behind_slow_link and cluster_8x8gb — runs `tapp-cli optimize
#    --json --no-verify --costs estimated` with a fresh policy and with --policy,
#    seeds SEEDS, ITERATIONS policy iterations each.
# Prints per case the best classical planner (HOGWILD left out), the
# evaluations each start needed to come within 2% of it (its search trace:
# policy, then refinement; "-" = never), the pre-trained policy's zero-shot
# plan (its greedy decision before any fine-tuning) against it, and the final
# gaps; then medians over seeds and the ratio of evaluations, counted to the end and on
# each policy's own search (before its first restart imitates the classical plan); writes
# transfer.svg (median best-so-far against evaluations, both starts) to OUT.
# Compare by evaluations, not seconds: the counts do not depend on the machine's load.
# Every cost is the multiply-add estimate (--costs estimated, training too), so
# the figures do not depend on which profiles this host happens to have cached.
#
# Usage: bench/bench_transfer.sh [BUILD_DIR]   env: TRAIN_ITERATIONS=3000 RANDOM_MODELS=24 RANDOM_CLUSTERS=40 RANDOM_MESH_CLUSTERS=0
#   RANDOM_TRANSFORMERS=0 TRAIN_MODELS=... CLONING_EPOCHS=200 HIDDEN=64 TRAIN_SEED=1
#   ITERATIONS=200 SEEDS="1 2 3" MODELS=... CLUSTERS=... CLUSTER_DIR=dir POLICY=file (skip training) TAPP_BENCH_OUT=dir
set -euo pipefail
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CLI="$ROOT/$BUILD/bin/tapp-cli"
[ -x "$CLI" ] || CLI="$BUILD/bin/tapp-cli"
OUT=${TAPP_BENCH_OUT:-$(mktemp -d)}
mkdir -p "$OUT"
TRAIN_ITERATIONS=${TRAIN_ITERATIONS:-3000}
TRAIN_MODELS=${TRAIN_MODELS:-alexnet,vgg16,alexnet_cifar,vgg5,mlp,bert_base,vit_b_16,text_transformer}
CLONING_EPOCHS=${CLONING_EPOCHS:-200}
HIDDEN=${HIDDEN:-64}
TRAIN_SEED=${TRAIN_SEED:-1}  # the networks' and the random models' and clusters' seed
RANDOM_MODELS=${RANDOM_MODELS:-24}
RANDOM_CLUSTERS=${RANDOM_CLUSTERS:-40}  # 40 against 20: docs/transfer.md, 2026-11-28
RANDOM_MESH_CLUSTERS=${RANDOM_MESH_CLUSTERS:-0}  # every device pair its own link (training_set.h)
RANDOM_TRANSFORMERS=${RANDOM_TRANSFORMERS:-0}
ITERATIONS=${ITERATIONS:-200}
SEEDS=${SEEDS:-"1 2 3"}
MODELS=${MODELS:-"resnet50 inception_v3 tiny_inception resnet18_script gpt2 gpt2_medium"}
CLUSTERS=${CLUSTERS:-"cluster_4equal cluster_fast_behind_slow_link cluster_8x8gb"}
CLUSTER_DIR=${CLUSTER_DIR:-$ROOT/examples}  # where CLUSTERS' files are (bench/random_clusters.py writes others)
PYTHON=${TAPP_PYTHON:-/usr/bin/python3}

POLICY=${POLICY:-$OUT/policy.pt}
if [ ! -f "$POLICY" ]; then
  echo "== training on the training split ($TRAIN_ITERATIONS iterations) =="
  "$CLI" train-policy --models "$TRAIN_MODELS" --random-models "$RANDOM_MODELS" --random-transformers "$RANDOM_TRANSFORMERS" \
    --clusters "$ROOT/examples/cluster_4hetero.json,$ROOT/examples/cluster_8equal.json,$ROOT/examples/cluster_2cpu.json" \
    --random-clusters "$RANDOM_CLUSTERS" --random-mesh-clusters "$RANDOM_MESH_CLUSTERS" --iterations "$TRAIN_ITERATIONS" --cloning-epochs "$CLONING_EPOCHS" \
    --hidden "$HIDDEN" --seed "$TRAIN_SEED" --costs estimated --out "$POLICY" | tee "$OUT/train.txt"
fi

SCRIPT="$OUT/resnet18_script.pt"
if [[ " $MODELS " == *" resnet18_script "* && ! -f "$SCRIPT" ]]; then
  "$PYTHON" - "$SCRIPT" <<'PY'
import sys, torch, torchvision
m = torchvision.models.resnet18(num_classes=100).eval()
torch.jit.trace(m, torch.randn(1, 3, 64, 64)).save(sys.argv[1])
PY
fi

echo "== held-out split: $MODELS on $CLUSTERS, seeds $SEEDS, $ITERATIONS iterations =="
for m in $MODELS; do
  model=$m
  [ "$m" = resnet18_script ] && model=$SCRIPT
  for c in $CLUSTERS; do
    for s in $SEEDS; do
      for start in fresh trained; do
        f="$OUT/run_${m}_${c}_${s}_${start}.json"
        [ -s "$f" ] && continue
        extra=()
        [ "$start" = trained ] && extra=(--policy "$POLICY")
        "$CLI" optimize "$model" --devices "$CLUSTER_DIR/$c.json" --json --no-verify --costs estimated \
          --seed "$s" --iterations "$ITERATIONS" "${extra[@]}" >"$f.tmp" 2>"$OUT/err.txt" || { echo "failed: $m $c $s $start"; cat "$OUT/err.txt"; continue; }
        mv "$f.tmp" "$f"
      done
    done
    echo "  done: $m on $c"
  done
done
"$PYTHON" "$ROOT/bench/transfer_report.py" "$OUT" "$MODELS" "$CLUSTERS" "$SEEDS"
echo "results and plot in $OUT"
