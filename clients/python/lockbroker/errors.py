"""Errors of the lockbroker client: one exception class per protocol code.

Every error the broker answers (``{"ok": false, "error": {"code", "message"}}``)
reaches the caller as the class registered for its code in ``_BY_CODE``,
carrying the broker's message unchanged. Two more classes are the client's
own: :class:`Disconnected` (no session: the connection could not be opened
or dropped while a request was in flight) and :class:`LeaseLost` (the broker
can no longer vouch for a lease, or its session ended).

Invariants:

- every class here derives from :class:`LockbrokerError`, so one ``except``
  catches everything the library raises on purpose;
- ``code`` is the protocol's wire string (``"timeout"``, ``"not_held"``, ...),
  or ``"disconnected"`` / ``"lost"`` for the two client-side classes;
- a code this version does not know still becomes a :class:`LockbrokerError`
  with that code (the broker may add codes; it never changes old ones).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "LockbrokerError",
    "BadJson",
    "BadRequest",
    "LineTooLong",
    "UnknownOp",
    "InvalidArgument",
    "Unauthorized",
    "LockTimeout",
    "Cancelled",
    "NotHeld",
    "Conflict",
    "UpgradeUnsupported",
    "LimitExceeded",
    "Unavailable",
    "ShuttingDown",
    "InternalError",
    "Disconnected",
    "LeaseLost",
    "error_for",
]


class LockbrokerError(Exception):
    """Base class of every error the library raises.

    ``code`` is the protocol's error code, ``message`` the broker's own text
    (or the client's, for errors found before anything was sent), ``op`` the
    request's op when the error answers a request, ``lock`` the name of the
    lock it is about when there is one (``acquire``, ``inspect``, ``watch``;
    ``release`` and ``extend`` of a lease this client holds), else None.
    ``str()`` shows them all: ``timeout (acquire 'invoice:42'): ...``.
    """

    code = "error"

    def __init__(self, message: str = "", *, code: str | None = None, op: str | None = None,
                 lock: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        self.op = op
        self.lock = lock

    def __str__(self) -> str:
        what = self.op or ""
        if self.lock is not None:
            what = f"{what} {self.lock!r}".lstrip()
        where = f" ({what})" if what else ""
        return f"{self.code}{where}: {self.message}"


class BadJson(LockbrokerError):
    """The broker could not parse a line as JSON (a client bug)."""

    code = "bad_json"


class BadRequest(LockbrokerError):
    """The line was not an object, or ``op`` was missing or not a string."""

    code = "bad_request"


class LineTooLong(LockbrokerError):
    """The request would exceed the broker's ``max_line``; it was not sent."""

    code = "line_too_long"


class UnknownOp(LockbrokerError):
    """The broker does not know this op."""

    code = "unknown_op"


class InvalidArgument(LockbrokerError):
    """A field was missing, of the wrong type, out of range, or unknown."""

    code = "invalid_argument"


class Unauthorized(LockbrokerError):
    """The broker wants ``hello`` with the right secret first."""

    code = "unauthorized"


class LockTimeout(LockbrokerError):
    """``acquire`` could not be granted within ``wait_ms``."""

    code = "timeout"


class Cancelled(LockbrokerError):
    """A waiting ``acquire`` was cancelled (see :class:`CancelToken`)."""

    code = "cancelled"


class NotHeld(LockbrokerError):
    """The lease is unknown, released, expired or lost."""

    code = "not_held"


class Conflict(LockbrokerError):
    """The name has holders or waiters of another kind (lock vs semaphore, other limit)."""

    code = "conflict"


class UpgradeUnsupported(LockbrokerError):
    """A shared holder asked for the same lock exclusive with the same owner."""

    code = "upgrade_unsupported"


class LimitExceeded(LockbrokerError):
    """A per-session or per-broker limit was hit (leases, waiters, connections)."""

    code = "limit_exceeded"


class Unavailable(LockbrokerError):
    """Redis could not be reached or failed; the request had no effect."""

    code = "unavailable"


class ShuttingDown(LockbrokerError):
    """The broker is stopping and takes no new acquisitions."""

    code = "shutting_down"


class InternalError(LockbrokerError):
    """A bug in the broker; the message says what."""

    code = "internal"


class Disconnected(Unavailable):
    """No session: the broker could not be reached, or the connection dropped.

    A request in flight when the connection dropped gets this error. The
    session is gone with the connection, so the broker has released every
    lease of it that was not detached and withdrawn its waiting acquires:
    like :class:`Unavailable`, an acquire that fails so left nothing held.
    """

    code = "disconnected"


class LeaseLost(NotHeld):
    """The lease can no longer be trusted: stop using the resource at once.

    ``reason`` is the broker's (``expired``, ``gone``, ``redis_unavailable``,
    ``max_hold``), or the client's: ``disconnected`` (the session ended with
    its connection), ``closed`` (the client was closed while the lease was
    held) or ``not_held`` (the broker answered ``not_held`` for a lease this
    client never released). ``lease`` is the lease object, ``lock`` its name.
    """

    code = "lost"

    def __init__(self, lease: Any, reason: str) -> None:
        self.lease = lease
        self.reason = reason
        super().__init__(f"the lease on {lease.name!r} was lost ({reason})", lock=lease.name)

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"  # the message names the lock already


_BY_CODE: dict[str, type[LockbrokerError]] = {
    cls.code: cls
    for cls in (
        BadJson,
        BadRequest,
        LineTooLong,
        UnknownOp,
        InvalidArgument,
        Unauthorized,
        LockTimeout,
        Cancelled,
        NotHeld,
        Conflict,
        UpgradeUnsupported,
        LimitExceeded,
        Unavailable,
        ShuttingDown,
        InternalError,
    )
}


def error_for(code: str, message: str, op: str | None = None,
              lock: str | None = None) -> LockbrokerError:
    """Returns the exception for a protocol error code (not raised)."""
    cls = _BY_CODE.get(code)
    if cls is None:
        return LockbrokerError(message, code=str(code), op=op, lock=lock)
    return cls(message, op=op, lock=lock)
