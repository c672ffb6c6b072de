'use strict';
/*
 * unit.test.js - the parts that need no broker: URL parsing and the default
 * URL, line framing (split at every byte, CRLF, blank lines, the maximum),
 * the error table (every protocol code to its class), option checks.
 */

const { describe, it } = require('node:test');
const assert = require('node:assert/strict');
const lb = require('..');
const { LineReader } = require('../lib/framing');
const { camelize } = require('../lib/client');

describe('urls', () => {
  it('parses tcp and unix URLs', () => {
    assert.deepEqual(lb.parseUrl('tcp://127.0.0.1:7380'), {
      kind: 'tcp',
      host: '127.0.0.1',
      port: 7380,
      url: 'tcp://127.0.0.1:7380',
    });
    assert.equal(lb.parseUrl('TCP://[::1]:9').host, '::1');
    assert.equal(lb.parseUrl('tcp://broker-1.example:65535').port, 65535);
    assert.deepEqual(lb.parseUrl('unix:///run/lockbroker/lockbroker.sock'), {
      kind: 'unix',
      path: '/run/lockbroker/lockbroker.sock',
      url: 'unix:///run/lockbroker/lockbroker.sock',
    });
  });

  it('refuses what is not an address', () => {
    for (const bad of [
      '',
      'tcp://host',
      'tcp://:80',
      'tcp://h:0',
      'tcp://h:70000',
      'tcp://h:80/x',
      'tcp://::1:80',
      'tcp://[zz]:80',
      'unix://relative',
      'unix:///a?b',
      'redis://h:1',
      'http://h:80',
    ]) {
      assert.throws(() => lb.parseUrl(bad), lb.InvalidArgumentError, bad);
    }
  });

  it('defaults as lockctl does', () => {
    assert.equal(lb.defaultUrl({ LOCKBROKER_URL: 'tcp://10.0.0.1:1' }), 'tcp://10.0.0.1:1');
    const d = lb.defaultUrl({});
    assert.ok(d === 'tcp://127.0.0.1:7380' || d === 'unix:///run/lockbroker/lockbroker.sock');
  });
});

describe('framing', () => {
  const text = '{"a":1}\r\n  \n{"b":"\u00e9\u20ac"}\n\t\n{"c":[]}\n';

  it('gives the same lines whatever the split', () => {
    const bytes = Buffer.from(text);
    const whole = new LineReader().feed(bytes);
    assert.deepEqual(whole, ['{"a":1}', '{"b":"\u00e9\u20ac"}', '{"c":[]}']);
    for (let i = 0; i <= bytes.length; i++) {
      const r = new LineReader();
      const lines = [...r.feed(bytes.subarray(0, i)), ...r.feed(bytes.subarray(i))];
      assert.deepEqual(lines, whole, `split at ${i}`);
    }
    const r = new LineReader();
    const lines = [];
    for (const b of bytes) lines.push(...r.feed(Buffer.from([b])));
    assert.deepEqual(lines, whole);
  });

  it('fails past the maximum, without waiting for the newline, and stays failed', () => {
    const r = new LineReader(8);
    assert.deepEqual(r.feed(Buffer.from('12345678\r\n')), ['12345678']);
    assert.throws(() => r.feed(Buffer.from('123456789A')), lb.ProtocolError);
    assert.throws(() => r.feed(Buffer.from('\n')), lb.ProtocolError);
  });
});

describe('errors', () => {
  it('maps every protocol code to its own class', () => {
    const expected = {
      bad_json: lb.BadJsonError,
      bad_request: lb.BadRequestError,
      line_too_long: lb.LineTooLongError,
      unknown_op: lb.UnknownOpError,
      invalid_argument: lb.InvalidArgumentError,
      unauthorized: lb.UnauthorizedError,
      timeout: lb.LockTimeoutError,
      cancelled: lb.CancelledError,
      not_held: lb.NotHeldError,
      conflict: lb.ConflictError,
      upgrade_unsupported: lb.UpgradeUnsupportedError,
      limit_exceeded: lb.LimitExceededError,
      unavailable: lb.UnavailableError,
      shutting_down: lb.ShuttingDownError,
      internal: lb.InternalError,
    };
    assert.deepEqual(
      lb.WIRE_CODES.map(([code]) => code),
      Object.keys(expected),
    );
    const seen = new Set();
    for (const [code, cls] of Object.entries(expected)) {
      const err = lb.errorFromWire({ code, message: `the broker says ${code}` });
      assert.ok(err instanceof cls, code);
      assert.ok(err instanceof lb.LockbrokerError, code);
      assert.equal(err.code, code);
      assert.equal(err.name, cls.name);
      assert.equal(err.message, `the broker says ${code}`);
      assert.equal(err.fromBroker, true);
      seen.add(cls);
    }
    assert.equal(seen.size, Object.keys(expected).length);
  });

  it('keeps an unknown code on a LockbrokerError', () => {
    const err = lb.errorFromWire({ code: 'brand_new', message: 'm' });
    assert.equal(err.constructor, lb.LockbrokerError);
    assert.equal(err.code, 'brand_new');
  });

  it('gives client-side classes their own codes', () => {
    assert.equal(new lb.ConnectionError('x').code, 'connection');
    assert.equal(new lb.DeadlockError('x').code, 'deadlock');
    assert.equal(new lb.ProtocolError('x').code, 'protocol');
    const lost = new lb.LeaseLostError('x', { reason: 'gone', lock: 'l', fence: 3 });
    assert.equal(lost.code, 'lost');
    assert.equal(lost.reason, 'gone');
    assert.equal(lost.fromBroker, false);
  });
});

describe('options', () => {
  it('refuses unknown client options', () => {
    assert.throws(() => new lb.Client({ url: 'tcp://127.0.0.1:1', keepalive: 5 }), lb.InvalidArgumentError);
    assert.throws(
      () => new lb.Client({ url: 'tcp://127.0.0.1:1', auth: 'a', authFile: '/f' }),
      lb.InvalidArgumentError,
    );
    assert.throws(() => new lb.Client({ url: 'nope' }), lb.InvalidArgumentError);
  });

  it('refuses unknown acquire options before connecting', async () => {
    const c = new lb.Client({ url: 'tcp://127.0.0.1:1' });
    await assert.rejects(c.acquire('x', { ttl: 5 }), lb.InvalidArgumentError);
    await assert.rejects(
      c.withLock('x', () => {}, { wait_ms: 5 }),
      lb.InvalidArgumentError,
    );
    await assert.rejects(c.withLock('x', 'not a function'), TypeError);
    await assert.rejects(c.acquire('x', { owner: 'o', reentrant: true }), lb.InvalidArgumentError);
  });

  it('rejects with ConnectionError when nothing listens', async () => {
    const c = new lb.Client({ url: 'tcp://127.0.0.1:1', connectTimeoutMs: 300, backoffMinMs: 20 });
    const t0 = Date.now();
    await assert.rejects(c.ping(), lb.ConnectionError);
    assert.ok(Date.now() - t0 < 2000);
    await c.close();
  });

  it('close() ends a connect attempt at once, even one the server never answers', async () => {
    const net = require('node:net');
    const silent = net.createServer(() => {});
    await new Promise((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const c = new lb.Client({ url: `tcp://127.0.0.1:${silent.address().port}`, connectTimeoutMs: 10000 });
    const pending = c.ping().catch((e) => e);
    await new Promise((resolve) => setTimeout(resolve, 50));
    const t0 = Date.now();
    await c.close();
    assert.ok((await pending) instanceof lb.ConnectionError);
    assert.ok(Date.now() - t0 < 500);
    await assert.rejects(c.ping(), lb.ConnectionError);
    silent.close();
  });

  it('an AbortSignal also cancels the wait for a connection', async () => {
    const net = require('node:net');
    const silent = net.createServer(() => {});
    await new Promise((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const c = new lb.Client({ url: `tcp://127.0.0.1:${silent.address().port}`, connectTimeoutMs: 10000 });
    const ac = new AbortController();
    const pending = c.acquire('x', { signal: ac.signal }).catch((e) => e);
    setTimeout(() => ac.abort(), 50);
    const t0 = Date.now();
    const err = await pending;
    assert.ok(err instanceof lb.CancelledError, String(err));
    assert.equal(err.fromBroker, false);
    assert.ok(Date.now() - t0 < 500);
    await c.close();
    silent.close();
  });

  it('camelizes answers', () => {
    assert.deepEqual(camelize({ id: 1, ok: true, ttl_ms: 5, redis_masters: [{ addr: 'a', up: true }] }), {
      ttlMs: 5,
      redisMasters: [{ addr: 'a', up: true }],
    });
  });
});
