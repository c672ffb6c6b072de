'use strict';
/*
 * helpers.js - what the node:test suites share: the environment that
 * tests/clients/with-broker.sh sets, unique lock names, a tiny RESP client
 * (to change Redis behind the broker's back), and a private lockbrokerd or
 * redis-server that a test may kill and restart.
 *
 * It lives outside test/ because `node --test clients/node/test/` runs every
 * .js file under test/ as a test file.
 *
 * Invariants:
 *  - env() throws at once, saying how to run the suite, when the variables
 *    are missing: a suite never half-runs against some default broker.
 *  - name() is unique per process and call, so test files that run at the
 *    same time against the same broker never share a lock.
 *  - Every process and socket a helper opens is closed by its stop()/close(),
 *    and a started broker is killed when the test process exits.
 */

const net = require('node:net');
const { spawn } = require('node:child_process');

function env() {
  const e = process.env;
  const need = [
    'LOCKBROKER_URL',
    'LOCKBROKER_UNIX_URL',
    'LOCKBROKER_AUTH_URL',
    'LOCKBROKER_AUTH_SECRET',
    'LOCKBROKER_AUTH_FILE',
    'LOCKBROKER_REDIS_HOST',
    'LOCKBROKER_REDIS_PORT',
    'LOCKBROKER_BIN',
    'LOCKBROKER_TMP',
  ];
  const missing = need.filter((k) => !e[k]);
  if (missing.length) {
    throw new Error(
      `missing ${missing.join(', ')}: run the suite as ` +
        '`sh tests/clients/with-broker.sh node --test clients/node/test/` from the repository top',
    );
  }
  return {
    url: e.LOCKBROKER_URL,
    unixUrl: e.LOCKBROKER_UNIX_URL,
    authUrl: e.LOCKBROKER_AUTH_URL,
    authSecret: e.LOCKBROKER_AUTH_SECRET,
    authFile: e.LOCKBROKER_AUTH_FILE,
    redisHost: e.LOCKBROKER_REDIS_HOST,
    redisPort: Number(e.LOCKBROKER_REDIS_PORT),
    bin: e.LOCKBROKER_BIN,
    tmp: e.LOCKBROKER_TMP,
  };
}

let seq = 0;
/** A lock name no other test (file) uses. */
function name(what) {
  seq += 1;
  return `node-test:${what}:${process.pid}:${seq}`;
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Resolves when cond() is true, polling every 10 ms; rejects after ms. */
async function waitFor(cond, ms = 5000, what = 'condition') {
  const end = Date.now() + ms;
  for (;;) {
    if (await cond()) return;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

/* ---- RESP --------------------------------------------------------------- */

/**
 * A minimal Redis client: commands as arrays of bulk strings, replies
 * parsed (simple string, error, integer, bulk, array), answered in order.
 */
class Resp {
  static connect(host, port) {
    return new Promise((resolve, reject) => {
      const sock = net.connect({ host, port }, () => {
        sock.off('error', reject);
        resolve(new Resp(sock));
      });
      sock.once('error', reject);
    });
  }

  constructor(sock) {
    this.sock = sock;
    this.buf = Buffer.alloc(0);
    this.waiting = []; // {resolve, reject}, in command order
    sock.on('data', (chunk) => {
      this.buf = Buffer.concat([this.buf, chunk]);
      for (;;) {
        const r = parseReply(this.buf, 0);
        if (r === null) break;
        this.buf = this.buf.subarray(r.end);
        const w = this.waiting.shift();
        if (r.value instanceof Error) w.reject(r.value);
        else w.resolve(r.value);
      }
    });
    sock.on('close', () => {
      for (const w of this.waiting.splice(0)) w.reject(new Error('redis connection closed'));
    });
  }

  command(...args) {
    let out = `*${args.length}\r\n`;
    for (const a of args) out += `$${Buffer.byteLength(String(a))}\r\n${a}\r\n`;
    this.sock.write(out);
    return new Promise((resolve, reject) => this.waiting.push({ resolve, reject }));
  }

  close() {
    this.sock.end();
  }
}

/** One reply at buf[at]: {value, end}, or null when incomplete. */
function parseReply(buf, at) {
  const nl = buf.indexOf('\r\n', at);
  if (nl < 0) return null;
  const type = String.fromCharCode(buf[at]);
  const head = buf.toString('utf8', at + 1, nl);
  if (type === '+') return { value: head, end: nl + 2 };
  if (type === '-') return { value: new Error(head), end: nl + 2 };
  if (type === ':') return { value: Number(head), end: nl + 2 };
  if (type === '$') {
    const n = Number(head);
    if (n < 0) return { value: null, end: nl + 2 };
    if (buf.length < nl + 2 + n + 2) return null;
    return { value: buf.toString('utf8', nl + 2, nl + 2 + n), end: nl + 2 + n + 2 };
  }
  if (type === '*') {
    const n = Number(head);
    if (n < 0) return { value: null, end: nl + 2 };
    const items = [];
    let end = nl + 2;
    for (let i = 0; i < n; i++) {
      const r = parseReply(buf, end);
      if (r === null) return null;
      items.push(r.value);
      end = r.end;
    }
    return { value: items, end };
  }
  throw new Error(`bad RESP type ${JSON.stringify(type)}`);
}

/**
 * Deletes the lock's keys ("lb:{NAME}" and "lb:{NAME}:*") behind the
 * broker's back; resolves with how many were deleted.
 */
async function deleteLockKeys(lock) {
  const e = env();
  const r = await Resp.connect(e.redisHost, e.redisPort);
  try {
    const keys = [`lb:{${lock}}`, ...(await r.command('KEYS', `lb:{${lock}}:*`))];
    return await r.command('DEL', ...keys);
  } finally {
    r.close();
  }
}

/* ---- a private broker ---------------------------------------------------- */

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

/** Resolves when a TCP connection to port succeeds and the broker answers ping with redis up. */
function pingBroker(port) {
  return new Promise((resolve) => {
    const s = net.connect({ host: '127.0.0.1', port });
    let data = '';
    const done = (ok) => {
      s.destroy();
      resolve(ok);
    };
    s.setTimeout(500, () => done(false));
    s.on('error', () => done(false));
    s.on('connect', () => s.write('{"id":1,"op":"ping"}\n'));
    s.on('data', (c) => {
      data += c;
      if (data.includes('\n')) done(data.includes('"redis":"up"'));
    });
  });
}

const started = new Set();
process.on('exit', () => {
  for (const p of started) p.kill('SIGKILL');
});

/**
 * Starts lockbrokerd on 127.0.0.1:port (a free one when not given) against
 * the suite's Redis, with extra flags; resolves once it serves.
 * @returns {Promise<{url: string, port: number, proc: object, kill(sig?): Promise<void>}>}
 */
async function startBroker(opts = {}) {
  const e = env();
  const port = opts.port || (await freePort());
  const args = [
    '--redis',
    opts.redis || `redis://${e.redisHost}:${e.redisPort}`,
    '--listen',
    `tcp://127.0.0.1:${port}`,
    '--log-level',
    'error',
    ...(opts.args || []),
  ];
  const proc = spawn(e.bin, args, { stdio: ['ignore', 'ignore', 'inherit'] });
  started.add(proc);
  const exited = new Promise((resolve) => proc.once('exit', resolve));
  exited.then(() => started.delete(proc));
  const ready = opts.waitRedis === false ? () => net.connect({ host: '127.0.0.1', port }) : null;
  await waitFor(
    async () => {
      if (proc.exitCode !== null) throw new Error(`lockbrokerd exited with ${proc.exitCode}`);
      if (ready) {
        return new Promise((resolve) => {
          const s = ready();
          s.on('connect', () => {
            s.destroy();
            resolve(true);
          });
          s.on('error', () => resolve(false));
        });
      }
      return pingBroker(port);
    },
    10000,
    'lockbrokerd to start',
  );
  return {
    url: `tcp://127.0.0.1:${port}`,
    port,
    proc,
    /** Sends sig (SIGKILL by default) and resolves once the process exited. */
    async kill(sig = 'SIGKILL') {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill(sig);
      await exited;
    },
  };
}

/**
 * Starts a private redis-server on 127.0.0.1:port (a free one when not
 * given) keeping its data in dir with an fsync'd append-only file, so a
 * restart on the same port and dir finds every key again.
 * @returns {Promise<{port: number, proc: object, kill(sig?): Promise<void>}>}
 */
async function startRedis(opts = {}) {
  const port = opts.port || (await freePort());
  const proc = spawn(
    'redis-server',
    [
      '--port',
      String(port),
      '--bind',
      '127.0.0.1',
      '--dir',
      opts.dir,
      '--appendonly',
      'yes',
      '--appendfsync',
      'always',
      '--save',
      '',
      '--logfile',
      '',
      '--loglevel',
      'warning',
    ],
    { stdio: ['ignore', 'ignore', 'inherit'] },
  );
  started.add(proc);
  const exited = new Promise((resolve) => proc.once('exit', resolve));
  exited.then(() => started.delete(proc));
  await waitFor(
    async () => {
      if (proc.exitCode !== null) throw new Error(`redis-server exited with ${proc.exitCode}`);
      try {
        const r = await Resp.connect('127.0.0.1', port);
        const pong = await r.command('PING');
        r.close();
        return pong === 'PONG';
      } catch {
        return false;
      }
    },
    10000,
    'redis-server to start',
  );
  return {
    port,
    proc,
    async kill(sig = 'SIGKILL') {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill(sig);
      await exited;
    },
  };
}

module.exports = { env, name, sleep, waitFor, Resp, deleteLockKeys, freePort, startBroker, startRedis };
