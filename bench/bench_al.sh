#!/usr/bin/env bash
# bench/bench_al.sh — Associated Learning against backpropagation: test accuracy on real data
# (issue 20, item 4). Not a test.
#
# Data: scikit-learn's digits (1,797 8x8 images of handwritten digits, 10 classes), the CSV that
# ships in Debian's python3-sklearn. Where that package is not installed, its .deb is downloaded
# with `apt-get download` and unpacked here (nothing is installed). For every block count in
# BLOCKS, bench_al_accuracy trains the same CNN from the same weights by BP and by AL (Adam, same
# batches and steps) for each seed, and prints a table of held-out accuracy.
#
# Usage: bench/bench_al.sh [BUILD_DIR]   (env: SEEDS="1 2 3" BLOCKS="2 3 4" EPOCHS=20 LR=0.003 OUT=dir)
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
  "$BIN" --data "$OUT/digits.csv" --seeds $SEEDS --blocks "$b" --epochs "$EPOCHS" --lr "$LR" >"$OUT/blocks$b.jsonl"
done
python3 - "$OUT" $BLOCKS <<'PY'
import json, statistics, sys
out, blocks = sys.argv[1], sys.argv[2:]
print("| AL blocks | cuts (layer index) | BP test accuracy, per seed | AL test accuracy, per seed | AL - BP (mean) | AL / BP train time |")
print("|---|---|---|---|---|---|")
for b in blocks:
    rows = [json.loads(l) for l in open(f"{out}/blocks{b}.jsonl")]
    bp = [r["bp_test_accuracy"] for r in rows]; al = [r["al_test_accuracy"] for r in rows]
    fmt = lambda xs: " / ".join(f"{100 * x:.1f}%" for x in xs)
    ratio = sum(r["al_train_s"] for r in rows) / sum(r["bp_train_s"] for r in rows)
    print(f"| {b} | {rows[0]['cuts']} | {fmt(bp)} | {fmt(al)} | {100 * (statistics.mean(al) - statistics.mean(bp)):+.1f} pts | {ratio:.2f}x |")
PY
