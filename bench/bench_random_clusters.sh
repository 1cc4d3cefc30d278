#!/usr/bin/env bash
# TAPP against the classical planners on random clusters it was never tuned on.
#
#   bash bench/bench_random_clusters.sh CLI OUTDIR
#
# env: MODELS (zoo names or model files; default "alexnet vgg16 resnet50"; may be ""),
# RANDOM_MODELS (seeds of bench/random_models.py, written under OUTDIR/models/
# and run after MODELS; default none), CLUSTERS (cluster seeds, default
# 101-108), FORM (rand: links drawn per direction; lan: one fast network,
# bench/random_clusters.py --lan), SEEDS (search seeds, default "1 2 3"), BATCHES
# (batch sizes, default the default batch; bench/optimize_grid.sh). Writes one
# `optimize --json` result per run (simulate, estimated costs, default
# iterations, no verification: deterministic for a seed) under OUTDIR/s<SEED>/
# and the clusters under OUTDIR/clusters/, then prints the summary of
# bench/random_clusters_report.py. Compare two builds with
# `bench/random_clusters_report.py OUTDIR_A OUTDIR_B`.
set -euo pipefail
if [ $# -ne 2 ]; then sed -n 2,16p "$0"; exit 2; fi
CLI=$1 OUT=$2
HERE=$(cd "$(dirname "$0")" && pwd)
MODELS=${MODELS-alexnet vgg16 resnet50}
CLUSTERS=${CLUSTERS:-101 102 103 104 105 106 107 108}
SEEDS=${SEEDS:-1 2 3}
FORM=${FORM:-rand}
case $FORM in rand) form_flag=() ;; lan) form_flag=(--lan) ;; *) echo "FORM is rand or lan, not '$FORM'" >&2; exit 2 ;; esac
# shellcheck disable=SC2086
CLUSTER_FILES=$(python3 "$HERE/random_clusters.py" "${form_flag[@]}" "$OUT/clusters" $CLUSTERS)
if [ -n "${RANDOM_MODELS:-}" ]; then
  # shellcheck disable=SC2086
  MODELS="$MODELS $(python3 "$HERE/random_models.py" "$OUT/models" $RANDOM_MODELS | tr '\n' ' ')"
fi
# shellcheck source=bench/optimize_grid.sh
. "$HERE/optimize_grid.sh"
# shellcheck disable=SC2086
optimize_grid "$CLI" "$OUT" "$SEEDS" "$MODELS" $CLUSTER_FILES
python3 "$HERE/random_clusters_report.py" "$OUT"
