// usage.ts - the main API used as a TypeScript program would use it, for
// tests/packaging/node.sh: compiled with `tsc --strict --noEmit` against
// the installed package (index.d.ts through package.json's "exports").
// It is never run. A line marked @ts-expect-error must fail to compile:
// the types refuse what index.js refuses.

import { once } from 'node:events';
import {
  Client,
  ConnectionError,
  Election,
  InvalidArgumentError,
  Lease,
  LeaseLostError,
  LockbrokerError,
  LockTimeoutError,
  WIRE_CODES,
  connect,
  defaultUrl,
  errorFromWire,
  parseUrl,
} from 'lockbroker';
import type { AcquireOptions, ClientOptions, Leader, LockInfo, ServerInfo } from 'lockbroker';

async function main(): Promise<void> {
  const opts: ClientOptions = { url: defaultUrl(), clientName: 'types/1', keepaliveMs: 5000, connectTimeoutMs: 2000 };
  const client: Client = await connect(opts);
  const info: ServerInfo | null = client.serverInfo;
  if (info !== null) {
    const maxLine: number = info.limits.maxLine;
    const features: string[] | undefined = info.features;
    console.log(info.server, maxLine, features);
  }
  const same: Client = await new Client({ taskScopes: false }).connect();
  await same.close();

  // withLock: the body's result, typed.
  const fence: number = await client.withLock('invoice:42', async (lease) => {
    lease.throwIfLost();
    if (lease.signal.aborted) throw lease.signal.reason;
    return lease.fence;
  }, { waitMs: 5000, ttlMs: 10000 });
  const text: string = await client.withLock('x', () => 'sync body');
  console.log(fence, text);

  // acquire, extend, release.
  const acq: AcquireOptions = { mode: 'shared', waitMs: 0, signal: AbortSignal.timeout(1000) };
  const lease: Lease = await client.acquire('report', acq);
  const ttl: number = await lease.extend(20000);
  const state: 'held' | 'released' | 'lost' = lease.state;
  lease.on('lost', (err: LeaseLostError) => console.log(err.reason, err.lock, err.fence));
  const left: number = await lease.release();
  await client.release(lease.token).catch(() => {});
  await client.extend(lease.token, 1000).catch(() => {});
  console.log(ttl, state, left, lease.held, lease.lost, lease.lostReason, lease.toJSON().token);
  const sem = await client.acquire('pool', { limit: 3, detach: true, maxHoldMs: 60000, lockDelayMs: 100 });
  console.log(sem.mode === 'permit', sem.detached);

  // inspect, leases, stats, ping, request.
  const li: LockInfo = await client.inspect('report');
  for (const h of li.holders) console.log(h.mode, h.ttlMs, h.count, h.owner, h.client, h.value);
  console.log(li.state, li.limit, li.waiters, li.fence);
  for (const l of await client.leases()) console.log(l.lease, l.lock, l.fence);
  const stats = await client.stats();
  console.log(stats.uptimeS, stats.redis, (await client.ping()).redis);
  const raw: Record<string, unknown> = await client.request('ping');
  console.log(raw.redis);

  // all or nothing.
  const [a, b] = await client.lockAll(['account:42', { lock: 'account:7', mode: 'shared' }], { waitMs: 2000 });
  await Promise.all([a.release(), b.release()]);

  // election.
  const ac = new AbortController();
  const election: Election = client.election('scheduler');
  const term: Lease = await election.campaign('10.0.0.7:8080', { signal: ac.signal, ttlMs: 10000 });
  const f: number = await term.proclaim('10.0.0.7:9090');
  await term.release();
  const leader: Leader | null = await election.leader();
  if (leader) console.log(leader.value, leader.term, leader.client, f);
  for await (const l of election.observe({ signal: ac.signal })) {
    console.log(l.value, l.term);
    break;
  }
  for await (const t of election.campaigns('me', { signal: ac.signal })) {
    console.log(t.fence);
    break;
  }

  // watch.
  for await (const w of client.watch('deploy', { signal: ac.signal })) {
    console.log(w.state, w.fence, w.holders.length);
    break;
  }
  const watching = client.watch('deploy');
  await watching.return(undefined);

  // events.
  client.on('lost', (l: Lease, err: LeaseLostError) => console.log(l.lock, err.reason));
  client.on('disconnect', (err: ConnectionError) => console.log(err.code));
  client.on('connect', (si: ServerInfo) => console.log(si.session));
  client.on('shutdown', (graceMs: number) => console.log(graceMs));
  const [dropped] = await once(client, 'disconnect');
  console.log(dropped);

  // errors.
  try {
    await client.acquire('busy', { waitMs: 0 });
  } catch (err) {
    if (err instanceof LockTimeoutError) console.log('busy', err.fromBroker);
    else if (err instanceof LockbrokerError) console.log(err.code, err.message);
    else throw err;
  }
  const e: LockbrokerError = errorFromWire({ code: 'not_held', message: 'gone' });
  for (const [code, cls] of WIRE_CODES) console.log(code, e instanceof cls);
  console.log(new InvalidArgumentError('x').code, parseUrl('tcp://127.0.0.1:7380').kind);

  await client.close();
}

async function refusals(client: Client): Promise<void> {
  // @ts-expect-error: an unknown option (the wire name): index.js rejects it.
  await client.acquire('x', { wait_ms: 5 });
  // @ts-expect-error: mode is exclusive or shared.
  await client.acquire('x', { mode: 'upgrade' });
  // @ts-expect-error: lockAll takes no value.
  await client.lockAll(['a'], { value: 'v' });
  // @ts-expect-error: an unknown client option.
  new Client({ timeoutMs: 5 });
  // @ts-expect-error: an Election is made by client.election(name).
  new Election();
  // @ts-expect-error: a Lease is made by the client.
  new Lease();
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
void refusals;
