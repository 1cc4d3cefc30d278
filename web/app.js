// web/app.js — the TAPP job page: a job list, a submit form, and a live job view.
//
// Talks only to the tapp-server that served it (same origin, no third-party
// assets). Routes: #/ (list + form) and #/jobs/<id> (one job, polled once a
// second while it runs). Charts are hand-drawn SVG: the best-step-time and
// reward curve from /placements/<id>/events, the placement (layers coloured by
// device) and the pipeline Gantt chart from the result's timeline.
// With a token-protected server the page asks for the token once and keeps it
// in localStorage.
'use strict';

const SVG_NS = 'http://www.w3.org/2000/svg';
const PALETTE = ['#2f6fde', '#e67e22', '#1e8e4e', '#8e44ad', '#c0392b', '#16a085', '#d4ac0d', '#7f8c8d',
                 '#2c3e50', '#e84393', '#6ab04c', '#0984e3'];
const EXAMPLE_CLUSTER = {
  name: 'four-cpus',
  devices: [
    {name: 'cpu0', kind: 'cpu', threads: 1, memory_mb: 4096, speed: 1.0},
    {name: 'cpu1', kind: 'cpu', threads: 1, memory_mb: 4096, speed: 1.0},
    {name: 'cpu2', kind: 'cpu', threads: 1, memory_mb: 4096, speed: 0.5},
    {name: 'cpu3', kind: 'cpu', threads: 1, memory_mb: 4096, speed: 0.5},
  ],
  default_link: {bandwidth_mbps: 1000, latency_ms: 0.1},
};

const state = {token: localStorage.getItem('tapp-token') || '', timer: null, jobId: null, events: [], lastSeq: 0,
               drawnResultFor: null};

// ---- HTTP -------------------------------------------------------------------

async function api(path, options = {}) {
  const headers = Object.assign({}, options.headers || {});
  if (state.token) headers['Authorization'] = 'Bearer ' + state.token;
  const res = await fetch(path, Object.assign({}, options, {headers}));
  if (res.status === 401) {
    await askToken();
    return api(path, options);
  }
  let body = null;
  try { body = await res.json(); } catch (e) { body = null; }
  return {status: res.status, ok: res.ok, body};
}

// One dialog for all the requests that got 401 at once: they all wait for the same answer.
let pendingToken = null;
function askToken() {
  if (pendingToken) return pendingToken;
  pendingToken = new Promise((resolve) => {
    const dialog = document.getElementById('token-dialog');
    const form = document.getElementById('token-form');
    const input = document.getElementById('token-input');
    form.onsubmit = () => {
      state.token = input.value.trim();
      localStorage.setItem('tapp-token', state.token);
      pendingToken = null;
      resolve();
    };
    if (!dialog.open) dialog.showModal();
  });
  return pendingToken;
}

// ---- small helpers ----------------------------------------------------------

function el(tag, attrs = {}, text) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

function svg(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }

function fmt(x, digits = 2) {
  return (typeof x === 'number' && isFinite(x)) ? x.toFixed(digits) : '–';
}

function niceTicks(lo, hi, count) {
  if (!(hi > lo)) { hi = lo + 1; }
  const raw = (hi - lo) / count;
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw) || raw;
  const ticks = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + 1e-9; t += step) ticks.push(t);
  return ticks;
}

// ---- list view --------------------------------------------------------------

async function loadModels() {
  const select = document.getElementById('model-select');
  if (select.options.length) return;
  const r = await api('/models');
  const names = (r.ok && r.body && r.body.models) || ['alexnet', 'vgg16', 'resnet50', 'inception_v3', 'mlp'];
  for (const n of names) select.appendChild(el('option', {value: n}, n));
  select.value = names.includes('alexnet_cifar') ? 'alexnet_cifar' : names[0];
}

async function refreshList() {
  const filter = document.getElementById('status-filter').value;
  const r = await api('/placements?limit=50' + (filter ? '&status=' + encodeURIComponent(filter) : ''));
  if (!r.ok) return;
  document.getElementById('jobs-total').textContent = r.body.total + ' in all';
  const tbody = document.querySelector('#jobs-table tbody');
  clear(tbody);
  for (const job of r.body.jobs) {
    const tr = el('tr', {'data-id': job.id});
    const idCell = el('td');
    idCell.appendChild(el('a', {href: '#/jobs/' + job.id}, job.id));
    tr.appendChild(idCell);
    tr.appendChild(el('td', {}, job.model));
    const st = el('td');
    st.appendChild(el('span', {class: 'badge ' + job.status}, job.status));
    tr.appendChild(st);
    const p = job.progress || {};
    tr.appendChild(el('td', {}, p.total_iterations ? p.iteration + ' / ' + p.total_iterations : (p.iteration || '–')));
    tr.appendChild(el('td', {}, fmt(p.best_step_ms)));
    tr.appendChild(el('td', {}, (job.created_at || '').replace('T', ' ').replace('Z', '')));
    tbody.appendChild(tr);
  }
}

async function refreshHealth() {
  const r = await api('/healthz');
  if (r.ok) {
    document.getElementById('health').textContent =
        `${r.body.running} running · ${r.body.queued} queued · ${r.body.free_cores}/${r.body.total_cores} cores free`;
  }
}

async function submitJob(ev) {
  ev.preventDefault();
  const errorBox = document.getElementById('submit-error');
  errorBox.textContent = '';
  document.querySelectorAll('.field-error').forEach((n) => n.classList.remove('field-error'));
  let cluster;
  const clusterInput = document.getElementById('cluster-input');
  try {
    cluster = JSON.parse(clusterInput.value);
  } catch (e) {
    clusterInput.classList.add('field-error');
    errorBox.textContent = 'cluster: not valid JSON (' + e.message + ')';
    return;
  }
  const options = {
    evaluator: document.getElementById('evaluator-select').value,
    iterations: parseInt(document.getElementById('iterations-input').value || '0', 10),
    time_budget_s: parseFloat(document.getElementById('budget-input').value || '0'),
    seed: parseInt(document.getElementById('seed-input').value || '1', 10),
    batch_size: parseInt(document.getElementById('batch-input').value || '32', 10),
    baselines: document.getElementById('baselines-input').checked,
    verify: document.getElementById('verify-input').checked,
    allow_al: document.getElementById('allow-al-input').checked,
  };
  const body = {model: document.getElementById('model-select').value, cluster, options};
  const button = document.getElementById('submit-button');
  button.disabled = true;
  try {
    const r = await api('/placements', {method: 'POST', headers: {'Content-Type': 'application/json'},
                                        body: JSON.stringify(body)});
    if (r.status === 202) {
      location.hash = '#/jobs/' + r.body.id;
    } else {
      const b = r.body || {};
      const msg = b.error || ('HTTP ' + r.status);
      errorBox.textContent = (b.field && !msg.startsWith(b.field) ? b.field + ': ' : '') + msg;
      const field = String(b.field || '');
      const target = field.startsWith('cluster') ? clusterInput
          : field.startsWith('options.iterations') ? document.getElementById('iterations-input')
          : field.startsWith('options.time_budget') ? document.getElementById('budget-input')
          : field.startsWith('options.batch') ? document.getElementById('batch-input')
          : field.startsWith('options.seed') ? document.getElementById('seed-input')
          : field.startsWith('model') ? document.getElementById('model-select') : null;
      if (target) target.classList.add('field-error');
    }
  } finally {
    button.disabled = false;
  }
}

// ---- job view ---------------------------------------------------------------

async function refreshJob() {
  const id = state.jobId;
  const r = await api('/placements/' + encodeURIComponent(id));
  if (id !== state.jobId) return;
  if (!r.ok) {
    document.getElementById('job-error').textContent = (r.body && r.body.error) || ('HTTP ' + r.status);
    return;
  }
  const job = r.body;
  const status = document.getElementById('job-status');
  status.textContent = job.status;
  status.className = 'badge ' + job.status;
  status.setAttribute('data-status', job.status);
  renderSummary(job);
  document.getElementById('job-error').textContent = job.error || '';
  document.getElementById('cancel-button').hidden = !['queued', 'profiling', 'optimizing'].includes(job.status);

  const ev = await api(`/placements/${encodeURIComponent(id)}/events?after=${state.lastSeq}`);
  if (id !== state.jobId) return;
  if (ev.ok && ev.body.events.length) {
    if (ev.body.events[0].seq < state.lastSeq) state.events = [];
    state.events.push(...ev.body.events);
    state.lastSeq = ev.body.events[ev.body.events.length - 1].seq;
  }
  drawCurve(state.events);
  if (job.status === 'succeeded' && job.result && state.drawnResultFor !== id) {
    state.drawnResultFor = id;
    drawPlacement(job.result);
    drawVerification(job.result);
    drawGantt(job.result);
    drawBaselines(job.result);
  }
  if (['succeeded', 'failed', 'cancelled'].includes(job.status) && state.timer) {
    clearInterval(state.timer);
    state.timer = null;
  }
}

function renderSummary(job) {
  const p = job.progress || {};
  const box = document.getElementById('job-summary');
  clear(box);
  const items = [
    ['model', job.model], ['phase', p.phase || '–'],
    // While profiling: which device kind, micro-batch size and layer; running the baselines: which
    // planner (placer's ProgressEvent.message).
    ...(p.message ? [['progress', p.message]] : []),
    ['iteration', p.total_iterations ? `${p.iteration} / ${p.total_iterations}` : (p.iteration || '–')],
    ['best step (ms)', fmt(p.best_step_ms)], ['elapsed (s)', fmt(job.elapsed_s, 1)],
  ];
  if (job.result) {
    const best = job.result.best || job.result;
    items.push(['source', best.source || placementOf(job.result).source || '–']);
    items.push(['step (ms)', fmt(best.step_ms, 3)]);
    items.push(['speedup vs BSP', fmt(job.result.speedup_vs_bsp) + '×']);
  }
  if (job.restarts) items.push(['restarts', job.restarts]);
  for (const [k, v] of items) {
    const d = el('div');
    d.appendChild(el('span', {}, k));
    d.appendChild(el('b', {}, String(v)));
    box.appendChild(d);
  }
  let frac = 0;
  if (job.status === 'succeeded') frac = 1;
  else if (p.total_iterations) frac = Math.min(1, p.iteration / p.total_iterations);
  else if (typeof p.phase_fraction === 'number') frac = Math.min(1, p.phase_fraction);
  document.getElementById('job-progress-bar').style.width = (100 * frac).toFixed(1) + '%';
}

function drawCurve(events) {
  const root = document.getElementById('curve');
  clear(root);
  const W = 640, H = 260, L = 56, R = 50, T = 26, B = 34;
  const pts = events.filter((e) => typeof e.iteration === 'number' && e.iteration > 0);
  const best = pts.filter((e) => typeof e.best_step_ms === 'number' && e.best_step_ms > 0);
  const reward = pts.filter((e) => e.phase === 'optimizing' && typeof e.reward === 'number' && isFinite(e.reward));
  root.appendChild(svg('line', {class: 'axis', x1: L, y1: H - B, x2: W - R, y2: H - B}));
  root.appendChild(svg('line', {class: 'axis', x1: L, y1: T, x2: L, y2: H - B}));
  if (!best.length) {
    root.appendChild(svg('text', {x: W / 2, y: H / 2, 'text-anchor': 'middle'}, 'waiting for the first evaluation…'));
    return;
  }
  const maxIt = Math.max(...pts.map((e) => e.iteration));
  const yLo = Math.min(...best.map((e) => e.best_step_ms)), yHi = Math.max(...best.map((e) => e.best_step_ms));
  const pad = (yHi - yLo) * 0.08 || yHi * 0.05 || 1;
  const y0 = Math.max(0, yLo - pad), y1 = yHi + pad;
  const sx = (it) => L + (W - L - R) * (maxIt > 1 ? (it - 1) / (maxIt - 1) : 0.5);
  const sy = (v) => H - B - (H - T - B) * (v - y0) / (y1 - y0);
  for (const t of niceTicks(y0, y1, 5)) {
    root.appendChild(svg('line', {class: 'grid', x1: L, x2: W - R, y1: sy(t), y2: sy(t)}));
    root.appendChild(svg('text', {x: L - 6, y: sy(t) + 4, 'text-anchor': 'end'}, String(+t.toFixed(3))));
  }
  for (const t of niceTicks(1, Math.max(2, maxIt), 6)) {
    if (t < 1 || t > maxIt) continue;
    root.appendChild(svg('text', {x: sx(t), y: H - B + 16, 'text-anchor': 'middle'}, String(Math.round(t))));
  }
  root.appendChild(svg('text', {x: (L + W - R) / 2, y: H - 4, 'text-anchor': 'middle'}, 'iteration'));
  root.appendChild(svg('text', {x: L - 6, y: 12, 'text-anchor': 'end'}, 'ms'));
  if (reward.length > 1) {
    const rLo = Math.min(...reward.map((e) => e.reward)), rHi = Math.max(...reward.map((e) => e.reward));
    const rs = (v) => H - B - (H - T - B) * (rHi > rLo ? (v - rLo) / (rHi - rLo) : 0.5);
    const d = reward.map((e, i) => (i ? 'L' : 'M') + sx(e.iteration).toFixed(1) + ',' + rs(e.reward).toFixed(1)).join(' ');
    root.appendChild(svg('path', {class: 'reward', d}));
    root.appendChild(svg('text', {x: W - R + 4, y: 12}, 'reward'));
    root.appendChild(svg('text', {x: W - R + 4, y: rs(rHi) + 4}, fmt(rHi)));
    root.appendChild(svg('text', {x: W - R + 4, y: rs(rLo) + 4}, fmt(rLo)));
  }
  const d = best.map((e, i) => (i ? 'L' : 'M') + sx(e.iteration).toFixed(1) + ',' + sy(e.best_step_ms).toFixed(1)).join(' ');
  root.appendChild(svg('path', {class: 'best', d}));
  const last = best[best.length - 1];
  root.appendChild(svg('circle', {cx: sx(last.iteration), cy: sy(last.best_step_ms), r: 3.5, fill: '#2f6fde'}));
  root.appendChild(svg('text', {x: L + 8, y: 12, fill: '#2f6fde'}, 'best step time: ' + fmt(last.best_step_ms) + ' ms'));
}

// The best placement of a result (placer's flat shape; result.best.* accepted too).
function placementOf(result) {
  return result.placement || (result.best && result.best.placement) || {};
}

// Layers in model order with the device each runs on. The order comes from
// result.layer_order (added by the service), else the placement's keys.
function layersOf(result) {
  const placement = placementOf(result);
  const groups = placement.groups || [];
  const byName = placement.layers || {};
  if (Array.isArray(byName)) {
    return byName.map((l) => ({name: l.name, device: l.device || groups[l.group] || String(l.group)}));
  }
  const order = Array.isArray(result.layer_order) && result.layer_order.length ? result.layer_order : Object.keys(byName);
  return order.map((name) => ({name, device: groups[byName[name]] !== undefined ? groups[byName[name]] : String(byName[name])}));
}

function deviceColors(result) {
  const names = [];
  for (const g of placementOf(result).groups || []) if (!names.includes(g)) names.push(g);
  for (const l of layersOf(result)) if (!names.includes(l.device)) names.push(l.device);
  const map = {};
  names.forEach((n, i) => { map[n] = PALETTE[i % PALETTE.length]; });
  return map;
}

function drawPlacement(result) {
  const root = document.getElementById('placement');
  clear(root);
  const layers = layersOf(result);
  const colors = deviceColors(result);
  const placement = placementOf(result);
  document.getElementById('placement-summary').textContent = placement.data_parallel
      ? `${layers.length} layers · data parallel: a full replica on each of ${(placement.groups || []).join(', ')}`
      : `${layers.length} layers · ${(placement.groups || []).length} groups · ${placement.micro_batches || '?'} micro-batches · ${placement.schedule || ''}` +
        // Replicas of different speeds share the micro-batches by weight (placement.replica_weights).
        Object.entries(placement.replica_weights || {}).map(([g, w]) =>
          ` · group ${g}: ${(placement.groups[g] || []).join('+')} weighted ${w.join(' : ')}`).join('');
  const W = 1000, top = 8, h = 46;
  const n = Math.max(1, layers.length);
  const w = (W - 20) / n;
  layers.forEach((l, i) => {
    const rect = svg('rect', {class: 'layer', x: 10 + i * w, y: top, width: Math.max(1, w), height: h,
                              fill: colors[l.device] || '#999', 'data-device': l.device});
    rect.appendChild(svg('title', {}, `${l.name} → ${l.device}`));
    root.appendChild(rect);
    if (w > 34) root.appendChild(svg('text', {x: 10 + i * w + w / 2, y: top + h + 13, 'text-anchor': 'middle'},
                                     l.name.slice(0, Math.floor(w / 6))));
  });
  let x = 10;
  for (const [name, color] of Object.entries(colors)) {
    root.appendChild(svg('rect', {x, y: 86, width: 12, height: 12, fill: color}));
    root.appendChild(svg('text', {x: x + 16, y: 96}, name));
    x += 26 + 7 * name.length;
  }
}

// Predicted and measured side by side for the plan and the best baseline
// (result.verification), with a flag on each that disagrees by more than the threshold.
function drawVerification(result) {
  const box = document.getElementById('verification');
  clear(box);
  const v = result.verification;
  if (!v) return;
  box.setAttribute('data-state', v.state);
  if (v.state !== 'verified') {
    box.appendChild(el('p', {class: 'muted'}, 'not verified by measurement: ' + (v.reason || v.state)));
    return;
  }
  const threshold = 100 * (v.threshold || 0.1);
  for (const p of v.plans || []) {
    const line = el('p', {class: 'verified-plan', 'data-role': p.role});
    const who = (p.role === 'best' ? 'plan' : 'best baseline') + ' (' + p.name + '): ';
    line.appendChild(el('span', {}, who + 'predicted ' + fmt(p.predicted_ms, 3) + ' ms · '));
    if (p.ok) {
      const diff = 100 * p.relative_difference;
      line.appendChild(el('span', {}, 'measured ' + fmt(p.measured_ms, 3) + ' ms (' + (diff >= 0 ? '+' : '') +
                                      fmt(diff, 1) + '%)'));
    } else {
      line.appendChild(el('span', {class: 'muted'}, 'not measured (' + p.failure_kind + ': ' + p.message +
                                                    '); the prediction stands'));
    }
    if (p.same_plan_as) line.appendChild(el('span', {class: 'muted'}, ' (the same plan, measured once)'));
    if (p.disagrees) {
      line.appendChild(el('span', {class: 'flag disagrees', 'data-role': p.role,
                                   title: `|measured - predicted| / measured > ${fmt(threshold, 0)}%`},
                          `⚠ disagrees: measured ${p.relative_difference > 0 ? 'slower' : 'faster'} than predicted by more than ${fmt(threshold, 0)}%`));
    }
    box.appendChild(line);
  }
}

function drawGantt(result) {
  const root = document.getElementById('gantt');
  clear(root);
  const best = result.best || {};
  const report = result.report || best.report || {};
  const timeline = result.timeline || report.timeline || [];
  const devNames = (report.devices || []).map((d) => d.device);
  const placement = placementOf(result);
  const colors = deviceColors(result);
  const rows = Math.max(1, ...timeline.map((t) => t.device + 1), devNames.length);
  const W = 1000, L = 80, rowH = 26, T = 8;
  const H = T + rows * rowH + 30;
  root.setAttribute('viewBox', `0 0 ${W} ${H}`);
  if (!timeline.length) {
    root.appendChild(svg('text', {x: W / 2, y: 40, 'text-anchor': 'middle'}, 'no timeline in the result'));
    return;
  }
  const end = Math.max(...timeline.map((t) => t.end_ms));
  const sx = (ms) => L + (W - L - 10) * ms / (end || 1);
  for (let d = 0; d < rows; d++) {
    const name = devNames[d] || (placement.groups || [])[d] || ('device ' + d);
    root.appendChild(svg('text', {x: 4, y: T + d * rowH + 17}, name));
    root.appendChild(svg('line', {class: 'grid', x1: L, x2: W - 10, y1: T + (d + 1) * rowH, y2: T + (d + 1) * rowH}));
  }
  for (const t of timeline) {
    const kind = String(t.task || '?')[0];
    const dev = devNames[t.device] || (placement.groups || [])[t.device];
    const base = colors[dev] || PALETTE[t.device % PALETTE.length];
    const isComm = kind === 'X' || kind === 'G';
    const y = T + t.device * rowH + (isComm ? 19 : 3);
    const rect = svg('rect', {class: 'task', x: sx(t.start_ms), y, width: Math.max(0.8, sx(t.end_ms) - sx(t.start_ms)),
                              height: isComm ? 5 : 15, fill: isComm ? '#555' : base,
                              'fill-opacity': kind === 'B' ? 0.55 : 1, 'data-task': t.task});
    rect.appendChild(svg('title', {}, `${t.task}: ${fmt(t.start_ms, 3)}–${fmt(t.end_ms, 3)} ms`));
    root.appendChild(rect);
  }
  for (const tick of niceTicks(0, end, 8)) {
    root.appendChild(svg('text', {x: sx(tick), y: H - 8, 'text-anchor': 'middle'}, +tick.toFixed(3) + ' ms'));
  }
}

function drawBaselines(result) {
  const tbody = document.querySelector('#baselines-table tbody');
  clear(tbody);
  let rows = result.baselines || [];
  if (!Array.isArray(rows)) rows = Object.entries(rows).map(([name, v]) => Object.assign({name}, v));
  const best = result.best || result;
  const bestMs = best.step_ms;
  const tr0 = el('tr', {class: 'tapp'});
  tr0.appendChild(el('td', {}, 'TAPP best (' + (best.source || 'policy') + ')'));
  tr0.appendChild(el('td', {}, fmt(bestMs, 3)));
  tr0.appendChild(el('td', {}, '1.00×'));
  tr0.appendChild(el('td', {}, fmt(result.speedup_vs_bsp) + '×'));
  tr0.appendChild(el('td', {}, fmt(100 * (best.comm_fraction || 0), 1) + '%'));
  tbody.appendChild(tr0);
  for (const b of rows) {
    const tr = el('tr');
    tr.appendChild(el('td', {}, b.name));
    // A planner that did not run (exhaustive over a space too large) says why; a failure says what failed.
    const notRun = b.skipped ? 'skipped: ' + (b.message || '') : (b.error || b.message || 'failed');
    tr.appendChild(el('td', b.skipped ? {class: 'skipped'} : {}, b.ok === false ? notRun : fmt(b.step_ms, 3)));
    tr.appendChild(el('td', {}, b.step_ms && bestMs ? fmt(b.step_ms / bestMs) + '×' : '–'));
    tr.appendChild(el('td', {}, fmt(b.speedup_vs_bsp) + '×'));
    tr.appendChild(el('td', {}, typeof b.comm_fraction === 'number' ? fmt(100 * b.comm_fraction, 1) + '%' : '–'));
    tbody.appendChild(tr);
  }
  // Associated Learning (options.allow_al): its own row, never the best (it changes the learning algorithm).
  const al = result.al;
  if (al) {
    const tr = el('tr', {class: 'al', id: 'al-row'});
    tr.appendChild(el('td', {}, al.found ? 'AL (' + al.blocks + ' blocks from ' + al.from + ')' : 'AL'));
    tr.appendChild(el('td', al.found ? {} : {class: 'skipped'}, al.found ? fmt(al.step_ms, 3) : (al.message || 'none')));
    tr.appendChild(el('td', {}, al.found && bestMs ? fmt(al.step_ms / bestMs) + '×' : '–'));
    tr.appendChild(el('td', {}, '–'));
    tr.appendChild(el('td', {}, '–'));
    tbody.appendChild(tr);
  }
}

async function cancelJob() {
  if (!state.jobId) return;
  await api('/placements/' + encodeURIComponent(state.jobId), {method: 'DELETE'});
  refreshJob();
}

// ---- routing ----------------------------------------------------------------

function route() {
  if (state.timer) clearInterval(state.timer);
  state.timer = null;
  const m = location.hash.match(/^#\/jobs\/([A-Za-z0-9_-]+)$/);
  document.getElementById('list-view').hidden = !!m;
  document.getElementById('job-view').hidden = !m;
  if (m) {
    state.jobId = m[1];
    state.events = [];
    state.lastSeq = 0;
    state.drawnResultFor = null;
    document.getElementById('job-id').textContent = state.jobId;
    ['curve', 'placement', 'gantt'].forEach((id) => clear(document.getElementById(id)));
    clear(document.querySelector('#baselines-table tbody'));
    refreshJob();
    state.timer = setInterval(refreshJob, 1000);
  } else {
    state.jobId = null;
    loadModels();
    refreshList();
    state.timer = setInterval(() => { refreshList(); refreshHealth(); }, 2000);
  }
  refreshHealth();
}

document.getElementById('cluster-input').value = JSON.stringify(EXAMPLE_CLUSTER, null, 2);
document.getElementById('submit-form').addEventListener('submit', submitJob);
document.getElementById('status-filter').addEventListener('change', refreshList);
document.getElementById('cancel-button').addEventListener('click', cancelJob);
window.addEventListener('hashchange', route);
route();
