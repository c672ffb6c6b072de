'use strict';
/*
 * modes.test.js - shared (read) locks and semaphores: shared holders
 * coexist and keep an exclusive one out; a semaphore grants `limit` permits
 * at once, each its own lease; a name used as both is a ConflictError.
 */

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const lb = require('..');
const { env, name, sleep } = require('../test-support/helpers');

describe('modes', () => {
  let client;

  before(async () => {
    client = await lb.connect({ url: env().url });
  });

  after(async () => {
    await client.close();
  });

  it('shared holders coexist and keep an exclusive acquire waiting', async () => {
    const lock = name('rw');
    const r1 = await client.acquire(lock, { mode: 'shared', waitMs: 0 });
    const r2 = await client.acquire(lock, { mode: 'shared', waitMs: 0 });
    assert.equal(r1.mode, 'shared');
    assert.notEqual(r1.token, r2.token, 'two tasks, two owners, two leases');
    const info = await client.inspect(lock);
    assert.equal(info.state, 'shared');
    assert.equal(info.holders.length, 2);
    await assert.rejects(client.acquire(lock, { waitMs: 0 }), lb.LockTimeoutError);
    const writer = client.acquire(lock, { waitMs: 5000 });
    await r1.release();
    await sleep(30);
    assert.equal((await client.inspect(lock)).state, 'shared');
    await r2.release();
    const w = await writer;
    assert.equal(w.mode, 'exclusive');
    await w.release();
  });

  it('concurrent withLock readers run together, a writer alone', async () => {
    const lock = name('rw2');
    let readers = 0;
    let maxReaders = 0;
    let writerSawReaders = -1;
    const read = () =>
      client.withLock(
        lock,
        async () => {
          readers++;
          maxReaders = Math.max(maxReaders, readers);
          await sleep(40);
          readers--;
        },
        { mode: 'shared' },
      );
    await Promise.all([
      read(),
      read(),
      read(),
      (async () => {
        await sleep(10);
        await client.withLock(lock, () => {
          writerSawReaders = readers;
        });
      })(),
    ]);
    assert.equal(maxReaders, 3);
    assert.equal(writerSawReaders, 0);
  });

  it('a semaphore grants limit permits, each a lease of its own', async () => {
    const sem = name('sem');
    const p1 = await client.acquire(sem, { limit: 2, waitMs: 0 });
    const p2 = await client.acquire(sem, { limit: 2, waitMs: 0 });
    assert.equal(p1.mode, 'permit');
    assert.notEqual(p1.token, p2.token);
    assert.notEqual(p1.fence, p2.fence);
    const info = await client.inspect(sem);
    assert.equal(info.state, 'semaphore');
    assert.equal(info.limit, 2);
    await assert.rejects(client.acquire(sem, { limit: 2, waitMs: 0 }), lb.LockTimeoutError);
    const third = client.acquire(sem, { limit: 2, waitMs: 5000 });
    await p1.release();
    const p3 = await third;
    await p2.release();
    await p3.release();
  });

  it('at most limit bodies run at once under withLock', async () => {
    const sem = name('sem2');
    let inside = 0;
    let most = 0;
    await Promise.all(
      Array.from({ length: 6 }, () =>
        client.withLock(
          sem,
          async () => {
            inside++;
            most = Math.max(most, inside);
            await sleep(15);
            inside--;
          },
          { limit: 2 },
        ),
      ),
    );
    assert.equal(most, 2);
  });

  it('a lock name used as a semaphore: ConflictError', async () => {
    const lock = name('conflict');
    await client.withLock(lock, async () => {
      const err = await client.acquire(lock, { limit: 3, waitMs: 0 }).catch((e) => e);
      assert.ok(err instanceof lb.ConflictError, String(err));
      assert.equal(err.code, 'conflict');
    });
  });
});
