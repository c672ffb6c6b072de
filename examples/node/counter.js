#!/usr/bin/env node
'use strict';
/*
 * counter.js - a counter in Redis, incremented under the lockbroker lock
 * "counter", with fencing checked at the resource.
 *
 *   node examples/node/counter.js --iterations 100 \
 *       [--url tcp://127.0.0.1:7380] [--redis 127.0.0.1:6379]
 *
 * Each iteration takes the lock, reads "counter:value" and "fence:last",
 * sleeps a little (the window in which a lock without fencing would let a
 * stale holder clobber the value), then writes value + 1 together with its
 * own fence. The write is one Lua script that refuses a fence not greater
 * than the stored one, as a fenced resource must; the read asserts the same
 * (each new fence is greater than the last stored). Run several copies at
 * once: the final value is the sum of their iterations.
 *
 * Exit status: 0 success, 1 a fence violation (a fence not above the last
 * stored one), 2 anything else (usage, broker or Redis unreachable, lease
 * lost). --url defaults to $LOCKBROKER_URL as for lockctl; --redis to
 * $LOCKBROKER_REDIS_HOST:$LOCKBROKER_REDIS_PORT, else 127.0.0.1:6379.
 */

const net = require('node:net');
const path = require('node:path');
const lb = require(path.join(__dirname, '..', '..', 'clients', 'node'));

/* Writes value and fence only when the fence is above the stored one. */
const FENCED_WRITE = `
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[2]) <= last then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[2])
return 1`;

function usage(msg) {
  console.error(`counter.js: ${msg}\nusage: node counter.js --iterations N [--url URL] [--redis HOST:PORT]`);
  process.exit(2);
}

function parseArgs(argv) {
  const e = process.env;
  const o = {
    iterations: null,
    url: undefined,
    redis: e.LOCKBROKER_REDIS_HOST ? `${e.LOCKBROKER_REDIS_HOST}:${e.LOCKBROKER_REDIS_PORT || 6379}` : '127.0.0.1:6379',
  };
  for (let i = 0; i < argv.length; i += 2) {
    const v = argv[i + 1];
    if (v === undefined) usage(`${argv[i]} needs a value`);
    if (argv[i] === '--iterations') o.iterations = Number(v);
    else if (argv[i] === '--url') o.url = v;
    else if (argv[i] === '--redis') o.redis = v;
    else usage(`unknown argument ${argv[i]}`);
  }
  if (!Number.isInteger(o.iterations) || o.iterations < 1) usage('--iterations must be a positive integer');
  const m = /^(.+):(\d+)$/.exec(o.redis);
  if (!m) usage('--redis must be HOST:PORT');
  o.redisHost = m[1];
  o.redisPort = Number(m[2]);
  return o;
}

/** A tiny Redis client: one command at a time, the replies this program needs. */
function redisConnect(host, port) {
  return new Promise((resolve, reject) => {
    const sock = net.connect({ host, port });
    let buf = Buffer.alloc(0);
    let waiting = null; // {resolve, reject} of the command in flight
    sock.once('error', reject);
    sock.on('data', (chunk) => {
      buf = Buffer.concat([buf, chunk]);
      const r = parseReply(buf, 0);
      if (r === null) return;
      buf = buf.subarray(r.end);
      const w = waiting;
      waiting = null;
      if (r.value instanceof Error) w.reject(r.value);
      else w.resolve(r.value);
    });
    sock.once('connect', () => {
      sock.off('error', reject);
      sock.on('error', (err) => waiting && waiting.reject(err));
      resolve({
        command(...args) {
          let out = `*${args.length}\r\n`;
          for (const a of args) out += `$${Buffer.byteLength(String(a))}\r\n${a}\r\n`;
          return new Promise((res, rej) => {
            waiting = { resolve: res, reject: rej };
            sock.write(out);
          });
        },
        close() {
          sock.end();
        },
      });
    });
  });
}

/* One RESP reply at buf[at]: {value, end}, or null when incomplete. */
function parseReply(buf, at) {
  const nl = buf.indexOf('\r\n', at);
  if (nl < 0) return null;
  const head = buf.toString('utf8', at + 1, nl);
  switch (buf[at]) {
    case 0x2b: // +
      return { value: head, end: nl + 2 };
    case 0x2d: // -
      return { value: new Error(head), end: nl + 2 };
    case 0x3a: // :
      return { value: Number(head), end: nl + 2 };
    case 0x24: {
      // $
      const n = Number(head);
      if (n < 0) return { value: null, end: nl + 2 };
      if (buf.length < nl + 4 + n) return null;
      return { value: buf.toString('utf8', nl + 2, nl + 2 + n), end: nl + 4 + n };
    }
    case 0x2a: {
      // *
      const items = [];
      let end = nl + 2;
      for (let i = 0; i < Number(head); i++) {
        const r = parseReply(buf, end);
        if (r === null) return null;
        items.push(r.value);
        end = r.end;
      }
      return { value: items, end };
    }
    default:
      throw new Error('bad reply from Redis');
  }
}

class FenceViolation extends Error {}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  const redis = await redisConnect(o.redisHost, o.redisPort);
  const client = await lb.connect({ url: o.url, clientName: `counter.js/${process.pid}` });
  let value = 0;
  try {
    for (let i = 0; i < o.iterations; i++) {
      value = await client.withLock('counter', async (lease) => {
        const [raw, last] = await redis.command('MGET', 'counter:value', 'fence:last');
        if (last !== null && !(lease.fence > Number(last))) {
          throw new FenceViolation(`fence ${lease.fence} is not greater than the last stored ${last}`);
        }
        const next = Number(raw || 0) + 1;
        await new Promise((resolve) => setTimeout(resolve, 1));
        lease.throwIfLost();
        if ((await redis.command('EVAL', FENCED_WRITE, 2, 'counter:value', 'fence:last', next, lease.fence)) !== 1) {
          throw new FenceViolation(`the write with fence ${lease.fence} was refused: a later fence is stored`);
        }
        return next;
      });
    }
  } finally {
    await client.close();
    redis.close();
  }
  console.log(`counter.js: ${o.iterations} increments done, counter:value is now ${value}, fences increased`);
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(`counter.js: ${err instanceof FenceViolation ? 'FENCE VIOLATION: ' : ''}${err.message}`);
    process.exit(err instanceof FenceViolation ? 1 : 2);
  },
);
