#!/usr/bin/env node
// Browser test of the TAPP page in headless Chromium (playwright-core + Debian's /usr/bin/chromium).
//
// Starts tapp-server on 127.0.0.1 (port 0, fresh database; placer's real optimize()
// in simulate mode, in each job's child process, or with --fake the test-only job
// program tests/service/test_job_main.cpp, given with --test-job),
// opens the page, submits a job from the form, waits for it to succeed, and
// checks that the best-step-time curve, the placement and the pipeline Gantt
// chart are drawn and the baselines table is filled; that every request the
// page made stayed on the server's origin; and, with a token-protected server,
// that the page asks for the token once and then works. Saves a screenshot.
//
// usage: node browser_test.js --server build/bin/tapp-server [--test-job build/bin/tapp-test-job]
//                              [--screenshot out.png] [--fake]
'use strict';
const {spawn} = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');

const here = __dirname;
let chromium;
try {
  ({chromium} = require(path.join(here, 'node_modules', 'playwright-core')));
} catch (e) {
  console.error('browser_test: playwright-core missing: run npm install in tests/js');
  process.exit(1);
}

function arg(name, fallback) {
  const i = process.argv.indexOf(name);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : fallback;
}
const serverBin = arg('--server', path.resolve(here, '..', '..', 'build', 'bin', 'tapp-server'));
const screenshot = arg('--screenshot', path.join(os.tmpdir(), 'tapp-page.png'));
const testJobBin = arg('--test-job', path.join(path.dirname(serverBin), 'tapp-test-job'));
const real = !process.argv.includes('--fake');  // the real optimize() by default
// The test-only job program: fake jobs of 40 ms per iteration (tests/service/test_job_main.cpp).
const fakeJobs = ['--job-program', testJobBin];

function check(cond, what) {
  if (!cond) throw new Error('check failed: ' + what);
  console.log('ok   ' + what);
}

function startServer(dir, extra) {
  return new Promise((resolve, reject) => {
    const args = ['--host', '127.0.0.1', '--port', '0', '--db', path.join(dir, 'jobs.db')].concat(extra);
    const env = Object.assign({}, process.env, {TAPP_FAKE_ITERATION_MS: '40'});
    const proc = spawn(serverBin, args, {stdio: ['ignore', 'pipe', 'inherit'], env});
    let out = '';
    const timer = setTimeout(() => reject(new Error('tapp-server did not start: ' + out)), 20000);
    proc.stdout.on('data', (d) => {
      out += d.toString();
      const m = out.match(/127\.0\.0\.1:(\d+)/);
      if (m) {
        clearTimeout(timer);
        resolve({proc, url: `http://127.0.0.1:${m[1]}`});
      }
    });
    proc.on('exit', (code) => reject(new Error('tapp-server exited with ' + code + ': ' + out)));
  });
}

async function launch() {
  const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'tapp-chromium-'));
  const args = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'];
  // playwright-core gives every launch a fresh profile; userDataDir keeps it in our temp dir.
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: '/usr/bin/chromium', args, headless: true, viewport: {width: 1360, height: 1500}});
  return {context, userDataDir};
}

async function submitAndFollow(page, base) {
  const foreign = [];
  const consoleErrors = [];
  page.on('request', (r) => { if (!r.url().startsWith(base) && !r.url().startsWith('data:')) foreign.push(r.url()); });
  // Network failures are logged as console errors too; the 400 of the bad cluster below is expected.
  page.on('console', (m) => {
    if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) consoleErrors.push(m.text());
  });
  page.on('pageerror', (e) => consoleErrors.push(String(e)));

  await page.goto(base + '/', {waitUntil: 'load'});
  await page.waitForSelector('#model-select option[value="alexnet_cifar"]', {state: 'attached', timeout: 15000});
  check(await page.locator('#cluster-input').inputValue().then((v) => JSON.parse(v).devices.length === 4),
        'the cluster textarea is prefilled with an example cluster');

  // A bad cluster is refused with the field named, before anything is queued.
  await page.fill('#cluster-input', '{"devices": [{"name": "a", "speed": 3000}]}');
  await page.click('#submit-button');
  await page.waitForFunction(() => document.getElementById('submit-error').textContent.length > 0);
  const err = await page.textContent('#submit-error');
  check(err.includes('cluster.devices[0].speed'), 'a bad cluster shows the server error naming the field: ' + err);

  // 96 MB a device: alexnet_cifar (with gradients, optimizer state, activations and buffers: 165.5 MB) fits on no single device,
  // so whatever plan wins is a pipeline over several devices, whichever the cost model prefers.
  await page.fill('#cluster-input', JSON.stringify({
    name: 'four', devices: [{name: 'cpu0', memory_mb: 96}, {name: 'cpu1', memory_mb: 96},
                            {name: 'cpu2', speed: 0.5, memory_mb: 96}, {name: 'cpu3', speed: 0.5, memory_mb: 96}]}, null, 2));
  await page.selectOption('#model-select', 'alexnet_cifar');
  await page.fill('#iterations-input', real ? '60' : '40');
  await page.check('#allow-al-input');
  await page.click('#submit-button');
  await page.waitForURL(/#\/jobs\/j[0-9a-f]+$/, {timeout: 15000});
  const id = page.url().split('/').pop();
  check(true, 'the form submitted job ' + id + ' and the page follows it');

  await page.waitForSelector('#job-status[data-status="succeeded"]', {timeout: 120000});
  check(true, 'the job page shows succeeded');
  await page.waitForSelector('#gantt rect.task', {timeout: 10000});

  const d = await page.getAttribute('#curve path.best', 'd');
  const points = (d.match(/[ML]/g) || []).length;
  check(points >= 3, `the best-step-time curve is drawn (${points} points)`);
  check(await page.locator('#curve path.reward').count() === 1, 'the reward curve is drawn');
  const layers = await page.locator('#placement rect.layer').count();
  check(layers >= 5, `the placement draws every layer (${layers})`);
  const devices = await page.$$eval('#placement rect.layer', (rs) => new Set(rs.map((r) => r.getAttribute('data-device'))).size);
  check(devices >= 2, `layers are coloured by device (${devices} devices)`);
  const tasks = await page.locator('#gantt rect.task').count();
  check(tasks >= 8, `the pipeline Gantt chart is drawn (${tasks} tasks)`);
  const verification = await page.getAttribute('#verification', 'data-state');
  check(['verified', 'skipped'].includes(verification),
        `the page says whether the plan was verified by measurement (${verification})`);
  const rows = await page.locator('#baselines-table tbody tr').count();
  check(rows >= 2, `the baselines table is filled (${rows} rows)`);
  const alRow = await page.textContent('#al-row').catch(() => '');
  check(alRow.startsWith('AL'), 'with "allow AL" ticked the table has its own Associated Learning row: ' + alRow);
  await page.screenshot({path: screenshot, fullPage: true});
  console.log('screenshot: ' + screenshot);

  await page.click('a[href="#/"]');
  await page.waitForSelector(`#jobs-table tr[data-id="${id}"]`, {timeout: 10000});
  check(true, 'the job list shows the job');
  check(foreign.length === 0, 'every request stayed on the server origin ' + (foreign.length ? foreign.join(', ') : ''));
  check(consoleErrors.length === 0, 'no errors in the console ' + consoleErrors.join(' | '));
}

// A result whose measured step disagrees with its prediction by more than 10%
// (the fake job's: measured 25% over predicted) shows the flag next to the plan.
async function disagreementFlag(context, base) {
  const page = await context.newPage();
  await page.goto(base + '/', {waitUntil: 'load'});
  await page.waitForSelector('#model-select option[value="mlp"]', {state: 'attached', timeout: 15000});
  await page.selectOption('#model-select', 'mlp');
  await page.fill('#iterations-input', '5');
  await page.click('#submit-button');
  await page.waitForURL(/#\/jobs\/j[0-9a-f]+$/, {timeout: 15000});
  await page.waitForSelector('#job-status[data-status="succeeded"]', {timeout: 30000});
  await page.waitForSelector('#verification .flag.disagrees', {timeout: 10000});
  const flags = await page.$$eval('#verification .flag.disagrees', (fs) => fs.map((f) => f.getAttribute('data-role')));
  check(flags.length === 1 && flags[0] === 'best', 'the disagreement flag is shown next to the plan, and only there: ' + flags);
  const text = await page.textContent('#verification .verified-plan[data-role="best"]');
  check(text.includes('predicted') && text.includes('measured') && text.includes('+20.0%'),
        'predicted and measured are shown side by side with the difference: ' + text);
  await page.close();
}

async function tokenFlow(context, base) {
  const page = await context.newPage();
  await page.goto(base + '/', {waitUntil: 'load'});
  await page.waitForSelector('#token-dialog[open]', {timeout: 10000});
  check(true, 'a token-protected server makes the page ask for the token');
  await page.fill('#token-input', 'browser-secret');
  await page.click('#token-form button');
  await page.waitForSelector('#model-select option[value="alexnet_cifar"]', {state: 'attached', timeout: 10000});
  await page.reload({waitUntil: 'load'});
  await page.waitForSelector('#model-select option[value="alexnet_cifar"]', {state: 'attached', timeout: 10000});
  check(!(await page.locator('#token-dialog[open]').count()), 'the page kept the token (asked once)');
  await page.close();
}

(async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tapp-browser-'));
  const procs = [];
  let browser;
  let failed = false;
  try {
    const s1 = await startServer(dir, real ? ['--jobs', '1'] : fakeJobs);
    procs.push(s1.proc);
    browser = await launch();
    const page = await browser.context.newPage();
    await submitAndFollow(page, s1.url);
    await page.close();

    fs.writeFileSync(path.join(dir, 'token'), 'browser-secret\n');
    fs.mkdirSync(path.join(dir, 't'));
    const s2 = await startServer(path.join(dir, 't'), fakeJobs.concat(['--token-file', path.join(dir, 'token')]));
    procs.push(s2.proc);
    await tokenFlow(browser.context, s2.url);

    fs.mkdirSync(path.join(dir, 'f'));
    const s3 = await startServer(path.join(dir, 'f'), fakeJobs);
    procs.push(s3.proc);
    await disagreementFlag(browser.context, s3.url);
  } catch (e) {
    console.error('FAIL ' + (e && e.stack || e));
    failed = true;
  } finally {
    if (browser) {
      await browser.context.close().catch(() => {});
      fs.rmSync(browser.userDataDir, {recursive: true, force: true});
    }
    for (const p of procs) p.kill('SIGTERM');
    fs.rmSync(dir, {recursive: true, force: true});
  }
  process.exit(failed ? 1 : 0);
})();
