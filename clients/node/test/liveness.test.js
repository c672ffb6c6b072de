'use strict';
/*
 * liveness.test.js - client-side liveness checking, on by default (issue
 * 26, point 6: "a frozen broker leaves its holders believing").
 *
 * The scenario, with real brokers: the holder takes a lock through
 * a lockbrokerd of the test's own, with default options; a waiter waits for
 * it on the suite's broker (same Redis); the holder's broker is frozen
 * (SIGSTOP). The holder must hear of its loss ('lost', signal aborted,
 * reason 'disconnected') within about ttl/3, and before the waiter is
 * granted the lock when Redis lets the lease expire.
 *
 * Then, against a fake broker (test-support/fake-broker.js) that answers
 * pings until told to fall silent: the bound on the broker's silence
 * follows the shortest TTL the session holds (it applies as soon as the
 * first lease is granted, shrinks with a shorter lease, relaxes when that
 * one is released), keepaliveMs caps it, a session that holds nothing
 * sends no pings, and keepaliveMs: 0 turns the check off (no ping ever
 * written).
 */

const { describe, it } = require('node:test');
const assert = require('node:assert/strict');
const { once } = require('node:events');
const { performance } = require('node:perf_hooks');
const lb = require('..');
const { env, name, sleep, waitFor, startBroker } = require('../test-support/helpers');
const { FakeBroker, helloAnswer } = require('../test-support/fake-broker');

const TTL_MS = 3000;
// The loss must come within ttl/3 of the freeze; the margin is for a loaded
// 2-core machine (the waiter cannot be granted before about 2/3 ttl anyway).
const LOSS_WITHIN_MS = TTL_MS / 3 + 1000;

describe('liveness: a frozen broker (the issue)', () => {
  it(
    "the holder (default options) hears of its loss before the waiter is granted",
    { timeout: 30000 },
    async () => {
      const broker = await startBroker();
      const holder = new lb.Client({ url: broker.url, connectTimeoutMs: 1000 }); // default options
      const waiter = new lb.Client({ url: env().url }); // the suite's broker, same Redis
      const lock = name('frozen-default');
      try {
        const lease = await holder.acquire(lock, { ttlMs: TTL_MS, waitMs: 0 });
        let tLost = null;
        let tAborted = null;
        let lostErr = null;
        lease.on('lost', (err) => {
          tLost = performance.now();
          lostErr = err;
        });
        lease.signal.addEventListener('abort', () => {
          tAborted = performance.now();
        });
        let tGranted = null;
        const waiting = waiter.acquire(lock, { waitMs: 15000 }).then(async (l) => {
          tGranted = performance.now();
          await l.release();
        });
        await waitFor(async () => (await waiter.inspect(lock)).waiters === 1, 3000, 'the waiter to queue');

        const tStop = performance.now();
        broker.proc.kill('SIGSTOP');
        try {
          await waiting;
        } finally {
          broker.proc.kill('SIGCONT');
        }
        assert.notEqual(tLost, null, 'the holder never heard that its lease was lost');
        assert.equal(lostErr.reason, 'disconnected');
        assert.equal(lease.state, 'lost');
        assert.notEqual(tAborted, null, 'the lease signal did not abort');
        assert.ok(
          tLost < tGranted,
          `two holders: the waiter was granted ${Math.round(tGranted - tStop)} ms after the freeze, ` +
            `the holder heard of its loss only ${Math.round(tLost - tStop)} ms after`,
        );
        assert.ok(tAborted <= tLost);
        assert.ok(
          tLost - tStop < LOSS_WITHIN_MS,
          `the loss came ${Math.round(tLost - tStop)} ms after the freeze (ttl ${TTL_MS} ms)`,
        );
      } finally {
        broker.proc.kill('SIGCONT');
        await holder.close();
        await waiter.close();
        await broker.kill('SIGKILL');
      }
    },
  );
});

/**
 * A fake broker that grants every acquire (its ttl_ms, else 30000),
 * releases to count 0, answers ping, and answers nothing at all once
 * `silent` is set (the connection stays open: a frozen broker). `pings`
 * holds the performance.now() of each ping it received.
 */
async function silentFake() {
  const f = { silent: false, pings: [], seq: 0 };
  f.broker = await FakeBroker.start({
    onRequest: (msg, conn) => {
      if (msg.op === 'ping') f.pings.push(performance.now());
      if (f.silent) return null;
      if (msg.op === 'hello') return helloAnswer(conn.n);
      if (msg.op === 'acquire') {
        f.seq += 1;
        return {
          ok: true,
          lease: f.seq.toString(16).padStart(32, '0'),
          lock: msg.lock,
          mode: 'exclusive',
          fence: f.seq,
          ttl_ms: msg.ttl_ms != null ? msg.ttl_ms : 30000,
          count: 1,
        };
      }
      if (msg.op === 'release') return { ok: true, count: 0 };
      return { ok: true, redis: 'up' };
    },
  });
  f.pingsSince = (t) => f.pings.filter((p) => p >= t).length;
  f.requests = () => f.broker.connections.flatMap((c) => c.requests);
  f.hello = () => f.requests().find((m) => m.op === 'hello');
  return f;
}

/** Milliseconds until the lease is lost, or null if it was not within ms. */
async function lostWithin(lease, ms) {
  const t0 = performance.now();
  if (lease.state === 'lost') return 0;
  const ac = new AbortController();
  const lost = once(lease, 'lost', { signal: ac.signal }).then(() => performance.now() - t0);
  let timer;
  const late = new Promise((resolve) => {
    timer = setTimeout(() => resolve(null), ms);
  });
  try {
    return await Promise.race([lost, late]);
  } finally {
    clearTimeout(timer);
    ac.abort();
    lost.catch(() => {});
  }
}

describe('liveness: the bound (a fake broker)', () => {
  it('a session holding nothing does not ping; without keepaliveMs, hello has no keepalive_ms', async () => {
    const f = await silentFake();
    const c = await lb.connect({ url: f.broker.url });
    try {
      await c.ping();
      const t0 = performance.now();
      await sleep(1000);
      assert.equal(f.pingsSince(t0), 0);
      assert.equal(f.hello().keepalive_ms, undefined);
    } finally {
      await c.close();
      await f.broker.close();
    }
  });

  it('the first lease bound applies at once', async () => {
    const f = await silentFake();
    const c = await lb.connect({ url: f.broker.url });
    try {
      await c.ping();
      await sleep(300); // an idle session, unwatched
      const lease = await c.acquire('fake:first', { ttlMs: 600, waitMs: 0 }); // bound 200 ms
      f.silent = true;
      const took = await lostWithin(lease, 3000);
      assert.notEqual(took, null, 'a silent broker was not given up');
      assert.ok(took < 1000, `lost after ${Math.round(took)} ms`);
      assert.equal(lease.lostReason, 'disconnected');
      assert.match(lease.lostError.cause.message, /keepalive/);
      // The next request opens a new session.
      f.silent = false;
      assert.equal((await c.ping()).redis, 'up');
      assert.equal(c.serverInfo.session, 's2');
    } finally {
      await c.close();
      await f.broker.close();
    }
  });

  it('the bound shrinks with a shorter lease', async () => {
    const f = await silentFake();
    const c = await lb.connect({ url: f.broker.url });
    try {
      const long = await c.acquire('fake:long', { ttlMs: 30000, waitMs: 0 }); // bound 5000 ms (the default)
      const short = await c.acquire('fake:short', { ttlMs: 600, waitMs: 0 }); // bound 200 ms
      f.silent = true;
      const took = await lostWithin(short, 3000);
      assert.notEqual(took, null, "the shorter lease's bound did not apply");
      assert.ok(took < 1000, `lost after ${Math.round(took)} ms`);
      assert.equal(long.state, 'lost'); // the session ended: every lease lost
      assert.deepEqual([short.lostReason, long.lostReason], ['disconnected', 'disconnected']);
    } finally {
      await c.close();
      await f.broker.close();
    }
  });

  it('the bound relaxes when the shorter lease is released', async () => {
    const f = await silentFake();
    const c = await lb.connect({ url: f.broker.url });
    try {
      const long = await c.acquire('fake:long', { ttlMs: 30000, waitMs: 0 });
      const short = await c.acquire('fake:short', { ttlMs: 600, waitMs: 0 });
      const t0 = performance.now();
      await sleep(600);
      // 200 ms bound: a ping about every 67 ms (each answer plans the next).
      assert.ok(f.pingsSince(t0) >= 3, `${f.pingsSince(t0)} pings in 600 ms`);
      await short.release();
      const t1 = performance.now();
      await sleep(1000);
      // 5000 ms bound now: the next ping is due 1.67 s after the last answer.
      assert.ok(f.pingsSince(t1) <= 1, `${f.pingsSince(t1)} pings in 1 s`);
      f.silent = true;
      assert.equal(await lostWithin(long, 1500), null, 'given up as if the short lease were held');
      assert.equal(long.state, 'held');
    } finally {
      await c.close();
      await f.broker.close();
    }
  });

  it('keepaliveMs caps the bound, and goes in hello', async () => {
    const f = await silentFake();
    const c = await lb.connect({ url: f.broker.url, keepaliveMs: 1000 });
    try {
      const lease = await c.acquire('fake:capped', { ttlMs: 60000, waitMs: 0 }); // ttl/3 = 20 s; cap 1 s
      assert.equal(f.hello().keepalive_ms, 1000);
      f.silent = true;
      const took = await lostWithin(lease, 4000);
      assert.notEqual(took, null);
      assert.ok(took < 2500, `lost after ${Math.round(took)} ms`);
      assert.equal(lease.lostReason, 'disconnected');
    } finally {
      await c.close();
      await f.broker.close();
    }
  });

  it('keepaliveMs: 0 turns it off: not one ping', async () => {
    const f = await silentFake();
    const c = await lb.connect({ url: f.broker.url, keepaliveMs: 0 });
    try {
      const lease = await c.acquire('fake:off', { ttlMs: 300, waitMs: 0 }); // would be a 100 ms bound
      assert.equal(f.hello().keepalive_ms, undefined);
      await sleep(1000);
      f.silent = true;
      await sleep(500);
      assert.deepEqual(
        f.requests().map((m) => m.op),
        ['hello', 'acquire'],
      );
      assert.equal(lease.state, 'held');
    } finally {
      await c.close();
      await f.broker.close();
    }
  });

  it('keepaliveMs must be 0 or a whole number of ms', () => {
    for (const bad of [-1, 1.5, '5000', true]) {
      assert.throws(() => new lb.Client({ url: 'tcp://127.0.0.1:1', keepaliveMs: bad }), lb.InvalidArgumentError);
    }
    new lb.Client({ url: 'tcp://127.0.0.1:1', keepaliveMs: 0 });
    new lb.Client({ url: 'tcp://127.0.0.1:1', keepaliveMs: null });
  });

  it('close() leaves no timer behind', async () => {
    const f = await silentFake();
    const c = await lb.connect({ url: f.broker.url });
    try {
      const lease = await c.acquire('fake:close', { ttlMs: 600, waitMs: 0 });
      const session = c._session;
      assert.notEqual(session.liveTimer, null);
      await c.close();
      assert.equal(lease.lostReason, 'closed');
      assert.equal(session.liveTimer, null);
      const n = f.pings.length;
      await sleep(400);
      assert.equal(f.pings.length, n);
    } finally {
      await f.broker.close();
    }
  });
});
