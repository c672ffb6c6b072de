"""Client-side liveness checking, on by default (issue 26, point 6: "a
frozen broker leaves its holders believing").

The issue's scenario, with real brokers: the holder takes a lock through a
broker of the test's own, with default options; a waiter waits for it on
the suite's broker (same Redis); the holder's broker is frozen (SIGSTOP).
The holder must hear of its loss (``disconnected``) within about ttl/3, and
before the waiter is granted the lock when Redis lets the lease expire.

Then, against a fake broker (tests.support.FakeBroker, no lockbrokerd
needed) that answers pings until told to fall silent: the bound on the
broker's silence follows the shortest TTL the session holds (it applies as
soon as the first lease is granted, shrinks with a shorter lease, relaxes
when that one is released), ``keepalive_ms`` caps it, a session that holds
nothing sends no pings, and ``keepalive_ms=0`` turns the whole check off
(no ping ever written).
"""

import asyncio
import signal
import socket
import threading
import time
import unittest

import lockbroker
from tests.support import FakeBroker, PrivateBroker, env, need_broker, unique, wait_until

# ---- the scenario --------------------------------------------------

TTL_MS = 3000
# The loss must come within ttl/3 of the freeze; the margin is for a loaded
# 2-core machine (the waiter cannot be granted before about 2/3 ttl anyway).
LOSS_WITHIN = TTL_MS / 3000 + 1.0


class FrozenBrokerScenarioTests(unittest.TestCase):
    def setUp(self):
        need_broker()
        env("LOCKBROKER_BIN")
        self.broker = PrivateBroker().start()
        self.addCleanup(self.broker.stop)
        # Whatever happens, the frozen broker is resumed before it is stopped.
        self.addCleanup(self.broker.kill, signal.SIGCONT)

    def check_order(self, t_stop, t_lost, t_granted, reason):
        self.assertIsNotNone(t_lost, "the holder never heard that its lease was lost")
        self.assertEqual(reason, "disconnected")
        self.assertIsNotNone(t_granted, "the waiter was never granted the lock")
        self.assertLess(t_lost, t_granted,
                        f"two holders: the waiter was granted {t_granted - t_stop:.3f} s after "
                        f"the freeze, the holder heard of its loss only "
                        f"{t_lost - t_stop:.3f} s after")
        self.assertLess(t_lost - t_stop, LOSS_WITHIN,
                        f"the loss came {t_lost - t_stop:.3f} s after the freeze (ttl {TTL_MS} ms)")

    def test_holder_hears_of_its_loss_before_the_waiter_is_granted(self):
        name = unique("frozen-default")
        holder = lockbroker.Client(self.broker.url, connect_timeout=0.5)  # default options
        self.addCleanup(holder.close)
        waiter = lockbroker.Client()  # $LOCKBROKER_URL: the suite's broker, same Redis
        self.addCleanup(waiter.close)
        times = {}
        lease = holder.acquire(name, ttl_ms=TTL_MS, wait_ms=0,
                               on_lost=lambda _: times.setdefault("lost", time.monotonic()))

        def wait():
            try:
                got = waiter.acquire(name, wait_ms=15000)
                times["granted"] = time.monotonic()
                got.release()
            except lockbroker.LockbrokerError as e:
                times["error"] = e

        t = threading.Thread(target=wait)
        t.start()
        # The waiter is queued before the freeze.
        deadline = time.monotonic() + 3
        while waiter.inspect(name).waiters < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertEqual(waiter.inspect(name).waiters, 1)

        lost_at = []
        watcher = threading.Thread(target=lambda: lease.lost.wait(15) and
                                   lost_at.append(time.monotonic()))
        watcher.start()
        t_stop = time.monotonic()
        self.broker.kill(signal.SIGSTOP)
        try:
            t.join(20)
            watcher.join(20)
        finally:
            self.broker.kill(signal.SIGCONT)
        self.assertNotIn("error", times)
        self.check_order(t_stop, lost_at[0] if lost_at else None, times.get("granted"),
                         lease.lost_reason)
        # on_lost ran too (on the callback thread, a little after the event).
        self.assertIn("lost", times)
        self.assertLess(times["lost"], times["granted"])

    def test_async_holder_hears_of_its_loss_before_the_waiter_is_granted(self):
        async def run():
            name = unique("async-frozen-default")
            holder = lockbroker.AsyncClient(self.broker.url, connect_timeout=0.5)
            waiter = lockbroker.AsyncClient()
            try:
                lease = await holder.acquire(name, ttl_ms=TTL_MS, wait_ms=0)
                lost_cb = []
                lease.on_lost(lambda _: lost_cb.append(time.monotonic()))

                async def wait():
                    got = await waiter.acquire(name, wait_ms=15000)
                    t = time.monotonic()
                    await got.release()
                    return t

                async def lost():
                    reason = await lease.wait_lost()
                    return time.monotonic(), reason

                waiting = asyncio.ensure_future(wait())
                deadline = time.monotonic() + 3
                while (await waiter.inspect(name)).waiters < 1 and time.monotonic() < deadline:
                    await asyncio.sleep(0.01)
                self.assertEqual((await waiter.inspect(name)).waiters, 1)
                losing = asyncio.ensure_future(lost())
                await asyncio.sleep(0)
                t_stop = time.monotonic()
                self.broker.kill(signal.SIGSTOP)
                try:
                    t_granted = await asyncio.wait_for(waiting, 20)
                    t_lost, reason = await asyncio.wait_for(losing, 1)
                finally:
                    self.broker.kill(signal.SIGCONT)
                self.check_order(t_stop, t_lost, t_granted, reason)
                self.assertEqual(len(lost_cb), 1)
                self.assertLess(lost_cb[0], t_granted)
            finally:
                await holder.close()
                await waiter.close()

        asyncio.run(run())


# ---- the bound, against a fake broker --------------------------------------


class SilentFake:
    """A fake broker that grants every acquire (its ``ttl_ms``, else
    30000), releases to count 0, answers ping, and answers nothing at all
    once ``silent`` is set (the connection stays open: a frozen broker).
    ``pings`` holds the time.monotonic() of each ping it received."""

    def __init__(self, test: unittest.TestCase):
        self.silent = False
        self.pings: list[float] = []
        self.seq = 0
        self.broker = FakeBroker(self.answer)
        test.addCleanup(self.broker.close)

    def answer(self, msg):
        op, rid = msg.get("op"), msg.get("id")
        if op == "ping":
            self.pings.append(time.monotonic())
        if self.silent:
            return []
        if op == "acquire":
            self.seq += 1
            return [{"id": rid, "ok": True, "lease": f"{self.seq:032x}", "lock": msg["lock"],
                     "mode": "exclusive", "fence": self.seq, "ttl_ms": msg.get("ttl_ms", 30000),
                     "count": 1}]
        if op == "release":
            return [{"id": rid, "ok": True, "count": 0}]
        return [{"id": rid, "ok": True, "redis": "up"}]

    def pings_since(self, t: float) -> int:
        return sum(1 for p in list(self.pings) if p >= t)

    def hello(self) -> dict:
        return next(m for _, m in self.broker.lines if m.get("op") == "hello")


def lost_within(lease, seconds: float) -> float | None:
    """Seconds until the lease was lost, or None if it was not within ``seconds``."""
    t0 = time.monotonic()
    if not lease.lost.wait(seconds):
        return None
    return time.monotonic() - t0


class LivenessBoundTests(unittest.TestCase):
    """The threaded client (default options unless said)."""

    def setUp(self):
        self.fake = SilentFake(self)

    def client(self, **kw) -> lockbroker.Client:
        c = lockbroker.Client(self.fake.broker.url, connect_timeout=2, **kw)
        self.addCleanup(c.close)
        return c

    def test_a_session_holding_nothing_does_not_ping(self):
        c = self.client()
        c.ping()
        t0 = time.monotonic()
        time.sleep(1.0)
        self.assertEqual(self.fake.pings_since(t0), 0)
        self.assertNotIn("keepalive_ms", self.fake.hello())  # no explicit keepalive: not sent

    def test_the_first_lease_bound_applies_at_once(self):
        c = self.client()
        c.ping()
        time.sleep(0.3)  # an idle session, unwatched
        # Granted, then silence: ttl 600 ms bounds the silence at 200 ms.
        self.fake.silent = False
        lease = c.acquire(unique("first"), ttl_ms=600, wait_ms=0)
        self.fake.silent = True
        took = lost_within(lease, 3)
        self.assertIsNotNone(took, "a silent broker was not given up")
        self.assertLess(took, 1.0)
        self.assertEqual(lease.lost_reason, "disconnected")
        # The next request opens a new session.
        self.fake.silent = False
        self.assertEqual(c.ping(), {"redis": "up"})
        self.assertEqual(c.server["session"], "s2")

    def test_the_bound_shrinks_with_a_shorter_lease(self):
        c = self.client()
        long = c.acquire(unique("long"), ttl_ms=30000, wait_ms=0)  # bound 5000 ms (the default)
        short = c.acquire(unique("short"), ttl_ms=600, wait_ms=0)  # bound 200 ms
        self.fake.silent = True
        took = lost_within(short, 3)
        self.assertIsNotNone(took, "the shorter lease's bound did not apply")
        self.assertLess(took, 1.0)
        self.assertTrue(long.lost.is_set())  # the session ended: every lease lost
        self.assertEqual((short.lost_reason, long.lost_reason), ("disconnected", "disconnected"))

    def test_the_bound_relaxes_when_the_shorter_lease_is_released(self):
        c = self.client()
        long = c.acquire(unique("long"), ttl_ms=30000, wait_ms=0)
        short = c.acquire(unique("short"), ttl_ms=600, wait_ms=0)
        t0 = time.monotonic()
        time.sleep(0.6)
        # 200 ms bound: a ping about every 67 ms (any answer resets the wait).
        self.assertGreaterEqual(self.fake.pings_since(t0), 3)
        short.release()
        t1 = time.monotonic()
        time.sleep(1.0)
        # 5000 ms bound now: the next ping is due 1.67 s after the last answer.
        self.assertLessEqual(self.fake.pings_since(t1), 1)
        self.fake.silent = True
        self.assertIsNone(lost_within(long, 1.5), "given up as if the short lease were held")
        self.assertTrue(long.held)

    def test_keepalive_ms_caps_the_bound(self):
        c = self.client(keepalive_ms=1000)
        lease = c.acquire(unique("capped"), ttl_ms=60000, wait_ms=0)  # ttl/3 = 20 s; cap 1 s
        self.assertEqual(self.fake.hello()["keepalive_ms"], 1000)
        self.fake.silent = True
        took = lost_within(lease, 4)
        self.assertIsNotNone(took)
        self.assertLess(took, 2.5)
        self.assertEqual(lease.lost_reason, "disconnected")

    def test_keepalive_ms_0_turns_it_off(self):
        c = self.client(keepalive_ms=0)
        lease = c.acquire(unique("off"), ttl_ms=300, wait_ms=0)  # would be a 100 ms bound
        self.assertNotIn("keepalive_ms", self.fake.hello())
        time.sleep(1.0)
        self.fake.silent = True
        time.sleep(0.5)
        self.assertEqual(self.fake.broker.ops(), ["hello", "acquire"])  # not one ping
        self.assertTrue(lease.held)


    def test_a_ping_never_blocks_the_liveness_thread(self):
        # A socket whose peer reads nothing and whose send buffer is full (a
        # frozen broker, a client that wrote a lot): the ping is written
        # without waiting, the rest by a thread of its own.
        from lockbroker.client import _SyncSession
        mine, peer = socket.socketpair()
        self.addCleanup(peer.close)
        self.addCleanup(mine.close)
        mine.setblocking(False)
        filler = 0
        try:
            while True:
                filler += mine.send(b"x" * 65536)
        except BlockingIOError:
            pass
        mine.setblocking(True)
        session = _SyncSession(mine)
        c = self.client()
        done = threading.Event()
        t = threading.Thread(target=lambda: (c._ping(session), done.set()), daemon=True)
        t.start()
        self.assertTrue(done.wait(2), "the ping blocked on a full send buffer")
        self.assertTrue(session.writing)  # a writer thread finishes it
        got = b""
        peer.settimeout(5)
        while not got.endswith(b"\n"):
            got += peer.recv(1 << 20)
        # Everything arrives, in order: what filled the buffer, then the ping.
        self.assertEqual(got.index(b"{"), filler)
        self.assertIn(b'"op":"ping"', got[filler:])
        self.assertTrue(wait_until(lambda: not session.writing))

    def test_keepalive_ms_must_be_0_or_milliseconds(self):
        for bad in (-1, 1.5, "5000"):
            with self.subTest(bad=bad), self.assertRaises(lockbroker.InvalidArgument):
                lockbroker.Client(self.fake.broker.url, keepalive_ms=bad)
            with self.subTest(bad=bad), self.assertRaises(lockbroker.InvalidArgument):
                lockbroker.AsyncClient(self.fake.broker.url, keepalive_ms=bad)


class AsyncLivenessBoundTests(unittest.IsolatedAsyncioTestCase):
    """The asyncio client: the same bound, on a timer of the loop."""

    def setUp(self):
        self.fake = SilentFake(self)

    async def asyncSetUp(self):
        self.clients = []

    async def asyncTearDown(self):
        for c in self.clients:
            await c.close()

    def client(self, **kw) -> lockbroker.AsyncClient:
        c = lockbroker.AsyncClient(self.fake.broker.url, connect_timeout=2, **kw)
        self.clients.append(c)
        return c

    async def lost_within(self, lease, seconds: float) -> float | None:
        t0 = time.monotonic()
        try:
            await asyncio.wait_for(lease.wait_lost(), seconds)
        except asyncio.TimeoutError:
            return None
        return time.monotonic() - t0

    async def test_nothing_held_no_ping_then_the_first_lease_bound_at_once(self):
        c = self.client()
        await c.ping()
        t0 = time.monotonic()
        await asyncio.sleep(1.0)
        self.assertEqual(self.fake.pings_since(t0), 0)
        lease = await c.acquire(unique("async-first"), ttl_ms=600, wait_ms=0)
        self.fake.silent = True
        took = await self.lost_within(lease, 3)
        self.assertIsNotNone(took, "a silent broker was not given up")
        self.assertLess(took, 1.0)
        self.assertEqual(lease.lost_reason, "disconnected")

    async def test_the_bound_shrinks_and_relaxes(self):
        c = self.client()
        long = await c.acquire(unique("async-long"), ttl_ms=30000, wait_ms=0)
        short = await c.acquire(unique("async-short"), ttl_ms=600, wait_ms=0)
        t0 = time.monotonic()
        await asyncio.sleep(0.6)
        self.assertGreaterEqual(self.fake.pings_since(t0), 3)
        await short.release()
        t1 = time.monotonic()
        await asyncio.sleep(1.0)
        self.assertLessEqual(self.fake.pings_since(t1), 1)
        short2 = await c.acquire(unique("async-short2"), ttl_ms=600, wait_ms=0)
        self.fake.silent = True
        took = await self.lost_within(short2, 3)
        self.assertIsNotNone(took, "the shorter lease's bound did not apply")
        self.assertLess(took, 1.0)
        self.assertEqual(long.lost_reason, "disconnected")

    async def test_keepalive_ms_0_turns_it_off(self):
        c = self.client(keepalive_ms=0)
        lease = await c.acquire(unique("async-off"), ttl_ms=300, wait_ms=0)
        await asyncio.sleep(1.0)
        self.fake.silent = True
        await asyncio.sleep(0.5)
        self.assertEqual(self.fake.broker.ops(), ["hello", "acquire"])
        self.assertNotIn("keepalive_ms", self.fake.hello())
        self.assertTrue(lease.held)

    async def test_close_leaves_no_timer(self):
        c = self.client()
        lease = await c.acquire(unique("async-close"), ttl_ms=600, wait_ms=0)
        await c.close()
        self.assertEqual(lease.lost_reason, "closed")
        loop = asyncio.get_running_loop()
        timers = [h for h in getattr(loop, "_scheduled", []) if not h.cancelled()
                  and getattr(h._callback, "__self__", None) is c]
        self.assertEqual(timers, [])
        n = len(self.fake.pings)
        await asyncio.sleep(0.4)
        self.assertEqual(len(self.fake.pings), n)


if __name__ == "__main__":
    unittest.main()
