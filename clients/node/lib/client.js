'use strict';
/*
 * client.js - the lockbroker client: one connection (session) at a time,
 * shared by every async task of the program, reconnected with backoff when
 * it drops; locks as withLock() scopes or explicit acquire()/release().
 *
 * Invariants:
 *  - At most one session is current (`_session`); a request waits in
 *    _ready() for it. Only one connect loop runs at a time (`_connecting`),
 *    shared by every waiting request; it tries again with exponential
 *    backoff (with jitter) until connectTimeoutMs, then rejects with the
 *    last ConnectionError. Before the client's first session, a connect
 *    the system refuses (ECONNREFUSED, ENOENT, ...) rejects at once, while
 *    one that hangs, or is accepted and dropped, is waited for as above;
 *    after a session, a refused connect is a broker restarting and is
 *    tried again like the rest. The backoff still spaces the next attempt
 *    (Session.refused() tells the refused connect). A broker that
 *    refuses hello (unauthorized, bad field) is not retried: that answer
 *    rejects at once; but a hello without a secret that is answered
 *    unauthorized opens the session (Session.open), where ping works and
 *    the rest answers unauthorized.
 *  - Every lease the client tracks is in `_tracked` (token -> Lease); one not
 *    detached is also in its session's `leases`. When a session ends, each
 *    of its leases is reported lost ('disconnected', or 'closed' after
 *    close()) before anything else happens, and is never sent again: a new
 *    session never uses an old token unless the caller names a detached
 *    lease, which is what detached leases are for.
 *  - `lost` events are routed by token to the lease of the session that got
 *    them (or to a detached lease); a token this client does not track is
 *    ignored.
 *  - Owners (reentrancy belongs to (session, owner), as the protocol says;
 *    the client's default owner is the caller's thread of control as far
 *    as it can see one, which in Node is the task scope of the enclosing
 *    withLock): a withLock body runs in an AsyncLocalStorage scope that
 *    names its lease (unless taskScopes is false). Inside it, an acquire,
 *    withLock or lockAll of the lock an enclosing body holds, without
 *    `owner`, re-enters it: same owner, same lease, count + 1, each level
 *    released by its own release. It never waits for itself and never
 *    throws for it; `{reentrant: false}` asks for a new owner instead (it
 *    waits, as a stranger would). Sub-tasks a body starts are in its scope
 *    too: they re-enter its lock, they do not exclude each other on it.
 *    Every other call without `owner` gets a
 *    fresh owner ("node-task-N"): two withLock tasks sharing the client
 *    exclude each other, and two plain acquires (no scope) of one lock in
 *    one task wait for each other, the client seeing no task there. An
 *    explicit `owner` always wins. A nested call whose enclosing lease is
 *    lost rejects with the loss. Semaphores (limit) are exempt: each
 *    acquire is a new permit by the protocol. DeadlockError is left for
 *    the one self-wait a single call cannot avoid: a lockAll over locks
 *    that enclosing bodies hold under two different owners.
 *  - withLock settles only after the release's answer (a release answered
 *    `unavailable` is tried again while the lease is held); if the lease
 *    was lost at any moment before the release completed, it rejects with
 *    the loss (LeaseLostError), whatever the body returned.
 *  - The client never emits 'error': failures are rejections of the call
 *    that met them; events ('lost', 'disconnect', ...) are information.
 */

const { EventEmitter } = require('node:events');
const { AsyncLocalStorage } = require('node:async_hooks');
const fs = require('node:fs');
const { Session } = require('./session');
const { Lease, safeEmit } = require('./lease');
const { parseUrl, defaultUrl } = require('./url');
const {
  CancelledError,
  ConnectionError,
  DeadlockError,
  InvalidArgumentError,
  LeaseLostError,
  NotHeldError,
  UnavailableError,
} = require('./errors');

/** The withLock scopes: {client, lease, parent}. */
const scopes = new AsyncLocalStorage();

const CLIENT_OPTIONS = [
  'url',
  'auth',
  'authFile',
  'clientName',
  'keepaliveMs',
  'connectTimeoutMs',
  'backoffMinMs',
  'backoffMaxMs',
  'taskScopes',
];

/* acquire's options that go on the wire as they are, camelCase -> wire name. */
const ACQUIRE_FIELDS = [
  ['mode', 'mode'],
  ['limit', 'limit'],
  ['ttlMs', 'ttl_ms'],
  ['waitMs', 'wait_ms'],
  ['watchdog', 'watchdog'],
  ['fair', 'fair'],
  ['detach', 'detach'],
  ['maxHoldMs', 'max_hold_ms'],
  ['value', 'value'],
  ['lockDelayMs', 'lock_delay_ms'],
];
const ACQUIRE_OPTIONS = [...ACQUIRE_FIELDS.map(([k]) => k), 'owner', 'reentrant', 'signal'];

/** A session that ends sooner than this after its hello does not reset the backoff. */
const STABLE_SESSION_MS = 1000;

function checkOptions(opts, allowed, what) {
  if (opts === null || typeof opts !== 'object') throw new TypeError(`${what} must be an object`);
  for (const key of Object.keys(opts)) {
    if (!allowed.includes(key)) {
      throw new InvalidArgumentError(`unknown ${what} '${key}' (known: ${allowed.join(', ')})`);
    }
  }
}

/**
 * Releases one level of a lease for withLock. `unavailable` (Redis is down;
 * the release had no effect) is tried again with backoff while the lease is
 * held, for at most its ttl + 5 s: meanwhile either Redis comes back and the
 * release goes through, or the broker reports the lease lost. A lock is
 * never left held behind a withLock while its session lives. Resolves with
 * null, or the error that ended the tries.
 */
async function releaseSurely(lease) {
  const end = Date.now() + (Number.isFinite(lease.ttlMs) ? lease.ttlMs : 30000) + 5000;
  let delay = 50;
  for (;;) {
    try {
      await lease.release();
      return null;
    } catch (err) {
      if (!(err instanceof UnavailableError) || lease.state !== 'held' || Date.now() + delay > end) return err;
    }
    await new Promise((resolve) => setTimeout(resolve, delay));
    delay = Math.min(delay * 2, 1000);
  }
}

/** p, or a rejection with makeError() as soon as signal aborts. */
function untilAborted(p, signal, makeError) {
  return new Promise((resolve, reject) => {
    const onAbort = () => reject(makeError());
    signal.addEventListener('abort', onAbort, { once: true });
    p.then(
      (v) => {
        signal.removeEventListener('abort', onAbort);
        resolve(v);
      },
      (err) => {
        signal.removeEventListener('abort', onAbort);
        reject(err);
      },
    );
  });
}

function camelKey(key) {
  return key.replace(/_([a-z0-9])/g, (_, c) => c.toUpperCase());
}

/** The broker's answer with camelCase keys (recursively), without id and ok. */
function camelize(value, top = true) {
  if (Array.isArray(value)) return value.map((v) => camelize(v, false));
  if (value === null || typeof value !== 'object') return value;
  const out = {};
  for (const [k, v] of Object.entries(value)) {
    if (top && (k === 'id' || k === 'ok')) continue;
    out[camelKey(k)] = camelize(v, false);
  }
  return out;
}

/**
 * The client label sent in hello when clientName is not given, the same
 * shape in every client: PROGRAM[PID]@HOST lockbroker-node/VERSION.
 */
function defaultLabel() {
  const path = require('node:path');
  const os = require('node:os');
  const prog = path.basename(process.argv[1] || process.argv0 || 'node').slice(0, 40);
  const host = (os.hostname() || '-').slice(0, 40);
  return `${prog}[${process.pid}]@${host} lockbroker-node/${require('../package.json').version}`;
}

class Client extends EventEmitter {
  /**
   * Makes a client; it connects on the first request (or connect()).
   * @param {object} [opts]
   * @param {string} [opts.url]          tcp://HOST:PORT or unix:///PATH (default: as lockctl)
   * @param {string} [opts.auth]         the broker's secret
   * @param {string} [opts.authFile]     a file holding it (one trailing newline dropped)
   * @param {string} [opts.clientName]   label shown by inspect (hello's `client`)
   * @param {number} [opts.keepaliveMs]  hello's keepalive_ms, and the most the liveness
   *   bound may be (default: not sent, bound at most 5000 ms); 0 turns the liveness check off
   * @param {number} [opts.connectTimeoutMs=10000]  how long a request waits for a connection
   * @param {number} [opts.backoffMinMs=50]   first delay between connection attempts
   * @param {number} [opts.backoffMaxMs=2000] largest delay
   * @param {boolean} [opts.taskScopes=true]  run withLock bodies in an
   *   AsyncLocalStorage scope, inside which the body's lock is re-entered;
   *   false spares the process the cost of async context tracking on
   *   Node < 22 (then every call without owner is a fresh owner)
   */
  constructor(opts = {}) {
    super();
    checkOptions(opts, CLIENT_OPTIONS, 'client option');
    if (opts.auth != null && opts.authFile != null) {
      throw new InvalidArgumentError("give 'auth' or 'authFile', not both");
    }
    this.url = opts.url != null ? opts.url : defaultUrl();
    this.addr = parseUrl(this.url);
    this.auth = opts.auth != null ? opts.auth : null;
    this.authFile = opts.authFile != null ? opts.authFile : null;
    this.clientName = opts.clientName != null ? opts.clientName : defaultLabel();
    if (opts.keepaliveMs != null && !(Number.isInteger(opts.keepaliveMs) && opts.keepaliveMs >= 0)) {
      throw new InvalidArgumentError(
        "'keepaliveMs' is 0 (no liveness check) or milliseconds (the broker takes 500..600000)",
      );
    }
    this.keepaliveMs = opts.keepaliveMs != null ? opts.keepaliveMs : null;
    this.connectTimeoutMs = opts.connectTimeoutMs != null ? opts.connectTimeoutMs : 10000;
    this.backoffMinMs = opts.backoffMinMs != null ? opts.backoffMinMs : 50;
    this.backoffMaxMs = opts.backoffMaxMs != null ? opts.backoffMaxMs : 2000;
    this.taskScopes = opts.taskScopes !== false;

    this._session = null; // the current ready Session, or null
    this._connecting = null; // the promise of the connect loop that runs, or null
    this._attempt = null; // the Session that loop is opening, or null
    this._wake = null; // ends the loop's wait between attempts, or null
    this._closed = false;
    this._tracked = new Map(); // token -> Lease, every lease held
    this._watches = new Map(); // watch id -> WatchQueue (watch, Election.observe)
    this._ownerSeq = 0;
    this._everConnected = false;
    this._backoffMs = this.backoffMinMs; // the next delay after a failure
    this._notBefore = 0; // Date.now() before which no attempt starts
    this._hooks = {
      onEvent: (session, msg) => this._onEvent(session, msg),
      onClose: (session, err) => this._onSessionClose(session, err),
    };
  }

  /** hello's answer of the current session (camelCase), or null when not connected. */
  get serverInfo() {
    return this._session ? camelize(this._session.info) : null;
  }

  get connected() {
    return this._session !== null;
  }

  /** Connects now (it also happens on the first request). Resolves with the client. */
  async connect() {
    await this._ready();
    return this;
  }

  /**
   * Closes the connection. Leases not detached end with it (the broker
   * releases them; here they are reported lost with reason 'closed');
   * requests in flight reject with ConnectionError. Idempotent.
   */
  async close() {
    this._closed = true;
    const session = this._session;
    if (session && session.state !== 'closed') {
      const closedNow = new Promise((resolve) => session.socket.once('close', resolve));
      session.destroy(new ConnectionError('the client was closed'));
      await closedNow;
    }
    if (this._attempt) this._attempt.destroy(new ConnectionError('the client was closed'));
    if (this._wake) this._wake();
    if (this._connecting) await this._connecting.catch(() => {});
  }

  /* ---- connection -------------------------------------------------------- */

  /** The current session, connecting first if there is none. */
  _ready() {
    if (this._closed) return Promise.reject(new ConnectionError('the client is closed'));
    if (this._session) return Promise.resolve(this._session);
    if (!this._connecting) {
      this._connecting = this._connectLoop().finally(() => {
        this._connecting = null;
      });
    }
    return this._connecting;
  }

  async _readAuth() {
    if (this.authFile === null) return this.auth;
    let text;
    try {
      text = await fs.promises.readFile(this.authFile, 'utf8');
    } catch (err) {
      throw new InvalidArgumentError(`cannot read authFile: ${err.code || err.message}`, { cause: err });
    }
    if (text.endsWith('\r\n')) return text.slice(0, -2);
    if (text.endsWith('\n')) return text.slice(0, -1);
    return text;
  }

  async _connectLoop() {
    const deadline = Date.now() + this.connectTimeoutMs;
    let lastError = null;
    for (;;) {
      if (this._closed) throw new ConnectionError('the client is closed');
      const wait = this._notBefore - Date.now();
      if (wait > 0) {
        if (Date.now() + wait >= deadline && lastError) throw lastError;
        await new Promise((resolve) => {
          const timer = setTimeout(resolve, wait);
          this._wake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
        this._wake = null;
        if (this._closed) throw new ConnectionError('the client is closed');
      }
      const hello = {};
      if (this.clientName !== null) hello.client = this.clientName;
      if (this.keepaliveMs) hello.keepalive_ms = this.keepaliveMs; // 0: no liveness check at all
      const auth = await this._readAuth();
      if (auth !== null) hello.auth = auth;
      const session = new Session(this.addr, this._hooks);
      this._attempt = session;
      try {
        await session.open(hello, {
          timeoutMs: Math.max(1, deadline - Date.now()),
          keepaliveMs: this.keepaliveMs,
        });
      } catch (err) {
        if (!(err instanceof ConnectionError)) throw err; // hello refused: trying again cannot help
        lastError = err;
        this._delayNextAttempt();
        // Refused before any session (a wrong address, no broker): the
        // system's answer, reported now as the Go and C clients do. Once
        // a session has been, refused is a broker restarting: tried again.
        if (Date.now() >= deadline || (!this._everConnected && session.refused())) throw err;
        continue;
      } finally {
        this._attempt = null;
      }
      if (this._closed) {
        session.destroy(new ConnectionError('the client was closed'));
        throw new ConnectionError('the client is closed');
      }
      this._session = session;
      this._backoffMs = this.backoffMinMs;
      this._notBefore = 0;
      const first = !this._everConnected;
      this._everConnected = true;
      safeEmit(this, first ? 'connect' : 'reconnect', camelize(session.info));
      return session;
    }
  }

  _delayNextAttempt() {
    const jittered = this._backoffMs * (0.5 + Math.random() * 0.5);
    this._notBefore = Date.now() + jittered;
    this._backoffMs = Math.min(this.backoffMaxMs, this._backoffMs * 2);
  }

  _onSessionClose(session, err) {
    const reason = this._closed ? 'closed' : 'disconnected';
    for (const [id, w] of this._watches) {
      if (w.session === session) {
        this._watches.delete(id);
        w.push(null); // its watch goes on on the next session
      }
    }
    for (const lease of session.leases) this._loseLease(lease, reason, err);
    session.leases.clear();
    if (this._session !== session) return; // never became current: a failed attempt
    this._session = null;
    if (Date.now() - session.openedAt < STABLE_SESSION_MS) this._delayNextAttempt();
    safeEmit(this, 'disconnect', err);
  }

  _onEvent(session, msg) {
    if (msg.event === 'lost' && typeof msg.lease === 'string') {
      const lease = this._tracked.get(msg.lease);
      if (lease && (lease.detached || lease._session === session)) {
        this._loseLease(lease, typeof msg.reason === 'string' ? msg.reason : 'unknown');
      }
    } else if (msg.event === 'shutdown') {
      safeEmit(this, 'shutdown', msg.grace_ms);
    } else if (msg.event === 'closing') {
      safeEmit(this, 'closing', msg.reason);
    } else if (msg.event === 'changed') {
      const w = this._watches.get(msg.watch);
      if (w && w.session === session) w.push(msg);
    }
    safeEmit(this, 'event', msg);
  }

  /* ---- leases -------------------------------------------------------------- */

  _loseLease(lease, reason, cause) {
    this._forget(lease);
    if (lease._markLost(reason, cause)) safeEmit(this, 'lost', lease, lease.lostError);
  }

  _forget(lease) {
    this._tracked.delete(lease.token);
    if (lease._session) {
      lease._session.leases.delete(lease);
      lease._session.countTtl(lease, null);
      lease._session.updateRef();
    }
  }

  /** The acquire answer's lease: the known object (re-entry) or a new one. */
  _adopt(ans, owner, session, detached) {
    const known = this._tracked.get(ans.lease);
    if (known && known.state === 'held') {
      known.count = ans.count;
      known.ttlMs = ans.ttl_ms;
      if (known._session) known._session.countTtl(known, known.ttlMs);
      return known;
    }
    const lease = new Lease(this, detached ? null : session, ans, owner, detached);
    this._tracked.set(lease.token, lease);
    if (!detached) {
      session.leases.add(lease);
      session.countTtl(lease, lease.ttlMs); // the liveness bound follows the shortest TTL held
      session.updateRef();
    }
    return lease;
  }

  /**
   * Sends release or extend for a tracked lease: on its own session (a
   * detached lease: on the current one). The answer updates the lease in
   * line order (see session.js).
   */
  async _leaseCall(lease, op, fields) {
    const session = lease.detached ? await this._ready() : lease._session;
    lease._throwIfGone(op);
    const onAnswer = (ans) => {
      if (op === 'release') {
        lease.count = ans.count;
        if (ans.count === 0 && lease._markReleased()) this._forget(lease);
      } else if (op === 'extend') {
        lease.ttlMs = ans.ttl_ms;
        if (lease._session) lease._session.countTtl(lease, lease.ttlMs);
      }
      return ans;
    };
    try {
      return await session.start(op, fields, { onAnswer }).promise;
    } catch (err) {
      if (lease.state === 'lost') throw lease.lostError;
      if (err instanceof NotHeldError) this._loseLease(lease, 'not_held', err);
      throw err;
    }
  }

  /** The lease of the innermost enclosing withLock body of this client on `name`. */
  _enclosing(name) {
    if (!this.taskScopes) return null;
    for (let s = scopes.getStore(); s; s = s.parent) {
      if (s.client === this && s.lease.lock === name && s.lease.state !== 'released') return s.lease;
    }
    return null;
  }

  _newOwner() {
    this._ownerSeq += 1;
    return `node-task-${this._ownerSeq}`;
  }

  /* ---- locks --------------------------------------------------------------- */

  /**
   * Takes a lock; resolves with its Lease. See README.md for the options.
   * Inside a withLock body of this client that holds `name`, it re-enters
   * that lease (same object, count + 1) unless opts.owner is given or
   * opts.reentrant is false (then it waits as another owner).
   * Rejects with the broker's error class (LockTimeoutError, ConflictError,
   * ...), CancelledError when opts.signal aborts it, the enclosing lease's
   * LeaseLostError when that was lost, or ConnectionError.
   * @param {string} name
   * @param {object} [opts]
   */
  async acquire(name, opts = {}) {
    checkOptions(opts, ACQUIRE_OPTIONS, 'acquire option');
    const fields = { lock: name };
    for (const [key, wire] of ACQUIRE_FIELDS) if (opts[key] != null) fields[wire] = opts[key];
    const detached = opts.detach === true;
    const signal = opts.signal != null ? opts.signal : null;
    if (signal !== null && (typeof signal.aborted !== 'boolean' || typeof signal.addEventListener !== 'function')) {
      throw new TypeError("acquire option 'signal' must be an AbortSignal");
    }

    let owner = opts.owner != null ? opts.owner : null;
    const reentrant = opts.reentrant != null ? Boolean(opts.reentrant) : null;
    if (reentrant === true) {
      if (owner !== null) throw new InvalidArgumentError("give 'owner' or 'reentrant', not both");
      if (!this.taskScopes) {
        throw new InvalidArgumentError("'reentrant' needs taskScopes; pass {owner: lease.owner} to re-enter a lease");
      }
    }
    // Inside a withLock scope holding this lock: re-enter it (the default),
    // unless an owner is named or reentrant is false. Never a wait for itself.
    if (owner === null && reentrant !== false && opts.limit == null) {
      const outer = this._enclosing(name);
      if (outer) {
        if (outer.state === 'lost') throw outer.lostError;
        owner = outer.owner;
      }
    }
    if (owner === null) owner = this._newOwner();
    fields.owner = owner;

    const cancelled = () =>
      new CancelledError(`the acquire of lock ${JSON.stringify(name)} was cancelled by its AbortSignal`, {
        cause: signal.reason,
      });
    if (signal && signal.aborted) throw cancelled();
    const session = signal ? await untilAborted(this._ready(), signal, cancelled) : await this._ready();
    if (signal && signal.aborted) throw cancelled();

    let aborted = false;
    const req = session.start('acquire', fields, {
      onAnswer: (ans) => this._adopt(ans, owner, session, detached),
    });
    const onAbort = () => {
      aborted = true;
      if (req.id !== null) session.start('cancel', { target: req.id }).promise.catch(() => {});
    };
    if (signal) signal.addEventListener('abort', onAbort, { once: true });
    let lease;
    try {
      lease = await req.promise;
    } finally {
      if (signal) signal.removeEventListener('abort', onAbort);
    }
    if (aborted) {
      // Granted before the cancel reached the broker: give back this level.
      lease.release().catch(() => {});
      throw cancelled();
    }
    return lease;
  }

  /**
   * Runs fn(lease) under the lock and releases it after, whatever fn did;
   * fn runs in a scope where this lock is re-entered (see acquire), and a
   * withLock of it inside an enclosing one re-enters, releasing one level.
   * Resolves with fn's result. Rejects with fn's error; with the loss
   * (LeaseLostError) if the lease was lost before the release completed,
   * even when fn succeeded; or with the release's error.
   * @param {string} name
   * @param {(lease: Lease) => any} fn
   * @param {object} [opts]  acquire's options
   */
  async withLock(name, fn, opts = {}) {
    if (typeof fn !== 'function') throw new TypeError('withLock(name, fn, opts): fn must be a function');
    const lease = await this.acquire(name, opts);
    let result;
    let failed = false;
    let bodyError;
    try {
      result = this.taskScopes
        ? await scopes.run({ client: this, lease, parent: scopes.getStore() }, () => fn(lease))
        : await fn(lease);
    } catch (err) {
      failed = true;
      bodyError = err;
    }
    const releaseError = lease.state === 'held' ? await releaseSurely(lease) : null;
    if (lease.state === 'lost') {
      if (!failed || bodyError === lease.lostError) throw lease.lostError;
      const e = lease.lostError;
      throw new LeaseLostError(`${e.message} (and the body failed: ${bodyError && bodyError.message})`, {
        reason: e.reason,
        lock: e.lock,
        fence: e.fence,
        cause: bodyError,
      });
    }
    if (failed) throw bodyError;
    if (releaseError) throw releaseError;
    return result;
  }

  /**
   * Releases a lease by object or by token (a detached lease from another
   * process, say). Resolves with the reentrancy count left.
   * @param {Lease|string} leaseOrToken
   */
  async release(leaseOrToken) {
    if (leaseOrToken instanceof Lease) return leaseOrToken.release();
    const known = this._tracked.get(leaseOrToken);
    if (known) return known.release();
    const ans = await this.request('release', { lease: leaseOrToken });
    return ans.count;
  }

  /**
   * Sets a lease's remaining lifetime, by object or token. Resolves with the
   * lifetime granted.
   * @param {Lease|string} leaseOrToken
   * @param {number} ttlMs
   */
  async extend(leaseOrToken, ttlMs) {
    if (leaseOrToken instanceof Lease) return leaseOrToken.extend(ttlMs);
    const known = this._tracked.get(leaseOrToken);
    if (known) return known.extend(ttlMs);
    const ans = await this.request('extend', { lease: leaseOrToken, ttl_ms: ttlMs });
    return ans.ttl_ms;
  }

  /**
   * Takes every lock of `locks` (names, or {lock, mode, limit}) or none
   * (the broker's acquire_all): resolves with the leases in that order.
   * The broker takes them in one total order, so callers asking overlapping
   * sets in any order never deadlock; on timeout or any error it gave back
   * what it took. Options: ttlMs, waitMs, watchdog, fair, detach, maxHoldMs,
   * lockDelayMs, owner. Without owner, locks of the set that enclosing
   * withLock bodies hold are re-entered (the set is taken as their owner);
   * held under two different owners, it rejects with DeadlockError.
   */
  async lockAll(locks, opts = {}) {
    checkOptions(opts, ['ttlMs', 'waitMs', 'watchdog', 'fair', 'detach', 'maxHoldMs', 'lockDelayMs', 'owner'],
      'lockAll option');
    const fields = { locks: locks.map((x) => (typeof x === 'string' ? { lock: x } : { ...x })) };
    for (const [key, wire] of ACQUIRE_FIELDS) if (opts[key] != null) fields[wire] = opts[key];
    let owner = opts.owner != null ? opts.owner : null;
    if (owner === null) {
      // Locks of the set that enclosing withLock bodies hold are re-entered,
      // as acquire does: the call takes the whole set as their owner. One
      // call has one owner, so holders under two owners would be waited for.
      const outers = new Set();
      for (const entry of fields.locks) {
        const outer = entry.limit == null ? this._enclosing(entry.lock) : null;
        if (!outer) continue;
        if (outer.state === 'lost') throw outer.lostError;
        outers.add(outer.owner);
      }
      if (outers.size > 1) {
        throw new DeadlockError(
          'lockAll: enclosing withLock bodies hold locks of this set under different owners, ' +
            'and one call re-enters as one owner: it would wait for itself; take the other locks on their own',
        );
      }
      owner = outers.size === 1 ? [...outers][0] : this._newOwner();
    }
    fields.owner = owner;
    const detached = opts.detach === true;
    const session = await this._ready();
    return session.start('acquire_all', fields, {
      onAnswer: (ans) => ans.leases.map((e) => this._adopt(e, owner, session, detached)),
    }).promise;
  }

  /**
   * Watches lock `name`: an async iterator of its state (camelCase, as
   * inspect), then its state after each change. It goes on across a
   * dropped connection or a broker restart (watching again, with backoff,
   * from the state read afresh). opts.signal (an AbortSignal) ends it;
   * so does leaving a for-await loop.
   */
  watch(name, opts = {}) {
    checkOptions(opts, ['signal'], 'watch option');
    return watchIterator(this, name, opts.signal || null);
  }

  /** The election `name` (see Election). */
  election(name) {
    return new Election(this, name);
  }

  /* ---- information --------------------------------------------------------- */

  /** A lock's state: {lock, state, limit, holders: [{mode, ttlMs, count, owner, client}], waiters, fence}. */
  async inspect(name) {
    return camelize(await this.request('inspect', { lock: name }));
  }

  /** This session's leases: [{lease, lock, mode, ttlMs, count, fence}]. */
  async leases() {
    return camelize((await this.request('leases', {})).leases, false);
  }

  /** The broker's counters (camelCase): uptimeS, connections, leases, ... */
  async stats() {
    return camelize(await this.request('stats', {}));
  }

  /** {redis: 'up'|'down'}. */
  async ping() {
    return camelize(await this.request('ping', {}));
  }

  /**
   * Sends any op with wire-named fields and resolves with the raw answer.
   * The escape hatch for ops this client has no method for: leases taken
   * through it are not tracked (no lost events, no release on exit).
   * @param {string} op
   * @param {object} [fields]
   */
  async request(op, fields = {}) {
    const session = await this._ready();
    return session.start(op, fields).promise;
  }
}

/** A watch's lines, from the reader to its iterator. */
class WatchQueue {
  constructor(session) {
    this.session = session;
    this.items = [];
    this.wake = null;
  }

  push(msg) {
    this.items.push(msg);
    if (this.wake) {
      const w = this.wake;
      this.wake = null;
      w();
    }
  }

  next() {
    if (this.items.length) return Promise.resolve(this.items.shift());
    return new Promise((resolve) => {
      this.wake = () => resolve(this.items.shift());
    });
  }
}

async function* watchIterator(client, name, signal) {
  const aborted = new Promise((resolve) => {
    if (signal) {
      if (signal.aborted) resolve(undefined);
      else signal.addEventListener('abort', () => resolve(undefined), { once: true });
    }
  });
  let q = null;
  let delay = 50;
  const start = async () => {
    const session = await client._ready();
    const queue = new WatchQueue(session);
    const ans = await session.start('watch', { lock: name }, {
      onAnswer: (a) => {
        client._watches.set(a.watch, queue); // before any event of it is read
        session.watching = (session.watching || 0) + 1; // a watch keeps the process alive
        session.updateRef();
        return a;
      },
    }).promise;
    queue.id = ans.watch;
    return [ans, queue];
  };
  try {
    for (;;) {
      if (signal && signal.aborted) return;
      let first;
      try {
        [first, q] = await start();
      } catch (err) {
        if (!(err instanceof ConnectionError)) throw err;
        await Promise.race([new Promise((r) => setTimeout(r, delay)), aborted]);
        delay = Math.min(delay * 2, 2000);
        continue;
      }
      delay = 50;
      yield camelize(first);
      for (;;) {
        const msg = await Promise.race([q.next(), aborted]);
        if (msg === undefined) return; // aborted
        if (msg === null) break; // the session ended: watch again
        yield camelize(msg);
      }
    }
  } finally {
    if (q && client._watches.get(q.id) === q) {
      client._watches.delete(q.id);
      q.session.watching -= 1;
      q.session.updateRef();
      q.session.start('unwatch', { watch: q.id }).promise.catch(() => {});
    }
  }
}

/**
 * Leader election on one lock, in the manner of etcd's Election: the
 * leader is the exclusive holder and publishes a value; the term is its
 * lease's fence.
 */
class Election {
  constructor(client, name) {
    this.client = client;
    this.name = name;
  }

  /**
   * Waits until this caller leads, publishing `value`; resolves with the
   * leadership's Lease (its fence is the term; its 'lost' event, and
   * lease.signal, say when leadership ends; release() resigns). opts as
   * acquire's (signal gives the campaign up).
   */
  campaign(value, opts = {}) {
    return this.client.acquire(this.name, { ...opts, value });
  }

  /**
   * Campaigns for as long as the caller iterates: yields the leadership's
   * Lease each time this caller is elected (lease.fence is the term). The
   * next iteration waits until that term ends (lost: a dropped connection,
   * a broker restart, an expiry; or released by the caller), then
   * campaigns again, reconnecting with backoff. opts as campaign's
   * (opts.signal ends it; a term still held then is released).
   */
  async *campaigns(value, opts = {}) {
    const signal = opts.signal || null;
    let delay = 50;
    while (!(signal && signal.aborted)) {
      let lease;
      try {
        lease = await this.campaign(value, opts);
      } catch (err) {
        if (err instanceof CancelledError) return;
        if (!(err instanceof ConnectionError)) throw err;
        await new Promise((resolve) => setTimeout(resolve, delay));
        delay = Math.min(delay * 2, 2000);
        continue;
      }
      delay = 50;
      yield lease;
      if (lease.state === 'held') {
        await new Promise((resolve) => {
          if (lease.signal.aborted) return resolve();
          lease.signal.addEventListener('abort', resolve, { once: true });
          if (signal) signal.addEventListener('abort', resolve, { once: true });
        });
      }
      if (signal && signal.aborted && lease.state === 'held') await lease.release().catch(() => {});
    }
  }

  /** Who leads now: {value, term, client}, or null. */
  async leader() {
    return leaderOf(await this.client.inspect(this.name));
  }

  /** An async iterator of the leaders: now (if any), then each new term or value. */
  async *observe(opts = {}) {
    let last = null;
    for await (const info of this.client.watch(this.name, opts)) {
      const l = leaderOf(info);
      if (l && (!last || l.value !== last.value || l.term !== last.term)) {
        last = l;
        yield l;
      }
    }
  }
}

function leaderOf(info) {
  if (info.state !== 'exclusive' || !info.holders || !info.holders.length) return null;
  const h = info.holders[0];
  return { value: h.value !== undefined ? h.value : null, term: info.fence, client: h.client };
}

module.exports = { Client, Election, camelize };
