#!/usr/bin/env bash
# Benchmark (not a test): TAPP's pipelined runtime vs a single LibTorch process
# and vs PyTorch's torch.distributed.pipeline.sync.Pipe, in one run.
#
# alexnet_cifar (zoo), batch 64, two local cpu devices with one thread each,
# split before conv5 (examples/placement_alexnet_cifar_2stage.json), CHUNKS
# micro-batches. Prints a markdown table of median step times.
#   bench/bench_runtime.sh [BUILD_DIR] (env: STEPS=5 WARMUP=2 CHUNKS=4 SCHEDULE=gpipe)
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$here/build}"
cli="$build/bin/tapp-cli"
steps="${STEPS:-5}"
warmup="${WARMUP:-2}"
chunks="${CHUNKS:-4}"
schedule="${SCHEDULE:-gpipe}"
batch=64
py=/usr/bin/python3
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

[ -x "$cli" ] || { echo "build tapp-cli and tapp-worker first ($cli missing)" >&2; exit 1; }

cat > "$tmp/one_cpu_two_threads.json" <<JSON
{"devices": [{"name": "cpu", "threads": 2, "memory_mb": 8192}]}
JSON
$py - "$here/examples/placement_alexnet_cifar_2stage.json" "$chunks" "$schedule" > "$tmp/placement.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1])); p["micro_batches"] = int(sys.argv[2]); p["schedule"] = sys.argv[3]
print(json.dumps(p))
PY

common=(--batch "$batch" --steps "$steps" --warmup "$warmup" --json)
echo "machine: $(nproc) cores; $(date -u +%FT%TZ)" >&2
"$cli" run alexnet_cifar --devices "$here/examples/cluster_2cpu.json" --placement "$tmp/placement.json" "${common[@]}" > "$tmp/tapp.json"
"$cli" run alexnet_cifar --devices "$tmp/one_cpu_two_threads.json" --strategy single "${common[@]}" > "$tmp/single.json"
$py "$here/bench/pipe_peer.py" --batch "$batch" --chunks "$chunks" --threads 1 --steps "$steps" --warmup "$warmup" 2>/dev/null > "$tmp/pipe1.json"
$py "$here/bench/pipe_peer.py" --batch "$batch" --chunks "$chunks" --threads 2 --steps "$steps" --warmup "$warmup" 2>/dev/null > "$tmp/pipe2.json"

$py - "$tmp" "$batch" "$chunks" "$schedule" <<'PY'
import json, sys, os
tmp, batch, chunks, schedule = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
load = lambda n: json.load(open(os.path.join(tmp, n)))
tapp, single, pipe1, pipe2 = load("tapp.json"), load("single.json"), load("pipe1.json"), load("pipe2.json")
rows = [
    (f"TAPP runtime: 2 worker processes x 1 thread, {chunks} micro-batches, {schedule}", tapp["step_ms"]),
    ("single LibTorch process, 2 threads (tapp-cli run --strategy single)", single["step_ms"]),
    (f"torch Pipe, {chunks} chunks, 1 process, set_num_threads(1)", pipe1["step_ms"]),
    (f"torch Pipe, {chunks} chunks, 1 process, set_num_threads(2)", pipe2["step_ms"]),
]
t = tapp["step_ms"]
print(f"alexnet_cifar, batch {batch}, split before conv5")
print()
print("| configuration | step ms (median) | samples/s | TAPP speed-up vs this |")
print("| --- | ---: | ---: | ---: |")
for name, ms in rows:
    print(f"| {name} | {ms:.1f} | {batch * 1000 / ms:.1f} | {ms / t:.2f}x |")
print()
for d in tapp["devices"]:
    print(f"TAPP {d['device']}: busy {d['busy_ms']:.1f} ms, comm {d['comm_ms']:.1f} ms, idle {d['idle_ms']:.1f} ms, "
          f"peak RSS {d['peak_memory_bytes'] / 2**20:.0f} MiB")
print(f"TAPP comm fraction {tapp['comm_fraction']:.3f}; samples {[round(s, 1) for s in tapp['step_samples_ms']]}")
for w in tapp.get("warnings", []):
    print("note:", w)
PY
