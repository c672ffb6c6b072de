"""The asyncio client: :class:`AsyncClient` and :class:`AsyncLease`.

Same sessions, routing and lease book as the threaded client (``_core``),
driven by an ``asyncio.Protocol`` instead of threads: ``data_received``
routes answers by ``id`` and events by lease, ``connection_lost`` fails the
pending requests and loses the session's leases. Everything runs on the
event loop the client was first used on; an ``AsyncClient`` is shared by
tasks of that loop, not by threads.

Invariants:

- each asyncio task is its own reentrancy owner unless the client or the
  call names one, so two tasks sharing the client exclude each other;
- a task cancelled while its acquire waits sends ``cancel`` for it; a grant
  that raced the cancel is released, never leaked to nobody;
- a dropped session is never re-used: the next request opens a new one
  (with backoff after failed attempts), and a lease bound to the dropped
  session is lost (``disconnected``) and never sent on the new one;
- liveness (unless ``keepalive_ms=0``): one timer of the loop, armed for
  when the check of ``ClientCore._liveness`` is due and re-armed at once
  when a shorter bound applies, pings a quiet session and ends one whose
  broker has been silent for the bound (its leases are reported lost,
  ``disconnected``). It does no I/O but a buffered write and never waits;
  it is cancelled by ``close()``, and not armed again while there is
  nothing to watch;
- ``on_lost`` callbacks run on the loop via ``call_soon`` (a coroutine
  function's coroutine becomes a task), never inside the protocol callback.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

from ._core import (_NEVER, AcquireMeta, ClientCore, LeaseBase, Session, acquire_fields, log,
                    refuse_id)
from ._wire import LineBuffer
from .errors import Cancelled, Disconnected, LeaseLost, LockbrokerError, NotHeld
from .info import LeaseInfo, LockInfo, strip

if TYPE_CHECKING:
    from .client import CancelToken, Leader

__all__ = ["AsyncClient", "AsyncLease", "AsyncElection"]


class AsyncLease(LeaseBase):
    """A held lease of an :class:`AsyncClient` (one acquire's level of it).
    An async context manager: leaving ``async with`` releases it, or raises
    :class:`LeaseLost` if it was lost. Same attributes as :class:`Lease`."""

    __slots__ = ()

    async def release(self) -> int:
        """Releases this level; returns the count the lease has left."""
        reply = await self._lease_call("release", {"lease": self.token})
        self._released = True
        return reply.get("count")

    async def proclaim(self, value: str) -> int:
        """A new value in the same term; returns the fence (the term)."""
        reply = await self._lease_call("proclaim", {"lease": self.token, "value": value})
        return reply.get("fence")

    async def extend(self, ttl_ms: int) -> int:
        """Sets the remaining lifetime to ``ttl_ms``; returns the new lifetime."""
        reply = await self._lease_call("extend", {"lease": self.token, "ttl_ms": ttl_ms})
        return reply.get("ttl_ms")

    async def wait_lost(self) -> str:
        """Waits until the lease is lost; returns the reason."""
        st = self._state
        if st.lost_reason is None:
            if st.aevent is None:
                st.aevent = asyncio.Event()
            await st.aevent.wait()
        return st.lost_reason

    async def _lease_call(self, op: str, fields: dict) -> dict:
        self._usable()
        st = self._state
        try:
            return await self._client._call(op, fields,
                                            session=None if st.detached else st.session)
        except LeaseLost:
            raise
        except NotHeld as e:
            self._client._lose_now(st, "not_held")
            raise LeaseLost(self, st.lost_reason) from e
        except Disconnected:
            self._check_lost()
            raise

    async def __aenter__(self) -> "AsyncLease":
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> bool:
        if self._leaving(exc):
            await self.release()
        return False


class _AsyncLockScope:
    """``async with client.lock(...) as lease``."""

    __slots__ = ("_client", "_name", "_kwargs", "_lease")

    def __init__(self, client: "AsyncClient", name: str, kwargs: dict):
        self._client = client
        self._name = name
        self._kwargs = kwargs
        self._lease: AsyncLease | None = None

    async def __aenter__(self) -> AsyncLease:
        self._lease = await self._client.acquire(self._name, **self._kwargs)
        return self._lease

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> bool:
        return await self._lease.__aexit__(exc_type, exc, tb)


class AsyncElection:
    """Leader election for asyncio::

        async with client.election("scheduler").campaign("10.0.0.7:8080") as term:
            ...  # leading; term.fence is the term

    """

    def __init__(self, client: "AsyncClient", name: str):
        self._client = client
        self.name = name

    def campaign(self, value: str, **kwargs: Any) -> "_AsyncLockScope":
        kwargs["value"] = value
        return _AsyncLockScope(self._client, self.name, kwargs)

    async def campaigns(self, value: str, **kwargs: Any) -> AsyncIterator[AsyncLease]:
        """As :meth:`Election.campaigns`: ``async for term in ...``, each term
        this caller is elected in; campaigns again (reconnecting with backoff)
        when one ends."""
        kwargs["value"] = value
        delay = 0.05
        while True:
            try:
                lease = await self._client.acquire(self.name, **kwargs)
            except Disconnected:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            delay = 0.05
            yield lease
            if lease.held:
                try:
                    await lease.release()
                except (LeaseLost, Disconnected):
                    pass

    async def leader(self) -> "Leader | None":
        from .client import Leader
        return Leader.of(await self._client.inspect(self.name))

    async def observe(self) -> AsyncIterator["Leader | None"]:
        """The leader (or None) now, then each change (new term or value)."""
        from .client import Leader
        last = object()
        async for info in self._client.watch(self.name):
            cur = Leader.of(info)
            if cur != last:
                last = cur
                yield cur


class _AsyncSession(Session, asyncio.Protocol):
    """A session over an asyncio transport."""

    def __init__(self, client: "AsyncClient"):
        Session.__init__(self)
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.buf = LineBuffer()
        self.paused = False
        self.drainers: list = []

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        prev, self.last_recv = self.last_recv, time.monotonic()
        if self.last_ping > prev:
            self.client._liveness_answered(self)
        try:
            msgs = self.buf.feed(data)
        except ValueError as e:
            log.warning("lockbroker: unreadable line from the broker: %s", e)
            self.transport.abort()
            return
        for msg in msgs:
            self.client._route(self, msg)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc) -> None:
        self.client._session_ended(self, exc)
        self.resume_writing()

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        drainers, self.drainers = self.drainers, []
        for fut in drainers:
            if not fut.done():
                fut.set_result(None)

    async def drain(self) -> None:
        if self.paused and not self.closed:
            fut = asyncio.get_running_loop().create_future()
            self.drainers.append(fut)
            await fut

    def write(self, line: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(line)
            self.last_send = time.monotonic()

    def kill(self) -> None:
        if self.transport is not None:
            self.transport.abort()


class AsyncClient(ClientCore):
    """The asyncio counterpart of :class:`Client`, same arguments; every
    request method is a coroutine and :meth:`lock` an async context manager.

    Use it from one event loop. ``async with AsyncClient(...) as client:``
    closes it on leaving.
    """

    _lease_class = AsyncLease

    def __init__(self, url: str | None = None, *, auth: str | None = None,
                 auth_file: str | None = None, label: str | None = None,
                 keepalive_ms: int | None = None, owner: str | None = None,
                 connect_timeout: float = 5.0):
        super().__init__(url, auth, auth_file, label, keepalive_ms, owner, connect_timeout)
        self._connect_mu = asyncio.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set = set()
        self._keepalive_timer: asyncio.TimerHandle | None = None

    # ---- the public API ---------------------------------------------------

    async def connect(self) -> "AsyncClient":
        """Opens the session now (else the first request does); returns self."""
        await self._session()
        return self

    @property
    def server(self) -> dict[str, Any] | None:
        """hello's answer on the current session, None while there is none."""
        s = self._current
        return s.info if s is not None and not s.closed else None

    async def acquire(self, name: str, *, mode: str | None = None, limit: int | None = None,
                      ttl_ms: int | None = None, wait_ms: int | None = None,
                      watchdog: bool | None = None, owner: str | None = None,
                      fair: bool | None = None, detach: bool = False,
                      max_hold_ms: int | None = None,
                      on_lost: Callable[[AsyncLease], object] | None = None,
                      cancel: "CancelToken | None" = None, value: str | None = None,
                      lock_delay_ms: int | None = None) -> AsyncLease:
        """As :meth:`Client.acquire`. Cancelling the awaiting task while the
        acquire waits sends ``cancel`` to the broker (and releases the lease
        if it was granted meanwhile); ``cancel`` may also be a
        :class:`CancelToken` set from any thread."""
        owner = self._owner_for(owner)
        fields = acquire_fields(name, mode, limit, ttl_ms, wait_ms, watchdog, owner, fair,
                                detach, max_hold_ms, value, lock_delay_ms)
        meta = AcquireMeta(name, bool(detach), owner, on_lost)
        return await self._call("acquire", fields, meta=meta, cancel=cancel)

    async def lock_all(self, locks: Iterable[str | Mapping[str, Any]], *,
                       ttl_ms: int | None = None, wait_ms: int | None = None,
                       watchdog: bool | None = None, owner: str | None = None,
                       fair: bool | None = None, detach: bool = False,
                       max_hold_ms: int | None = None, lock_delay_ms: int | None = None,
                       on_lost: Callable[[AsyncLease], object] | None = None,
                       ) -> list[AsyncLease]:
        """As :meth:`Client.lock_all`."""
        owner = self._owner_for(owner)
        fields = acquire_fields(None, None, None, ttl_ms, wait_ms, watchdog, owner, fair,
                                detach, max_hold_ms, None, lock_delay_ms)
        del fields["lock"]
        fields["locks"] = [{"lock": x} if isinstance(x, str) else dict(x) for x in locks]
        meta = AcquireMeta(None, bool(detach), owner, on_lost)
        return await self._call("acquire_all", fields, meta=meta)

    async def watch(self, name: str) -> AsyncIterator[LockInfo]:
        """``async for info in client.watch(name):`` the lock's state, then
        one :class:`LockInfo` per change; it watches again (with backoff)
        after a dropped connection or a broker restart. Leaving the loop
        (or closing the generator) ends the watch."""
        q: asyncio.Queue = asyncio.Queue()
        wid = None
        delay = 0.05
        try:
            while True:
                try:
                    reply = await self._call("watch", {"lock": name}, meta=q.put_nowait)
                except Disconnected:
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 2.0)
                    continue
                wid, delay = reply.get("watch"), 0.05
                while True:
                    msg = await q.get()
                    if msg is None:
                        break  # the session ended: watch again
                    yield LockInfo.from_wire(msg)
        finally:
            if wid is not None and wid in self._watches:
                self._send_nowait(self._watches[wid][0], "unwatch", {"watch": wid})
                self._watches.pop(wid, None)

    def election(self, name: str) -> "AsyncElection":
        """As :meth:`Client.election`, for asyncio."""
        return AsyncElection(self, name)

    def lock(self, name: str, **kwargs: Any) -> _AsyncLockScope:
        """``async with client.lock(name, ...) as lease:`` (arguments as
        :meth:`acquire`); leaving after a loss raises :class:`LeaseLost`."""
        return _AsyncLockScope(self, name, kwargs)

    async def release_token(self, token: str) -> int:
        """Releases one level of a lease by its token; returns the count left."""
        return (await self._call("release", {"lease": token})).get("count")

    async def extend_token(self, token: str, ttl_ms: int) -> int:
        """Extends a lease by its token; returns its new lifetime in ms."""
        return (await self._call("extend", {"lease": token, "ttl_ms": ttl_ms})).get("ttl_ms")

    async def inspect(self, name: str) -> LockInfo:
        return LockInfo.from_wire(await self._call("inspect", {"lock": name}))

    async def leases(self) -> list[LeaseInfo]:
        reply = await self._call("leases", {})
        return [LeaseInfo.from_wire(r) for r in reply.get("leases") or ()]

    async def stats(self) -> dict[str, Any]:
        return strip(await self._call("stats", {}))

    async def ping(self) -> dict[str, Any]:
        return strip(await self._call("ping", {}))

    async def request(self, op: str, **fields: Any) -> dict[str, Any]:
        """Any op with any fields; the answer without its envelope."""
        refuse_id(fields)
        return strip(await self._call(op, fields))

    async def close(self) -> None:
        """Ends the session (its leases are reported lost, reason ``closed``)."""
        self._closed = True
        if self._keepalive_timer is not None:
            self._keepalive_timer.cancel()
            self._keepalive_timer = None
        s = self._current
        if s is not None:
            s.end_reason = "closed"
            s.kill()
            self._session_ended(s)
        await asyncio.sleep(0)

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    def __repr__(self) -> str:
        s = self._current
        state = "closed" if self._closed else ("connected" if s and not s.closed else "idle")
        return f"<AsyncClient {self.url} {state}>"

    # ---- requests ---------------------------------------------------------

    async def _call(self, op: str, fields: dict, *, meta=None, cancel=None, session=None):
        if cancel is not None and cancel.is_set():
            raise Cancelled("the acquire was cancelled before it was sent", op=op)
        if session is None:
            session = await self._session()
        fut = self._loop.create_future()
        pending, line = self._register(session, op, fields, meta, fut)
        session.write(line)
        hook = None
        if cancel is not None:
            loop = self._loop

            def hook():
                loop.call_soon_threadsafe(self._send_nowait, session, "cancel",
                                          {"target": pending.id})
            cancel._hook(hook)
        try:
            await session.drain()
            await fut
        except asyncio.CancelledError:
            if op == "acquire":
                self._abandon(session, pending)
            else:
                self._unregister(session, pending)
            raise
        finally:
            if hook is not None:
                cancel._unhook(hook)
        if pending.error is not None:
            raise pending.error
        return pending.result

    def _send_nowait(self, session, op, fields) -> None:
        try:
            pending, line = self._register(session, op, fields)
        except LockbrokerError as e:
            log.debug("lockbroker: %s not sent: %s", op, e)
            return
        session.write(line)

    def _wake(self, pending) -> None:
        if not pending.waiter.done():
            pending.waiter.set_result(None)

    def _post(self, fn, *args) -> None:
        self._loop.call_soon(self._run_callback, fn, args)

    def _run_callback(self, fn, args) -> None:
        try:
            result = fn(*args)
            if asyncio.iscoroutine(result):
                task = self._loop.create_task(result)
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        except Exception:
            log.exception("lockbroker: a callback raised")

    # ---- sessions ---------------------------------------------------------

    async def _session(self) -> _AsyncSession:
        s = self._current
        if s is not None and not s.closed:
            return s
        async with self._connect_mu:
            s = self._current
            if s is not None and not s.closed:
                return s
            self._loop = asyncio.get_running_loop()
            hello = self._hello_fields()
            deadline = time.monotonic() + self.connect_timeout
            last: Exception | None = None
            while True:
                if self._closed:
                    raise Disconnected("the client is closed")
                wait = self._attempt_delay(deadline, last)
                if wait > 0:
                    await asyncio.sleep(wait)
                try:
                    s = await self._connect_session(deadline)
                except OSError as e:  # TimeoutError included: a connect that hung
                    last = e
                    self._attempt_failed(e)  # raises now if refused before any session
                    continue
                try:
                    await self._hello(s, deadline, hello)
                except (OSError, asyncio.TimeoutError, Disconnected) as e:
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
                    self._attempt_succeeded(s)  # arms the liveness timer
                return s

    async def _connect_session(self, deadline: float) -> _AsyncSession:
        """Connects to the broker by ``deadline``: the new session, or the
        connect's OSError (TimeoutError when it hung until then)."""
        addr = self._address
        loop = self._loop
        remaining = max(0.001, deadline - time.monotonic())
        if addr.kind == "tcp":
            connecting = loop.create_connection(lambda: _AsyncSession(self), addr.host, addr.port)
        else:
            connecting = loop.create_unix_connection(lambda: _AsyncSession(self), addr.path)
        _, session = await asyncio.wait_for(connecting, remaining)
        return session

    async def _hello(self, session: _AsyncSession, deadline: float, hello: dict) -> None:
        """Says hello on the connected ``session``; on any error (OSError,
        Disconnected, the hello's error) kills it and raises."""
        loop = self._loop
        fut = loop.create_future()
        try:
            pending, line = self._register(session, "hello", hello, None, fut)
            session.write(line)
            remaining = max(0.001, deadline - time.monotonic())
            try:
                await asyncio.wait_for(fut, remaining)
            except asyncio.TimeoutError:
                raise Disconnected(f"no answer to hello from {self.url}", op="hello") from None
            self._hello_answered(session, pending)
        except BaseException:
            session.kill()
            self._session_ended(session)
            raise

    def _liveness_rearm(self) -> None:
        """(Under ``_mu``, on the loop.) Arms the timer for ``_liveness_at``."""
        if self._keepalive_timer is not None:
            self._keepalive_timer.cancel()
            self._keepalive_timer = None
        if self._closed or self._liveness_at == _NEVER:
            return
        delay = max(0.0, self._liveness_at - time.monotonic())
        self._keepalive_timer = self._loop.call_later(delay, self._keepalive_tick)

    def _keepalive_tick(self) -> None:
        """The liveness timer: pings a quiet session, gives up one whose
        broker fell silent (``ClientCore._liveness``), and arms itself for
        the next check, if any."""
        self._keepalive_timer = None
        if self._closed:
            return
        while True:
            with self._mu:
                s = self._current
                what, _ = self._liveness(s, time.monotonic())
                if what is None:
                    self._liveness_rearm()
                    return
            if what == "ping":
                self._send_nowait(s, "ping", {})
            else:
                s.kill()
                self._session_ended(s)
            # Plans again: with the ping in flight, or without the session.
