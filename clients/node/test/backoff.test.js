'use strict';
/*
 * backoff.test.js - how often the client tries to connect, watched from a
 * server of the test's own that times every connection it accepts
 * (test-support/fake-broker.js). What README.md and lib/client.js say:
 *  - attempts after a failure are spaced by backoffMinMs doubling up to
 *    backoffMaxMs, each delay jittered to 50..100% of its value; the delay
 *    goes on growing across requests (a new request does not start again
 *    from backoffMinMs, nor at once), so requests in a loop against a broker
 *    that is down stay bounded;
 *  - the client does not reconnect on its own after a drop: the next
 *    request does, at once after a session that had lived (>= 1 s), after
 *    the backoff after a session that ended within 1 s of its hello (a
 *    broker that accepts and then drops every session is not hammered).
 * Only lower bounds on time are asserted (a loaded machine only makes
 * things slower), plus counts with wide margins. Needs no lockbrokerd.
 */

const { describe, it } = require('node:test');
const assert = require('node:assert/strict');
const { once } = require('node:events');
const { performance } = require('node:perf_hooks');
const lb = require('..');
const { FakeBroker } = require('../test-support/fake-broker');
const { sleep } = require('../test-support/helpers');

/* Timer and clock rounding: a delay may look up to this much shorter when measured. */
const SLACK_MS = 3;

describe('reconnect backoff', () => {
  it(
    'requests in a loop against a broker that drops every connection: attempts spaced by the doubling backoff, capped',
    { timeout: 20000 },
    async () => {
      const MIN = 10;
      const MAX = 40;
      const broker = await FakeBroker.start({ onConnection: (conn) => conn.socket.destroy() });
      const client = new lb.Client({ url: broker.url, backoffMinMs: MIN, backoffMaxMs: MAX, connectTimeoutMs: 300 });
      let requests = 0;
      let elapsed;
      try {
        const t0 = performance.now();
        while (performance.now() - t0 < 1500) {
          // Three at once: they share one connect loop.
          const results = await Promise.allSettled([client.ping(), client.stats(), client.acquire('x', { waitMs: 0 })]);
          for (const r of results) {
            assert.equal(r.status, 'rejected');
            assert.ok(r.reason instanceof lb.ConnectionError, String(r.reason));
          }
          requests += 1;
        }
        elapsed = performance.now() - t0;
      } finally {
        await client.close();
        await broker.close();
      }

      const at = broker.connections.map((c) => c.at);
      const n = at.length;
      assert.ok(requests >= 3, `${requests} rounds of requests (each waits at most connectTimeoutMs)`);
      assert.ok(n >= 3, `${n} attempts: it kept trying`);

      // The k-th delay (k = 1, 2, ...) is jittered from min(MIN * 2^(k-1), MAX): at least half of it.
      const nominal = (k) => Math.min(MIN * 2 ** (k - 1), MAX);
      for (let k = 1; k < n; k++) {
        const gap = at[k] - at[k - 1];
        assert.ok(
          gap >= nominal(k) / 2 - SLACK_MS,
          `attempt ${k + 1} came ${gap.toFixed(1)} ms after the one before, under half of the ${nominal(k)} ms backoff ` +
            `(gaps: ${gapsText(at)})`,
        );
      }

      // Bounded: no more attempts than those delays leave room for in the time the loop ran.
      const most = attemptsWithin(elapsed, (k) => nominal(k) / 2 - SLACK_MS);
      assert.ok(n <= most, `${n} attempts in ${elapsed.toFixed(0)} ms; the backoff allows at most ${most}`);

      // Capped at MAX: had the delay kept doubling, this many attempts could not fit in the time.
      const uncapped = attemptsWithin(elapsed, (k) => (MIN * 2 ** (k - 1)) / 2);
      assert.ok(
        n > uncapped,
        `${n} attempts in ${elapsed.toFixed(0)} ms, no more than a backoff doubling past backoffMaxMs ` +
          `(${MAX} ms) would allow (${uncapped}): gaps ${gapsText(at)}`,
      );
    },
  );

  it(
    'after a session that lived: no reconnect on its own; the next request reconnects at once',
    { timeout: 20000 },
    async () => {
      const MIN = 3000; // a delayed attempt would wait at least MIN / 2
      const broker = await FakeBroker.start(); // answers hello and ping
      const client = new lb.Client({ url: broker.url, backoffMinMs: MIN, backoffMaxMs: MIN, connectTimeoutMs: 20000 });
      try {
        const t0 = performance.now();
        await client.connect();
        assert.equal(broker.connections.length, 1);
        assert.ok(broker.connections[0].at - t0 < MIN / 2, 'the first attempt does not wait');

        // The session lives over 1 s, then drops.
        await sleep(1200);
        const disconnected = once(client, 'disconnect');
        broker.connections[0].socket.destroy();
        const [err] = await disconnected;
        assert.ok(err instanceof lb.ConnectionError);
        assert.equal(client.connected, false);
        await sleep(300);
        assert.equal(broker.connections.length, 1, 'no reconnect without a request');

        const reconnected = once(client, 'reconnect');
        const t1 = performance.now();
        assert.deepEqual(await client.ping(), { redis: 'up' });
        const [info] = await reconnected;
        assert.equal(info.session, 's2');
        assert.equal(broker.connections.length, 2);
        const waited = broker.connections[1].at - t1;
        assert.ok(waited < MIN / 2, `the reconnect after a stable session waited ${waited.toFixed(0)} ms`);
      } finally {
        await client.close();
        await broker.close();
      }
    },
  );

  it(
    'after a session that ended within 1 s of its hello: the next attempt waits for the backoff',
    { timeout: 20000 },
    async () => {
      const MIN = 800;
      const broker = await FakeBroker.start();
      const client = new lb.Client({ url: broker.url, backoffMinMs: MIN, backoffMaxMs: MIN, connectTimeoutMs: 20000 });
      try {
        await client.connect();
        const disconnected = once(client, 'disconnect');
        const t0 = performance.now();
        broker.connections[0].socket.destroy();
        await disconnected;
        assert.deepEqual(await client.ping(), { redis: 'up' });
        assert.equal(broker.connections.length, 2);
        const waited = broker.connections[1].at - t0;
        assert.ok(
          waited >= MIN / 2 - SLACK_MS,
          `the reconnect after a session of a few ms came ${waited.toFixed(0)} ms after the drop, before the backoff`,
        );
      } finally {
        await client.close();
        await broker.close();
      }
    },
  );
});

/** How many attempts fit in ms when the k-th gap is at least gap(k). */
function attemptsWithin(ms, gap) {
  let n = 1;
  let t = 0;
  for (;;) {
    t += Math.max(0, gap(n));
    if (t > ms) return n;
    n += 1;
    if (n > 100000) return n;
  }
}

function gapsText(at) {
  return at
    .slice(1)
    .map((t, i) => (t - at[i]).toFixed(0))
    .join(',');
}
