'use strict';
/*
 * tasks.test.js - one client shared by many async tasks, and reentrancy:
 * every withLock task gets an owner of its own, so tasks exclude each other
 * instead of re-entering; inside a withLock body, a call for the lock the
 * body holds re-enters it (same lease, count + 1, one level released each)
 * instead of waiting for itself; {reentrant: false} asks as a new owner and
 * waits; a lost enclosing lease rejects the nested call with the loss.
 */

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const lb = require('..');
const { env, name, sleep, deleteLockKeys } = require('../test-support/helpers');

function aborted(signal) {
  return new Promise((resolve) => {
    if (signal.aborted) resolve();
    else signal.addEventListener('abort', () => resolve(), { once: true });
  });
}

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

  it('plain acquires outside any scope are fresh owners: the second waits', async () => {
    const lock = name('explicit');
    const a = await client.acquire(lock, { waitMs: 0 });
    await assert.rejects(client.acquire(lock, { waitMs: 0 }), lb.LockTimeoutError);
    await assert.rejects(client.acquire(lock, { reentrant: true, waitMs: 0 }), lb.LockTimeoutError);
    const again = await client.acquire(lock, { owner: a.owner, waitMs: 0 });
    assert.equal(again, a);
    assert.equal(await again.release(), 1);
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

  it('a nested withLock of the lock re-enters: same token, count 2, levels unwind', async () => {
    const lock = name('nested');
    await client.withLock(lock, async (outer) => {
      assert.equal(outer.count, 1);
      const inner = await client.withLock(lock, async (lease) => {
        assert.equal(lease, outer, 'the same lease object');
        assert.equal(lease.token, outer.token);
        assert.equal(lease.fence, outer.fence);
        assert.equal(lease.count, 2);
        const info = await client.inspect(lock);
        assert.equal(info.holders.length, 1);
        assert.equal(info.holders[0].count, 2);
        assert.equal(info.holders[0].owner, outer.owner);
        // A third level, from the inner scope: still the same lease.
        const third = await client.withLock(lock, (l) => l.count, { waitMs: 0 });
        assert.equal(third, 3);
        assert.equal(lease.count, 2);
        return lease;
      });
      assert.equal(inner, outer);
      assert.equal(outer.count, 1);
      assert.equal(outer.state, 'held');
      assert.equal((await client.inspect(lock)).holders[0].count, 1);
    });
    assert.equal((await client.inspect(lock)).state, 'free');
  });

  it('a nested acquire inside withLock re-enters; its release drops one level', async () => {
    const lock = name('nested-acquire');
    let outerLease;
    await client.withLock(lock, async (outer) => {
      outerLease = outer;
      const again = await client.acquire(lock, { waitMs: 0 });
      assert.equal(again, outer);
      assert.equal(again.count, 2);
      assert.equal(await again.release(), 1);
      assert.equal(outer.state, 'held');
      assert.equal((await client.inspect(lock)).holders[0].count, 1);
    });
    assert.equal(outerLease.state, 'released');
    assert.equal((await client.inspect(lock)).state, 'free');
  });

  it('sub-tasks a body starts are in its scope: they re-enter its lock', async () => {
    const lock = name('subtasks-same');
    await client.withLock(lock, async (outer) => {
      const counts = await Promise.all(
        [1, 2, 3].map(() => client.withLock(lock, async (l) => (l === outer ? 'same' : 'other'), { waitMs: 0 })),
      );
      assert.deepEqual(counts, ['same', 'same', 'same']);
      assert.equal(outer.count, 1);
    });
    assert.equal((await client.inspect(lock)).state, 'free');
  });

  it('reentrant: false inside the scope asks as another owner and waits', async () => {
    const lock = name('not-reentrant');
    await client.withLock(lock, async (outer) => {
      const t0 = Date.now();
      const err = await client.acquire(lock, { reentrant: false, waitMs: 150 }).catch((e) => e);
      assert.ok(err instanceof lb.LockTimeoutError, String(err));
      assert.ok(Date.now() - t0 >= 100, 'it waited');
      await assert.rejects(client.withLock(lock, () => 'never', { reentrant: false, waitMs: 0 }), lb.LockTimeoutError);
      assert.equal(outer.count, 1);
      assert.equal((await client.inspect(lock)).holders[0].count, 1);
    });
    assert.equal((await client.inspect(lock)).state, 'free');
  });

  it('reentrant: false waits for the body, and is granted when it releases', async () => {
    const lock = name('not-reentrant-later');
    let waiter;
    let outerToken;
    await client.withLock(lock, async (outer) => {
      outerToken = outer.token;
      waiter = client.acquire(lock, { reentrant: false, waitMs: 5000 });
      await sleep(50);
    });
    const lease = await waiter;
    assert.notEqual(lease.token, outerToken);
    assert.equal(lease.count, 1);
    await lease.release();
  });

  it('two concurrent withLock tasks with nested re-entry exclude each other', async () => {
    const lock = name('two-tasks');
    let inside = 0;
    let most = 0;
    const tokens = [];
    await Promise.all(
      [1, 2].map(() =>
        client.withLock(lock, async (outer) => {
          inside++;
          most = Math.max(most, inside);
          tokens.push(outer.token);
          await sleep(20);
          const again = await client.acquire(lock, { waitMs: 0 });
          assert.equal(again, outer, 'each task re-enters its own lease only');
          assert.equal(again.count, 2);
          await again.release();
          inside--;
        }),
      ),
    );
    assert.equal(most, 1);
    assert.equal(new Set(tokens).size, 2);
  });

  it('a lost enclosing lease: the nested acquire rejects with the loss', { timeout: 5000 }, async () => {
    const lock = name('lost-outer');
    let lostError;
    const err = await client
      .withLock(
        lock,
        async (outer) => {
          await deleteLockKeys(lock);
          await aborted(outer.signal);
          lostError = outer.lostError;
          const nested = await client.acquire(lock, { waitMs: 0 }).catch((e) => e);
          assert.equal(nested, lostError);
          const nestedScope = await client.withLock(lock, () => 'never').catch((e) => e);
          assert.equal(nestedScope, lostError);
          await assert.rejects(client.acquire(lock, { reentrant: true, waitMs: 0 }), (e) => e === lostError);
          return 'done';
        },
        { ttlMs: 600 },
      )
      .catch((e) => e);
    assert.ok(lostError instanceof lb.LeaseLostError, String(lostError));
    assert.equal(err, lostError);
  });

  it('lockAll inside a scope re-enters the lock the body holds', async () => {
    const lock = name('all-outer');
    const other = name('all-other');
    await client.withLock(lock, async (outer) => {
      const [a, b] = await client.lockAll([lock, other], { waitMs: 1000 });
      assert.equal(a, outer);
      assert.equal(outer.count, 2);
      assert.equal(b.count, 1);
      assert.equal(b.owner, outer.owner);
      await a.release();
      await b.release();
    });
    assert.equal((await client.inspect(lock)).state, 'free');
    assert.equal((await client.inspect(other)).state, 'free');
  });

  it('lockAll over locks held by two enclosing owners: DeadlockError, not a wait', async () => {
    const a = name('all-a');
    const b = name('all-b');
    await client.withLock(a, async () => {
      await client.withLock(b, async () => {
        const err = await client.lockAll([a, b], { waitMs: 0 }).catch((e) => e);
        assert.ok(err instanceof lb.DeadlockError, String(err));
        assert.equal(err.code, 'deadlock');
      });
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
      async (outer) => {
        const err = await client.acquire(lock, { reentrant: true, waitMs: 0 }).catch((e) => e);
        assert.ok(err instanceof lb.UpgradeUnsupportedError, String(err));
        assert.equal(err.code, 'upgrade_unsupported');
        const byDefault = await client.acquire(lock, { waitMs: 0 }).catch((e) => e);
        assert.ok(byDefault instanceof lb.UpgradeUnsupportedError, String(byDefault));
        const shared = await client.acquire(lock, { mode: 'shared', waitMs: 0 });
        assert.equal(shared, outer);
        assert.equal(await shared.release(), 1);
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
        await assert.rejects(plain.withLock(lock, () => 'never', { waitMs: 0 }), lb.LockTimeoutError);
        await assert.rejects(plain.acquire(lock, { reentrant: false, waitMs: 0 }), lb.LockTimeoutError);
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
