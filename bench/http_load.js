#!/usr/bin/env node
// A bounded HTTP load client for bench_http.sh: C keep-alive connections send
// GET <path> back to back for D seconds (after a 1 s warm-up) and report
// requests/s and latency percentiles. Only for 127.0.0.1 servers.
// usage: node http_load.js --url http://127.0.0.1:PORT/placements/ID [--connections 8] [--seconds 10]
'use strict';
const http = require('http');

function arg(name, fallback) {
  const i = process.argv.indexOf(name);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : fallback;
}
const url = new URL(arg('--url', 'http://127.0.0.1:8080/healthz'));
if (url.hostname !== '127.0.0.1' && url.hostname !== 'localhost') {
  console.error('http_load: only 127.0.0.1 targets');
  process.exit(2);
}
const connections = parseInt(arg('--connections', '8'), 10);
const seconds = parseFloat(arg('--seconds', '10'));
const warmup = parseFloat(arg('--warmup', '1'));
const token = process.env.TAPP_TOKEN || '';

const agent = new http.Agent({keepAlive: true, maxSockets: connections});
const latencies = [];
let errors = 0, non200 = 0, measuring = false, stop = false;
const t0 = process.hrtime.bigint();

function one() {
  if (stop) return;
  const start = process.hrtime.bigint();
  const req = http.request({host: url.hostname, port: url.port, path: url.pathname + url.search, agent,
                            headers: token ? {Authorization: 'Bearer ' + token} : {}}, (res) => {
    res.on('data', () => {});
    res.on('end', () => {
      if (measuring) {
        latencies.push(Number(process.hrtime.bigint() - start) / 1e6);
        if (res.statusCode !== 200) non200++;
      }
      one();
    });
  });
  req.on('error', () => { errors++; setTimeout(one, 10); });
  req.end();
}

for (let i = 0; i < connections; i++) one();
setTimeout(() => {
  measuring = true;
  const m0 = process.hrtime.bigint();
  setTimeout(() => {
    stop = true;
    measuring = false;
    const elapsed = Number(process.hrtime.bigint() - m0) / 1e9;
    latencies.sort((a, b) => a - b);
    const pct = (p) => latencies.length ? latencies[Math.min(latencies.length - 1, Math.floor(p * latencies.length))] : NaN;
    const out = {
      url: url.href, connections, seconds: +elapsed.toFixed(2), requests: latencies.length,
      requests_per_s: Math.round(latencies.length / elapsed),
      p50_ms: +pct(0.5).toFixed(3), p90_ms: +pct(0.9).toFixed(3), p99_ms: +pct(0.99).toFixed(3),
      max_ms: +(latencies[latencies.length - 1] || NaN).toFixed(3), non_200: non200, errors,
    };
    console.log(JSON.stringify(out));
    agent.destroy();
    process.exit(0);
  }, seconds * 1000);
}, warmup * 1000);
