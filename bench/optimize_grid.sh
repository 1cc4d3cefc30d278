# bench/optimize_grid.sh — sourced by the bench scripts that run `tapp-cli optimize` over a grid.
#
# optimize_grid CLI OUT "SEEDS" "MODELS" CLUSTER_FILE...
#   One `optimize --json` result per run (simulate, estimated costs, default
#   iterations, no verification: deterministic for a seed) as
#   OUT/s<SEED>/<model>_<cluster>.json, <model> the name without ".json" and
#   <cluster> the file's without "cluster_" and ".json"; resumable (a run with
#   a result is skipped), a failed run's stderr beside it (.err).
#   env BATCHES: batch sizes to run each at (--batch), the file names then
#   ending in _b<BATCH>; default: the default batch, names without it.
# shellcheck shell=bash disable=SC2086
optimize_grid() {
  local cli=$1 out=$2 seeds=$3 models=$4 seed cluster_file c m f b
  local batches=${BATCHES:--}  # "-": the default batch
  shift 4
  for seed in $seeds; do
    mkdir -p "$out/s$seed"
    for cluster_file in "$@"; do
      c=$(basename "$cluster_file" .json)
      c=${c#cluster_}
      for m in $models; do
        for b in $batches; do
          local batch_flag=() suffix=""
          [ "$b" = - ] || batch_flag=(--batch "$b") suffix=_b$b
          f="$out/s$seed/$(basename "$m" .json)_$c$suffix.json"
          [ -s "$f" ] && continue
          echo "seed $seed: $m on $c${suffix:+, batch $b}" >&2
          "$cli" optimize "$m" --devices "$cluster_file" "${batch_flag[@]}" --json --no-verify --costs estimated \
            --seed "$seed" > "$f.tmp" 2> "$f.err" || echo "  failed (exit $?): $f.err" >&2
          mv "$f.tmp" "$f"
        done
      done
    done
  done
}
