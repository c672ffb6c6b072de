'use strict';
/*
 * fake-broker.js - a broker of the test's own: a net.Server on a free
 * loopback port that speaks just enough of the protocol for the client to
 * open sessions on it, and answers what the test tells it to. It lets a
 * test send what the real broker never sends to a correct client
 * (bad_json, internal, line_too_long as answers, a hello refused with any
 * code), and watch the client's connection attempts (each accepted
 * connection is timed).
 *
 * Invariants:
 *  - Every connection is recorded in `connections`, in accept order, with
 *    `at` (performance.now() when the server saw it) and the requests it
 *    received; `onConnection` runs first and may destroy the socket at once.
 *  - A request gets the answer `onRequest(msg, conn)` returns (the `id` is
 *    filled in), nothing when it returns null; the default answers hello
 *    and ping as the real broker does and every other op with `internal`.
 *  - close() destroys every socket it accepted and closes the server; it
 *    resolves once the server is closed.
 */

const net = require('node:net');
const { performance } = require('node:perf_hooks');

/** The limits a real lockbrokerd announces in hello (PROTOCOL.md's example). */
const LIMITS = Object.freeze({
  max_line: 65536,
  ttl_ms_min: 100,
  ttl_ms_max: 86400000,
  max_leases_per_session: 10000,
  max_waiters_per_session: 1000,
  max_inflight: 1024,
  keepalive_ms_min: 500,
  keepalive_ms_max: 600000,
});

/** hello's success answer, as lockbrokerd gives it, for the n-th session. */
function helloAnswer(n) {
  return {
    ok: true,
    server: 'lockbroker/0.0.0-fake',
    proto: 1,
    session: `s${n}`,
    broker: 'fa4eb40c0e4f0001',
    limits: { ...LIMITS },
  };
}

/** An error answer. */
function errorAnswer(code, message) {
  return { ok: false, error: { code, message } };
}

function defaultOnRequest(msg, conn) {
  if (msg.op === 'hello') return helloAnswer(conn.n);
  if (msg.op === 'ping') return { ok: true, redis: 'up' };
  return errorAnswer('internal', `the fake broker does not do ${msg.op}`);
}

class FakeBroker {
  /**
   * Starts listening on 127.0.0.1 (a free port).
   * @param {object} [o]
   * @param {(conn) => void} [o.onConnection]  runs first for each connection
   * @param {(msg, conn) => object|null} [o.onRequest]  the answer, without id
   * @returns {Promise<FakeBroker>}
   */
  static async start(o = {}) {
    const fb = new FakeBroker(o);
    await new Promise((resolve, reject) => {
      fb.server.once('error', reject);
      fb.server.listen(0, '127.0.0.1', () => {
        fb.server.off('error', reject);
        resolve();
      });
    });
    fb.url = `tcp://127.0.0.1:${fb.server.address().port}`;
    return fb;
  }

  constructor(o) {
    this.onConnection = o.onConnection || null;
    this.onRequest = o.onRequest || defaultOnRequest;
    this.connections = []; // {n, at, socket, requests: [msg]}
    this.url = null;
    this.server = net.createServer((socket) => this._accept(socket));
  }

  _accept(socket) {
    const conn = { n: this.connections.length + 1, at: performance.now(), socket, requests: [] };
    this.connections.push(conn);
    socket.on('error', () => {}); // a client that resets is no failure of the fake
    if (this.onConnection) this.onConnection(conn);
    if (socket.destroyed) return;
    let buf = '';
    socket.setEncoding('utf8');
    socket.on('data', (text) => {
      buf += text;
      for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (line.trim() === '') continue;
        const msg = JSON.parse(line);
        conn.requests.push(msg);
        const ans = this.onRequest(msg, conn);
        if (ans && !socket.destroyed) this.send(conn, { id: msg.id === undefined ? null : msg.id, ...ans });
      }
    });
  }

  /** Writes one line (an answer or an event) on a connection. */
  send(conn, obj) {
    conn.socket.write(JSON.stringify(obj) + '\n');
  }

  /** Destroys every connection and closes the server. */
  async close() {
    for (const c of this.connections) c.socket.destroy();
    await new Promise((resolve) => this.server.close(() => resolve()));
  }
}

module.exports = { FakeBroker, helloAnswer, errorAnswer, LIMITS };
