'use strict';
/*
 * session.js - one connection to the broker, which is one broker session:
 * the socket, the hello, the one reader that routes every line, the
 * requests in flight, and the client side of keepalive.
 *
 * Invariants:
 *  - State moves one way only, in setState(): hello (connecting, hello
 *    queued or sent) -> ready -> closed, or hello -> closed. Nothing is sent
 *    once closed.
 *  - Request ids are integers 1, 2, 3... per session, never reused; every
 *    request in flight is in `pending` under its id until its answer or the
 *    session's end. When the socket closes, every pending request rejects
 *    with one ConnectionError before hooks.onClose() runs.
 *  - The reader is the only consumer of the socket's bytes. An answer goes
 *    to its request by `id`; an event (no `id`) goes to hooks.onEvent().
 *    Lines are handled in order, each to the end, before the next: an
 *    `onAnswer` hook given to start() runs inside that order (so a lease is
 *    adopted before a `lost` event about it that follows in the same
 *    chunk), and the request's promise settles afterwards with its result.
 *  - Requests leave in the order start() was called: they are queued and
 *    written together by one process.nextTick callback, which runs once the
 *    current chain of promise reactions has drained. So the many tasks that
 *    one chunk of answers wakes cost one write, not one each, and a lone
 *    request waits for no later event-loop phase.
 *  - A request line longer than the broker's max_line is refused before it
 *    is sent (LineTooLongError): the broker would close the session.
 *  - The socket keeps the process alive only while a request that is not a
 *    keepalive ping is in flight or the session holds leases (`leases`, a Set
 *    the client keeps); updateRef() applies that.
 *  - Liveness (unless keepaliveMs is 0): the session gives the broker up
 *    (destroys the socket, so every lease is reported lost, 'disconnected')
 *    when nothing at all arrived from it for boundMs(): the shortest TTL of
 *    the leases it holds / 3 (the broker renews every ttl/3 and Redis frees
 *    a lease a TTL after the last renewal, so this is before Redis can give
 *    a lease away), at most keepaliveMs, or DEFAULT_BOUND_MS without it;
 *    with no lease held, keepaliveMs, or nothing (no check, no ping). A
 *    ping leaves when the broker has been quiet for a third of the bound
 *    (or, with keepaliveMs, which the broker enforces too, when we have
 *    been quiet for a third of it), never while another is unanswered;
 *    its answer (or anything after it) plans the next.
 *    `ttls` counts the held leases by TTL (the client calls countTtl() when
 *    a lease is granted, extended, released or lost); a shorter bound
 *    re-arms the one timer at once. The timer is unref'd and cleared when
 *    the socket closes.
 */

const net = require('node:net');
const { performance } = require('node:perf_hooks');
const { LineReader, encodeLine } = require('./framing');
const { connectArgs } = require('./url');
const {
  ConnectionError,
  LineTooLongError,
  LockbrokerError,
  ProtocolError,
  UnauthorizedError,
  errorFromWire,
} = require('./errors');

/** The broker's default max_line, used until hello tells the real one. */
const DEFAULT_BROKER_MAX_LINE = 65536;

/** The longest silence from the broker a session holding leases accepts without keepaliveMs. */
const DEFAULT_BOUND_MS = 5000;

class Session {
  /**
   * Starts connecting; open() says hello.
   * @param {object} addr   parsed URL (url.js)
   * @param {object} hooks  {onEvent(session, msg), onClose(session, err)}
   */
  constructor(addr, hooks) {
    this.addr = addr;
    this.hooks = hooks;
    this.state = 'hello';
    this.pending = new Map(); // id -> {resolve, reject, weak, onAnswer}
    this.strong = 0; // pending requests that are not keepalive pings
    this.nextId = 1;
    this.out = []; // lines queued for the next write
    this.flushQueued = false;
    this.reader = new LineReader();
    this.maxLine = DEFAULT_BROKER_MAX_LINE;
    this.info = null; // hello's answer: server, proto, session, broker, limits
    this.leases = new Set(); // Lease objects bound to this session (the client adds them)
    this.openedAt = 0; // Date.now() when hello succeeded
    this.connected = false; // the socket connected (for the close message)
    this.closeCause = null; // the socket error or local reason that ended it
    this.closingReason = null; // the broker's `closing` event reason, if any
    this.keepaliveMs = null; // hello's keepalive_ms, 0 for no liveness check (open() sets it)
    this.ttls = new Map(); // ttl -> how many held leases have it (liveness)
    this.lastRx = performance.now(); // when the broker last sent anything
    this.lastTx = this.lastRx; // when we last wrote
    this.lastPing = -Infinity; // a ping is in flight while lastPing > lastRx
    this.liveTimer = null;
    this.liveAt = Infinity; // when liveTimer fires
    this.refed = true;

    this.socket = net.connect(connectArgs(addr));
    this.socket.setNoDelay(true);
    this.socket.on('connect', () => {
      this.connected = true;
    });
    this.socket.on('data', (chunk) => this.onData(chunk));
    this.socket.on('error', (err) => {
      if (this.closeCause === null) this.closeCause = err;
    });
    this.socket.on('close', () => this.onSocketClose());
  }

  /**
   * Says hello (the first request of the session); resolves with the
   * session once the broker accepted it. Rejects with ConnectionError
   * (could not connect, timed out, dropped) or the error the broker
   * answered hello with (UnauthorizedError, InvalidArgumentError); the
   * session is then closed. Without a secret in hello, UnauthorizedError
   * still opens the session (info null): ping works, the rest is refused.
   * @param {object} hello  the hello request's fields (wire names)
   * @param {object} o      {timeoutMs, keepaliveMs (null: the default bound; 0: no liveness check)}
   * @returns {Promise<Session>}
   */
  open(hello, o) {
    this.keepaliveMs = o.keepaliveMs;
    const timer = setTimeout(
      () => {
        const what = this.connected ? 'no answer to hello' : 'no connection';
        this.destroy(new ConnectionError(`cannot connect to ${this.addr.url}: ${what} within ${o.timeoutMs} ms`));
      },
      Math.max(1, o.timeoutMs),
    );
    return this.start('hello', hello).promise.then(
      (ans) => {
        clearTimeout(timer);
        this.info = ans;
        if (ans.limits && Number.isInteger(ans.limits.max_line)) this.maxLine = ans.limits.max_line;
        this.openedAt = Date.now();
        this.setState('ready');
        this.armLiveness();
        this.updateRef();
        return this;
      },
      (err) => {
        clearTimeout(timer);
        if (err instanceof UnauthorizedError && hello.auth === undefined) {
          // No secret given: the session stays open, as lockctl's and the
          // other clients': ping works, every other op answers
          // unauthorized by itself. No server info: hello was refused.
          this.info = null;
          this.openedAt = Date.now();
          this.setState('ready');
          this.armLiveness();
          this.updateRef();
          return this;
        }
        this.destroy(err);
        throw err;
      },
    );
  }

  setState(next) {
    this.state = next;
  }

  /**
   * Sends one request. Returns its id (for `cancel`) and a promise of the
   * result: the answer object, or what opts.onAnswer(answer) returned (run
   * in line order, see the header). Rejects with the error class of the
   * broker's code, LineTooLongError, or ConnectionError.
   * @param {string} op
   * @param {object} fields  wire fields (undefined values are left out by JSON)
   * @param {object} [opts]  {weak: a keepalive ping, onAnswer(ans)}
   */
  start(op, fields, opts = {}) {
    if (this.state === 'closed') {
      return { id: null, promise: Promise.reject(this.endError()) };
    }
    const id = this.nextId++;
    const line = encodeLine({ id, op, ...fields });
    // A UTF-16 unit is at most 3 UTF-8 bytes: count bytes only when it matters.
    if (line.length * 3 > this.maxLine && Buffer.byteLength(line) - 1 > this.maxLine) {
      const n = Buffer.byteLength(line) - 1;
      return {
        id: null,
        promise: Promise.reject(
          new LineTooLongError(
            `the ${op} request is ${n} bytes, longer than the broker's max_line (${this.maxLine} bytes)`,
          ),
        ),
      };
    }
    const weak = opts.weak === true;
    const promise = new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject, weak, onAnswer: opts.onAnswer });
    });
    if (!weak && this.strong++ === 0) this.updateRef();
    this.out.push(line);
    if (!this.flushQueued) {
      this.flushQueued = true;
      process.nextTick(() => this.flush());
    }
    return { id, promise };
  }

  flush() {
    this.flushQueued = false;
    if (this.out.length === 0 || this.state === 'closed') return;
    const data = this.out.length === 1 ? this.out[0] : this.out.join('');
    this.out = [];
    this.socket.write(data);
    this.lastTx = performance.now();
  }

  onData(chunk) {
    const prev = this.lastRx;
    this.lastRx = performance.now();
    if (this.lastPing > prev) this.armLiveness(); // a ping answered: plan the next, a third of the bound on
    let lines;
    try {
      lines = this.reader.feed(chunk);
    } catch (err) {
      this.destroy(err);
      return;
    }
    for (const line of lines) {
      if (this.state === 'closed') return;
      let msg;
      try {
        msg = JSON.parse(line);
      } catch {
        this.destroy(new ProtocolError('the broker sent a line that is not JSON'));
        return;
      }
      if (msg === null || typeof msg !== 'object' || Array.isArray(msg)) {
        this.destroy(new ProtocolError('the broker sent a line that is not a JSON object'));
        return;
      }
      this.route(msg);
    }
  }

  route(msg) {
    if (msg.id === undefined && typeof msg.event === 'string') {
      if (msg.event === 'closing' && typeof msg.reason === 'string') this.closingReason = msg.reason;
      this.hooks.onEvent(this, msg);
      return;
    }
    // An answer with "id": null (bad_json, line_too_long) belongs to no
    // request of ours: this client only sends valid JSON within max_line.
    const entry = msg.id === null || msg.id === undefined ? undefined : this.pending.get(msg.id);
    if (entry === undefined) return;
    this.pending.delete(msg.id);
    if (!entry.weak && --this.strong === 0) this.updateRef();
    if (msg.ok === true) {
      let value = msg;
      if (entry.onAnswer) {
        try {
          value = entry.onAnswer(msg);
        } catch (err) {
          entry.reject(err);
          return;
        }
      }
      entry.resolve(value);
    } else {
      entry.reject(errorFromWire(msg.error));
    }
  }

  /* ---- liveness ---------------------------------------------------------- */

  /** How long the broker may stay silent before the session gives it up (ms), or null: not watched. */
  boundMs() {
    const ka = this.keepaliveMs;
    if (ka === 0) return null;
    if (this.ttls.size > 0) {
      let min = Infinity;
      for (const ttl of this.ttls.keys()) if (ttl < min) min = ttl;
      return Math.min(ka !== null ? ka : DEFAULT_BOUND_MS, min / 3);
    }
    return ka;
  }

  /**
   * Counts a held lease in the bound with its TTL now (ttl), or no more
   * (ttl null: released, lost); a shorter bound applies at once.
   * @param {object} lease  the Lease (its _ttlCounted is this session's bookkeeping)
   * @param {number|null} ttl
   */
  countTtl(lease, ttl) {
    const old = lease._ttlCounted;
    if (old != null) {
      const n = this.ttls.get(old) - 1;
      if (n > 0) this.ttls.set(old, n);
      else this.ttls.delete(old);
      lease._ttlCounted = null;
    }
    if (!Number.isInteger(ttl) || ttl <= 0) return;
    let shrunk = true;
    for (const t of this.ttls.keys()) if (t <= ttl) shrunk = false;
    this.ttls.set(ttl, (this.ttls.get(ttl) || 0) + 1);
    lease._ttlCounted = ttl;
    if (shrunk) this.armLiveness();
  }

  /** Arms the timer for the next check if that is sooner than it is armed for. */
  armLiveness() {
    if (this.state !== 'ready') return;
    const bound = this.boundMs();
    if (bound === null) return;
    const at = this.lastRx + bound / 3;
    if (at < this.liveAt) this.setLiveTimer(at);
  }

  setLiveTimer(at) {
    if (this.liveTimer !== null) clearTimeout(this.liveTimer);
    this.liveTimer = null;
    this.liveAt = at;
    if (at === Infinity) return;
    this.liveTimer = setTimeout(() => this.onLiveTimer(), Math.max(0, Math.ceil(at - performance.now())));
    this.liveTimer.unref();
  }

  onLiveTimer() {
    this.liveTimer = null;
    this.liveAt = Infinity;
    if (this.state !== 'ready') return;
    const bound = this.boundMs();
    if (bound !== null && performance.now() - this.lastRx >= bound) {
      // Timers run before the loop polls the socket: after a long turn of
      // the loop, an answer may wait unread. Look again once it was read.
      setImmediate(() => this.checkLiveness());
      this.liveAt = -Infinity; // no re-arm meanwhile
      return;
    }
    this.checkLiveness();
  }

  /** Gives up a silent broker, pings a quiet one, and arms the timer for the next check. */
  checkLiveness() {
    this.liveAt = Infinity;
    if (this.state !== 'ready') return;
    const bound = this.boundMs();
    if (bound === null) return; // nothing to watch: armed again by the next lease
    const now = performance.now();
    const deadAt = this.lastRx + bound;
    if (now >= deadAt) {
      const ms = Math.round(bound);
      this.destroy(new ConnectionError(`the broker sent nothing for ${ms} ms (keepalive: the liveness bound)`));
      return;
    }
    let at = deadAt;
    if (this.lastPing <= this.lastRx) {
      let pingAt = this.lastRx + bound / 3;
      if (this.keepaliveMs) pingAt = Math.min(pingAt, this.lastTx + this.keepaliveMs / 3);
      if (now >= pingAt) {
        this.lastPing = now;
        this.start('ping', {}, { weak: true }).promise.catch(() => {});
      } else {
        at = Math.min(at, pingAt);
      }
    }
    this.setLiveTimer(at);
  }

  /** Refs the socket while it has work that must keep the process alive. */
  updateRef() {
    if (this.state === 'closed') return;
    const want = this.state !== 'ready' || this.strong > 0 || this.leases.size > 0 || this.watching > 0;
    if (want === this.refed) return;
    this.refed = want;
    if (want) this.socket.ref();
    else this.socket.unref();
  }

  /** Ends the session now; pending requests reject (with cause `err`). */
  destroy(err) {
    if (this.state === 'closed') return;
    if (err && this.closeCause === null) this.closeCause = err;
    this.socket.destroy();
  }

  /**
   * True when the connect itself failed with the system's answer: refused,
   * no such socket, no route, unknown host; nothing was ever connected.
   * False for a connect that timed out (ours is a ConnectionError), was
   * ended by the client, or was made and then dropped.
   */
  refused() {
    const cause = this.closeCause;
    return (
      this.state === 'closed' &&
      !this.connected &&
      cause instanceof Error &&
      typeof cause.code === 'string' &&
      !(cause instanceof LockbrokerError)
    );
  }

  /** The error of every request cut off by the session's end. */
  endError() {
    if (this.closeCause instanceof ConnectionError || this.closeCause instanceof ProtocolError) {
      return this.closeCause;
    }
    const what = this.connected ? `the connection to ${this.addr.url} closed` : `cannot connect to ${this.addr.url}`;
    const why = this.closingReason
      ? `: the broker closed it (${this.closingReason})`
      : this.closeCause && this.closeCause.message
        ? `: ${this.closeCause.message}`
        : '';
    return new ConnectionError(what + why, this.closeCause ? { cause: this.closeCause } : {});
  }

  onSocketClose() {
    if (this.state === 'closed') return;
    this.setState('closed');
    this.setLiveTimer(Infinity);
    this.out = [];
    const err = this.endError();
    const pending = [...this.pending.values()];
    this.pending.clear();
    this.strong = 0;
    for (const entry of pending) entry.reject(err);
    this.hooks.onClose(this, err);
  }
}

module.exports = { Session, DEFAULT_BOUND_MS };
