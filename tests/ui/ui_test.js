'use strict';
/*
 * tests/ui/ui_test.js - the /ui page in a real browser: Debian's chromium,
 * headless, driven by puppeteer-core, against a broker that tests/ui/run.sh
 * started (LB_BROKER_HOST, LB_BROKER_PORT: its protocol; LB_UI_URL: its
 * page). The test holds a lock and queues a waiter on it, then asserts what
 * the page shows: the lock, the holder's client label, the queue length 1,
 * Redis up, the store, the charts; releases it and asserts the page
 * follows (the waiter's label, queue 0); shows that labels and names are
 * text, never markup; and that no lease token ever reaches the page.
 * It fails on any error the page logs (a script error, a blocked load).
 */
const assert = require('node:assert/strict');
const fs = require('node:fs');
const net = require('node:net');
const path = require('node:path');
const puppeteer = require('puppeteer-core');

const HOST = process.env.LB_BROKER_HOST || '127.0.0.1';
const PORT = Number(process.env.LB_BROKER_PORT);
const UI = process.env.LB_UI_URL;
const CHROMIUM = process.env.CHROMIUM_BIN || '/usr/bin/chromium';
const OUT = process.env.LB_UI_OUT || '.';
const STEP_MS = 10000; /* the longest a step waits for the page */

/* ---- a line-protocol client ------------------------------------------------ */

class Client {
  constructor() {
    this.pending = new Map();
    this.nextId = 1;
    this.buf = '';
  }

  connect() {
    return new Promise((resolve, reject) => {
      this.sock = net.connect(PORT, HOST, resolve);
      this.sock.once('error', reject);
      this.sock.setEncoding('utf8');
      this.sock.on('data', (d) => {
        this.buf += d;
        let nl;
        while ((nl = this.buf.indexOf('\n')) >= 0) {
          const msg = JSON.parse(this.buf.slice(0, nl));
          this.buf = this.buf.slice(nl + 1);
          const p = msg.id !== undefined && this.pending.get(msg.id);
          if (p) {
            this.pending.delete(msg.id);
            p(msg);
          }
        }
      });
    });
  }

  /* Sends req; the promise is its answer. */
  call(req) {
    const id = this.nextId++;
    return new Promise((resolve) => {
      this.pending.set(id, resolve);
      this.sock.write(JSON.stringify({...req, id}) + '\n');
    });
  }

  async ok(req) {
    const a = await this.call(req);
    assert.equal(a.ok, true, JSON.stringify(req) + ' -> ' + JSON.stringify(a));
    return a;
  }

  close() {
    this.sock.end();
  }
}

async function client(label) {
  const c = new Client();
  await c.connect();
  await c.ok({op: 'hello', client: label});
  return c;
}

/* ---- the page ------------------------------------------------------------------ */

/* What the page shows of lock `name` (its row), or null. Runs in the page. */
function rowOf(name) {
  for (const tr of document.querySelectorAll('#locks tbody tr.lock-row')) {
    const cell = tr.querySelector('.lock-name');
    if (cell && cell.firstChild && cell.firstChild.nodeValue === name) {
      return {
        holders: tr.querySelector('.lock-holders').textContent,
        holderLabels: [...tr.querySelectorAll('.lock-holders .label')].map((e) => e.textContent),
        modes: [...tr.querySelectorAll('.lock-holders .holder-mode')].map((e) => e.textContent),
        queue: tr.querySelector('.lock-queue').textContent,
        waiterLabels: [...tr.querySelectorAll('.lock-waiters .label')].map((e) => e.textContent),
        elements: tr.querySelectorAll('*').length,
      };
    }
  }
  return null;
}

async function waitRow(page, name, pred, what) {
  const t0 = Date.now();
  for (;;) {
    const row = await page.evaluate(rowOf, name);
    if (pred(row)) return row;
    if (Date.now() - t0 > STEP_MS)
      throw new Error('the page never showed ' + what + '; last row: ' + JSON.stringify(row));
    await new Promise((r) => setTimeout(r, 100));
  }
}

/* ---- the test ------------------------------------------------------------------ */

const results = [];

async function step(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
    results.push({name, ok: true});
    console.log('ok   ' + name + ' (' + (Date.now() - t0) + ' ms)');
  } catch (e) {
    results.push({name, ok: false});
    console.log('FAIL ' + name + ': ' + (e && e.stack || e));
    throw e;
  }
}

async function main() {
  assert.ok(PORT > 0 && UI, 'run me with tests/ui/run.sh');
  fs.mkdirSync(OUT, {recursive: true});
  const t0 = Date.now();
  const pageErrors = [];
  const tokens = [];
  const browser = await puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run'],
  });
  let page;
  const clients = [];
  try {
    page = await browser.newPage();
    await page.setViewport({width: 1280, height: 1000});
    page.on('pageerror', (e) => pageErrors.push('pageerror: ' + e.message));
    page.on('console', (m) => {
      if (m.type() === 'error') pageErrors.push('console: ' + m.text());
    });
    page.on('requestfailed', (r) => pageErrors.push('request failed: ' + r.url()));
    page.on('response', (r) => {
      if (r.status() >= 400) pageErrors.push('HTTP ' + r.status() + ': ' + r.url());
    });

    const holder = await client('ui-holder-label');
    const waiter = await client('ui-waiter-label');
    clients.push(holder, waiter);
    let held, waiting;

    await step('a lock held and one waiter queued', async () => {
      held = await holder.ok({op: 'acquire', lock: 'ui-test/lock', wait_ms: 0, ttl_ms: 30000});
      tokens.push(held.lease);
      waiting = waiter.call({op: 'acquire', lock: 'ui-test/lock', wait_ms: 30000, ttl_ms: 30000});
    });

    await step('the page shows the lock, its holder, mode and the queue of 1', async () => {
      await page.goto(UI, {waitUntil: 'load'});
      const row = await waitRow(page, 'ui-test/lock',
        (r) => r && r.queue === '1' && r.holderLabels.includes('ui-holder-label'),
        'ui-test/lock held by ui-holder-label with 1 waiting');
      assert.deepEqual(row.modes, ['exclusive']);
      assert.ok(row.holders.includes('fence ' + held.fence), row.holders);
      assert.match(row.holders, /TTL \d/);
      assert.deepEqual(row.waiterLabels, ['ui-waiter-label']);
    });

    await step('Redis up and the store', async () => {
      await page.waitForFunction(
        () => document.getElementById('redis-status').dataset.up === 'true', {timeout: STEP_MS});
      assert.equal(await page.$eval('#redis-status', (e) => e.textContent), 'Redis up');
      assert.equal(await page.$eval('#store-mode', (e) => e.textContent), 'single');
      assert.match(await page.$eval('#store-target', (e) => e.textContent), /^Single Redis at 127\.0\.0\.1:\d+/);
      assert.match(await page.$eval('#scope', (e) => e.textContent), /this broker's sessions/);
    });

    await step('the charts are drawn', async () => {
      /* A sample a second: within two the grants chart has its line. */
      await page.waitForFunction(
        () => document.querySelectorAll('#chart-grants polyline.series').length > 0, {timeout: STEP_MS});
      assert.ok(await page.$('#chart-handoff'), 'no handoff chart');
      const axis = await page.$$eval('#chart-grants text', (ts) => ts.map((t) => t.textContent));
      assert.ok(axis.includes('now') && axis.includes('-5 min'), axis.join(','));
      await page.screenshot({path: path.join(OUT, 'held.png'), fullPage: true});
    });

    await step('released: the waiter holds it and the queue is empty', async () => {
      await holder.ok({op: 'release', lease: held.lease});
      const got = await waiting;
      assert.equal(got.ok, true, JSON.stringify(got));
      tokens.push(got.lease);
      await waitRow(page, 'ui-test/lock',
        (r) => r && r.queue === '0' && r.holderLabels.join() === 'ui-waiter-label',
        'ui-test/lock held by ui-waiter-label with an empty queue');
      /* The handoff reaches the latency chart within a sample or two. */
      await page.waitForFunction(
        () => document.querySelectorAll('#chart-handoff polyline.series').length >= 2,
        {timeout: STEP_MS});
    });

    await step('names and labels are text, never markup', async () => {
      const evil = await client('<img src=x onerror="window.__xss=1">');
      clients.push(evil);
      const name = '<script>window.__xss=2</script><b>x</b>';
      const a = await evil.ok({op: 'acquire', lock: name, wait_ms: 0});
      tokens.push(a.lease);
      const row = await waitRow(page, name, (r) => r !== null, 'the lock with markup in its name');
      assert.deepEqual(row.holderLabels, ['<img src=x onerror="window.__xss=1">']);
      assert.equal(await page.evaluate(() => window.__xss), undefined);
      assert.equal(await page.$$eval('#locks img, #locks script, #locks b', (es) => es.length), 0);
    });

    await step('no lease token reaches the page', async () => {
      await new Promise((r) => setTimeout(r, 1100)); /* one more poll */
      const html = await page.content();
      const state = await page.evaluate(async () => (await fetch('/ui/state')).text());
      for (const t of tokens) {
        assert.ok(t && t.length >= 32, 'a token: ' + t);
        assert.ok(!html.includes(t), 'token ' + t + ' in the page');
        assert.ok(!state.includes(t), 'token ' + t + ' in /ui/state');
      }
    });

    await step('sessions end: the locks leave the page', async () => {
      for (const c of clients) c.close();
      clients.length = 0;
      await page.waitForFunction(
        () => !document.getElementById('locks-empty').hidden, {timeout: STEP_MS});
      assert.equal(await page.$$eval('#locks tbody tr', (rs) => rs.length), 0);
      await page.screenshot({path: path.join(OUT, 'after.png'), fullPage: true});
    });

    await step('the page logged no error', async () => {
      assert.deepEqual(pageErrors, []);
    });
  } finally {
    for (const c of clients) c.close();
    await browser.close();
    const failed = results.filter((r) => !r.ok).length;
    console.log('ui: browser test took ' + ((Date.now() - t0) / 1000).toFixed(1) + ' s; screenshots in ' + OUT);
    console.log((results.length - failed) + ' passed, ' + failed + ' failed');
  }
}

main().catch((e) => {
  if (!results.some((r) => !r.ok)) console.log('FAIL ' + (e && e.stack || e));
  process.exitCode = 1;
});
