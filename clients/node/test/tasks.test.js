'use strict';
/*
 * tasks.test.js - one client shared by many async tasks: every task gets an
 * owner of its own, so tasks exclude each other instead of re-entering; a
 * body re-enters its own lock only when asked (reentrant: true), and asking
 * for it as a new owner is a DeadlockError instead of a wait for itself.
 */

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const lb = require('..');
const { env, name, sleep } = require('../test-support/helpers');

describe('tasks sharing a client', () => {
  let client;

  before(async () => {
    client = await lb.connect({ url: env().url });
  });

  after(async () => {
    await client.close();
  });

  it('concurrent withLock calls on one client exclude each other', async () => {
    const lock = name('mutex');
    let inside = 0;
    let most = 0;
    const owners = new Set();
    const tokens = new Set();
    await Promise.all(
      Array.from({ length: 8 }, () =>
        client.withLock(lock, async (lease) => {
          inside++;
          most = Math.max(most, inside);
          assert.equal(lease.count, 1, 'no task re-entered another task’s lease');
          owners.add(lease.owner);
          tokens.add(lease.token);
          await sleep(5);
          inside--;
        }),
      ),
    );
    assert.equal(most, 1);
    assert.equal(owners.size, 8);
    assert.equal(tokens.size, 8);
  });

  it('explicit acquires by two tasks do not share a lease', async () => {
    const lock = name('explicit');
    const a = await client.acquire(lock, { waitMs: 0 });
    await assert.rejects(client.acquire(lock, { waitMs: 0 }), lb.LockTimeoutError);
    await a.release();
  });

  it('sub-tasks inside a body take other locks as owners of their own', async () => {
    const outer = name('outer');
    const inner = name('inner');
    let inside = 0;
    let most = 0;
    await client.withLock(outer, async () => {
      await Promise.all(
        [1, 2, 3].map(() =>
          client.withLock(inner, async (lease) => {
            assert.equal(lease.count, 1);
            inside++;
            most = Math.max(most, inside);
            await sleep(5);
            inside--;
          }),
        ),
      );
    });
    assert.equal(most, 1);
  });

  it('asking again for the lock the body holds: DeadlockError, not a hang', async () => {
    const lock = name('self');
    await client.withLock(lock, async () => {
      const err = await client.withLock(lock, () => 'never').catch((e) => e);
      assert.ok(err instanceof lb.DeadlockError, String(err));
      assert.equal(err.code, 'deadlock');
    });
  });

  it('reentrant: true re-enters the enclosing lease, one level each', async () => {
    const lock = name('reenter');
    await client.withLock(lock, async (outer) => {
      const sameFence = await client.withLock(
        lock,
        async (inner) => {
          assert.equal(inner, outer, 'the same lease object');
          assert.equal(inner.count, 2);
          return inner.fence === outer.fence;
        },
        { reentrant: true },
      );
      assert.equal(sameFence, true);
      assert.equal(outer.count, 1);
      assert.equal(outer.state, 'held');
      assert.equal((await client.inspect(lock)).holders[0].count, 1);
    });
    assert.equal((await client.inspect(lock)).state, 'free');
  });

  it('an explicit owner is re-entered by whoever names it', async () => {
    const lock = name('owner');
    const a = await client.acquire(lock, { owner: 'worker-1', waitMs: 0 });
    const b = await client.acquire(lock, { owner: 'worker-1', waitMs: 0 });
    assert.equal(a, b);
    assert.equal(b.count, 2);
    await assert.rejects(client.acquire(lock, { owner: 'worker-2', waitMs: 0 }), lb.LockTimeoutError);
    assert.equal(await a.release(), 1);
    assert.equal(await a.release(), 0);
  });

  it('a shared holder asking the same lock exclusive: UpgradeUnsupportedError', async () => {
    const lock = name('upgrade');
    await client.withLock(
      lock,
      async () => {
        const err = await client.acquire(lock, { reentrant: true, waitMs: 0 }).catch((e) => e);
        assert.ok(err instanceof lb.UpgradeUnsupportedError, String(err));
        assert.equal(err.code, 'upgrade_unsupported');
      },
      { mode: 'shared' },
    );
  });

  it('taskScopes: false: no scope, re-entry only by naming the owner', async () => {
    const plain = await lb.connect({ url: env().url, taskScopes: false });
    try {
      const lock = name('noscope');
      await plain.withLock(lock, async (lease) => {
        await assert.rejects(plain.acquire(lock, { waitMs: 0 }), lb.LockTimeoutError);
        await assert.rejects(plain.acquire(lock, { reentrant: true }), lb.InvalidArgumentError);
        const again = await plain.acquire(lock, { owner: lease.owner, waitMs: 0 });
        assert.equal(again, lease);
        assert.equal(await again.release(), 1);
      });
    } finally {
      await plain.close();
    }
  });
});
