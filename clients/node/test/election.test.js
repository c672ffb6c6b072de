'use strict';
/*
 * Coordination beyond the mutex in the Node client (issue 27): elections
 * (campaign, proclaim, leader, observe), watch, lockAll, and a watch that
 * goes on across a broker restart.
 */

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const lb = require('..');
const { env, name, sleep, startBroker } = require('../test-support/helpers');

describe('election, watch, lockAll', () => {
  let a;
  let b;

  before(async () => {
    a = await lb.connect({ url: env().url, clientName: 'node-test/elect-a' });
    b = await lb.connect({ url: env().url, clientName: 'node-test/elect-b' });
  });

  after(async () => {
    await a.close();
    await b.close();
  });

  it('campaigns, proclaims, hands over in a higher term, and observes it all', async () => {
    const lock = name('elect');
    const ea = a.election(lock);
    const eb = b.election(lock);
    assert.equal(await ea.leader(), null);
    const ac = new AbortController();
    const seen = [];
    const observing = (async () => {
      for await (const l of eb.observe({ signal: ac.signal })) {
        seen.push(l);
        if (l.value === 'b:1') return;
      }
    })();
    const lease = await ea.campaign('a:1');
    const term = lease.fence;
    assert.equal(await lease.proclaim('a:2'), term);
    assert.deepEqual(await eb.leader(), { value: 'a:2', term, client: 'node-test/elect-a' });
    let bLeads = null;
    const campaignB = eb.campaign('b:1').then((l) => {
      bLeads = l;
      return l;
    });
    await sleep(300);
    assert.equal(bLeads, null, 'two leaders');
    assert.equal(await lease.release(), 0);
    const lb2 = await campaignB;
    assert.ok(lb2.fence > term, 'the next term is higher');
    await observing;
    ac.abort();
    const values = seen.map((l) => l.value);
    assert.ok(values.includes('a:2'), values.join(','));
    assert.equal(values[values.length - 1], 'b:1');
    assert.ok(values.indexOf('a:2') < values.indexOf('b:1'));
    await lb2.release();
  });

  it('watches each change and ends on abort', async () => {
    const lock = name('watched');
    const ac = new AbortController();
    const it = a.watch(lock, { signal: ac.signal })[Symbol.asyncIterator]();
    assert.equal((await it.next()).value.state, 'free');
    const lease = await b.acquire(lock, { waitMs: 0, value: 'v', lockDelayMs: 0 });
    const s = (await it.next()).value;
    assert.equal(s.state, 'exclusive');
    assert.equal(s.fence, lease.fence);
    assert.equal(s.holders[0].value, 'v');
    await lease.release();
    assert.equal((await it.next()).value.state, 'free');
    ac.abort();
    assert.equal((await it.next()).done, true);
  });

  it('lockAll takes all or none', async () => {
    const [x, y, z] = [name('all-x'), name('all-y'), name('all-z')];
    const leases = await a.lockAll([y, { lock: x, mode: 'shared' }], { waitMs: 0, ttlMs: 5000 });
    assert.deepEqual(leases.map((l) => l.lock), [y, x]);
    await assert.rejects(b.lockAll([z, y], { waitMs: 200 }), lb.LockTimeoutError);
    assert.equal((await b.inspect(z)).state, 'free');
    for (const l of leases) assert.equal(await l.release(), 0);
    await assert.rejects(a.lockAll([x, x]), lb.InvalidArgumentError);
  });

  it('a watch goes on across a broker restart', async () => {
    const broker = await startBroker();
    const c = await lb.connect({ url: broker.url, clientName: 'node-test/watch-restart' });
    const other = await lb.connect({ url: broker.url });
    try {
      const lock = name('restart');
      const ac = new AbortController();
      const it = c.watch(lock, { signal: ac.signal })[Symbol.asyncIterator]();
      assert.equal((await it.next()).value.state, 'free');
      await broker.kill();
      const again = await startBroker({ port: broker.port });
      try {
        const fresh = (await it.next()).value;
        assert.equal(fresh.lock, lock);
        const lease = await other.acquire(lock, { waitMs: 5000, value: 'after' });
        let s;
        do s = (await it.next()).value;
        while (s.state !== 'exclusive');
        assert.equal(s.holders[0].value, 'after');
        await lease.release();
        ac.abort();
      } finally {
        await again.kill();
      }
    } finally {
      await c.close();
      await other.close();
    }
  });
});

describe('default client label', () => {
  it('has the shape every client uses: PROGRAM[PID]@HOST lockbroker-node/VERSION', () => {
    const c = new lb.Client({ url: 'tcp://127.0.0.1:1' });
    assert.match(c.clientName, /^\S+\[\d+\]@\S+ lockbroker-node\/\S+$/);
    assert.ok(Buffer.byteLength(c.clientName) <= 128);
  });
});

describe('campaigns', () => {
  it('goes on across a broker restart: a new term once the broker is back', async () => {
    const broker = await startBroker();
    const c = new lb.Client({ url: broker.url });
    const ac = new AbortController();
    let again = null;
    try {
      const terms = c.election(name('again')).campaigns('me', { ttlMs: 1000, signal: ac.signal });
      const first = (await terms.next()).value;
      const f1 = first.fence;
      const lost = new Promise((resolve) => {
        if (first.signal.aborted) resolve();
        else first.signal.addEventListener('abort', resolve, { once: true });
      });
      await broker.kill();
      await lost;
      again = await startBroker({ port: broker.port });
      const second = (await terms.next()).value;
      assert.ok(second.fence > f1, 'the new term is not higher');
      ac.abort();
      await terms.return();
    } finally {
      await c.close();
      if (again) await again.kill();
    }
  });
});
