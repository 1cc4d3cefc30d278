#!/usr/bin/env bash
# bench/bench_al.sh — Associated Learning against backpropagation: test accuracy on real data
# (issue 20, item 4). Not a test.
#
# Data: scikit-learn's digits (1,797 8x8 images of handwritten digits, 10 classes), the CSV that
# ships in Debian's python3-sklearn. Where that package is not installed, its .deb is downloaded
# with `apt-get download` and unpacked here (nothing is installed). For every block count in
# BLOCKS, bench_al_accuracy trains the same CNN from the same weights by BP and by AL (Adam, same
# batches and steps) for each seed, and prints a table of held-out accuracy. Then the same for
# the text classifiers (text_lstm, text_transformer) on sentences from bench/text_corpus.h's
# generator (no text corpus ships in a Debian package): TEXT_BLOCKS, TEXT_EPOCHS, TEXT_SAMPLES.
#
# Usage: bench/bench_al.sh [BUILD_DIR]   (env: SEEDS="1 2 3" BLOCKS="2 3 4" EPOCHS=20 LR=0.003 OUT=dir
#        TEXT_MODELS="text_lstm text_transformer" TEXT_BLOCKS="2 4" TEXT_EPOCHS=10 TEXT_SAMPLES=5000)
set -euo pipefail
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN="$ROOT/$BUILD/bin/bench_al_accuracy"
[ -x "$BIN" ] || BIN="$BUILD/bin/bench_al_accuracy"
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
SEEDS=${SEEDS:-"1 2 3"}
BLOCKS=${BLOCKS:-"2 3 4"}
EPOCHS=${EPOCHS:-20}
LR=${LR:-0.003}
GZ=/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz
if [ ! -f "$GZ" ]; then
  (cd "$OUT" && apt-get download python3-sklearn >/dev/null 2>&1 && dpkg-deb -x python3-sklearn_*.deb sk)
  GZ="$OUT/sk$GZ"
fi
zcat "$GZ" >"$OUT/digits.csv"
echo "## AL against BP on scikit-learn's digits ($(wc -l <"$OUT/digits.csv") images; 25% held out; $EPOCHS epochs, batch 32, Adam lr $LR; results in $OUT)"
echo
for b in $BLOCKS; do
  "$BIN" --data "$OUT/digits.csv" --seeds $SEEDS --blocks "$b" --epochs "$EPOCHS" --lr "$LR" >"$OUT/digits-blocks$b.jsonl"
done
TEXT_MODELS=${TEXT_MODELS-"text_lstm text_transformer"}
TEXT_BLOCKS=${TEXT_BLOCKS:-"2 4"}
TEXT_EPOCHS=${TEXT_EPOCHS:-10}
TEXT_SAMPLES=${TEXT_SAMPLES:-5000}
runs="digits:$(echo $BLOCKS | tr ' ' ,)"
for m in $TEXT_MODELS; do
  for b in $TEXT_BLOCKS; do
    "$BIN" --text "$m" --text-samples "$TEXT_SAMPLES" --seeds $SEEDS --blocks "$b" --epochs "$TEXT_EPOCHS" --lr "$LR" \
      >"$OUT/$m-blocks$b.jsonl"
  done
  runs="$runs $m:$(echo $TEXT_BLOCKS | tr ' ' ,)"
done
[ -n "$TEXT_MODELS" ] && echo "(text: $TEXT_SAMPLES generated sentences of 32 tokens, 4 classes, $TEXT_EPOCHS epochs)" && echo
python3 - "$OUT" $runs <<'PY'
import json, statistics, sys
out, runs = sys.argv[1], sys.argv[2:]
print("| data, model | AL blocks | cuts (layer index) | BP test accuracy, per seed | AL test accuracy, per seed | AL - BP (mean) | AL / BP train time |")
print("|---|---|---|---|---|---|---|")
for run in runs:
  name, blocks = run.split(":")
  for b in blocks.split(","):
    rows = [json.loads(l) for l in open(f"{out}/{name}-blocks{b}.jsonl")]
    bp = [r["bp_test_accuracy"] for r in rows]; al = [r["al_test_accuracy"] for r in rows]
    fmt = lambda xs: " / ".join(f"{100 * x:.1f}%" for x in xs)
    ratio = sum(r["al_train_s"] for r in rows) / sum(r["bp_train_s"] for r in rows)
    what = "digits, CNN" if name == "digits" else f"generated text, {name}"
    print(f"| {what} | {b} | {rows[0]['cuts']} | {fmt(bp)} | {fmt(al)} | {100 * (statistics.mean(al) - statistics.mean(bp)):+.1f} pts | {ratio:.2f}x |")
PY
