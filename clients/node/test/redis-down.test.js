'use strict';
/*
 * redis-down.test.js - Redis goes away under a held lease. The test runs
 * its own redis-server (append-only, fsync always, so a restart keeps the
 * lock) and its own lockbrokerd: while Redis is down, new acquires answer
 * UnavailableError and withLock's release, answered `unavailable`, is tried
 * again until Redis is back; then it succeeds and the lock is free.
 */

const { describe, it } = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const fs = require('node:fs');
const lb = require('..');
const { env, name, sleep, waitFor, startBroker, startRedis } = require('../test-support/helpers');

describe('redis down', () => {
  it("withLock's release waits out a Redis restart; the lock ends free", { timeout: 20000 }, async () => {
    const dir = fs.mkdtempSync(path.join(env().tmp, 'redis-down-'));
    let redis = await startRedis({ dir });
    const broker = await startBroker({ redis: `redis://127.0.0.1:${redis.port}` });
    const client = await lb.connect({ url: broker.url });
    const lock = name('redis-down');
    try {
      let restarted = null;
      const result = await client.withLock(lock, async (lease) => {
        await redis.kill('SIGKILL');
        await waitFor(async () => (await client.ping()).redis === 'down', 5000, 'the broker to see Redis down');
        const err = await client.acquire(name('other'), { waitMs: 0 }).catch((e) => e);
        assert.ok(err instanceof lb.UnavailableError, String(err));
        restarted = sleep(300).then(async () => {
          redis = await startRedis({ dir, port: redis.port });
        });
        assert.equal(lease.state, 'held');
        return 'the body finished while Redis was down';
      });
      assert.equal(result, 'the body finished while Redis was down');
      await restarted;
      const info = await client.inspect(lock);
      assert.equal(info.state, 'free');
    } finally {
      await client.close();
      await broker.kill('SIGKILL');
      await redis.kill('SIGKILL');
    }
  });
});
