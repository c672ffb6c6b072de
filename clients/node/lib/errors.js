'use strict';
/*
 * errors.js - the error classes of the lockbroker client, and the one
 * table that maps the broker's error codes to them.
 *
 * Invariants:
 *  - Every error this library rejects with (or throws) is a LockbrokerError,
 *    except TypeError for a call that is wrong in its JavaScript shape (a
 *    callback that is not a function, an option that is not an object).
 *  - One class per protocol error code (PROTOCOL.md, "Error codes"); the
 *    code is on the class's prototype and on every instance (`err.code`), and
 *    `err.message` is the broker's own message when the broker answered.
 *    A code this version does not know becomes a plain LockbrokerError that
 *    keeps the code, so a newer broker never breaks an older client.
 *  - Client-side conditions have classes of their own, with codes that are
 *    not protocol codes: ConnectionError ('connection'), LeaseLostError
 *    ('lost'), DeadlockError ('deadlock'), ProtocolError ('protocol').
 *  - `err.fromBroker` is true when the broker sent the error, false when the
 *    client decided it locally (a check before sending, an AbortSignal, a
 *    dropped connection).
 */

class LockbrokerError extends Error {
  /**
   * @param {string} message  human text (the broker's when it answered)
   * @param {object} [opts]   {code, cause, fromBroker}
   */
  constructor(message, opts = {}) {
    super(message, opts.cause !== undefined ? { cause: opts.cause } : undefined);
    this.name = new.target.name;
    this.code = opts.code !== undefined ? opts.code : new.target.prototype.code;
    this.fromBroker = opts.fromBroker === true;
  }
}
LockbrokerError.prototype.code = 'error';

/* One class per protocol code, in PROTOCOL.md's order. */
class BadJsonError extends LockbrokerError {}
class BadRequestError extends LockbrokerError {}
class LineTooLongError extends LockbrokerError {}
class UnknownOpError extends LockbrokerError {}
class InvalidArgumentError extends LockbrokerError {}
class UnauthorizedError extends LockbrokerError {}
class LockTimeoutError extends LockbrokerError {}
class CancelledError extends LockbrokerError {}
class NotHeldError extends LockbrokerError {}
class ConflictError extends LockbrokerError {}
class UpgradeUnsupportedError extends LockbrokerError {}
class LimitExceededError extends LockbrokerError {}
class UnavailableError extends LockbrokerError {}
class ShuttingDownError extends LockbrokerError {}
class InternalError extends LockbrokerError {}

/* The table: wire code -> class. The only place a code is spelled. */
const WIRE_CODES = [
  ['bad_json', BadJsonError],
  ['bad_request', BadRequestError],
  ['line_too_long', LineTooLongError],
  ['unknown_op', UnknownOpError],
  ['invalid_argument', InvalidArgumentError],
  ['unauthorized', UnauthorizedError],
  ['timeout', LockTimeoutError],
  ['cancelled', CancelledError],
  ['not_held', NotHeldError],
  ['conflict', ConflictError],
  ['upgrade_unsupported', UpgradeUnsupportedError],
  ['limit_exceeded', LimitExceededError],
  ['unavailable', UnavailableError],
  ['shutting_down', ShuttingDownError],
  ['internal', InternalError],
];
const byCode = new Map(WIRE_CODES);
for (const [code, cls] of WIRE_CODES) cls.prototype.code = code;

/* Client-side conditions. */

/** The broker cannot be reached, or the connection dropped under a request. */
class ConnectionError extends LockbrokerError {}
ConnectionError.prototype.code = 'connection';

/**
 * A call would wait for its own task. Since acquire and withLock re-enter
 * the lock an enclosing withLock body holds (they no longer throw this),
 * only lockAll throws it: asked, without an owner, for locks that
 * enclosing bodies hold under two different owners. Kept exported for
 * callers that test for it.
 */
class DeadlockError extends LockbrokerError {}
DeadlockError.prototype.code = 'deadlock';

/** The broker sent something this client cannot read (not JSON, too long). */
class ProtocolError extends LockbrokerError {}
ProtocolError.prototype.code = 'protocol';

/**
 * A lease the client can no longer vouch for. `reason` is the broker's
 * ('expired', 'gone', 'redis_unavailable', 'max_hold') or the client's:
 * 'disconnected' (the session's connection dropped), 'closed' (the client
 * was closed while the lease was held) or 'not_held' (the broker answered
 * not_held for a lease the client still believed held).
 */
class LeaseLostError extends LockbrokerError {
  constructor(message, opts = {}) {
    super(message, opts);
    this.reason = opts.reason;
    this.lock = opts.lock;
    this.fence = opts.fence;
  }
}
LeaseLostError.prototype.code = 'lost';

/**
 * The error for an answer {"ok": false, "error": {code, message}}: an
 * instance of the code's class, or a LockbrokerError keeping an unknown code.
 */
function errorFromWire(error) {
  const code = error && typeof error.code === 'string' ? error.code : 'internal';
  const message = error && typeof error.message === 'string' ? error.message : `broker error ${code}`;
  const cls = byCode.get(code);
  if (cls) return new cls(message, { fromBroker: true });
  return new LockbrokerError(message, { code, fromBroker: true });
}

module.exports = {
  LockbrokerError,
  BadJsonError,
  BadRequestError,
  LineTooLongError,
  UnknownOpError,
  InvalidArgumentError,
  UnauthorizedError,
  LockTimeoutError,
  CancelledError,
  NotHeldError,
  ConflictError,
  UpgradeUnsupportedError,
  LimitExceededError,
  UnavailableError,
  ShuttingDownError,
  InternalError,
  ConnectionError,
  DeadlockError,
  ProtocolError,
  LeaseLostError,
  errorFromWire,
  /** [code, class] for every protocol code, in PROTOCOL.md's order. */
  WIRE_CODES: Object.freeze(WIRE_CODES.map((pair) => Object.freeze(pair.slice()))),
};
