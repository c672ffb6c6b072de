'use strict';
/*
 * lease.js - a lease the client holds: its token, fence and state, and the
 * ways its loss reaches the code that uses it.
 *
 * Invariants:
 *  - One Lease object per token: a reentrant acquire that the broker
 *    answers with a known token updates that object's `count` and returns
 *    it, so every level of a re-entered lock shares one state and one
 *    signal.
 *  - state moves one way only, in _markLost() and _markReleased():
 *    'held' -> 'released' (the count reached 0) or 'held' -> 'lost'.
 *    A lease that is not 'held' is never sent to the broker again: release()
 *    and extend() of a lost lease reject with its loss, locally.
 *  - On loss, in this order: state 'lost', `lostError` set, `signal`
 *    aborted with `lostError` as its reason, then the lease's 'lost' event,
 *    then the client's (client.js). A listener that throws does not stop
 *    the others, nor the client's reader: its exception is rethrown on its
 *    own tick, where it is an uncaught exception like any other.
 *  - The token is the right to the lease: util.inspect() and toJSON() show
 *    only its first 8 characters.
 */

const { EventEmitter } = require('node:events');
const util = require('node:util');
const { LeaseLostError, NotHeldError } = require('./errors');

/** Emits without letting a throwing listener unwind the caller. */
function safeEmit(emitter, name, ...args) {
  for (const listener of emitter.listeners(name)) {
    try {
      listener.apply(emitter, args);
    } catch (err) {
      process.nextTick(() => {
        throw err;
      });
    }
  }
}

class Lease extends EventEmitter {
  /**
   * Made by the client from an acquire's answer; not for direct use.
   * @param {object} client   the Client (its leaseCall() sends release/extend)
   * @param {object} session  the Session that holds it (null when detached)
   * @param {object} ans      the acquire's answer (wire names)
   * @param {string} owner    the owner it was acquired with
   * @param {boolean} detached
   */
  constructor(client, session, ans, owner, detached) {
    super();
    this._client = client;
    this._session = session; // null when detached
    /** The lease token: the right to extend and release it, from any session. */
    this.token = ans.lease;
    this.lock = ans.lock;
    /** 'exclusive', 'shared' or 'permit' (a semaphore's). */
    this.mode = ans.mode;
    /** The fencing token: strictly increases with every new grant of the lock. */
    this.fence = ans.fence;
    this.ttlMs = ans.ttl_ms;
    /** Reentrancy count, as the broker last said. */
    this.count = ans.count;
    this.owner = owner;
    this.detached = detached;
    /** 'held', 'released' or 'lost'. */
    this.state = 'held';
    /** Why it was lost (see LeaseLostError), else null. */
    this.lostReason = null;
    /** The LeaseLostError of its loss, else null. */
    this.lostError = null;
    this._controller = new AbortController();
    this._ttlCounted = null; // the TTL its session counts it with (liveness)
  }

  /** Aborted when the lease is lost; its reason is the LeaseLostError. */
  get signal() {
    return this._controller.signal;
  }

  get held() {
    return this.state === 'held';
  }

  get lost() {
    return this.state === 'lost';
  }

  /** Throws the loss if the lease is lost. Call it before each write the lease guards. */
  throwIfLost() {
    if (this.state === 'lost') throw this.lostError;
  }

  /**
   * Drops one reentrancy level; at 0 the lock is free. Resolves with the
   * count left. Rejects with the loss if the lease is lost (nothing is sent),
   * NotHeldError if it was released already (nothing is sent) or if the
   * broker says it is not held (the lease is then lost, reason 'not_held').
   */
  async release() {
    this._throwIfGone('release');
    const ans = await this._client._leaseCall(this, 'release', { lease: this.token });
    return ans.count;
  }

  /**
   * Sets the lease's remaining lifetime to ttlMs (it does not add). Resolves
   * with the lifetime the broker granted (less when max_hold_ms ends it
   * sooner). Rejects as release() does.
   * @param {number} ttlMs
   */
  /**
   * Publishes a new value (an election's leader's) without a new term:
   * resolves with the fence, which stays the term.
   * @param {string} value
   */
  async proclaim(value) {
    this._throwIfGone('proclaim');
    const ans = await this._client._leaseCall(this, 'proclaim', { lease: this.token, value });
    return ans.fence;
  }

  async extend(ttlMs) {
    this._throwIfGone('extend');
    const ans = await this._client._leaseCall(this, 'extend', { lease: this.token, ttl_ms: ttlMs });
    return ans.ttl_ms;
  }

  _throwIfGone(op) {
    if (this.state === 'lost') throw this.lostError;
    if (this.state === 'released') {
      throw new NotHeldError(`cannot ${op}: this lease of lock ${JSON.stringify(this.lock)} was released already`);
    }
  }

  /** 'held' -> 'lost'. Returns false (and does nothing) in any other state. */
  _markLost(reason, cause) {
    if (this.state !== 'held') return false;
    this.state = 'lost';
    this.lostReason = reason;
    this.lostError = new LeaseLostError(
      `the lease of lock ${JSON.stringify(this.lock)} (fence ${this.fence}) was lost: ${reason}`,
      { reason, lock: this.lock, fence: this.fence, cause },
    );
    this._controller.abort(this.lostError);
    safeEmit(this, 'lost', this.lostError);
    return true;
  }

  /** 'held' -> 'released'. */
  _markReleased() {
    if (this.state !== 'held') return false;
    this.state = 'released';
    this.count = 0;
    return true;
  }

  toJSON() {
    return {
      token: `${this.token.slice(0, 8)}...`,
      lock: this.lock,
      mode: this.mode,
      fence: this.fence,
      ttlMs: this.ttlMs,
      count: this.count,
      owner: this.owner,
      detached: this.detached,
      state: this.state,
      lostReason: this.lostReason,
    };
  }

  [util.inspect.custom](depth, options) {
    return `Lease ${util.inspect(this.toJSON(), options)}`;
  }
}

module.exports = { Lease, safeEmit };
