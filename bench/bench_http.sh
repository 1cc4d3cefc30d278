#!/usr/bin/env bash
# Status-polling throughput of tapp-server on 127.0.0.1 while a job runs (a benchmark, not a test).
#
# Starts build/bin/tapp-server (port 0, fresh database), submits a long
# placement job (placer's real optimize(), simulate evaluator, alexnet on the
# four-device cluster below), waits until it is optimizing, then polls
# GET /placements/{id} with bench/http_load.js (C keep-alive connections for
# S seconds) and checks the job was still running at the end; then cancels the
# job and reports how long the runner took to stop.
# usage: bench/bench_http.sh [build-dir] [connections] [seconds]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
CONNS=${2:-8}
SECS=${3:-10}
DIR=$(mktemp -d)
trap 'kill $SERVER_PID 2>/dev/null || true; wait $SERVER_PID 2>/dev/null || true; rm -rf "$DIR"' EXIT

"$BUILD/bin/tapp-server" --host 127.0.0.1 --port 0 --db "$DIR/jobs.db" --jobs 1 > "$DIR/server.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 100); do grep -qs 'listening on' "$DIR/server.log" && break; sleep 0.1; done
BASE=$(grep -o 'http://127.0.0.1:[0-9]*' "$DIR/server.log" | head -1)
echo "server: $BASE (pid $SERVER_PID)"

BODY='{"model": "alexnet", "cluster": {"devices": [{"name": "cpu0"}, {"name": "cpu1"}, {"name": "cpu2", "speed": 0.5}, {"name": "cpu3", "speed": 0.5}]}, "options": {"evaluator": "simulate", "iterations": 1000000, "time_budget_s": 120}}'
ID=$(curl -sf -X POST "$BASE/placements" -H 'Content-Type: application/json' -d "$BODY" | sed 's/.*"id":"\([^"]*\)".*/\1/')
echo "job: $ID"
for _ in $(seq 200); do
  curl -sf "$BASE/placements/$ID" | grep -q '"status":"optimizing"' && break
  sleep 0.1
done
echo "job status before: $(curl -sf "$BASE/placements/$ID" | grep -o '"status":"[a-z]*"')"
node bench/http_load.js --url "$BASE/placements/$ID" --connections "$CONNS" --seconds "$SECS"
echo "job status after:  $(curl -sf "$BASE/placements/$ID" | grep -o '"status":"[a-z]*"'), iteration $(curl -sf "$BASE/placements/$ID" | grep -o '"iteration":[0-9]*')"
# Cancel latency: DELETE answers with the job cancelled; the runner is free when /healthz shows 0 running.
python3 - "$BASE" "$ID" <<'PY'
import json, sys, time, urllib.request
base, job = sys.argv[1], sys.argv[2]
t0 = time.time()
urllib.request.urlopen(urllib.request.Request(base + "/placements/" + job, method="DELETE")).read()
t1 = time.time()
while json.load(urllib.request.urlopen(base + "/healthz"))["running"] > 0:
    time.sleep(0.005)
t2 = time.time()
print("cancel: DELETE answered in %.1f ms, runner free after %.1f ms" % ((t1 - t0) * 1e3, (t2 - t0) * 1e3))
PY
