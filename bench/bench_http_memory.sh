#!/usr/bin/env bash
# Resident memory of tapp-server before and after a burst of large requests (a benchmark, not a test).
#
# Starts build/bin/tapp-server (port 0, fresh database, fake jobs so that only
# the HTTP side is measured: issue 19's "bounded memory"), sends a few small
# requests and records the idle RSS; then sends ROUNDS rounds of the largest
# bodies the server reads, C at a time: 7.9 MiB JSON arrays of numbers (refused
# after parsing), 7.9 MiB objects of long strings, 10,000-layer inline graphs
# (accepted as jobs), and 6 MiB TorchScript uploads in base64 (accepted; the
# bytes go to SQLite). Prints the RSS (VmRSS) after each round, and after the
# burst once the server has been idle 2 s, with the ratio to the idle level.
# usage: bench/bench_http_memory.sh [build-dir] [rounds] [concurrency]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
ROUNDS=${2:-3}
CONC=${3:-8}
DIR=$(mktemp -d)
trap 'kill $SERVER_PID 2>/dev/null || true; wait $SERVER_PID 2>/dev/null || true; rm -rf "$DIR"' EXIT

# Jobs are the test-only fake job (tests/service/fake_job.h) run by tapp-test-job.
TAPP_FAKE_ITERATION_MS=1 "$BUILD/bin/tapp-server" --host 127.0.0.1 --port 0 --db "$DIR/jobs.db" \
  --job-program "$BUILD/bin/tapp-test-job" --queue-size 100000 > "$DIR/server.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 100); do grep -qs 'listening on' "$DIR/server.log" && break; sleep 0.1; done
PORT=$(grep -o '127.0.0.1:[0-9]*' "$DIR/server.log" | head -1 | cut -d: -f2)
echo "server: 127.0.0.1:$PORT (pid $SERVER_PID)"

python3 - "$PORT" "$SERVER_PID" "$ROUNDS" "$CONC" <<'PY'
import base64, json, os, sys, time, http.client
from concurrent.futures import ThreadPoolExecutor
port, pid, rounds, conc = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])

def rss_mib():
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
def post(body):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        c.request("POST", "/placements", body=body, headers={"Content-Type": "application/json"})
        r = c.getresponse(); r.read(); c.close()
        return r.status
    except OSError as e:
        return type(e).__name__

cluster = {"devices": [{"name": "a", "memory_mb": 1 << 20}]}
small = json.dumps({"model": "mlp", "cluster": cluster, "options": {"iterations": 1}})
for _ in range(5): post(small)
time.sleep(1)
idle = rss_mib()
print(f"idle RSS after 5 small jobs: {idle:.1f} MiB")

limit = 8 * 1024 * 1024 - 4096
numbers = "[" + ",".join(["1234567.125"] * (limit // 12)) + "]"
strings = json.dumps({"k%d" % i: "x" * 1000 for i in range(limit // 1020)})
layers = [{"name": "in", "op": "linear", "attrs": {"out": 16}}]
layers += [{"name": "l%d" % i, "op": "relu", "inputs": ["in" if i == 0 else "l%d" % (i - 1)]} for i in range(9998)]
layers += [{"name": "out", "op": "linear", "inputs": ["l9997"], "attrs": {"out": 10}}]
graph = json.dumps({"model": {"name": "deep", "input_shape": [16], "layers": layers}, "cluster": cluster})
upload = json.dumps({"model_file": {"name": "big.pt", "base64": base64.b64encode(os.urandom(6 * 1024 * 1024 - 1024)).decode()},
                     "cluster": cluster})
bodies = [numbers, strings, graph, upload] * conc
sizes = ", ".join(f"{len(b) / 1048576:.1f}" for b in [numbers, strings, graph, upload])
print(f"burst: {rounds} rounds of {len(bodies)} bodies ({sizes} MiB), {conc} at a time")
statuses = {}
peak = idle
for r in range(rounds):
    with ThreadPoolExecutor(conc) as ex:
        for s in ex.map(post, bodies):
            statuses[s] = statuses.get(s, 0) + 1
    peak = max(peak, rss_mib())
    print(f"  after round {r + 1}: {rss_mib():.1f} MiB")
time.sleep(2)
after = rss_mib()
print(f"statuses: {dict(sorted(statuses.items(), key=str))}")
print(f"RSS idle {idle:.1f} MiB, peak seen {peak:.1f} MiB, after the burst (2 s idle) {after:.1f} MiB = {after / idle:.2f}x idle")
PY
