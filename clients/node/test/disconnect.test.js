'use strict';
/*
 * disconnect.test.js - the connection drops under held leases. The test
 * starts its own lockbrokerd (against the suite's Redis) and kills it:
 * every lease of the session is reported lost ('disconnected'), a running
 * withLock rejects with that loss, a waiting acquire rejects with
 * ConnectionError, old leases are never sent again; once a broker listens
 * again, new requests reconnect and work with new tokens, and a detached
 * lease taken before the drop is released through the new session. A
 * frozen broker (SIGSTOP) is found by the client's keepalive.
 */

const { describe, it } = require('node:test');
const assert = require('node:assert/strict');
const { once } = require('node:events');
const lb = require('..');
const { name, startBroker } = require('../test-support/helpers');

describe('disconnect', () => {
  it(
    'a killed broker: leases lost (disconnected); a restarted one: new requests work',
    { timeout: 20000 },
    async () => {
      const broker = await startBroker();
      const client = new lb.Client({ url: broker.url, backoffMinMs: 20, backoffMaxMs: 200, connectTimeoutMs: 5000 });
      const lock = name('drop');
      const other = name('drop-other');
      const lease = await client.acquire(lock, { ttlMs: 1000, waitMs: 0 });
      const detached = await client.acquire(name('drop-detached'), { detach: true, ttlMs: 10000, waitMs: 0 });
      const waiting = client.acquire(lock, { waitMs: 10000 }).catch((e) => e);
      let bodySignal;
      let bodyStarted;
      const started = new Promise((resolve) => {
        bodyStarted = resolve;
      });
      const body = client
        .withLock(
          other,
          async (l) => {
            bodySignal = l.signal;
            bodyStarted();
            await new Promise((resolve) => l.signal.addEventListener('abort', resolve, { once: true }));
          },
          { ttlMs: 1000 },
        )
        .catch((e) => e);
      await started;
      const lostOne = once(lease, 'lost');
      const disconnected = once(client, 'disconnect');

      await broker.kill('SIGKILL');

      const [err] = await lostOne;
      assert.ok(err instanceof lb.LeaseLostError);
      assert.equal(err.reason, 'disconnected');
      assert.ok(err.cause instanceof lb.ConnectionError);
      assert.equal(lease.signal.aborted, true);
      const [discErr] = await disconnected;
      assert.ok(discErr instanceof lb.ConnectionError);
      const bodyErr = await body;
      assert.ok(bodyErr instanceof lb.LeaseLostError, String(bodyErr));
      assert.equal(bodyErr.reason, 'disconnected');
      assert.equal(bodySignal.aborted, true);
      const waitErr = await waiting;
      assert.ok(waitErr instanceof lb.ConnectionError, String(waitErr));
      assert.equal(client.connected, false);
      assert.equal(detached.state, 'held', 'a detached lease outlives its session');

      // The old lease is never sent again: it rejects locally with its loss.
      await assert.rejects(lease.release(), (e) => e === err);
      await assert.rejects(lease.extend(5000), (e) => e === err);

      // Nothing listens: a new client's request rejects with ConnectionError (at once: refused).
      const impatient = new lb.Client({ url: broker.url, connectTimeoutMs: 200, backoffMinMs: 20 });
      await assert.rejects(impatient.ping(), lb.ConnectionError);
      await impatient.close();

      // A broker listens again: new requests reconnect.
      const reconnected = once(client, 'reconnect');
      const requestBeforeRestart = client.ping();
      const again = await startBroker({ port: broker.port });
      try {
        // Answered by the new broker, which may not have reached Redis yet.
        assert.ok(['up', 'down'].includes((await requestBeforeRestart).redis));
        await reconnected;
        assert.equal(client.connected, true);
        // The dead broker's lease ends by its TTL (1 s) in Redis; then the lock is ours, with a new token.
        const fresh = await client.acquire(lock, { waitMs: 5000 });
        assert.notEqual(fresh.token, lease.token);
        assert.ok(fresh.fence > lease.fence);
        assert.equal(fresh.state, 'held');
        await fresh.release();
        // A detached lease is the one kind the new session may use.
        assert.equal(await detached.release(), 0);
        await client.close();
      } finally {
        await again.kill('SIGTERM');
      }
    },
  );

  it('a frozen broker is found by keepalive: leases lost (disconnected)', { timeout: 10000 }, async () => {
    const broker = await startBroker();
    const client = await lb.connect({ url: broker.url, keepaliveMs: 600 });
    try {
      const lease = await client.acquire(name('frozen'), { waitMs: 0 });
      const lost = once(lease, 'lost');
      broker.proc.kill('SIGSTOP');
      const t0 = Date.now();
      const [err] = await lost;
      assert.equal(err.reason, 'disconnected');
      assert.match(err.cause.message, /keepalive/);
      assert.ok(Date.now() - t0 < 2000);
    } finally {
      broker.proc.kill('SIGCONT');
      await client.close();
      await broker.kill('SIGKILL');
    }
  });
});
