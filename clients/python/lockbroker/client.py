"""The threaded client: :class:`Client`, :class:`Lease`, :class:`CancelToken`.

One ``Client`` holds at most one session (one socket) at a time and may be
shared by any number of threads. Threads around it:

- the callers: each queues its request line, writes the queue itself unless
  another thread is writing it (``_write``), and sleeps on a lock of its
  own until its answer is routed and its turn to be woken comes (the wake
  chain: see ``_SyncSession.wakeq``);
- one reader per session: reads lines, routes answers by ``id`` and events
  by lease (``ClientCore._route``), and when the socket ends, fails the
  pending requests and loses the session's leases (``_session_ended``);
- one callback thread per client: runs ``on_lost`` callbacks and the
  requests the reader must not write itself (releasing a grant nobody waits
  for), so neither can stall the reader;
- one liveness thread (unless ``keepalive_ms=0``): sleeps until the check
  of ``ClientCore._liveness`` is due (or is re-armed because a shorter
  bound applies), pings a quiet session, and ends one whose broker has
  been silent for the bound (its leases are reported lost,
  ``disconnected``, before Redis can give them away). It never waits on
  the socket: the reader may sit in ``recv`` forever on a frozen broker,
  and a ping is written without blocking (``_ping``), so a full send
  buffer cannot hold the check up either.

Invariants:

- only the reader closes its socket; everyone else only shuts it down, so a
  descriptor is never closed under a thread still writing to it;
- a dropped session is never re-used: the next request opens a new one
  (with backoff after failed attempts), and a lease bound to the dropped
  session is lost (``disconnected``) and never sent on the new one;
- each thread is its own reentrancy owner unless the client or the call
  names one, so two threads sharing the client exclude each other;
- a caller whose answer was routed is woken in its turn: every woken
  caller wakes the next queued one, and so does the reader after each read
  (see ``_SyncSession.wakeq``); the writer's part and the next wake are
  taken so that an exception (a signal handler's) cannot lose them.
"""

from __future__ import annotations

import _thread
import collections
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import TracebackType
from typing import Any

from ._core import (_NEVER, AcquireMeta, ClientCore, LeaseBase, Session, acquire_fields, log,
                    refuse_id)
from ._wire import LineBuffer
from .errors import Cancelled, Disconnected, LeaseLost, LockbrokerError, NotHeld
from .info import LeaseInfo, LockInfo, strip

__all__ = ["Client", "Lease", "CancelToken", "Watch", "Election", "Leader"]

# What one recv asks for: under glibc's mmap threshold (128 KiB), since a
# bigger buffer is mmap'ed, shrunk and unmapped on every recv (three system
# calls and fresh pages, dearer than the rest of the read: 262144 made the
# client a third slower). Lines longer than this simply take several recvs.
_RECV_SIZE = 65536


class CancelToken(threading.Event):
    """A ``threading.Event`` that cancels the waiting acquires it is given to.

    Pass it as ``cancel=`` to :meth:`Client.acquire` or :meth:`Client.lock`;
    ``token.set()`` (or ``token.cancel()``) from any thread sends ``cancel``
    for each acquire still waiting, which then raises :class:`Cancelled`. An
    acquire given a token that is already set raises at once, sending nothing.
    """

    def __init__(self) -> None:
        super().__init__()
        self._hooks_mu = threading.Lock()
        self._hooks: list = []

    def set(self) -> None:
        with self._hooks_mu:
            super().set()
            hooks, self._hooks = self._hooks, []
        for fn in hooks:
            fn()

    def cancel(self) -> None:
        """Same as ``set()``."""
        self.set()

    def _hook(self, fn) -> None:
        with self._hooks_mu:
            if not self.is_set():
                self._hooks.append(fn)
                return
        fn()

    def _unhook(self, fn) -> None:
        with self._hooks_mu:
            if fn in self._hooks:
                self._hooks.remove(fn)


class Lease(LeaseBase):
    """A held lease (one acquire's level of it). A context manager: leaving
    the ``with`` releases it, or raises :class:`LeaseLost` if it was lost.

    Attributes (read-only): ``name``, ``mode``, ``fence`` (raises
    :class:`LeaseLost` once lost), ``token``, ``ttl_ms``, ``count``,
    ``detached``, ``owner``, ``lost`` (a ``threading.Event``),
    ``lost_reason``, ``released``, ``held``.
    """

    __slots__ = ()

    def release(self) -> int:
        """Releases this level; returns the count the lease has left (0: the
        lock is free). Raises :class:`LeaseLost` if the lease was lost,
        :class:`NotHeld` if this handle was already released."""
        reply = self._lease_call("release", {"lease": self.token})
        self._released = True
        return reply.get("count")

    def extend(self, ttl_ms: int) -> int:
        """Sets the remaining lifetime to ``ttl_ms``; returns the lifetime
        the lease now has (less where ``max_hold_ms`` ends it sooner)."""
        reply = self._lease_call("extend", {"lease": self.token, "ttl_ms": ttl_ms})
        return reply.get("ttl_ms")

    def proclaim(self, value: str) -> int:
        """Publishes a new value (an election's leader's address) without a
        new term; returns the fence, which stays the term."""
        return self._lease_call("proclaim", {"lease": self.token, "value": value}).get("fence")

    def _lease_call(self, op: str, fields: dict) -> dict:
        self._usable()
        st = self._state
        try:
            # A bound lease is only ever used on the session that granted it.
            return self._client._call(op, fields, session=None if st.detached else st.session)
        except LeaseLost:
            raise
        except NotHeld as e:
            # Not released by this client, yet the broker no longer has it.
            self._client._lose_now(st, "not_held")
            raise LeaseLost(self, st.lost_reason) from e
        except Disconnected:
            self._check_lost()
            raise

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> bool:
        if self._leaving(exc):
            self.release()
        return False


class _LockScope:
    """``with client.lock(...) as lease``: acquires on enter, releases on exit."""

    __slots__ = ("_client", "_name", "_kwargs", "_lease")

    def __init__(self, client: "Client", name: str, kwargs: dict):
        self._client = client
        self._name = name
        self._kwargs = kwargs
        self._lease: Lease | None = None

    def __enter__(self) -> Lease:
        self._lease = self._client.acquire(self._name, **self._kwargs)
        return self._lease

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> bool:
        return self._lease.__exit__(exc_type, exc, tb)


class Watch:
    """``for info in client.watch(name):`` the lock's state (a
    :class:`LockInfo`), then one per change, heard from Redis through the
    broker (the broker's ``watch``). It survives a dropped connection or a
    broker restart: it watches again (with backoff) and goes on with the
    state read afresh. ``close()`` (or leaving ``with``) ends it; iterating
    then stops. ``next(watch, timeout)``-style waits: :meth:`get`."""

    _RETRY_CAP = 2.0

    def __init__(self, client: "Client", name: str):
        self._client = client
        self.name = name
        self._q: "queue.Queue" = queue.Queue()
        self._id = None
        self._closed = False
        self._pending_state = None
        self._start()

    def _start(self) -> None:
        reply = self._client._call("watch", {"lock": self.name}, meta=self._q.put)
        self._id = reply.get("watch")

    def get(self, timeout: float | None = None) -> "LockInfo | None":
        """The next state, waiting up to ``timeout`` seconds (None: until
        one comes); None when none came in time or the watch is closed."""
        delay = 0.05
        end = None if timeout is None else time.monotonic() + timeout
        while not self._closed:
            left = None if end is None else max(0.0, end - time.monotonic())
            try:
                msg = self._q.get(timeout=left)
            except queue.Empty:
                return None
            if msg is not None:
                return LockInfo.from_wire(msg)
            # the session ended: watch again on a new one
            while not self._closed:
                try:
                    self._start()
                    break
                except (Disconnected, LockbrokerError):
                    if end is not None and time.monotonic() + delay > end:
                        return None
                    time.sleep(delay)
                    delay = min(delay * 2, self._RETRY_CAP)
        return None

    def __iter__(self) -> "Watch":
        return self

    def __next__(self) -> "LockInfo":
        info = self.get()
        if info is None:
            raise StopIteration
        return info

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._q.put(None)
        try:
            self._client._call("unwatch", {"watch": self._id})
        except LockbrokerError:
            pass  # gone with its session already

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> bool:
        self.close()
        return False


class Leader:
    """Who leads an election: its published ``value``, its ``term`` (the
    fence) and its ``client`` label."""

    __slots__ = ("value", "term", "client")

    def __init__(self, value: str | None, term: int | None, client: str | None) -> None:
        self.value, self.term, self.client = value, term, client

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Leader) and (self.value, self.term) == (other.value, other.term)

    def __repr__(self) -> str:
        return f"Leader(value={self.value!r}, term={self.term})"

    @classmethod
    def of(cls, info: "LockInfo") -> "Leader | None":
        h = info.leader
        return cls(h.value, info.fence, h.client) if h is not None else None


class Election:
    """Leader election on one lock, in the manner of etcd's
    ``concurrency.Election``::

        with client.election("scheduler").campaign("10.0.0.7:8080") as term:
            ...  # leading; term.fence is the term; LeaseLost when it ends

    """

    def __init__(self, client: "Client", name: str):
        self._client = client
        self.name = name

    def campaign(self, value: str, **kwargs: Any) -> "_LockScope":
        """A context manager that waits until this caller leads (``wait_ms``
        may bound it), publishing ``value``; leaving it resigns, and raises
        :class:`LeaseLost` if leadership was lost meanwhile. Inside,
        ``lease.proclaim(v)`` publishes another value in the same term."""
        kwargs["value"] = value
        return _LockScope(self._client, self.name, kwargs)

    def campaigns(self, value: str, **kwargs: Any) -> Iterator[Lease]:
        """Campaigns for as long as the caller iterates: yields the
        leadership's :class:`Lease` each time this caller is elected (its
        ``fence`` is the term); when the body is done with it (or it is
        lost: a dropped connection, a broker restart, an expiry), the next
        iteration campaigns again, reconnecting with backoff::

            for term in election.campaigns("10.0.0.7:8080"):
                with term:        # LeaseLost on leaving if leadership was lost
                    lead(term)

        A term the caller still holds when it asks for the next is
        resigned first."""
        kwargs["value"] = value
        delay = 0.05
        while True:
            try:
                lease = self._client.acquire(self.name, **kwargs)
            except Disconnected:
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            delay = 0.05
            yield lease
            if lease.held:
                try:
                    lease.release()
                except (LeaseLost, Disconnected):
                    pass

    def leader(self) -> "Leader | None":
        """Who leads now (from ``inspect``), or None."""
        return Leader.of(self._client.inspect(self.name))

    def observe(self) -> Iterator["Leader | None"]:
        """Yields the leader (or None) now, then each time it changes: a new
        term or a new value. Survives reconnects (see :class:`Watch`);
        close the generator to stop."""
        last = object()
        with self._client.watch(self.name) as w:
            for info in w:
                cur = Leader.of(info)
                if cur != last:
                    last = cur
                    yield cur


class _SyncSession(Session):
    """A session over a blocking socket, with its reader thread."""

    def __init__(self, sock: socket.socket):
        super().__init__()
        self.sock = sock
        self.outq: collections.deque = collections.deque()  # lines not yet written
        self.outq_mu = threading.Lock()  # guards outq and writing
        self.writing = False  # a thread is writing what outq holds
        # The wake chain. The reader queues the waiters of the answers it
        # routes here (``_route``, under ``_mu``, in the same hold that takes
        # the request off ``pending``) and wakes the first after each read;
        # each caller, once woken or giving up, wakes the next (``_call``).
        # Woken all at once, the callers of one read would all fight over
        # the GIL while only one can run: many context switches for
        # nothing. A caller that gives up after its answer was routed takes
        # its waiter out of the queue if it is still there (then nobody
        # releases it), else it was released and the caller holds a turn,
        # which it passes on. So every released waiter's caller passes one
        # wake on, and any read restarts the chain besides.
        self.wakeq: collections.deque = collections.deque()
        # Takes the next waiter from wakeq and releases it, both inside one
        # call into C: no exception (a signal handler's, in the main thread)
        # can fall between the two and lose the wake, as one could between
        # a popleft() and a release() written in Python. IndexError when
        # wakeq is empty.
        self.wake_next = map(_thread.LockType.release, iter(self.wakeq.popleft, None)).__next__
        self.reader: threading.Thread | None = None

    def take_outq(self) -> "bytes | None":
        """What ``outq`` holds, joined and taken off it; None when it is
        empty, and then the calling thread gives up the writer's part."""
        with self.outq_mu:
            if not self.outq:
                self.writing = False
                return None
            data = b"".join(self.outq)
            self.outq.clear()
            return data

    def kill(self) -> None:
        """Shuts the socket down; the reader sees the end and closes it."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class Client(ClientCore):
    """A connection to lockbrokerd, safe to share between threads.

    ``url`` is ``tcp://HOST:PORT`` or ``unix:///PATH`` (default: as lockctl,
    ``$LOCKBROKER_URL``, else the default socket if it exists, else
    ``tcp://127.0.0.1:7380``). ``auth`` is the broker's secret, or
    ``auth_file`` a file holding it (read at each connection). ``label`` is
    the ``client`` label ``inspect`` shows. The client checks that the
    broker is alive while the session holds leases: it pings, and gives the
    session up (its leases lost, ``disconnected``) when the broker has been
    silent for the shortest TTL held / 3, at most 5000 ms. ``keepalive_ms``
    makes that at most ``keepalive_ms``, watches idle sessions too, and asks
    the broker to end the session if it hears nothing for that long (the
    client pings in time); ``keepalive_ms=0`` turns the check off. ``owner``
    fixes the reentrancy owner of every acquire (default: one per thread and
    per asyncio task). ``connect_timeout`` bounds, in seconds, how long a
    request waits for a session to be opened; before the first session, a
    connect the system refuses fails at once (a wrong address, no broker).

    The connection is opened by the first request (or :meth:`connect`) and
    opened again, with backoff after failures, by the first request after it
    dropped.
    """

    _lease_class = Lease

    def __init__(self, url: str | None = None, *, auth: str | None = None,
                 auth_file: str | None = None, label: str | None = None,
                 keepalive_ms: int | None = None, owner: str | None = None,
                 connect_timeout: float = 5.0):
        super().__init__(url, auth, auth_file, label, keepalive_ms, owner, connect_timeout)
        self._connect_mu = threading.Lock()
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._service: threading.Thread | None = None
        self._keepalive: threading.Thread | None = None
        self._stop = threading.Event()
        self._kick = threading.Event()  # wakes the liveness thread to plan again

    # ---- the public API ---------------------------------------------------

    def connect(self) -> "Client":
        """Opens the session now (else the first request does); returns self."""
        self._session()
        return self

    @property
    def server(self) -> dict[str, Any] | None:
        """hello's answer on the current session (server, proto, session,
        broker, limits), None while there is none."""
        s = self._current
        return s.info if s is not None and not s.closed else None

    def acquire(self, name: str, *, mode: str | None = None, limit: int | None = None,
                ttl_ms: int | None = None, wait_ms: int | None = None,
                watchdog: bool | None = None, owner: str | None = None,
                fair: bool | None = None, detach: bool = False,
                max_hold_ms: int | None = None,
                on_lost: Callable[[Lease], object] | None = None,
                cancel: CancelToken | None = None, value: str | None = None,
                lock_delay_ms: int | None = None) -> Lease:
        """Acquires lock ``name``; returns its :class:`Lease`.

        ``mode`` "exclusive" (default) or "shared"; ``limit`` makes the name a
        semaphore with that many permits; ``wait_ms`` None waits until
        granted, 0 tries once; ``ttl_ms``, ``watchdog``, ``fair``, ``detach``,
        ``max_hold_ms`` as in the protocol (None: the broker's default);
        ``value`` an exclusive holder's published value (an election's
        leader's), ``lock_delay_ms`` how long the lock stays held back when
        the lease ends without a release.
        ``on_lost(lease)`` is called once if the lease is lost. ``cancel`` is a
        :class:`CancelToken` that cancels the wait. Raises
        :class:`LockTimeout` when ``wait_ms`` ran out, :class:`Cancelled`, and
        the other errors by their code. Interrupted while waiting (e.g.
        KeyboardInterrupt), it cancels the acquire at the broker, releasing
        the lease if it was granted meanwhile.
        """
        owner = self._owner_for(owner)
        fields = acquire_fields(name, mode, limit, ttl_ms, wait_ms, watchdog, owner, fair,
                                detach, max_hold_ms, value, lock_delay_ms)
        meta = AcquireMeta(name, bool(detach), owner, on_lost)
        return self._call("acquire", fields, meta=meta, cancel=cancel)

    def lock_all(self, locks: Iterable[str | Mapping[str, Any]], *, ttl_ms: int | None = None,
                 wait_ms: int | None = None, watchdog: bool | None = None,
                 owner: str | None = None, fair: bool | None = None, detach: bool = False,
                 max_hold_ms: int | None = None, lock_delay_ms: int | None = None,
                 on_lost: Callable[[Lease], object] | None = None) -> list[Lease]:
        """Acquires every lock of ``locks`` or none (``acquire_all``): names,
        or dicts ``{"lock": name, "mode": ..., "limit": ...}``. Returns the
        leases in that order. The broker takes them in one total order, so
        two callers asking overlapping sets in any order never deadlock;
        on a timeout (:class:`LockTimeout`) or any error it gave back what
        it took."""
        owner = self._owner_for(owner)
        entries = [{"lock": x} if isinstance(x, str) else dict(x) for x in locks]
        fields = acquire_fields(None, None, None, ttl_ms, wait_ms, watchdog, owner, fair,
                                detach, max_hold_ms, None, lock_delay_ms)
        del fields["lock"]
        fields["locks"] = entries
        meta = AcquireMeta(None, bool(detach), owner, on_lost)
        return self._call("acquire_all", fields, meta=meta)

    def watch(self, name: str) -> "Watch":
        """Watches lock ``name``: iterate the returned :class:`Watch` for
        its state, then one :class:`LockInfo` per change."""
        return Watch(self, name)

    def election(self, name: str) -> "Election":
        """The election ``name`` (an exclusive lock whose holder publishes
        a value): :meth:`Election.campaign`, :meth:`Election.leader`,
        :meth:`Election.observe`."""
        return Election(self, name)

    def lock(self, name: str, **kwargs: Any) -> _LockScope:
        """``with client.lock(name, ...) as lease:`` acquires (same arguments
        as :meth:`acquire`) and releases on leaving; leaving after the lease
        was lost raises :class:`LeaseLost` instead."""
        return _LockScope(self, name, kwargs)

    def release_token(self, token: str) -> int:
        """Releases one level of a lease by its token (e.g. a detached lease
        taken by another process); returns the count left."""
        return self._call("release", {"lease": token}).get("count")

    def extend_token(self, token: str, ttl_ms: int) -> int:
        """Extends a lease by its token; returns its new lifetime in ms."""
        return self._call("extend", {"lease": token, "ttl_ms": ttl_ms}).get("ttl_ms")

    def inspect(self, name: str) -> LockInfo:
        """The lock's state, holders (without tokens), waiters and last fence."""
        return LockInfo.from_wire(self._call("inspect", {"lock": name}))

    def leases(self) -> list[LeaseInfo]:
        """The leases this client's current session holds."""
        return [LeaseInfo.from_wire(r) for r in self._call("leases", {}).get("leases") or ()]

    def stats(self) -> dict[str, Any]:
        """The broker's counters (uptime_s, sessions, leases, redis, ...)."""
        return strip(self._call("stats", {}))

    def ping(self) -> dict[str, Any]:
        """``{"redis": "up"|"down"}`` (and whatever the broker adds)."""
        return strip(self._call("ping", {}))

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        """Sends any op with any fields and returns the answer without its
        envelope; the escape hatch for ops this library does not wrap."""
        refuse_id(fields)
        return strip(self._call(op, fields))

    def close(self) -> None:
        """Ends the session (the broker releases its leases, which are
        reported lost with reason ``closed``) and stops the client's threads.
        The client cannot be used again."""
        self._closed = True
        self._stop.set()
        self._kick.set()
        s = self._current
        if s is not None:
            s.end_reason = "closed"
            s.kill()
            self._session_ended(s)
            if s.reader is not None and s.reader is not threading.current_thread():
                s.reader.join(5)
        if self._service is not None:
            self._queue.put(None)
            if self._service is not threading.current_thread():
                self._service.join(5)
        if self._keepalive is not None and self._keepalive is not threading.current_thread():
            self._keepalive.join(5)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        s = self._current
        state = "closed" if self._closed else ("connected" if s and not s.closed else "idle")
        return f"<Client {self.url} {state}>"

    # ---- requests ---------------------------------------------------------

    def _call(self, op: str, fields: dict, *, meta=None, cancel=None, session=None):
        if cancel is not None and cancel.is_set():
            raise Cancelled("the acquire was cancelled before it was sent", op=op)
        if session is None:
            session = self._session()
        waiter = _thread.allocate_lock()
        waiter.acquire()
        pending, line = self._register(session, op, fields, meta, waiter)
        hook = None
        try:
            self._write(session, line)
            if cancel is not None:
                def hook():
                    self._send_nowait(session, "cancel", {"target": pending.id})
                cancel._hook(hook)
            waiter.acquire()
        except BaseException:
            # Given up (KeyboardInterrupt, say): cancel or give back an acquire.
            if op == "acquire":
                answered = self._abandon(session, pending)
            else:
                answered = self._unregister(session, pending)
            if answered:
                # Routed already: our waiter is still queued in wakeq (take
                # it out: nobody will release it) or was released (we hold
                # the turn and pass it on below).
                try:
                    session.wakeq.remove(waiter)
                except ValueError:
                    pass
            raise
        finally:
            # Woken, or given up: passes a wake on (see _SyncSession.wakeq).
            # Written out here, as a call to a Python function could be cut
            # short by an exception before it passed the wake.
            if session.wakeq:
                try:
                    session.wake_next()
                except IndexError:  # another caller took the last one meanwhile
                    pass
            if hook is not None:
                cancel._unhook(hook)
        if pending.error is not None:
            raise pending.error
        return pending.result

    def _write(self, session: _SyncSession, line: bytes) -> None:
        """Queues one line and makes sure it is written: by this thread if no
        other is writing, else by the writer, which writes what the others
        queued meanwhile in one ``sendall`` (so a thread rarely waits for
        another's write, and many lines cost one system call). Lines go out
        in the order they were queued. A failed write ends the session (its
        requests, the queued ones included, then fail with Disconnected); so
        does one cut short by an exception (a signal handler's), since the
        rest of the stream could not be read as lines any more, and that
        exception propagates in the writer."""
        outq = session.outq
        writer = False  # whether this thread took the writer's part
        try:
            with session.outq_mu:
                outq.append(line)
                if session.writing:
                    return
                # One statement, no call inside: an exception (a signal
                # handler's) cannot fall between the two stores, so the
                # handler below knows whether this thread is the writer.
                session.writing = writer = True
            while True:
                with session.outq_mu:
                    if not outq:
                        session.writing = writer = False
                        return
                    data = b"".join(outq)
                    outq.clear()
                session.sock.sendall(data)
                session.last_send = time.monotonic()
        except BaseException as e:
            if not writer:
                raise
            # Lines were taken, maybe half written: the stream is lost.
            # (``writing`` stays set: nothing more is written on the session.)
            session.kill()
            self._session_ended(session, e)
            if not isinstance(e, OSError):
                raise

    def _send_nowait(self, session, op, fields) -> None:
        try:
            pending, line = self._register(session, op, fields)
        except LockbrokerError as e:
            log.debug("lockbroker: %s not sent: %s", op, e)
            return
        self._write(session, line)

    def _ping(self, session: _SyncSession) -> None:
        """Sends a ping from the liveness thread, which must never block on
        the socket (a frozen broker stops reading, and a full send buffer
        would stall ``sendall``, and with it the check that gives the broker
        up). When another thread is writing, the ping joins its queue; else
        this thread writes without waiting (``MSG_DONTWAIT``), and if the
        kernel takes only part of the data, a thread of its own writes the
        rest (and blocks, if it must, until the session is given up)."""
        try:
            _, line = self._register(session, "ping", {})
        except LockbrokerError as e:
            log.debug("lockbroker: ping not sent: %s", e)
            return
        outq = session.outq
        with session.outq_mu:
            outq.append(line)
            if session.writing:
                return
            session.writing = True
            data = b"".join(outq)
            outq.clear()
        try:
            while True:
                try:
                    sent = session.sock.send(data, socket.MSG_DONTWAIT)
                except BlockingIOError:
                    sent = 0
                if sent:
                    session.last_send = time.monotonic()
                    data = data[sent:]
                if data:  # the send buffer is full
                    break
                data = session.take_outq()
                if data is None:
                    return
        except OSError as e:
            session.kill()
            self._session_ended(session, e)
            return
        with session.outq_mu:
            outq.appendleft(data)
        threading.Thread(target=self._finish_write, args=(session,),
                         name="lockbroker-writer", daemon=True).start()

    def _finish_write(self, session: _SyncSession) -> None:
        """(A thread of its own, holding the writer's part, as ``_write``'s
        writer.) Writes what ``outq`` holds until it is empty."""
        try:
            while (data := session.take_outq()) is not None:
                session.sock.sendall(data)
                session.last_send = time.monotonic()
        except OSError as e:
            session.kill()
            self._session_ended(session, e)

    def _wake(self, pending) -> None:
        pending.waiter.release()

    def _liveness_rearm(self) -> None:
        self._kick.set()

    def _post(self, fn, *args) -> None:
        self._queue.put((fn, args))

    # ---- sessions ---------------------------------------------------------

    def _session(self) -> _SyncSession:
        s = self._current
        if s is not None and not s.closed:
            return s
        with self._connect_mu:
            s = self._current
            if s is not None and not s.closed:
                return s
            hello = self._hello_fields()
            deadline = time.monotonic() + self.connect_timeout
            last: Exception | None = None
            while True:
                if self._closed:
                    raise Disconnected("the client is closed")
                wait = self._attempt_delay(deadline, last)
                if wait > 0:
                    time.sleep(wait)
                try:
                    sock = self._connect_socket(deadline)
                except OSError as e:
                    last = e
                    self._attempt_failed(e)  # raises now if refused before any session
                    continue
                try:
                    s = self._open(sock, deadline, hello)
                except (OSError, Disconnected) as e:
                    last = e
                    self._attempt_failed()
                    continue
                except LockbrokerError:
                    self._attempt_failed()
                    raise
                with self._mu:
                    if self._closed:  # closed while this session was opening
                        s.kill()
                        continue
                    self._attempt_succeeded(s)
                self._start_threads()
                return s

    def _connect_socket(self, deadline: float) -> socket.socket:
        """Connects to the broker by ``deadline``: the connected socket, or
        the connect's OSError (TimeoutError when it hung until then)."""
        addr = self._address
        remaining = max(0.001, deadline - time.monotonic())
        if addr.kind == "tcp":
            sock = socket.create_connection((addr.host, addr.port), timeout=remaining)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        else:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.settimeout(remaining)
                sock.connect(addr.path)
            except BaseException:
                sock.close()
                raise
        sock.settimeout(None)
        return sock

    def _open(self, sock: socket.socket, deadline: float, hello: dict) -> _SyncSession:
        """Starts the reader on the connected ``sock`` (taking ownership of
        it) and says hello; the new session or an error (OSError,
        Disconnected, the hello's error)."""
        session = _SyncSession(sock)
        session.reader = threading.Thread(target=self._read_loop, args=(session,),
                                          name="lockbroker-reader", daemon=True)
        session.reader.start()
        waiter = _thread.allocate_lock()
        waiter.acquire()
        try:
            pending, line = self._register(session, "hello", hello, None, waiter)
            self._write(session, line)
            if not waiter.acquire(timeout=max(0.001, deadline - time.monotonic())):
                raise Disconnected(f"no answer to hello from {self.url}", op="hello")
            self._hello_answered(session, pending)
        except BaseException:
            session.kill()
            self._session_ended(session)
            raise
        finally:
            if session.wakeq:  # passes a wake on, as _call does
                try:
                    session.wake_next()
                except IndexError:
                    pass
        return session

    def _read_loop(self, session: _SyncSession) -> None:
        buf = LineBuffer()
        sock = session.sock
        error = None
        try:
            while True:
                data = sock.recv(_RECV_SIZE)
                if not data:
                    break
                prev, session.last_recv = session.last_recv, time.monotonic()
                if session.last_ping > prev:
                    self._liveness_answered(session)
                try:
                    for msg in buf.feed(data):
                        self._route(session, msg, session.wakeq)
                finally:
                    if session.wakeq:
                        try:
                            session.wake_next()
                        except IndexError:
                            pass
        except (OSError, ValueError) as e:
            error = e
        except Exception as e:  # a bug in routing: end the session, loudly
            log.exception("lockbroker: reader failed")
            error = e
        finally:
            self._session_ended(session, error)
            sock.close()

    def _start_threads(self) -> None:
        if self._service is None:
            self._service = threading.Thread(target=self._service_loop,
                                             name="lockbroker-callbacks", daemon=True)
            self._service.start()
        if self.keepalive_ms != 0 and self._keepalive is None:
            self._keepalive = threading.Thread(target=self._keepalive_loop,
                                               name="lockbroker-keepalive", daemon=True)
            self._keepalive.start()

    def _service_loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            fn, args = item
            try:
                fn(*args)
            except Exception:
                log.exception("lockbroker: a callback raised")

    def _keepalive_loop(self) -> None:
        """The liveness thread: runs the check when it is due, and sleeps
        until the next one or until re-armed (``_kick``: a shorter bound, a
        new session, close)."""
        while not self._stop.is_set():
            with self._mu:
                self._kick.clear()  # before planning: a later re-arm wakes the wait below
                s = self._current
                what, at = self._liveness(s, time.monotonic())
            if what == "ping":
                self._ping(s)
                continue  # plans again, with the ping in flight
            if what == "dead":
                s.kill()
                self._session_ended(s)
                continue
            self._kick.wait(None if at == _NEVER else max(0.0, at - time.monotonic()))
