'use strict';
/*
 * connect.test.js - reaching the broker: auth by value and by file against
 * the broker that wants a secret (and a wrong secret refused without
 * retries), the Unix socket, the default URL from $LOCKBROKER_URL, and an
 * idle client that does not keep its process alive.
 */

const { describe, it } = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const fs = require('node:fs');
const { execFile } = require('node:child_process');
const lb = require('..');
const { env, name } = require('../test-support/helpers');

describe('connect', () => {
  it('auth by value', async () => {
    const e = env();
    const c = await lb.connect({ url: e.authUrl, auth: e.authSecret, clientName: 'node-test/auth' });
    try {
      const lock = name('auth');
      await c.withLock(lock, async () => {
        const info = await c.inspect(lock);
        assert.equal(info.holders[0].client, 'node-test/auth');
      });
    } finally {
      await c.close();
    }
  });

  it('auth from a file (its trailing newline dropped)', async () => {
    const e = env();
    assert.ok(fs.readFileSync(e.authFile, 'utf8').endsWith('\n'));
    const c = await lb.connect({ url: e.authUrl, authFile: e.authFile });
    try {
      assert.deepEqual(await c.ping(), { redis: 'up' });
      await c.withLock(name('authfile'), () => {});
    } finally {
      await c.close();
    }
  });

  it('a wrong secret: UnauthorizedError at once, no retry loop', async () => {
    const e = env();
    const c = new lb.Client({ url: e.authUrl, auth: 'not the secret', connectTimeoutMs: 5000 });
    const t0 = Date.now();
    const err = await c.connect().catch((x) => x);
    assert.ok(err instanceof lb.UnauthorizedError, String(err));
    assert.ok(Date.now() - t0 < 1000);
    await c.close();
  });

  it('an unreadable auth file: InvalidArgumentError', async () => {
    const c = new lb.Client({ url: env().authUrl, authFile: path.join(env().tmp, 'no-such-file') });
    await assert.rejects(c.connect(), lb.InvalidArgumentError);
    await c.close();
  });

  it('the Unix socket', async () => {
    const c = await lb.connect({ url: env().unixUrl });
    try {
      const lock = name('unix');
      const fence = await c.withLock(lock, (lease) => lease.fence);
      assert.ok(fence > 0);
      assert.deepEqual(await c.ping(), { redis: 'up' });
    } finally {
      await c.close();
    }
  });

  it('the default URL is $LOCKBROKER_URL, as for lockctl', async () => {
    const c = new lb.Client();
    assert.equal(c.url, env().url);
    await c.connect();
    await c.close();
  });

  it('keepalive: a session with keepaliveMs stays up while idle', async () => {
    const c = await lb.connect({ url: env().url, keepaliveMs: 500 });
    try {
      const lease = await c.acquire(name('keepalive'), { waitMs: 0 });
      await new Promise((resolve) => setTimeout(resolve, 1200));
      assert.equal(lease.state, 'held');
      assert.equal(c.connected, true);
      await lease.release();
    } finally {
      await c.close();
    }
  });

  it('an idle client does not keep the process alive', { timeout: 10000 }, async () => {
    const script = `
      const lb = require(${JSON.stringify(path.join(__dirname, '..'))});
      lb.connect({ keepaliveMs: 1000 }).then(async (c) => {
        await c.withLock('node-test:exit:' + process.pid, () => {});
        console.log('done');
      });`;
    const t0 = Date.now();
    const out = await new Promise((resolve, reject) => {
      execFile(process.execPath, ['-e', script], { timeout: 5000 }, (err, stdout) =>
        err ? reject(err) : resolve(stdout),
      );
    });
    assert.equal(out.trim(), 'done');
    assert.ok(Date.now() - t0 < 4000);
  });
});
