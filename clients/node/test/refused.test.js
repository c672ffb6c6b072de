'use strict';
/*
 * refused.test.js - how long a connect that cannot succeed takes. Before
 * the client's first session, a connect the system refuses (nothing
 * listens on the port, no such Unix socket) rejects at once with
 * ConnectionError, whatever connectTimeoutMs, as in the Go and C clients;
 * it took 9 s with the default options when every attempt was tried again
 * until connectTimeoutMs. A connect that hangs (here: accepted, hello never
 * answered) still waits for connectTimeoutMs. After a session, a refused
 * connect is a broker restarting: the request waits for it, up to
 * connectTimeoutMs. Needs no lockbrokerd.
 */

const { describe, it } = require('node:test');
const assert = require('node:assert/strict');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const lb = require('..');
const { helloAnswer } = require('../test-support/fake-broker');
const { sleep } = require('../test-support/helpers');

/* Far below the old 5 s at the least (half of each backoff delay summed up to 10 s), far above 3-8 ms. */
const PROMPT_MS = 1500;

/** A port nothing listens on: one the system just gave and took back. */
async function freePort() {
  const s = net.createServer();
  await new Promise((resolve) => s.listen(0, '127.0.0.1', resolve));
  const { port } = s.address();
  await new Promise((resolve) => s.close(resolve));
  return port;
}

/** A server on `port` that answers hello and ping, one line each; close() drops it all. */
async function miniBroker(port) {
  const sockets = new Set();
  let n = 0;
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => {});
    const conn = { n: ++n };
    let buf = '';
    socket.on('data', (chunk) => {
      buf += chunk;
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const msg = JSON.parse(buf.slice(0, nl));
        buf = buf.slice(nl + 1);
        const ans = msg.op === 'hello' ? helloAnswer(conn.n) : { ok: true, redis: 'up' };
        socket.write(`${JSON.stringify({ id: msg.id, ...ans })}\n`);
      }
    });
  });
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', resolve);
  });
  return {
    close() {
      for (const s of sockets) s.destroy();
      return new Promise((resolve) => server.close(resolve));
    },
  };
}

async function timed(p) {
  const t0 = Date.now();
  const value = await p.catch((e) => e);
  return [value, Date.now() - t0];
}

describe('a refused connect', () => {
  it('connect() to a TCP port nothing listens on rejects at once (default options)', async () => {
    const url = `tcp://127.0.0.1:${await freePort()}`;
    const [err, ms] = await timed(lb.connect({ url }));
    assert.ok(err instanceof lb.ConnectionError, String(err));
    assert.equal(err.code, 'connection');
    assert.equal(err.fromBroker, false);
    assert.equal(err.cause && err.cause.code, 'ECONNREFUSED');
    assert.ok(ms < PROMPT_MS, `rejected after ${ms} ms`);
  });

  it('connect() to a Unix socket that does not exist rejects at once', async () => {
    const url = `unix://${path.join(os.tmpdir(), `lockbroker-none-${process.pid}.sock`)}`;
    const [err, ms] = await timed(lb.connect({ url }));
    assert.ok(err instanceof lb.ConnectionError, String(err));
    assert.equal(err.cause && err.cause.code, 'ENOENT');
    assert.ok(ms < PROMPT_MS, `rejected after ${ms} ms`);
  });

  it('the first request of a client that never connected rejects at once too', async () => {
    const c = new lb.Client({ url: `tcp://127.0.0.1:${await freePort()}` });
    try {
      const [err, ms] = await timed(c.withLock('x', () => {}));
      assert.ok(err instanceof lb.ConnectionError, String(err));
      assert.ok(ms < PROMPT_MS, `rejected after ${ms} ms`);
    } finally {
      await c.close();
    }
  });

  it('a connect that hangs waits for connectTimeoutMs', async () => {
    const silent = net.createServer(() => {}); // accepts, never answers hello
    await new Promise((resolve) => silent.listen(0, '127.0.0.1', resolve));
    try {
      const url = `tcp://127.0.0.1:${silent.address().port}`;
      const [err, ms] = await timed(lb.connect({ url, connectTimeoutMs: 400 }));
      assert.ok(err instanceof lb.ConnectionError, String(err));
      assert.match(err.message, /no answer to hello within/);
      assert.ok(ms >= 390, `rejected after ${ms} ms, before connectTimeoutMs`);
    } finally {
      silent.close();
    }
  });

  it('after a session, a refused connect is a broker restarting: the request waits for it', async () => {
    const port = await freePort();
    let broker = await miniBroker(port);
    const url = `tcp://127.0.0.1:${port}`;
    const c = new lb.Client({ url, connectTimeoutMs: 5000, backoffMinMs: 20, backoffMaxMs: 100 });
    try {
      await c.connect();
      await broker.close(); // the session drops; the port refuses
      broker = null;
      await sleep(50);
      const t0 = Date.now();
      const ping = c.ping();
      await sleep(300);
      broker = await miniBroker(port);
      assert.deepEqual(await ping, { redis: 'up' });
      assert.ok(Date.now() - t0 >= 290);
      assert.equal(c.serverInfo.session, 's1'); // the second server's first session
    } finally {
      await c.close();
      if (broker) await broker.close();
    }
  });
});
