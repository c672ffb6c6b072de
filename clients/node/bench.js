'use strict';
/*
 * bench.js - uncontended acquire+release cycles per second, this client
 * against a raw-socket loop, from 1 and from 16 concurrent tasks.
 *
 *   make build/lockbrokerd
 *   LB_BROKER_BIN=build/lockbrokerd sh tests/clients/with-broker.sh node clients/node/bench.js
 *
 * Options: --seconds S (one window, default 2), --runs N (default 5),
 * --tasks 1,16, --url URL (default $LOCKBROKER_URL), --only raw,acquire
 * (a subset of the variants: withLock, acquire, raw).
 *
 * What is measured, per window of S seconds, all on one connection:
 *  - client withLock: each task loops `await client.withLock(name, noop)`;
 *  - client acquire: each task loops `(await client.acquire(name)).release()`;
 *  - raw: each task loops writing the same acquire line the client sends
 *    ({"id","op","lock","owner"}), waiting for its answer, then the release,
 *    over one socket with a Map of ids and a plain line splitter: the least a
 *    Node program can do with the protocol.
 * Every task has a lock name of its own (uncontended). The windows of the
 * three variants alternate within each run, so a slow moment of the machine
 * hurts them alike; the table shows each variant's median cycles/s over the
 * runs, the ratio to raw, and the median CPU time this Node process spent
 * per cycle (the client's own cost: the broker and Redis run elsewhere, and
 * on a small machine they bound the cycles/s).
 *
 * Invariants: every lock a window takes is released before the next window
 * starts; the script exits 0 after printing the table, 1 on any error.
 */

const net = require('node:net');
const lb = require('.');

function args() {
  const o = {
    seconds: 2,
    runs: 5,
    tasks: [1, 16],
    url: process.env.LOCKBROKER_URL || lb.defaultUrl(),
    only: ['withLock', 'acquire', 'raw'],
  };
  const a = process.argv.slice(2);
  for (let i = 0; i < a.length; i++) {
    const v = a[i + 1];
    if (a[i] === '--seconds') o.seconds = Number(v);
    else if (a[i] === '--runs') o.runs = Number(v);
    else if (a[i] === '--tasks') o.tasks = v.split(',').map(Number);
    else if (a[i] === '--url') o.url = v;
    else if (a[i] === '--only') o.only = v.split(',');
    else {
      console.error('usage: node bench.js [--seconds S] [--runs N] [--tasks 1,16] [--url URL] [--only V,V]');
      process.exit(64);
    }
    i++;
  }
  return o;
}

/**
 * Runs n tasks of `cycle(i)` in a loop for ms; resolves with the cycles done
 * and this process's CPU time (user + system, microseconds) per cycle.
 */
async function window(n, ms, cycle) {
  const cpu0 = process.cpuUsage();
  let count = 0;
  let stop = false;
  const timer = setTimeout(() => {
    stop = true;
  }, ms);
  await Promise.all(
    Array.from({ length: n }, async (_, i) => {
      while (!stop) {
        await cycle(i);
        count++;
      }
    }),
  );
  clearTimeout(timer);
  const cpu = process.cpuUsage(cpu0);
  return { count, cpuPerCycle: (cpu.user + cpu.system) / count };
}

/** The raw baseline: one socket, ids in a Map, lines split by hand. */
class Raw {
  static open(addr) {
    return new Promise((resolve, reject) => {
      const sock = net.connect(addr.kind === 'tcp' ? { host: addr.host, port: addr.port } : { path: addr.path });
      sock.setNoDelay(true);
      sock.once('error', reject);
      sock.once('connect', () => resolve(new Raw(sock)));
    });
  }

  constructor(sock) {
    this.sock = sock;
    this.nextId = 1;
    this.pending = new Map();
    this.rest = '';
    sock.setEncoding('utf8');
    sock.on('data', (chunk) => {
      let data = this.rest + chunk;
      let nl;
      while ((nl = data.indexOf('\n')) >= 0) {
        const msg = JSON.parse(data.slice(0, nl));
        data = data.slice(nl + 1);
        const done = this.pending.get(msg.id);
        if (done) {
          this.pending.delete(msg.id);
          done(msg);
        }
      }
      this.rest = data;
    });
  }

  call(req) {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, (msg) => (msg.ok ? resolve(msg) : reject(new Error(msg.error.code))));
      this.sock.write(JSON.stringify({ id, ...req }) + '\n');
    });
  }

  close() {
    this.sock.end();
  }
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

async function main() {
  const o = args();
  const ms = o.seconds * 1000;
  const client = await lb.connect({ url: o.url, clientName: 'bench' });
  const raw = await Raw.open(lb.parseUrl(o.url));
  const tag = `${process.pid}`;
  const all = {
    'client withLock': (i) => client.withLock(`bench:w:${tag}:${i}`, () => {}),
    'client acquire': async (i) => {
      const lease = await client.acquire(`bench:a:${tag}:${i}`);
      await lease.release();
    },
    raw: async (i) => {
      const ans = await raw.call({ op: 'acquire', lock: `bench:r:${tag}:${i}`, owner: `raw-${i}` });
      await raw.call({ op: 'release', lease: ans.lease });
    },
  };
  const variants = Object.fromEntries(
    Object.entries(all).filter(([k]) => o.only.some((v) => k === v || k === `client ${v}`)),
  );
  const names = Object.keys(variants);
  console.log(
    `lockbroker node client bench: ${o.url}, node ${process.version}, ` +
      `${o.runs} runs of ${o.seconds} s windows, medians`,
  );
  const rows = [];
  for (const n of o.tasks) {
    const got = Object.fromEntries(names.map((k) => [k, []]));
    const cpu = Object.fromEntries(names.map((k) => [k, []]));
    for (let r = 0; r < o.runs; r++) {
      // Alternate the order per run, so no variant always goes first.
      const order = r % 2 ? [...names].reverse() : names;
      for (const k of order) {
        const w = await window(n, ms, variants[k]);
        got[k].push(w.count / o.seconds);
        cpu[k].push(w.cpuPerCycle);
      }
    }
    rows.push({
      n,
      med: Object.fromEntries(names.map((k) => [k, median(got[k])])),
      cpu: Object.fromEntries(names.map((k) => [k, median(cpu[k])])),
      got,
    });
  }
  const pad = (s, w) => String(s).padStart(w);
  const ratios = names.filter((k) => k !== 'raw' && variants.raw);
  console.log(
    `${pad('tasks', 5)} ${names.map((k) => pad(k + ' /s', 20)).join(' ')} ` +
      ratios.map((k) => pad(k.replace('client ', '') + '/raw', 13)).join(' '),
  );
  for (const { n, med } of rows) {
    console.log(
      `${pad(n, 5)} ${names.map((k) => pad(Math.round(med[k]), 20)).join(' ')} ` +
        ratios.map((k) => pad((med[k] / med.raw).toFixed(2), 13)).join(' '),
    );
  }
  console.log(`\nnode CPU per cycle (us, medians)`);
  console.log(`${pad('tasks', 5)} ${names.map((k) => pad(k, 20)).join(' ')}`);
  for (const { n, cpu } of rows) {
    console.log(`${pad(n, 5)} ${names.map((k) => pad(cpu[k].toFixed(1), 20)).join(' ')}`);
  }
  console.log('');
  for (const { n, got } of rows) {
    for (const k of names) console.log(`  runs, ${n} task(s), ${k}: ${got[k].map(Math.round).join(' ')}`);
  }
  raw.close();
  await client.close();
}

main().catch((err) => {
  console.error('bench failed:', err);
  process.exit(1);
});
