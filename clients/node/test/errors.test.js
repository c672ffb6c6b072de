'use strict';
/*
 * errors.test.js - every protocol error code the broker can be made to send
 * reaches the caller as its own class, with the code and the broker's
 * message: invalid_argument, unknown_op, bad_request, unauthorized,
 * timeout, cancelled, not_held, conflict, upgrade_unsupported,
 * limit_exceeded, unavailable, shutting_down; line_too_long is caught by the
 * client before the broker would close the session. (bad_json and internal
 * cannot be provoked by a correct client: fake-broker.test.js sends every
 * code of PROTOCOL.md, those included, from a broker of its own.)
 */

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { once } = require('node:events');
const lb = require('..');
const { env, name, freePort, startBroker } = require('../test-support/helpers');

/** Asserts that p rejects with an instance of cls whose code is `code` and that the broker sent. */
async function rejectsAs(p, cls, code) {
  const err = await p.then(
    () => null,
    (e) => e,
  );
  assert.ok(err instanceof cls, `expected ${cls.name}, got ${err && err.name}: ${err && err.message}`);
  assert.ok(err instanceof lb.LockbrokerError);
  assert.equal(err.code, code);
  assert.equal(err.fromBroker, true);
  assert.ok(typeof err.message === 'string' && err.message.length > 0);
  return err;
}

describe('errors from the broker', () => {
  let client;

  before(async () => {
    client = await lb.connect({ url: env().url });
  });

  after(async () => {
    await client.close();
  });

  it('invalid_argument', async () => {
    const err = await rejectsAs(client.acquire(name('bad'), { ttlMs: 5 }), lb.InvalidArgumentError, 'invalid_argument');
    assert.match(err.message, /ttl_ms/);
    await rejectsAs(client.acquire('', { waitMs: 0 }), lb.InvalidArgumentError, 'invalid_argument');
    await rejectsAs(client.acquire(name('bad'), { mode: 'sideways' }), lb.InvalidArgumentError, 'invalid_argument');
  });

  it('unknown_op and bad_request', async () => {
    const err = await rejectsAs(client.request('frobnicate'), lb.UnknownOpError, 'unknown_op');
    assert.match(err.message, /frobnicate/);
    await rejectsAs(client.request(42), lb.BadRequestError, 'bad_request');
  });

  it('timeout, cancelled, not_held, conflict, upgrade_unsupported', async () => {
    const lock = name('codes');
    const held = await client.acquire(lock, { mode: 'shared', owner: 'o1' });
    await rejectsAs(client.acquire(lock, { waitMs: 50 }), lb.LockTimeoutError, 'timeout');
    const ac = new AbortController();
    const pending = client.acquire(lock, { signal: ac.signal });
    setTimeout(() => ac.abort(), 50);
    await rejectsAs(pending, lb.CancelledError, 'cancelled');
    await rejectsAs(client.acquire(lock, { limit: 2, waitMs: 0 }), lb.ConflictError, 'conflict');
    await rejectsAs(
      client.acquire(lock, { owner: 'o1', waitMs: 0 }),
      lb.UpgradeUnsupportedError,
      'upgrade_unsupported',
    );
    const token = held.token;
    await held.release();
    await rejectsAs(client.release(token), lb.NotHeldError, 'not_held');
    await rejectsAs(client.extend(token, 1000), lb.NotHeldError, 'not_held');
  });

  it('line_too_long is refused before it is sent, and the session lives on', async () => {
    const err = await client.acquire('x'.repeat(70000), { waitMs: 0 }).catch((e) => e);
    assert.ok(err instanceof lb.LineTooLongError, String(err));
    assert.equal(err.code, 'line_too_long');
    assert.equal(err.fromBroker, false);
    assert.deepEqual(await client.ping(), { redis: 'up' });
  });
});

describe('errors from brokers of our own', () => {
  it('unauthorized (a broker that wants a secret, none given: ping works, the rest is refused)', async () => {
    const e = env();
    const c = new lb.Client({ url: e.authUrl });
    try {
      const pong = await c.ping();
      assert.equal(pong.redis, 'up');
      assert.equal(c.serverInfo, null, 'hello was refused: no server info');
      await rejectsAs(c.acquire(name('noauth'), { waitMs: 0 }), lb.UnauthorizedError, 'unauthorized');
      await rejectsAs(c.stats(), lb.UnauthorizedError, 'unauthorized');
    } finally {
      await c.close();
    }
  });

  it('unauthorized (a wrong secret): connect fails', async () => {
    const e = env();
    const c = new lb.Client({ url: e.authUrl, auth: 'wr0ng' });
    await rejectsAs(c.ping(), lb.UnauthorizedError, 'unauthorized');
    await c.close();
  });

  it('limit_exceeded, then shutting_down', { timeout: 15000 }, async () => {
    const broker = await startBroker({ args: ['--max-leases-per-session', '1', '--shutdown-grace-ms', '3000'] });
    const c = await lb.connect({ url: broker.url });
    try {
      const one = await c.acquire(name('limit1'), { waitMs: 0 });
      await rejectsAs(c.acquire(name('limit2'), { waitMs: 0 }), lb.LimitExceededError, 'limit_exceeded');
      const shutdown = once(c, 'shutdown');
      broker.proc.kill('SIGTERM');
      const [graceMs] = await shutdown;
      assert.equal(graceMs, 3000);
      await one.release();
      await rejectsAs(c.acquire(name('late'), { waitMs: 0 }), lb.ShuttingDownError, 'shutting_down');
    } finally {
      await c.close();
      await broker.kill('SIGKILL');
    }
  });

  it('unavailable (a broker whose Redis is down)', { timeout: 15000 }, async () => {
    const deadPort = await freePort();
    const broker = await startBroker({ redis: `redis://127.0.0.1:${deadPort}`, waitRedis: false });
    const c = await lb.connect({ url: broker.url });
    try {
      assert.deepEqual(await c.ping(), { redis: 'down' });
      await rejectsAs(c.acquire(name('unavail'), { waitMs: 0 }), lb.UnavailableError, 'unavailable');
    } finally {
      await c.close();
      await broker.kill('SIGKILL');
    }
  });
});
