'use strict';
/*
 * locks.test.js - scoped and explicit locks against the suite's broker:
 * withLock acquires, runs and releases; acquire/release by hand; extend,
 * inspect, leases, stats, ping; detached leases released by token from
 * another client; max_hold_ms and watchdog:false losses; a client closed
 * under a running body.
 */

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { once } = require('node:events');
const util = require('node:util');
const lb = require('..');
const { env, name, waitFor } = require('../test-support/helpers');

describe('locks', () => {
  let client;

  before(async () => {
    client = await lb.connect({ url: env().url, clientName: 'node-test/locks' });
  });

  after(async () => {
    await client.close();
  });

  it('says hello and pings', async () => {
    const info = client.serverInfo;
    assert.equal(info.proto, 1);
    assert.match(info.server, /^lockbroker\//);
    assert.equal(typeof info.limits.maxLine, 'number');
    assert.deepEqual(await client.ping(), { redis: 'up' });
  });

  it('withLock acquires, runs the body with the lease, and releases', async () => {
    const lock = name('scoped');
    const result = await client.withLock(lock, async (lease) => {
      assert.ok(lease instanceof lb.Lease);
      assert.equal(lease.lock, lock);
      assert.equal(lease.mode, 'exclusive');
      assert.equal(lease.state, 'held');
      assert.equal(lease.count, 1);
      assert.ok(Number.isSafeInteger(lease.fence) && lease.fence > 0);
      assert.match(lease.token, /^[0-9a-f]{32,}$/);
      assert.equal(lease.signal.aborted, false);
      assert.ok(!util.inspect(lease).includes(lease.token), 'inspect shows no full token');
      assert.ok(!JSON.stringify(lease).includes(lease.token), 'toJSON shows no full token');
      const info = await client.inspect(lock);
      assert.equal(info.state, 'exclusive');
      assert.equal(info.holders.length, 1);
      assert.equal(info.holders[0].client, 'node-test/locks');
      assert.equal(info.holders[0].owner, lease.owner);
      assert.equal(info.fence, lease.fence);
      return 'body result';
    });
    assert.equal(result, 'body result');
    assert.equal((await client.inspect(lock)).state, 'free');
  });

  it('withLock releases when the body throws, and rethrows', async () => {
    const lock = name('throws');
    let seen;
    await assert.rejects(
      client.withLock(lock, (lease) => {
        seen = lease;
        throw new Error('boom');
      }),
      /boom/,
    );
    assert.equal(seen.state, 'released');
    assert.equal((await client.inspect(lock)).state, 'free');
  });

  it('fences increase with every grant', async () => {
    const lock = name('fence');
    const a = await client.withLock(lock, (l) => l.fence);
    const b = await client.withLock(lock, (l) => l.fence);
    assert.ok(b > a);
  });

  it('acquire and release by hand; extend; leases; stats', async () => {
    const lock = name('explicit');
    const lease = await client.acquire(lock, { ttlMs: 5000, waitMs: 0 });
    assert.equal(lease.ttlMs, 5000);
    assert.equal(await lease.extend(20000), 20000);
    assert.equal(lease.ttlMs, 20000);
    const mine = (await client.leases()).find((l) => l.lease === lease.token);
    assert.ok(mine);
    assert.equal(mine.lock, lock);
    assert.equal(mine.fence, lease.fence);
    const stats = await client.stats();
    assert.equal(stats.redis, 'up');
    assert.ok(stats.leases >= 1);
    assert.ok(stats.acquiredTotal >= 1);
    assert.equal(await lease.release(), 0);
    assert.equal(lease.state, 'released');
    await assert.rejects(lease.release(), lb.NotHeldError);
    await assert.rejects(lease.extend(1000), lb.NotHeldError);
    assert.equal(
      (await client.leases()).find((l) => l.lease === lease.token),
      undefined,
    );
  });

  it('a detached lease outlives its client and is released by token', async () => {
    const lock = name('detach');
    const other = await lb.connect({ url: env().url });
    const lease = await other.acquire(lock, { detach: true, ttlMs: 10000, waitMs: 0 });
    assert.equal(lease.detached, true);
    await other.close();
    assert.equal(lease.state, 'held', 'a detached lease is not lost with its session');
    assert.equal((await client.inspect(lock)).state, 'exclusive');
    assert.equal(await client.extend(lease.token, 15000), 15000);
    assert.equal(await client.release(lease.token), 0);
    assert.equal((await client.inspect(lock)).state, 'free');
    await assert.rejects(client.release(lease.token), lb.NotHeldError);
  });

  it('max_hold_ms ends the lease: lost with reason max_hold', async () => {
    const lock = name('maxhold');
    const lease = await client.acquire(lock, { maxHoldMs: 150, waitMs: 0 });
    const [err] = await once(lease, 'lost');
    assert.ok(err instanceof lb.LeaseLostError);
    assert.equal(err.reason, 'max_hold');
    assert.equal(lease.lost, true);
    assert.equal(lease.signal.reason, err);
    await assert.rejects(lease.release(), (e) => e === err);
  });

  it('a watchdog:false lease not extended is lost (expired); the client emits lost', async () => {
    const lock = name('nowatchdog');
    const seen = once(client, 'lost');
    const lease = await client.acquire(lock, { watchdog: false, ttlMs: 150, waitMs: 0 });
    const [which, err] = await seen;
    assert.equal(which, lease);
    assert.equal(err.reason, 'expired');
  });

  it('closing the client under a running body: lost (closed), withLock rejects', async () => {
    const other = await lb.connect({ url: env().url });
    const lock = name('closed');
    const err = await other
      .withLock(lock, async (lease) => {
        await other.close();
        assert.equal(lease.signal.aborted, true);
      })
      .catch((e) => e);
    assert.ok(err instanceof lb.LeaseLostError, String(err));
    assert.equal(err.reason, 'closed');
    // The broker releases the session's leases once it sees the connection end.
    await waitFor(async () => (await client.inspect(lock)).state === 'free', 2000, 'the release');
  });
});
