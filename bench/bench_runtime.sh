#!/usr/bin/env bash
# Benchmark (not a test): TAPP's pipelined runtime vs a single LibTorch process
# and vs PyTorch's torch.distributed.pipeline.sync.Pipe, in one run.
#
# alexnet_cifar (zoo), batch 64, two local cpu devices with one thread each,
# split before conv4 (examples/placement_alexnet_cifar_2stage.json), CHUNKS
# micro-batches. Prints a markdown table of median step times.
#   bench/bench_runtime.sh [BUILD_DIR] (env: STEPS=5 WARMUP=2 CHUNKS=8 SCHEDULE=gpipe ROUNDS=3)
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$here/build}"
cli="$build/bin/tapp-cli"
steps="${STEPS:-5}"
warmup="${WARMUP:-2}"
chunks="${CHUNKS:-8}"
schedule="${SCHEDULE:-gpipe}"
rounds="${ROUNDS:-3}"
batch=64
py=/usr/bin/python3
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

[ -x "$cli" ] || { echo "build tapp-cli and tapp-worker first ($cli missing)" >&2; exit 1; }
tcmalloc="$(ls /usr/lib/*/libtcmalloc_minimal.so.4 2>/dev/null | head -1)"
[ -n "$tcmalloc" ] || { echo "libtcmalloc_minimal.so.4 not found (apt-get install libgoogle-perftools-dev)" >&2; exit 1; }

cat > "$tmp/one_cpu_two_threads.json" <<JSON
{"devices": [{"name": "cpu", "threads": 2, "memory_mb": 8192}]}
JSON
cat > "$tmp/one_cpu_one_thread.json" <<JSON
{"devices": [{"name": "cpu", "threads": 1, "memory_mb": 8192}]}
JSON
with_chunks() {  # a placement file with CHUNKS micro-batches and SCHEDULE
  $py - "$1" "$chunks" "$schedule" <<'PY'
import json, sys
p = json.load(open(sys.argv[1])); p["micro_batches"] = int(sys.argv[2]); p["schedule"] = sys.argv[3]
print(json.dumps(p))
PY
}
with_chunks "$here/examples/placement_alexnet_cifar_2stage.json" > "$tmp/placement.json"
with_chunks "$here/examples/placement_alexnet_cifar_noncontiguous.json" > "$tmp/placement_nc.json"

# OpenMP threads that spin while waiting collapse when another process holds a
# core (a 2-thread LibTorch step went from ~570 ms to ~1300 ms on this shared
# machine): every configuration runs with passive waiting unless the caller set it.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
common=(--batch "$batch" --steps "$steps" --warmup "$warmup" --json)
echo "machine: $(nproc) cores; $(date -u +%FT%TZ); load average: $(cut -d' ' -f1-3 /proc/loadavg); OMP_WAIT_POLICY=$OMP_WAIT_POLICY" >&2
# The configurations run interleaved, ROUNDS times, so that load from other
# processes on a shared machine falls on all of them alike.
for round in $(seq 1 "$rounds"); do
  "$cli" run alexnet_cifar --devices "$here/examples/cluster_2cpu.json" --placement "$tmp/placement.json" "${common[@]}" > "$tmp/tapp.$round.json"
  "$cli" run alexnet_cifar --devices "$here/examples/cluster_2cpu.json" --placement "$tmp/placement_nc.json" "${common[@]}" > "$tmp/tappnc.$round.json"
  "$cli" run alexnet_cifar --devices "$tmp/one_cpu_two_threads.json" --strategy single "${common[@]}" > "$tmp/single.$round.json"
  "$cli" run alexnet_cifar --devices "$tmp/one_cpu_one_thread.json" --strategy single "${common[@]}" > "$tmp/single1.$round.json"
  $py "$here/bench/pipe_peer.py" --batch "$batch" --chunks "$chunks" --threads 1 --steps "$steps" --warmup "$warmup" 2>/dev/null > "$tmp/pipe1.$round.json"
  $py "$here/bench/pipe_peer.py" --batch "$batch" --chunks "$chunks" --threads 2 --steps "$steps" --warmup "$warmup" 2>/dev/null > "$tmp/pipe2.$round.json"
  # The peers again with the allocator TAPP's binaries link (tcmalloc), so that the comparison stays fair.
  LD_PRELOAD="$tcmalloc" $py "$here/bench/pipe_peer.py" --batch "$batch" --chunks "$chunks" --threads 1 --steps "$steps" --warmup "$warmup" 2>/dev/null > "$tmp/pipe1tc.$round.json"
  LD_PRELOAD="$tcmalloc" $py "$here/bench/pipe_peer.py" --batch "$batch" --chunks "$chunks" --threads 2 --steps "$steps" --warmup "$warmup" 2>/dev/null > "$tmp/pipe2tc.$round.json"
  $py "$here/bench/pipe_peer.py" --plain --batch "$batch" --threads 2 --steps "$steps" --warmup "$warmup" 2>/dev/null > "$tmp/plain2.$round.json"
  LD_PRELOAD="$tcmalloc" $py "$here/bench/pipe_peer.py" --plain --batch "$batch" --threads 2 --steps "$steps" --warmup "$warmup" 2>/dev/null > "$tmp/plain2tc.$round.json"
  echo "round $round done; load average: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
done

$py - "$tmp" "$batch" "$chunks" "$schedule" "$rounds" <<'PY'
import json, sys, os, statistics
tmp, batch, chunks, schedule, rounds = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
load = lambda n, r: json.load(open(os.path.join(tmp, f"{n}.{r}.json")))
names = {
    "tapp": f"TAPP runtime: 2 worker processes x 1 thread, {chunks} micro-batches, {schedule}",
    "tappnc": f"TAPP runtime, non-contiguous (not Pipe's split): cpu0 conv1-relu3 + fc7-fc8, cpu1 conv4-drop7, {chunks} micro-batches, {schedule}",
    "single": "single LibTorch process, 2 threads (tapp-cli run --strategy single)",
    "single1": "single LibTorch process, 1 thread",
    "pipe1": f"torch Pipe, {chunks} chunks, 1 process, set_num_threads(1) + OpenBLAS 1 thread",
    "pipe2": f"torch Pipe, {chunks} chunks, 1 process, set_num_threads(2) + OpenBLAS 2 threads",
    "pipe1tc": f"torch Pipe, {chunks} chunks, 1 thread, with tcmalloc (LD_PRELOAD)",
    "pipe2tc": f"torch Pipe, {chunks} chunks, 2 threads, with tcmalloc (LD_PRELOAD)",
    "plain2": "PyTorch single process (nn.Sequential, no Pipe), 2 threads, glibc malloc",
    "plain2tc": "PyTorch single process (nn.Sequential, no Pipe), 2 threads, with tcmalloc (LD_PRELOAD)",
}
runs = {k: [load(k, r) for r in range(1, rounds + 1)] for k in names}
med = {k: statistics.median(x["step_ms"] for x in v) for k, v in runs.items()}
best = {k: min(x["step_ms"] for x in v) for k, v in runs.items()}
t, tb = med["tapp"], best["tapp"]
print(f"alexnet_cifar, batch {batch}, split before conv4; each run's median step, then the median and the best "
      f"of {rounds} interleaved rounds (on a shared machine, the best round is the least disturbed)")
print()
print("| configuration | step ms, median round | TAPP throughput / this | step ms, best round | TAPP throughput / this | per-round step ms |")
print("| --- | ---: | ---: | ---: | ---: | --- |")
for k, name in names.items():
    per = " ".join(f"{x['step_ms']:.0f}" for x in runs[k])
    print(f"| {name} | {med[k]:.1f} | {med[k] / t:.2f}x | {best[k]:.1f} | {best[k] / tb:.2f}x | {per} |")
print()
tapp = sorted(runs["tapp"], key=lambda x: x["step_ms"])[len(runs["tapp"]) // 2]
for d in tapp["devices"]:
    print(f"TAPP (median round) {d['device']}: busy {d['busy_ms']:.1f} ms, comm {d['comm_ms']:.1f} ms, "
          f"idle {d['idle_ms']:.1f} ms, peak RSS {d['peak_memory_bytes'] / 2**20:.0f} MiB")
print(f"TAPP comm fraction {tapp['comm_fraction']:.3f}")
for w in tapp.get("warnings", []):
    print("note:", w)
PY
