#!/usr/bin/env bash
# Benchmark (not a test): the memory rule's predicted peak per device against
# the peak each worker measured, for several placements run with `tapp-cli run`.
#
# Measured: the peak of the bytes held by CPU tensors in the worker, counted by
# its counting allocator (runtime/tensor_memory.h): parameters, gradients,
# optimizer state, saved activations, received buffers and the temporaries of
# the op running at that moment. Predicted: core's estimate_device_memory
# (`tapp-cli run --json` prints both). The goal: within 15% on every device.
# The rule does not count the step's input batch (the data loader's; each
# worker draws it), so the model's input is kept narrow (INPUT floats a sample).
# A small GPT-2 (the zoo's, TLAYERS blocks of TWIDTH, TTOKENS tokens, a TVOCAB vocabulary; batch
# TBATCH) adds the transformer's own terms: attention's saved scores and probabilities, the tied
# lm_head's copy of the token table on a device without the embedding, per-token logits.
#   bench/bench_memory.sh [BUILD_DIR]   (env: BATCH=512 INPUT=256 WIDTH=1024 STEPS=2 WARMUP=1
#                                         TBATCH=16 TTOKENS=128 TWIDTH=256 TLAYERS=4 TVOCAB=8192)
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$here/build}"
cli="$build/bin/tapp-cli"
batch="${BATCH:-512}"
width="${WIDTH:-1024}"
input="${INPUT:-256}"
steps="${STEPS:-2}"
warmup="${WARMUP:-1}"
py=/usr/bin/python3
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
[ -x "$cli" ] || { echo "build tapp-cli and tapp-worker first ($cli missing)" >&2; exit 1; }

# An MLP whose activations and parameters are both a large share of the peak.
cat > "$tmp/mlp.json" <<JSON
{"name": "mlp_memory", "input_shape": [$input], "layers": [
  {"name": "fc0", "op": "linear", "inputs": [], "attrs": {"out": $width}},
  {"name": "relu0", "op": "relu", "inputs": ["fc0"]},
  {"name": "fc1", "op": "linear", "inputs": ["relu0"], "attrs": {"out": $width}},
  {"name": "relu1", "op": "relu", "inputs": ["fc1"]},
  {"name": "fc2", "op": "linear", "inputs": ["relu1"], "attrs": {"out": $width}},
  {"name": "relu2", "op": "relu", "inputs": ["fc2"]},
  {"name": "fc3", "op": "linear", "inputs": ["relu2"], "attrs": {"out": 10}}]}
JSON
cat > "$tmp/cluster.json" <<JSON
{"devices": [{"name": "cpu0", "threads": 1, "memory_mb": 4096},
             {"name": "cpu1", "threads": 1, "memory_mb": 4096},
             {"name": "cpu2", "threads": 1, "memory_mb": 4096}],
 "default_link": {"bandwidth_mbps": 100000, "latency_ms": 0.01}}
JSON
two='"layers": {"fc0": 0, "relu0": 0, "fc1": 0, "relu1": 0, "fc2": 1, "relu2": 1, "fc3": 1}'
one='"layers": {"fc0": 0, "relu0": 0, "fc1": 0, "relu1": 0, "fc2": 0, "relu2": 0, "fc3": 0}'
"$cli" export-model gpt2 --layers "${TLAYERS:-4}" --width "${TWIDTH:-256}" --heads 4 --vocab "${TVOCAB:-8192}" \
  --input-size "${TTOKENS:-128}" --out "$tmp/gpt2.json" >/dev/null
# Its layers split in half: the embedding on cpu0, the blocks' second half and the tied head on cpu1.
gpt2_two=$($py -c '
import json, sys
names = [l["name"] for l in json.load(open(sys.argv[1]))["layers"]]
print(json.dumps({"layers": {n: int(i >= len(names) // 2) for i, n in enumerate(names)}})[1:-1])' "$tmp/gpt2.json")
gpt2_one=$($py -c '
import json, sys
print(json.dumps({"layers": {l["name"]: 0 for l in json.load(open(sys.argv[1]))["layers"]}})[1:-1])' "$tmp/gpt2.json")
declare -A placements=(
  [1_single_sgd]="{\"micro_batches\": 1, \"groups\": [\"cpu0\"], $one}"
  [2_gpipe8_sgd]="{\"micro_batches\": 8, \"schedule\": \"gpipe\", \"groups\": [\"cpu0\", \"cpu1\"], $two}"
  [3_1f1b8_adam]="{\"micro_batches\": 8, \"schedule\": \"1f1b\", \"optimizer\": \"adam\", \"groups\": [\"cpu0\", \"cpu1\"], $two}"
  [4_gpipe8_recompute0]="{\"micro_batches\": 8, \"schedule\": \"gpipe\", \"recompute\": [0], \"groups\": [\"cpu0\", \"cpu1\"], $two}"
  [5_gpipe8_replicated]="{\"micro_batches\": 8, \"schedule\": \"gpipe\", \"groups\": [[\"cpu0\", \"cpu2\"], \"cpu1\"], $two}"
  [6_gpt2_single_sgd]="{\"micro_batches\": 1, \"groups\": [\"cpu0\"], $gpt2_one}"
  [7_gpt2_gpipe4_sgd]="{\"micro_batches\": 4, \"schedule\": \"gpipe\", \"groups\": [\"cpu0\", \"cpu1\"], $gpt2_two}"
  [8_gpt2_1f1b4_adam]="{\"micro_batches\": 4, \"schedule\": \"1f1b\", \"optimizer\": \"adam\", \"groups\": [\"cpu0\", \"cpu1\"], $gpt2_two}"
)
echo "| placement | device | predicted MiB (params / grads / optimizer / activations / buffers) | measured tensor peak MiB | error | peak RSS MiB |"
echo "| --- | --- | --- | --- | --- | --- |"
worst=0
for name in $(printf '%s\n' "${!placements[@]}" | sort); do
  echo "${placements[$name]}" > "$tmp/$name.json"
  model="$tmp/mlp.json" model_batch="$batch"
  [[ $name == *gpt2* ]] && model="$tmp/gpt2.json" model_batch="${TBATCH:-16}"
  "$cli" run "$model" --devices "$tmp/cluster.json" --placement "$tmp/$name.json" --batch "$model_batch" \
    --steps "$steps" --warmup "$warmup" --json > "$tmp/$name.out"
  worst=$($py - "$tmp/$name.out" "$name" "$worst" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); name = sys.argv[2]; worst = float(sys.argv[3])
mib = lambda b: b / 1048576
for d, p in zip(r["devices"], r["predicted_memory"]):
    b = p["bytes"]
    measured = d.get("peak_tensor_bytes", 0)
    err = (b["total"] - measured) / measured if measured else float("nan")
    worst = max(worst, abs(err))
    parts = " / ".join(f"{mib(b[k]):.1f}" for k in ("params", "grads", "optimizer_state", "activations", "buffers"))
    print(f"| {name} ({r['optimizer']}) | {d['device']} | {mib(b['total']):.1f} ({parts}) | {mib(measured):.1f} | "
          f"{100 * err:+.1f}% | {mib(d['peak_memory_bytes']):.0f} |", file=sys.stderr)
print(worst)
PY
  )
done 2>&1
echo
echo "worst |predicted - measured| / measured: $($py -c "print(f'{100 * $worst:.1f}%')")"
