#!/usr/bin/env bash
# TAPP where the devices are far apart in memory (issue 15, item 5: proposals
# that do not fit, the layers the measurer moves to make them fit). Not a test.
#
#   bash bench/bench_memory_tight.sh CLI OUTDIR
#
# env: MODELS (default "gpt2_medium gpt2 bert_base vgg16 vit_b_16"), CLUSTERS
# (examples/cluster_<NAME>.json; default "edge_uplinks pipelearn edge_server
# fast_and_slow"), SEEDS (search seeds, default "1 2 3"). Writes one
# `optimize --json` result per run under OUTDIR/s<SEED>/ (bench/optimize_grid.sh),
# then prints bench/random_clusters_report.py's
# summary: the plans against the best classical planner and the policy's
# evaluations that failed or had layers moved to fit. Compare two builds with
# `bench/random_clusters_report.py OUTDIR_A OUTDIR_B`.
# shellcheck disable=SC2086
set -euo pipefail
[ $# -eq 2 ] || { sed -n 2,14p "$0" >&2; exit 2; }
CLI=$1
OUT=$2
HERE=$(cd "$(dirname "$0")" && pwd)
MODELS=${MODELS-"gpt2_medium gpt2 bert_base vgg16 vit_b_16"}
CLUSTERS=${CLUSTERS:-"edge_uplinks pipelearn edge_server fast_and_slow"}
SEEDS=${SEEDS:-"1 2 3"}
for c in $CLUSTERS; do
  [ -f "$HERE/../examples/cluster_$c.json" ] || { echo "no examples/cluster_$c.json" >&2; exit 2; }
done
# shellcheck source=bench/optimize_grid.sh
. "$HERE/optimize_grid.sh"
# shellcheck disable=SC2046
optimize_grid "$CLI" "$OUT" "$SEEDS" "$MODELS" $(for c in $CLUSTERS; do echo "$HERE/../examples/cluster_$c.json"; done)
python3 "$HERE/random_clusters_report.py" "$OUT"
