"""What the threaded and the asyncio client share: sessions, requests,
routing of answers and events, the lease book, owners and backoff.

Glossary (as in the broker): a *session* is one connection and what the
broker keeps for it; a *lease* is one grant of a lock, named by its token;
its *fence* is the grant's fencing token; an *owner* is the reentrancy
identity inside a session.

Who owns what:

- ``ClientCore`` owns the lease book (``_leases``: token -> ``LeaseState``)
  and the current session; a ``Session`` owns its pending requests (``id`` ->
  ``Pending``). ``_mu`` guards all of them. A transport (client.py, aio.py)
  subclasses ``ClientCore`` and ``Session`` and supplies the I/O: how to
  write a line, how to wake a waiter, where to run callbacks.
- Many ``Lease`` handles may share one ``LeaseState``: each reentrant
  acquire of the same lock by the same owner returns the same token with
  ``count`` + 1, and gets a handle of its own that releases one level.

Invariants:

- A request is registered in its session's ``pending`` before its line is
  written, so its answer always finds it; a session that has ended takes no
  new request (``Session.closed`` is set under ``_mu``, in the same hold that
  fails every pending request and loses every lease bound to the session).
  Hence a new session can exist only once the old one's leases are marked
  lost: an old token is never used on a new session behind the caller's
  back (detached leases excepted, which the protocol lets any session use).
- A lease state is lost at most once; losing it sets ``lost_reason`` (and
  the ``lost`` event, made on demand under ``_mu``), removes it from the book and queues every ``on_lost`` callback of the handles still
  holding it. Callbacks never run on the reader (``_post``), so they may call
  the client.
- Answers are matched by ``id`` only; ids come from one counter per client
  and are never reused, so a ``cancel`` can never hit a later request.
- Liveness: each session counts the TTLs of the leases bound to it
  (``Session.ttls``, kept under ``_mu`` wherever a lease is granted,
  extended, released or lost). The broker renews a lease every ttl/3 and
  Redis frees it a TTL after the last renewal, so a broker silent for ttl/3
  may be frozen with the lease about to be given away: the client gives the
  session up when the broker has said nothing (any message counts) for
  ``_bound_ms``: the shortest TTL held / 3, at most ``keepalive_ms`` (or
  ``DEFAULT_BOUND_MS`` without it), and pings within it (one ping in flight
  at most). The transport runs the check (``_liveness``) on a thread or a
  timer that never waits on the socket, and re-arms it at once when the
  bound shrinks or a ping is answered (``_liveness_replan``).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import socket
import random
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Self

from . import _wire
from .errors import Disconnected, InvalidArgument, LeaseLost, NotHeld, Unauthorized, error_for
from .info import strip

log = logging.getLogger("lockbroker")

__version__ = "0.1.0"

# The longest silence from the broker that a session holding leases
# accepts when no keepalive_ms is given (a lease's ttl/3 may make it shorter).
DEFAULT_BOUND_MS = 5000
_NEVER = float("inf")

# ---- owners ---------------------------------------------------------------

# asyncio's own "is a loop running in this thread?", without the exception
# that asyncio.current_task() raises when none is (this runs per acquire).
_get_running_loop = asyncio.events._get_running_loop
_owner_seq = itertools.count(1)
_owner_tls = threading.local()
_task_owners: "weakref.WeakKeyDictionary[asyncio.Task, str]" = weakref.WeakKeyDictionary()
_task_owners_mu = threading.Lock()


def _owner_label(name: str) -> str:
    short = name.encode("utf-8")[:96].decode("utf-8", "ignore")
    return f"{short}#{next(_owner_seq)}"


def current_owner() -> str:
    """The reentrancy owner of the running asyncio task, else of the thread.

    Each task and each thread gets its own, unique in the process and never
    reused (a thread ident or ``id(task)`` can be), e.g. ``"Thread-3#7"``.
    """
    loop = _get_running_loop()
    task = asyncio.current_task(loop) if loop is not None else None
    if task is not None:
        with _task_owners_mu:
            owner = _task_owners.get(task)
            if owner is None:
                owner = _task_owners[task] = _owner_label(task.get_name())
        return owner
    owner = getattr(_owner_tls, "owner", None)
    if owner is None:
        owner = _owner_tls.owner = _owner_label(threading.current_thread().name)
    return owner


def default_label() -> str:
    """The ``client`` label sent in hello, the same shape in every client:
    ``PROGRAM[PID]@HOST lockbroker-python/VERSION``."""
    prog = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
    host = socket.gethostname() or "-"
    return f"{prog[:40]}[{os.getpid()}]@{host[:40]} lockbroker-python/{__version__}"


# ---- backoff --------------------------------------------------------------


class Backoff:
    """Delays between failed connection attempts: doubling from ``first``
    up to ``cap`` seconds, each drawn at random from its upper half."""

    def __init__(self, first: float = 0.05, cap: float = 2.0):
        self.first = first
        self.cap = cap
        self.delay = 0.0

    def failed(self) -> float:
        self.delay = self.first if self.delay == 0 else min(self.cap, self.delay * 2)
        return random.uniform(self.delay / 2, self.delay)

    def reset(self) -> None:
        self.delay = 0.0


# ---- requests, sessions, leases --------------------------------------------


class Pending:
    """One request waiting for its answer.

    ``waiter`` belongs to the transport (a lock, a future; None for a request
    whose answer nobody awaits). Exactly one of ``result`` / ``error`` is set
    before the waiter is woken. ``abandoned`` marks an acquire whose caller
    gave up (cancelled, interrupted): a grant that still arrives is released.
    """

    __slots__ = ("id", "op", "fields", "meta", "waiter", "result", "error", "abandoned")

    def __init__(self, rid, op, fields, meta, waiter):
        self.id = rid
        self.op = op
        self.fields = fields
        self.meta = meta
        self.waiter = waiter
        self.result = None
        self.error = None
        self.abandoned = False


class AcquireMeta:
    """What the reader needs to build the lease of an acquire's grant."""

    __slots__ = ("name", "detached", "owner", "on_lost")

    def __init__(self, name, detached, owner, on_lost):
        self.name = name
        self.detached = detached
        self.owner = owner
        self.on_lost = on_lost


class Session:
    """One connection's share of the bookkeeping (transports extend it)."""

    def __init__(self) -> None:
        self.pending: dict = {}
        self.closed = False
        self.info: dict | None = None
        self.max_line = _wire.DEFAULT_MAX_LINE
        self.closing_reason: str | None = None
        self.end_reason = "disconnected"
        self.silent: str | None = None  # why the client gave up on a silent broker
        self.last_send = self.last_recv = time.monotonic()
        self.last_ping = -_NEVER  # a ping is in flight while last_ping > last_recv
        self.ttls: dict[int, int] = {}  # ttl_ms -> how many bound leases have it


class LeaseState:
    """The client's view of one lease token, shared by its handles."""

    __slots__ = ("token", "name", "mode", "fence", "ttl_ms", "count", "detached", "owner",
                 "session", "event", "lost_reason", "done", "watchers", "aevent", "counted")

    def __init__(self, token, name, mode, fence, ttl_ms, count, detached, owner, session):
        self.token = token
        self.name = name
        self.mode = mode
        self.fence = fence
        self.ttl_ms = ttl_ms
        self.count = count
        self.detached = detached
        self.owner = owner
        self.session = session
        self.lost_reason: str | None = None  # set (never to None) when lost
        self.event: threading.Event | None = None  # made on demand: LeaseBase.lost
        self.done = False  # released down to count 0
        self.watchers: list = []  # (handle, on_lost)
        self.aevent = None  # asyncio.Event, made by AsyncLease.wait_lost
        self.counted: int | None = None  # the TTL it counts for in session.ttls


class LeaseBase:
    """One acquire's handle on a lease (the transports add release/extend).

    ``fence`` raises :class:`LeaseLost` once the lease is lost, so code that
    reads it to stamp a write cannot use a stale one; ``lost`` (a
    ``threading.Event``) and ``lost_reason`` tell without raising.
    """

    __slots__ = ("_client", "_state", "_count", "_released")

    def __init__(self, client, state: LeaseState, count: int):
        self._client = client
        self._state = state
        self._count = count
        self._released = False

    @property
    def token(self) -> str:
        """The lease token: the right to extend and release the lease."""
        return self._state.token

    @property
    def name(self) -> str:
        """The lock's name."""
        return self._state.name

    @property
    def mode(self) -> str:
        """"exclusive", "shared" or "permit" (a semaphore's)."""
        return self._state.mode

    @property
    def fence(self) -> int:
        """The fencing token; raises :class:`LeaseLost` once the lease is lost."""
        self._check_lost()
        return self._state.fence

    @property
    def ttl_ms(self) -> int:
        """The lifetime the broker last confirmed (grant or extend), in ms."""
        return self._state.ttl_ms

    @property
    def count(self) -> int:
        """The reentrancy count this acquire brought the lease to."""
        return self._count

    @property
    def detached(self) -> bool:
        """True for a detached lease (it outlives its session)."""
        return self._state.detached

    @property
    def owner(self) -> str:
        """The reentrancy owner it was acquired for."""
        return self._state.owner

    @property
    def lost(self) -> threading.Event:
        """Set as soon as the client learns that the lease is lost."""
        st = self._state
        if st.event is None:
            # Made on first use (most leases never need one), under the lock
            # that losing the lease takes, so it cannot miss the loss.
            with self._client._mu:
                if st.event is None:
                    event = threading.Event()
                    if st.lost_reason is not None:
                        event.set()
                    st.event = event
        return st.event

    @property
    def lost_reason(self) -> str | None:
        """Why it was lost (see :class:`LeaseLost`), None while it is not."""
        return self._state.lost_reason

    @property
    def released(self) -> bool:
        """True once this handle's level was released."""
        return self._released

    @property
    def held(self) -> bool:
        """Neither released by this handle nor lost."""
        return not self._released and self._state.lost_reason is None

    def check(self) -> None:
        """Raises :class:`LeaseLost` if the lease is lost, :class:`NotHeld` if
        this handle was released; returns None while it is held."""
        self._usable()

    def on_lost(self, fn: Callable[[Self], object]) -> None:
        """Calls ``fn(lease)`` once when the lease is lost (at once, outside
        the caller, if it already is). Runs on the client's callback thread
        (threaded client) or the event loop (asyncio client)."""
        self._client._watch(self, fn)

    def _check_lost(self) -> None:
        st = self._state
        if st.lost_reason is not None:
            raise LeaseLost(self, st.lost_reason)

    def _leaving(self, exc: BaseException | None) -> bool:
        """On leaving the lease's scope with ``exc`` (or None): True when the
        level is to be released; False when there is nothing to do (released
        already, or ``exc`` is this lease's own loss, which then propagates);
        raises :class:`LeaseLost` when the lease was lost meanwhile."""
        if self._released:
            return False
        st = self._state
        if st.lost_reason is not None:
            if isinstance(exc, LeaseLost) and getattr(exc.lease, "_state", None) is st:
                return False
            raise LeaseLost(self, st.lost_reason)
        return True

    def _usable(self) -> None:
        self._check_lost()
        if self._released:
            raise NotHeld(f"this lease on {self.name!r} was already released")

    def __repr__(self) -> str:
        st = self._state
        what = ("lost: " + st.lost_reason) if st.lost_reason is not None else (
            "released" if self._released else "held")
        return (f"<{type(self).__name__} {st.name!r} {st.mode} fence={st.fence} "
                f"token={st.token[:8]}... {what}>")


def acquire_fields(name, mode, limit, ttl_ms, wait_ms, watchdog, owner, fair, detach,
                   max_hold_ms, value=None, lock_delay_ms=None) -> dict:
    """The acquire request's fields; absent (None) ones are left out and the
    broker applies its defaults and checks every value."""
    fields = {"lock": name}
    for key, value in (("mode", mode), ("limit", limit), ("ttl_ms", ttl_ms),
                       ("wait_ms", wait_ms), ("watchdog", watchdog), ("owner", owner),
                       ("fair", fair), ("max_hold_ms", max_hold_ms), ("value", value),
                       ("lock_delay_ms", lock_delay_ms)):
        if value is not None:
            fields[key] = value
    if detach:
        fields["detach"] = True
    return fields


def refuse_id(fields: dict) -> None:
    """The client numbers requests itself: a caller's ``id`` is refused."""
    if "id" in fields:
        raise InvalidArgument("'id' is set by the client, one per request", op=None)


class ClientCore:
    """State and routing shared by :class:`Client` and :class:`AsyncClient`.

    Transports provide: ``_lease_class``; ``_wake(pending)`` (called under
    ``_mu``, must not block); ``_post(fn, *args)`` (run fn later, off the
    reader); ``_send_nowait(session, op, fields)`` (a request whose answer
    nobody awaits; never raises); ``_liveness_rearm()`` (called under
    ``_mu``, must not block: run the liveness check at ``_liveness_at``).
    """

    _lease_class = LeaseBase

    def __init__(self, url, auth, auth_file, label, keepalive_ms, owner, connect_timeout):
        self.url = url if url is not None else _wire.default_url()
        self._address = _wire.parse_url(self.url)
        if auth is not None and auth_file is not None:
            raise InvalidArgument("give auth or auth_file, not both")
        self._auth = auth
        self._auth_file = auth_file
        self.label = label if label is not None else default_label()
        if keepalive_ms is not None and (type(keepalive_ms) is not int or keepalive_ms < 0):
            raise InvalidArgument("keepalive_ms is None (the default liveness check), 0 (none) "
                                  "or milliseconds (the broker takes 500..600000)")
        self.keepalive_ms = keepalive_ms  # None: the default bound; 0: no liveness check
        self.owner = owner
        self.connect_timeout = connect_timeout
        self._mu = threading.Lock()
        self._ids = itertools.count(1)
        self._leases: dict[str, LeaseState] = {}
        # watch id -> (session, sink): sink(msg) gets the watch's `changed`
        # events, sink(None) when its session ended (called on the reader)
        self._watches: dict = {}
        self._current: Session | None = None
        self._closed = False
        self._backoff = Backoff()
        self._next_attempt = 0.0
        self._ever_connected = False  # a session was opened once (_attempt_failed)
        self._liveness_at = _NEVER  # when the transport runs the check next

    # -- what hello sends, what it answers

    def _hello_fields(self) -> dict:
        """hello's fields; reads ``auth_file`` now (InvalidArgument if it cannot)."""
        fields = {"client": self.label}
        secret = self._auth
        if self._auth_file is not None:
            try:
                secret = _wire.read_secret(self._auth_file)
            except (OSError, UnicodeDecodeError) as e:
                raise InvalidArgument(f"cannot read auth_file {self._auth_file}: {e}",
                                      op="hello") from None
        if secret is not None:
            fields["auth"] = secret
        if self.keepalive_ms:
            fields["keepalive_ms"] = self.keepalive_ms
        return fields

    def _hello_answered(self, session: Session, pending: Pending) -> None:
        """Takes hello's answer: limits on success; raises what must stop the
        connection (any error but an ``unauthorized`` to a hello that sent no
        secret: as with lockctl, ping still works then and every other op
        answers ``unauthorized`` itself)."""
        if pending.error is not None:
            if isinstance(pending.error, Unauthorized) and "auth" not in pending.fields:
                return
            raise pending.error
        session.info = strip(pending.result)
        limits = session.info.get("limits") or {}
        max_line = limits.get("max_line")
        if isinstance(max_line, int) and max_line > 0:
            session.max_line = max_line

    def _owner_for(self, owner):
        if owner is not None:
            return owner
        if self.owner is not None:
            return self.owner
        return current_owner()

    # -- requests

    def _register(self, session: Session, op: str, fields: dict, meta=None, waiter=None):
        """Registers a request; returns (pending, line). Raises Disconnected
        when the session has ended, LineTooLong / InvalidArgument when the
        line cannot be sent (nothing is registered then)."""
        rid = next(self._ids)
        msg = {"id": rid, "op": op}
        msg.update(fields)
        line = _wire.encode(msg, session.max_line)
        pending = Pending(rid, op, fields, meta, waiter)
        with self._mu:
            if session.closed:
                raise self._disconnected(session, op)
            session.pending[rid] = pending
        return pending, line

    def _unregister(self, session: Session, pending: Pending) -> bool:
        """Forgets a request whose caller gave up. Returns True when it was
        answered already (by the reader, or failed by the session's end):
        its waiter is then woken, or queued in the wake chain (client.py)."""
        with self._mu:
            if session.pending.get(pending.id) is pending:
                del session.pending[pending.id]
                return False
            return True

    def _disconnected(self, session: Session | None, op: str | None) -> Disconnected:
        if self._closed:
            return Disconnected("the client is closed", op=op)
        why = f"the connection to {self.url} was lost"
        if session is not None and session.closing_reason:
            why += f" (the broker closed it: {session.closing_reason})"
        elif session is not None and session.silent:
            why += f" ({session.silent})"
        return Disconnected(why, op=op)

    # -- liveness

    def _bound_ms(self, session: Session) -> float | None:
        """How long the broker may stay silent on ``session`` before the
        client gives it up, in ms; None when it is not watched
        (``keepalive_ms=0``, or no ``keepalive_ms`` and no lease held)."""
        ka = self.keepalive_ms
        if ka == 0:
            return None
        if session.ttls:
            return min(ka if ka is not None else DEFAULT_BOUND_MS, min(session.ttls) / 3)
        return ka

    def _count_ttl(self, state: LeaseState, ttl) -> None:
        """(Under ``_mu``.) Makes ``state`` count in its session's bound with
        ``ttl`` (its TTL now), or no more with None; re-arms the check when
        the bound shrinks. Detached leases never count: they outlive the
        session."""
        ttls = state.session.ttls
        old = state.counted
        if old is not None:
            n = ttls[old] - 1
            if n:
                ttls[old] = n
            else:
                del ttls[old]
            state.counted = None
        if state.detached or type(ttl) is not int or ttl <= 0:
            return
        shrunk = not ttls or ttl < min(ttls)
        ttls[ttl] = ttls.get(ttl, 0) + 1
        state.counted = ttl
        if shrunk:
            self._liveness_replan(state.session)

    def _liveness_replan(self, session: Session) -> None:
        """(Under ``_mu``.) The bound of ``session`` may have shrunk, the
        session just opened, or a ping was answered: re-arms the check if it
        is due sooner than the transport planned, so a new, shorter bound
        applies at once, and the next ping goes a third of the bound after
        the last answer."""
        if session is not self._current or session.closed:
            return
        bound = self._bound_ms(session)
        if bound is None:
            return
        at = session.last_recv + bound / 3000.0
        if at < self._liveness_at:
            self._liveness_at = at
            self._liveness_rearm()

    def _liveness(self, session: Session | None, now: float):
        """(Under ``_mu``.) The liveness check of the current session: returns
        (what, at), ``what`` being "dead" (the broker has said nothing for
        the bound: give the session up), "ping" (send one now) or None, and
        ``at`` when to check next (``_NEVER``: not until re-armed). Records
        the plan in ``_liveness_at``.

        A ping goes out when the broker has been silent for a third of the
        bound, or (with ``keepalive_ms``, which the broker enforces too) when
        the client has; never while another is unanswered: on one stream an
        answer to the first is as good a sign of life as any, and a frozen
        broker must not pile pings up. While one is in flight, the check is
        planned for the deadline; its answer plans it again
        (``_liveness_answered``)."""
        what, at = None, _NEVER
        bound = self._bound_ms(session) if session is not None and not session.closed else None
        if bound is not None:
            b = bound / 1000.0
            dead_at = session.last_recv + b
            if now >= dead_at:
                session.silent = f"keepalive: the broker sent nothing for {bound:.0f} ms"
                what = "dead"
            else:
                at = dead_at
                if session.last_ping <= session.last_recv:  # no ping in flight
                    ping_at = session.last_recv + b / 3
                    if self.keepalive_ms:
                        ping_at = min(ping_at, session.last_send + self.keepalive_ms / 3000.0)
                    if now >= ping_at:
                        what = "ping"
                        session.last_ping = now
                    else:
                        at = min(at, ping_at)
        self._liveness_at = at
        return what, at

    def _liveness_answered(self, session: Session) -> None:
        """(The reader, on the first read after a ping was sent.) Plans the
        next check: the next ping is due a third of the bound from now."""
        with self._mu:
            self._liveness_replan(session)

    def _liveness_rearm(self) -> None:
        raise NotImplementedError

    # -- answers and events

    def _route(self, session: Session, msg, woken=None) -> None:
        """Handles one message from the broker (reader side). An answered
        request whose caller waits is woken (``_wake``) or, given ``woken``
        (the threaded client's wake chain), its waiter is appended to it,
        under ``_mu``; one whose caller gave up (``abandoned``) is not:
        nobody waits."""
        if not isinstance(msg, dict):
            log.warning("lockbroker: ignoring a message that is not an object")
            return
        if "event" in msg and "id" not in msg:
            self._on_event(session, msg)
            return
        rid = msg.get("id")
        posts = []
        with self._mu:
            pending = session.pending.pop(rid, None) if type(rid) in (int, str) else None
            if pending is None:
                if msg.get("ok") is not True:
                    err = msg.get("error") or {}
                    log.warning("lockbroker: broker error not tied to a request: %s: %s",
                                err.get("code"), err.get("message"))
                return
            if msg.get("ok") is True:
                pending.result = self._on_success(session, pending, msg, posts)
            else:
                err = msg.get("error") or {}
                pending.error = error_for(str(err.get("code", "internal")),
                                          str(err.get("message", "")), pending.op,
                                          self._lock_of(pending.fields))
                if pending.error.code not in ("cancelled", "timeout") and pending.waiter is None:
                    log.debug("lockbroker: %s answered %s", pending.op, pending.error)
            if pending.waiter is not None:
                if woken is None:
                    self._wake(pending)
                elif not pending.abandoned:
                    woken.append(pending.waiter)
        for fn, args in posts:
            self._post(fn, *args)

    def _lock_of(self, fields: dict) -> str | None:
        """(Under ``_mu``.) The lock a request is about, for its error's
        ``lock``: its ``lock`` field, else its lease's name, if known."""
        lock = fields.get("lock")
        if isinstance(lock, str):
            return lock
        token = fields.get("lease")
        state = self._leases.get(token) if isinstance(token, str) else None
        return state.name if state is not None else None

    def _on_success(self, session, pending, msg, posts):
        op = pending.op
        if op == "acquire_all":
            handles = []
            for entry in msg.get("leases") or ():
                handles.append(self._granted(session, pending, entry, posts))
            return handles
        if op == "watch":
            sink = pending.meta
            self._watches[msg.get("watch")] = (session, sink)
            sink(msg)
            return msg
        if op == "acquire":
            return self._granted(session, pending, msg, posts)
        return self._on_other_success(pending, msg)

    def _granted(self, session, pending, msg, posts):
        """A grant in an acquire's (or acquire_all's) answer: its lease."""
        token = msg.get("lease")
        meta = pending.meta
        state = self._leases.get(token)
        if state is None or state.done or state.lost_reason is not None:
            state = LeaseState(token, msg.get("lock", meta.name), msg.get("mode"),
                               msg.get("fence"), msg.get("ttl_ms"), msg.get("count"),
                               meta.detached, meta.owner, session)
            self._leases[token] = state
        else:
            state.count = msg.get("count")
            state.ttl_ms = msg.get("ttl_ms", state.ttl_ms)
        self._count_ttl(state, state.ttl_ms)
        if pending.abandoned:
            posts.append((self._send_nowait, (session, "release", {"lease": token})))
            return None
        handle = self._lease_class(self, state, msg.get("count"))
        if meta.on_lost is not None:
            state.watchers.append((handle, meta.on_lost))
        return handle

    def _on_other_success(self, pending, msg):
        op = pending.op
        if op == "release":
            state = self._leases.get(pending.fields.get("lease"))
            count = msg.get("count")
            if state is not None and isinstance(count, int):
                state.count = count
                if count == 0:
                    state.done = True
                    del self._leases[state.token]
                    self._count_ttl(state, None)
        elif op == "extend":
            state = self._leases.get(pending.fields.get("lease"))
            if state is not None:
                state.ttl_ms = msg.get("ttl_ms", state.ttl_ms)
                self._count_ttl(state, state.ttl_ms)
        return msg

    def _on_event(self, session: Session, msg: dict) -> None:
        event = msg.get("event")
        if event == "lost":
            with self._mu:
                state = self._leases.get(msg.get("lease"))
                calls = self._lose(state, str(msg.get("reason") or "unknown")) if state else []
            for fn, args in calls:
                self._post(fn, *args)
        elif event == "changed":
            with self._mu:
                entry = self._watches.get(msg.get("watch"))
            if entry is not None and entry[0] is session:
                entry[1](msg)
        elif event == "closing":
            session.closing_reason = str(msg.get("reason"))
        # Other events need nothing: after "shutdown" the broker refuses new
        # acquires itself and ends the session with "closing"; "half_closed"
        # cannot happen (the client never half-closes); newer ones are ignored.

    def _lose(self, state: LeaseState, reason: str) -> list:
        """Marks a lease lost (under ``_mu``); returns the callbacks to post."""
        if state.lost_reason is not None or state.done:
            return []
        state.lost_reason = reason
        self._count_ttl(state, None)
        if state.event is not None:
            state.event.set()
        if state.aevent is not None:
            state.aevent.set()
        if self._leases.get(state.token) is state:
            del self._leases[state.token]
        return [(fn, (handle,)) for handle, fn in state.watchers if not handle._released]

    def _lose_now(self, state: LeaseState, reason: str) -> None:
        """Marks a lease lost from a caller's thread (e.g. after ``not_held``)."""
        with self._mu:
            calls = self._lose(state, reason)
        for fn, args in calls:
            self._post(fn, *args)

    def _watch(self, handle: LeaseBase, fn) -> None:
        with self._mu:
            lost = handle._state.lost_reason is not None
            if not lost:
                handle._state.watchers.append((handle, fn))
        if lost:
            self._post(fn, handle)

    def _session_ended(self, session: Session, error=None) -> None:
        """The connection is gone: fails its requests, loses its leases.
        Idempotent; the first call wins."""
        with self._mu:
            if session.closed:
                return
            session.closed = True
            if self._current is session:
                self._current = None
            pendings = list(session.pending.values())
            session.pending.clear()
            for p in pendings:
                p.error = self._disconnected(session, p.op)
                if error is not None:
                    p.error.__cause__ = error
                if p.waiter is not None:
                    self._wake(p)
            calls = []
            for state in list(self._leases.values()):
                if state.session is session and not state.detached:
                    calls.extend(self._lose(state, session.end_reason))
            for wid, (s, sink) in list(self._watches.items()):
                if s is session:
                    del self._watches[wid]
                    calls.append((sink, (None,)))
        for fn, args in calls:
            self._post(fn, *args)

    def _abandon(self, session: Session, pending: Pending) -> bool:
        """The caller of a waiting acquire gave up (cancelled, interrupted):
        cancels it at the broker, or releases what it was granted. Returns
        True when it was answered already, as ``_unregister``."""
        with self._mu:
            waiting = session.pending.get(pending.id) is pending
            if waiting:
                pending.abandoned = True
        if waiting:
            self._send_nowait(session, "cancel", {"target": pending.id})
        elif isinstance(pending.result, LeaseBase):
            pending.result._released = True
            self._send_nowait(session, "release", {"lease": pending.result.token})
        return not waiting

    # -- connection attempts

    def _attempt_delay(self, deadline: float, last: Exception | None) -> float:
        """Seconds to wait before the next connection attempt; raises
        Disconnected (caused by ``last``, the previous attempt's error) when
        that would pass ``deadline``."""
        now = time.monotonic()
        wait = max(0.0, self._next_attempt - now)
        # A first attempt always goes out; a later one only within the deadline
        # (an attempt slower than the backoff leaves no wait, but the deadline
        # may have passed during it).
        if (wait > 0 or last is not None) and now + wait >= deadline:
            if last is None:
                why = " (backing off after failed attempts)"
            else:  # (asyncio's TimeoutError has no text)
                why = f": {str(last) or 'timed out'}"
            raise Disconnected(f"cannot connect to {self.url}{why}") from last
        return wait

    def _attempt_failed(self, connect_error: OSError | None = None) -> None:
        """A connection attempt failed: the next one waits for the backoff.

        ``connect_error`` is the error of the connect itself (nothing was
        connected), None when the attempt failed later (hello). Before the
        client's first session, a connect the system refuses (refused, no
        such socket, no route, unknown host: any error but a timeout) raises
        :class:`Disconnected` at once, as the other clients do: it is a
        wrong address or no broker, and trying again until
        ``connect_timeout`` would only make the caller wait. Only a connect
        that hangs waits for ``connect_timeout``. Once a session has been,
        a refused connect is a broker restarting, and is tried again (with
        backoff, within ``connect_timeout``) like any failed attempt."""
        self._next_attempt = time.monotonic() + self._backoff.failed()
        if (connect_error is not None and not self._ever_connected
                and not isinstance(connect_error, TimeoutError)):
            raise Disconnected(f"cannot connect to {self.url}: {connect_error}") from connect_error

    def _attempt_succeeded(self, session: Session) -> None:
        """(Under ``_mu``.) ``session`` is open: it becomes the current one."""
        self._ever_connected = True
        self._backoff.reset()
        self._next_attempt = 0.0
        self._current = session
        self._liveness_replan(session)
