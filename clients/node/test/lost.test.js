'use strict';
/*
 * lost.test.js - a lease lost while its withLock body runs: the lock's keys
 * are deleted in Redis behind the broker's back; the broker's next renewal
 * (ttl 600 ms, so about 200 ms later) finds the lease gone and sends `lost`.
 * The body sees its signal abort, the lease emits 'lost', and withLock
 * rejects with the loss instead of reporting a release that never happened.
 */

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const lb = require('..');
const { env, name, deleteLockKeys } = require('../test-support/helpers');

function aborted(signal) {
  return new Promise((resolve) => {
    if (signal.aborted) resolve();
    else signal.addEventListener('abort', () => resolve(), { once: true });
  });
}

describe('lost leases', () => {
  let client;

  before(async () => {
    client = await lb.connect({ url: env().url });
  });

  after(async () => {
    await client.close();
  });

  it('a loss during the body: signal aborted, lost emitted, withLock rejects', { timeout: 5000 }, async () => {
    const lock = name('lost');
    const events = [];
    const clientEvents = [];
    const onLost = (lease, err) => clientEvents.push([lease, err]);
    client.on('lost', onLost);
    let bodyLease;
    let after = null;
    const err = await client
      .withLock(
        lock,
        async (lease) => {
          bodyLease = lease;
          lease.on('lost', (e) => events.push(e));
          assert.ok((await deleteLockKeys(lock)) >= 1);
          await aborted(lease.signal);
          after = {
            state: lease.state,
            lost: lease.lost,
            reason: lease.signal.reason,
          };
          assert.throws(() => lease.throwIfLost(), lb.LeaseLostError);
          await assert.rejects(lease.extend(1000), lb.LeaseLostError);
          return 'the body finished';
        },
        { ttlMs: 600 },
      )
      .then(
        () => null,
        (e) => e,
      );
    client.off('lost', onLost);
    assert.ok(err instanceof lb.LeaseLostError, `withLock settled with ${err}`);
    assert.equal(err.code, 'lost');
    assert.ok(['gone', 'expired'].includes(err.reason), err.reason);
    assert.equal(err.lock, lock);
    assert.equal(err.fence, bodyLease.fence);
    assert.deepEqual(after, { state: 'lost', lost: true, reason: err });
    assert.deepEqual(events, [err]);
    assert.equal(clientEvents.length, 1);
    assert.equal(clientEvents[0][0], bodyLease);
    assert.equal(bodyLease.lostReason, err.reason);
  });

  it('a body that fails because of the loss rejects with the same loss', { timeout: 5000 }, async () => {
    const lock = name('lost2');
    let lostError;
    const err = await client
      .withLock(
        lock,
        async (lease) => {
          await deleteLockKeys(lock);
          await aborted(lease.signal);
          lostError = lease.lostError;
          lease.signal.throwIfAborted();
        },
        { ttlMs: 600 },
      )
      .catch((e) => e);
    assert.equal(err, lostError);
  });

  it('a loss with another body error keeps that error as the cause', { timeout: 5000 }, async () => {
    const lock = name('lost3');
    const err = await client
      .withLock(
        lock,
        async (lease) => {
          await deleteLockKeys(lock);
          await aborted(lease.signal);
          throw new Error('the write failed');
        },
        { ttlMs: 600 },
      )
      .catch((e) => e);
    assert.ok(err instanceof lb.LeaseLostError);
    assert.equal(err.cause.message, 'the write failed');
  });
});
