// index.d.ts - types of the lockbroker client library (index.js). The
// behaviour is documented in README.md and in the JSDoc of lib/*.js; this
// file only describes shapes, and must change with them.

import { EventEmitter } from 'node:events';

export interface ClientOptions {
  /** tcp://HOST:PORT or unix:///PATH; default $LOCKBROKER_URL, else the default socket if it exists, else tcp://127.0.0.1:7380. */
  url?: string;
  /** The broker's shared secret. */
  auth?: string;
  /** A file holding the secret (one trailing \n or \r\n dropped); read at each connect. */
  authFile?: string;
  /** Label shown by inspect (hello's `client`); default PROGRAM[PID]@HOST lockbroker-node/VERSION. */
  clientName?: string;
  /**
   * Liveness checking is on by default: while leases are held, the client pings and drops a broker
   * silent for the bound, the shortest lease TTL / 3 and at most 5000 ms (at most keepaliveMs when
   * given). keepaliveMs (500..600000) is also hello's keepalive_ms (the broker watches the client);
   * 0 turns liveness checking off.
   */
  keepaliveMs?: number;
  /**
   * How long a request waits for a connection, all attempts included (default 10000). Before the
   * first session, a connect the system refuses (nothing listens, no such socket) rejects at once.
   */
  connectTimeoutMs?: number;
  /** First delay between connection attempts (default 50). */
  backoffMinMs?: number;
  /** Largest delay between connection attempts (default 2000). */
  backoffMaxMs?: number;
  /**
   * Run withLock bodies in an AsyncLocalStorage scope, inside which the body's lock is re-entered
   * (default true). false: no scopes, every call without `owner` is a fresh owner, `reentrant: true`
   * is refused.
   */
  taskScopes?: boolean;
}

export interface AcquireOptions {
  mode?: 'exclusive' | 'shared';
  /** Makes the name a semaphore with this many permits; mode must then be absent. */
  limit?: number;
  ttlMs?: number;
  /** 0: try once; absent: wait until granted. */
  waitMs?: number;
  watchdog?: boolean;
  fair?: boolean;
  detach?: boolean;
  maxHoldMs?: number;
  /** An exclusive holder's published value (an election's leader's). */
  value?: string;
  /** Ended without a release, the lock stays held back this long. */
  lockDelayMs?: number;
  /**
   * Reentrancy identity; always wins. Default: inside a withLock body of this client holding this
   * lock, that body's owner (the call re-enters); otherwise a fresh owner per call.
   */
  owner?: string;
  /**
   * Inside a withLock body holding this lock: true or absent re-enters it (same lease, count + 1);
   * false asks as a new owner, which waits (waitMs) while the body holds it. Outside such a body it
   * changes nothing. true cannot go with `owner`, nor with taskScopes: false.
   */
  reentrant?: boolean;
  /** Aborting it cancels the acquire: the call rejects with CancelledError. */
  signal?: AbortSignal;
}

export type LeaseState = 'held' | 'released' | 'lost';

/** What toJSON() and util.inspect() show of a lease: the token cut to 8 characters. */
export interface LeaseJSON {
  token: string;
  lock: string;
  mode: 'exclusive' | 'shared' | 'permit';
  fence: number;
  ttlMs: number;
  count: number;
  owner: string;
  detached: boolean;
  state: LeaseState;
  lostReason: string | null;
}

export declare class Lease extends EventEmitter {
  /** Made by the client from an acquire's answer, never directly. */
  private constructor();
  readonly token: string;
  readonly lock: string;
  readonly mode: 'exclusive' | 'shared' | 'permit';
  readonly fence: number;
  ttlMs: number;
  count: number;
  readonly owner: string;
  readonly detached: boolean;
  readonly state: LeaseState;
  readonly lostReason: string | null;
  readonly lostError: LeaseLostError | null;
  /** Aborted (reason: the LeaseLostError) when the lease is lost. */
  readonly signal: AbortSignal;
  readonly held: boolean;
  readonly lost: boolean;
  throwIfLost(): void;
  /** Drops one reentrancy level; resolves with the count left. */
  release(): Promise<number>;
  /** Sets the remaining lifetime; resolves with the lifetime granted. */
  extend(ttlMs: number): Promise<number>;
  /** A new value in the same term; resolves with the fence. */
  proclaim(value: string): Promise<number>;
  toJSON(): LeaseJSON;
  on(event: 'lost', listener: (err: LeaseLostError) => void): this;
  once(event: 'lost', listener: (err: LeaseLostError) => void): this;
}

export interface ServerInfo {
  server: string;
  proto: number;
  session: string;
  broker: string;
  limits: {
    maxLine: number;
    ttlMsMin: number;
    ttlMsMax: number;
    maxLeasesPerSession: number;
    maxWaitersPerSession: number;
    maxInflight: number;
    keepaliveMsMin: number;
    keepaliveMsMax: number;
    [key: string]: number;
  };
  /** The additions of "Coordination beyond the mutex" the broker serves (value, proclaim, watch, ...). */
  features?: string[];
  [key: string]: unknown;
}

export interface LockInfo {
  lock: string;
  state: 'free' | 'exclusive' | 'shared' | 'semaphore' | 'delayed';
  limit: number | null;
  holders: Array<{ mode: string; ttlMs: number; count: number; owner: string; client: string; value?: string }>;
  delayMs?: number;
  waiters: number;
  fence: number | null;
  [key: string]: unknown;
}

export interface LeaseInfo {
  lease: string;
  lock: string;
  mode: string;
  ttlMs: number;
  count: number;
  fence: number;
}

export interface Stats {
  uptimeS: number;
  connections: number;
  sessions: number;
  leases: number;
  waiters: number;
  acquiredTotal: number;
  releasedTotal: number;
  timeoutsTotal: number;
  lostTotal: number;
  redis: 'up' | 'down';
  [key: string]: unknown;
}

export declare class Client extends EventEmitter {
  constructor(opts?: ClientOptions);
  readonly url: string;
  readonly connected: boolean;
  readonly serverInfo: ServerInfo | null;
  connect(): Promise<this>;
  close(): Promise<void>;
  /** Inside a withLock body holding `name`, re-enters its lease unless `owner` or `reentrant: false`. */
  acquire(name: string, opts?: AcquireOptions): Promise<Lease>;
  /** Runs fn under the lock, then releases one level; nested in a withLock of `name`, re-enters it. */
  withLock<T>(name: string, fn: (lease: Lease) => T | Promise<T>, opts?: AcquireOptions): Promise<T>;
  release(lease: Lease | string): Promise<number>;
  extend(lease: Lease | string, ttlMs: number): Promise<number>;
  inspect(name: string): Promise<LockInfo>;
  leases(): Promise<LeaseInfo[]>;
  stats(): Promise<Stats>;
  ping(): Promise<{ redis: 'up' | 'down' }>;
  request(op: string, fields?: Record<string, unknown>): Promise<Record<string, unknown>>;
  /** All or none; without `owner`, locks that enclosing withLock bodies hold are re-entered. */
  lockAll(
    locks: Array<string | { lock: string; mode?: 'exclusive' | 'shared'; limit?: number }>,
    opts?: Omit<AcquireOptions, 'mode' | 'limit' | 'value' | 'reentrant' | 'signal'>,
  ): Promise<Lease[]>;
  /** The lock's state, then its state after each change; ends when opts.signal aborts or on return(). */
  watch(name: string, opts?: { signal?: AbortSignal }): AsyncGenerator<LockInfo, void, undefined>;
  election(name: string): Election;

  on(event: 'lost', listener: (lease: Lease, err: LeaseLostError) => void): this;
  on(event: 'connect' | 'reconnect', listener: (info: ServerInfo) => void): this;
  on(event: 'disconnect', listener: (err: ConnectionError) => void): this;
  on(event: 'shutdown', listener: (graceMs: number) => void): this;
  on(event: 'closing', listener: (reason: string) => void): this;
  on(event: 'event', listener: (msg: Record<string, unknown>) => void): this;
  on(event: string | symbol, listener: (...args: any[]) => void): this;
}

export declare function connect(opts?: ClientOptions): Promise<Client>;

export type BrokerAddress =
  { kind: 'tcp'; host: string; port: number; url: string } | { kind: 'unix'; path: string; url: string };
export declare function parseUrl(url: string): BrokerAddress;
export declare function defaultUrl(env?: Record<string, string | undefined>): string;

export declare class LockbrokerError extends Error {
  constructor(message: string, opts?: { code?: string; cause?: unknown; fromBroker?: boolean });
  readonly code: string;
  /** True when the broker sent the error, false when the client decided it. */
  readonly fromBroker: boolean;
}
export declare class BadJsonError extends LockbrokerError {}
export declare class BadRequestError extends LockbrokerError {}
export declare class LineTooLongError extends LockbrokerError {}
export declare class UnknownOpError extends LockbrokerError {}
export declare class InvalidArgumentError extends LockbrokerError {}
export declare class UnauthorizedError extends LockbrokerError {}
export declare class LockTimeoutError extends LockbrokerError {}
export declare class CancelledError extends LockbrokerError {}
export declare class NotHeldError extends LockbrokerError {}
export declare class ConflictError extends LockbrokerError {}
export declare class UpgradeUnsupportedError extends LockbrokerError {}
export declare class LimitExceededError extends LockbrokerError {}
export declare class UnavailableError extends LockbrokerError {}
export declare class ShuttingDownError extends LockbrokerError {}
export declare class InternalError extends LockbrokerError {}
export declare class ConnectionError extends LockbrokerError {}
/**
 * No longer thrown by acquire or withLock (they re-enter the lock an enclosing withLock holds); only
 * lockAll throws it, asked without owner for locks that enclosing bodies hold under two owners.
 */
export declare class DeadlockError extends LockbrokerError {}
export declare class ProtocolError extends LockbrokerError {}
export declare class LeaseLostError extends LockbrokerError {
  constructor(message: string, opts?: { reason?: string; lock?: string; fence?: number; cause?: unknown });
  /** 'expired' | 'gone' | 'redis_unavailable' | 'max_hold' (the broker's), 'disconnected' | 'closed' | 'not_held' (the client's). */
  readonly reason: string;
  readonly lock: string;
  readonly fence: number;
}

export declare function errorFromWire(error: { code: string; message: string }): LockbrokerError;
export declare const WIRE_CODES: ReadonlyArray<readonly [string, typeof LockbrokerError]>;

export interface Leader {
  value: string | null;
  term: number;
  client: string;
}

export declare class Election {
  /** client.election(name) makes one. */
  constructor(client: Client, name: string);
  readonly client: Client;
  readonly name: string;
  /** Resolves when this caller leads, publishing `value`: the leadership's lease (its fence is the term). */
  campaign(value: string, opts?: Omit<AcquireOptions, 'value'>): Promise<Lease>;
  /** Each term this caller is elected in; campaigns again when one ends. */
  campaigns(value: string, opts?: Omit<AcquireOptions, 'value'>): AsyncGenerator<Lease, void, undefined>;
  leader(): Promise<Leader | null>;
  observe(opts?: { signal?: AbortSignal }): AsyncGenerator<Leader, void, undefined>;
}
