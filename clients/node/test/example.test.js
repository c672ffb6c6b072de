'use strict';
/*
 * example.test.js - examples/node/counter.js runs as documented: two copies
 * at once increment the counter without losing an update and exit 0; a
 * stored fence above every real one makes it exit 1 (a fence violation).
 */

const { describe, it } = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { execFile } = require('node:child_process');
const { env, Resp } = require('../test-support/helpers');

const COUNTER = path.join(__dirname, '..', '..', '..', 'examples', 'node', 'counter.js');

function run(args) {
  return new Promise((resolve) => {
    execFile(process.execPath, [COUNTER, ...args], { timeout: 20000 }, (err, stdout, stderr) =>
      resolve({ code: err ? err.code : 0, stdout, stderr }),
    );
  });
}

describe('examples/node/counter.js', () => {
  it('two copies: every increment counted, exit 0; a stale fence: exit 1', { timeout: 30000 }, async () => {
    const e = env();
    const redis = await Resp.connect(e.redisHost, e.redisPort);
    try {
      await redis.command('DEL', 'counter:value', 'fence:last');
      const args = ['--iterations', '25', '--url', e.url, '--redis', `${e.redisHost}:${e.redisPort}`];
      const [a, b] = await Promise.all([run(args), run(args)]);
      assert.equal(a.code, 0, a.stderr);
      assert.equal(b.code, 0, b.stderr);
      assert.equal(await redis.command('GET', 'counter:value'), '50');

      await redis.command('SET', 'fence:last', '9000000000000000');
      const c = await run(['--iterations', '1', '--url', e.url, '--redis', `${e.redisHost}:${e.redisPort}`]);
      assert.equal(c.code, 1);
      assert.match(c.stderr, /FENCE VIOLATION/);
    } finally {
      await redis.command('DEL', 'counter:value', 'fence:last');
      redis.close();
    }
  });
});
