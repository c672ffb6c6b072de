'use strict';
/*
 * wait.test.js - acquires that wait: granted when the holder releases,
 * LockTimeoutError when waitMs runs out, and cancellation by AbortSignal
 * (the broker withdraws the waiter; the call rejects with CancelledError).
 */

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const lb = require('..');
const { env, name, sleep, waitFor } = require('../test-support/helpers');

describe('waiting', () => {
  let client;

  before(async () => {
    client = await lb.connect({ url: env().url });
  });

  after(async () => {
    await client.close();
  });

  it('a waiting acquire is granted when the holder releases', async () => {
    const lock = name('handoff');
    const holder = await client.acquire(lock);
    let granted = null;
    const waiting = client.acquire(lock, { waitMs: 5000 }).then((l) => {
      granted = l;
      return l;
    });
    await waitFor(async () => (await client.inspect(lock)).waiters === 1, 2000, 'the waiter');
    assert.equal(granted, null);
    await holder.release();
    const lease = await waiting;
    assert.notEqual(lease.token, holder.token);
    assert.ok(lease.fence > holder.fence);
    await lease.release();
  });

  it('waitMs runs out: LockTimeoutError with the broker message', async () => {
    const lock = name('timeout');
    const holder = await client.acquire(lock);
    try {
      const t0 = Date.now();
      const err = await client.acquire(lock, { waitMs: 200 }).catch((e) => e);
      assert.ok(err instanceof lb.LockTimeoutError, String(err));
      assert.equal(err.code, 'timeout');
      assert.equal(err.fromBroker, true);
      assert.ok(err.message.length > 0);
      assert.ok(Date.now() - t0 >= 190);
      await assert.rejects(client.acquire(lock, { waitMs: 0 }), lb.LockTimeoutError);
    } finally {
      await holder.release();
    }
  });

  it('aborting the signal cancels a waiting acquire: CancelledError, waiter withdrawn', async () => {
    const lock = name('cancel');
    const holder = await client.acquire(lock);
    try {
      const ac = new AbortController();
      const pending = client.acquire(lock, { signal: ac.signal });
      await waitFor(async () => (await client.inspect(lock)).waiters === 1, 2000, 'the waiter');
      const t0 = Date.now();
      ac.abort(new Error('user gave up'));
      const err = await pending.catch((e) => e);
      assert.ok(err instanceof lb.CancelledError, String(err));
      assert.equal(err.code, 'cancelled');
      assert.equal(err.fromBroker, true, 'the broker answered the acquire with cancelled');
      assert.ok(Date.now() - t0 < 1000);
      await waitFor(async () => (await client.inspect(lock)).waiters === 0, 2000, 'the waiter to leave');
    } finally {
      await holder.release();
    }
  });

  it('withLock with an aborted signal never runs the body', async () => {
    const lock = name('cancel2');
    const ac = new AbortController();
    ac.abort();
    let ran = false;
    const err = await client
      .withLock(
        lock,
        () => {
          ran = true;
        },
        { signal: ac.signal },
      )
      .catch((e) => e);
    assert.ok(err instanceof lb.CancelledError);
    assert.equal(err.fromBroker, false);
    assert.equal(ran, false);
    assert.equal((await client.inspect(lock)).state, 'free');
  });

  it('a signal that aborts after the grant leaves the lease alone', async () => {
    const lock = name('late-abort');
    const ac = new AbortController();
    const lease = await client.acquire(lock, { signal: ac.signal, waitMs: 0 });
    ac.abort();
    await sleep(20);
    assert.equal(lease.state, 'held');
    assert.equal((await client.inspect(lock)).state, 'exclusive');
    await lease.release();
  });
});
