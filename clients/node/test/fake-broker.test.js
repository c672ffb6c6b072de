'use strict';
/*
 * fake-broker.test.js - errors that travel over a real connection from a
 * broker of the test's own (test-support/fake-broker.js), which sends what
 * lockbrokerd never sends to a correct client: every error code that
 * protocol/PROTOCOL.md lists (bad_json, line_too_long and internal among
 * them) as the answer to each kind of call, and as the answer to hello.
 * Each reaches the caller as its own class, with the code and the broker's
 * message, and leaves the session as it was; a refused hello is not tried
 * again. Also the broker's real way of ending a session for line_too_long
 * (an answer with "id": null, a closing event, the close). Needs no
 * lockbrokerd.
 */

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const lb = require('..');
const { FakeBroker, helloAnswer, errorAnswer } = require('../test-support/fake-broker');
const { readErrorCodes } = require('../test-support/protocol-doc');

const CODES = readErrorCodes(path.join(__dirname, '../../../protocol/PROTOCOL.md'));
const CLASS_OF = new Map(lb.WIRE_CODES);

/** The broker's message for code C answering op: quotes and non-ASCII, to see it arrive verbatim. */
function message(code, op) {
  return `fake broker: ${code} for "${op}" \u00e9\u20ac`;
}

/** Each kind of call, with the op it sends. */
const CALLS = [
  ['ping', (c) => c.ping()],
  ['acquire', (c) => c.acquire('fake:lock', { waitMs: 0, ttlMs: 1000 })],
  ['acquire', (c) => c.acquire('fake:lock', { signal: new AbortController().signal })],
  [
    'acquire',
    (c) =>
      c.withLock('fake:lock', () => {
        throw new Error('the body ran without the lock');
      }),
  ],
  ['release', (c) => c.release('0123456789abcdef0123456789abcdef')],
  ['extend', (c) => c.extend('0123456789abcdef0123456789abcdef', 1000)],
  ['inspect', (c) => c.inspect('fake:lock')],
  ['leases', (c) => c.leases()],
  ['stats', (c) => c.stats()],
  ['frobnicate', (c) => c.request('frobnicate', { x: 1 })],
];

/** Asserts err is the class of `code` (a plain LockbrokerError for an unknown one), sent by the broker. */
function assertBrokerError(err, code, msg) {
  assert.ok(err instanceof lb.LockbrokerError, `${code}: got ${err && err.stack}`);
  const cls = CLASS_OF.get(code) || lb.LockbrokerError;
  assert.equal(err.constructor, cls, `${code}: expected ${cls.name}, got ${err.constructor.name}`);
  assert.equal(err.name, cls.name);
  assert.equal(err.code, code);
  assert.equal(err.message, msg);
  assert.equal(err.fromBroker, true, code);
}

describe('errors sent by a fake broker', () => {
  let broker;
  let failWith = null; // the code every request but hello is answered with, or null

  before(async () => {
    broker = await FakeBroker.start({
      onRequest: (msg, conn) => {
        if (msg.op === 'hello') return helloAnswer(conn.n);
        if (failWith !== null) return errorAnswer(failWith, message(failWith, msg.op));
        if (msg.op === 'ping') return { ok: true, redis: 'up' };
        return errorAnswer('internal', `unexpected ${msg.op}`);
      },
    });
  });

  after(async () => {
    await broker.close();
  });

  it('PROTOCOL.md lists the codes a correct client never provokes', () => {
    for (const code of ['bad_json', 'line_too_long', 'internal']) assert.ok(CODES.includes(code), code);
  });

  it('every code of PROTOCOL.md, answering every kind of call, reaches the caller as its class', async () => {
    const client = await lb.connect({ url: broker.url, connectTimeoutMs: 5000 });
    try {
      assert.equal(client.serverInfo.session, 's1');
      assert.equal(client.serverInfo.limits.maxLine, 65536);
      const classes = new Set();
      for (const code of [...CODES, 'a_code_of_a_newer_broker']) {
        failWith = code;
        for (const [op, call] of CALLS) {
          const before = broker.connections[0].requests.length;
          const err = await call(client).then(
            (v) => assert.fail(`${code}: ${op} resolved with ${JSON.stringify(v)}`),
            (e) => e,
          );
          assertBrokerError(err, code, message(code, op));
          const sent = broker.connections[0].requests.slice(before);
          assert.deepEqual(
            sent.map((m) => m.op),
            [op],
            `${code}: one ${op} request was sent, nothing else (no cancel, no release)`,
          );
        }
        if (CLASS_OF.has(code)) classes.add(CLASS_OF.get(code));
        // The session survives an error answer: same connection, still usable.
        failWith = null;
        assert.deepEqual(await client.ping(), { redis: 'up' });
        assert.equal(client.connected, true);
      }
      assert.equal(classes.size, CODES.length, 'one class per code');
      assert.equal(broker.connections.length, 1, 'no error answer dropped the session');
    } finally {
      failWith = null;
      await client.close();
    }
  });

  it('every code of PROTOCOL.md, answering hello, rejects connect() with its class, without retries', async () => {
    for (const code of CODES) {
      const fake = await FakeBroker.start({
        onRequest: (msg) =>
          msg.op === 'hello' ? errorAnswer(code, message(code, 'hello')) : { ok: true, redis: 'up' },
      });
      // With a secret: without one, an unauthorized hello opens the session
      // (the next test).
      const client = new lb.Client({
        url: fake.url,
        auth: 's3cret',
        connectTimeoutMs: 10000,
        backoffMinMs: 10,
        backoffMaxMs: 20,
      });
      try {
        const err = await client.connect().then(
          () => assert.fail(`${code}: connect() resolved`),
          (e) => e,
        );
        assertBrokerError(err, code, message(code, 'hello'));
        assert.equal(client.connected, false);
        assert.equal(client.serverInfo, null);
        assert.equal(fake.connections.length, 1, `${code}: the refused hello was not tried again`);
        assert.deepEqual(
          fake.connections[0].requests.map((m) => m.op),
          ['hello'],
        );
      } finally {
        await client.close();
        await fake.close();
      }
    }
  });

  it('unauthorized answering a hello without a secret opens the session; any other code does not', async () => {
    const fake = await FakeBroker.start({
      onRequest: (msg) =>
        msg.op === 'hello'
          ? errorAnswer('unauthorized', message('unauthorized', 'hello'))
          : { ok: true, redis: 'up' },
    });
    const client = new lb.Client({ url: fake.url, connectTimeoutMs: 10000 });
    try {
      await client.connect();
      assert.equal(client.connected, true);
      assert.equal(client.serverInfo, null);
      assert.equal((await client.ping()).redis, 'up');
      assert.equal(fake.connections.length, 1);
      assert.deepEqual(
        fake.connections[0].requests.map((m) => m.op),
        ['hello', 'ping'],
      );
    } finally {
      await client.close();
      await fake.close();
    }
  });

  it('line_too_long as lockbrokerd sends it ("id": null, closing, close): ConnectionError saying so', async () => {
    const fake = await FakeBroker.start({
      onRequest: (msg, conn) => {
        if (msg.op === 'hello') return helloAnswer(conn.n);
        if (msg.op === 'ping') return { ok: true, redis: 'up' };
        fake.send(conn, {
          id: null,
          ...errorAnswer('line_too_long', 'the line is longer than max_line (65536 bytes)'),
        });
        fake.send(conn, { event: 'closing', reason: 'line_too_long' });
        conn.socket.end();
        return null;
      },
    });
    const client = await lb.connect({ url: fake.url });
    try {
      const events = [];
      client.on('closing', (reason) => events.push(reason));
      const err = await client.stats().then(
        () => assert.fail('stats resolved'),
        (e) => e,
      );
      assert.ok(err instanceof lb.ConnectionError, String(err));
      assert.match(err.message, /line_too_long/);
      assert.deepEqual(events, ['line_too_long']);
      assert.equal(client.connected, false);
    } finally {
      await client.close();
      await fake.close();
    }
  });
});
