"""Brokers of the tests' own (LOCKBROKER_BIN): killed while a lease is held
(the lease is lost, reason "disconnected"; new requests work once it is
back, and the old token is never sent again: a proxy records every line the
client writes), and the error codes that need a broker set up for them:
limit_exceeded, unavailable, shutting_down."""

import asyncio
import signal
import threading
import time
import unittest

import lockbroker
from tests.support import LoggingProxy, PrivateBroker, env, free_port, unique, wait_until



async def ping_until_up(client) -> None:
    """Pings until the (restarted) broker answers, for up to 5 s."""
    for _ in range(100):
        try:
            await client.ping()
            return
        except lockbroker.Disconnected:
            await asyncio.sleep(0.05)

class DisconnectTests(unittest.TestCase):
    def setUp(self):
        env("LOCKBROKER_BIN")
        self.broker = PrivateBroker().start()
        self.addCleanup(self.broker.stop)

    def test_killed_broker_loses_leases_and_reconnects(self):
        client = lockbroker.Client(self.broker.url, connect_timeout=0.5)
        self.addCleanup(client.close)
        called = []
        name = unique("killed")
        lease = client.acquire(name, ttl_ms=2000, wait_ms=0, on_lost=called.append)
        detached = client.acquire(unique("killed-detached"), detach=True, ttl_ms=5000)
        first_broker = client.server["broker"]

        waiting = []

        def wait():  # a second thread waits for the lock on the same client
            try:
                client.acquire(name, wait_ms=10000)
            except lockbroker.LockbrokerError as e:
                waiting.append(e)

        t = threading.Thread(target=wait)
        t.start()
        time.sleep(0.1)

        with self.assertRaises(lockbroker.LeaseLost) as cm:
            with lease:
                self.broker.kill()
                self.assertTrue(lease.lost.wait(3))
                self.assertEqual(lease.lost_reason, "disconnected")
        self.assertEqual(cm.exception.reason, "disconnected")
        t.join(3)
        self.assertEqual([type(e) for e in waiting], [lockbroker.Disconnected])
        self.assertTrue(wait_until(lambda: called == [lease]))
        self.assertFalse(detached.lost.is_set())  # a detached lease outlives its session

        # While the broker is down, requests fail fast with Disconnected.
        t0 = time.monotonic()
        with self.assertRaises(lockbroker.Disconnected):
            client.ping()
        self.assertLess(time.monotonic() - t0, 2)

        self.broker.start()  # same port
        self.assertTrue(wait_until(lambda: self._pings(client), timeout=5))
        self.assertNotEqual(client.server["broker"], first_broker)  # a new process
        with client.lock(unique("after"), wait_ms=0) as again:
            self.assertTrue(again.held)
        # The old lease stays lost; its token is never sent on the new session.
        with self.assertRaises(lockbroker.LeaseLost):
            lease.release()
        with self.assertRaises(lockbroker.LeaseLost):
            lease.extend(1000)
        self.assertEqual(client.stats()["released_total"], 1)  # only "after"'s
        # A detached lease may be released from the new session, explicitly.
        self.assertEqual(detached.release(), 0)

    def _pings(self, client):
        try:
            return client.ping()["redis"] == "up"
        except lockbroker.Disconnected:
            return False

    def test_old_token_is_never_written_on_a_new_session(self):
        # Every line the client writes goes through a proxy that records it.
        proxy = LoggingProxy(self.broker.port)
        self.addCleanup(proxy.close)
        client = lockbroker.Client(proxy.url, connect_timeout=1)
        self.addCleanup(client.close)
        lease = client.acquire(unique("old-token"), ttl_ms=5000, wait_ms=0)
        detached = client.acquire(unique("old-token-detached"), detach=True, ttl_ms=5000)
        self.assertEqual(lease.extend(4000), 4000)
        # The proxy sees the token when the client does send it (session 1).
        self.assertEqual(len(proxy.written(lease.token)), 1)

        self.broker.kill()
        self.assertTrue(lease.lost.wait(3))
        self.broker.start()  # same port: the proxy's next connections reach it
        self.assertTrue(wait_until(lambda: self._pings(client), timeout=5))
        self.assertGreaterEqual(len(proxy.accepts), 2)

        for what, call in (("release", lease.release), ("extend", lambda: lease.extend(1000)),
                           ("check", lease.check), ("fence", lambda: lease.fence)):
            with self.subTest(what=what), self.assertRaises(lockbroker.LeaseLost) as cm:
                call()
            # (The reason alone proves nothing: a lease stays lost for its first
            # reason, even if the old token drew not_held; the proxy's record does.)
            self.assertEqual(cm.exception.reason, "disconnected", what)
        with self.assertRaises(lockbroker.LeaseLost) as cm:
            with lease:
                pass
        self.assertEqual(cm.exception.reason, "disconnected")
        # A detached lease is released through the new session: its token is
        # written there, so the proxy does record tokens on the new session.
        self.assertEqual(detached.release(), 0)
        client.ping()  # answered: every line written before it is recorded
        new_session = lambda n: n >= 2  # noqa: E731
        self.assertEqual(len(proxy.written(detached.token, new_session)), 1)
        self.assertEqual(proxy.written(lease.token, new_session), [])
        self.assertEqual(len(proxy.written(lease.token)), 1)  # the extend, on session 1

    def test_async_killed_broker(self):
        async def run():
            client = lockbroker.AsyncClient(self.broker.url, connect_timeout=0.5)
            try:
                lease = await client.acquire(unique("async-killed"), wait_ms=0)
                self.broker.kill()
                self.assertEqual(await asyncio.wait_for(lease.wait_lost(), 3), "disconnected")
                with self.assertRaises(lockbroker.LeaseLost):
                    await lease.release()
                with self.assertRaises(lockbroker.Disconnected):
                    await client.ping()
                self.broker.start()
                await ping_until_up(client)
                async with client.lock(unique("async-after"), wait_ms=0) as again:
                    self.assertTrue(again.held)
            finally:
                await client.close()

        asyncio.run(run())

    def test_async_old_token_is_never_written_on_a_new_session(self):
        proxy = LoggingProxy(self.broker.port)
        self.addCleanup(proxy.close)

        async def run():
            client = lockbroker.AsyncClient(proxy.url, connect_timeout=1)
            try:
                lease = await client.acquire(unique("async-old-token"), ttl_ms=5000, wait_ms=0)
                detached = await client.acquire(unique("async-old-token-detached"),
                                                detach=True, ttl_ms=5000)
                self.assertEqual(await lease.extend(4000), 4000)
                self.assertEqual(len(proxy.written(lease.token)), 1)
                self.broker.kill()
                self.assertEqual(await asyncio.wait_for(lease.wait_lost(), 3), "disconnected")
                self.broker.start()
                await ping_until_up(client)
                self.assertGreaterEqual(len(proxy.accepts), 2)
                for what, call in (("release", lease.release),
                                   ("extend", lambda: lease.extend(1000))):
                    with self.subTest(what=what), self.assertRaises(lockbroker.LeaseLost) as cm:
                        await call()
                    self.assertEqual(cm.exception.reason, "disconnected", what)
                with self.assertRaises(lockbroker.LeaseLost) as cm:
                    async with lease:
                        pass
                self.assertEqual(cm.exception.reason, "disconnected")
                self.assertEqual(await detached.release(), 0)
                await client.ping()
                return lease.token, detached.token
            finally:
                await client.close()

        old, detached = asyncio.run(run())
        new_session = lambda n: n >= 2  # noqa: E731
        self.assertEqual(len(proxy.written(detached, new_session)), 1)
        self.assertEqual(proxy.written(old, new_session), [])
        self.assertEqual(len(proxy.written(old)), 1)

    def test_silent_broker_is_given_up_with_keepalive(self):
        client = lockbroker.Client(self.broker.url, keepalive_ms=500, connect_timeout=0.3)
        self.addCleanup(client.close)
        lease = client.acquire(unique("silent"), wait_ms=0)
        self.broker.kill(signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            self.assertTrue(lease.lost.wait(3))
            self.assertLess(time.monotonic() - t0, 1.5)
            self.assertEqual(lease.lost_reason, "disconnected")
        finally:
            self.broker.kill(signal.SIGCONT)
        self.assertTrue(wait_until(lambda: self._pings(client), timeout=5))

    def test_closing_the_client_loses_its_leases(self):
        client = lockbroker.Client(self.broker.url)
        lease = client.acquire(unique("closed"), wait_ms=0)
        client.close()
        self.assertEqual(lease.lost_reason, "closed")
        with self.assertRaises(lockbroker.Disconnected):
            client.ping()

    def test_unreachable_broker(self):
        client = lockbroker.Client(f"tcp://127.0.0.1:{free_port()}", connect_timeout=0.3)
        with self.assertRaises(lockbroker.Disconnected) as cm:
            client.ping()
        self.assertIsInstance(cm.exception, lockbroker.Unavailable)
        self.assertIn("cannot connect", cm.exception.message)
        client.close()


class BrokerSetUpErrorTests(unittest.TestCase):
    def test_limit_exceeded(self):
        env("LOCKBROKER_BIN")
        broker = PrivateBroker("--max-leases-per-session", "1").start()
        self.addCleanup(broker.stop)
        with lockbroker.Client(broker.url) as c:
            with c.lock(unique("one"), wait_ms=0):
                with self.assertRaises(lockbroker.LimitExceeded) as cm:
                    c.acquire(unique("two"), wait_ms=0)
                self.assertEqual(cm.exception.code, "limit_exceeded")

    def test_unavailable(self):
        env("LOCKBROKER_BIN")
        broker = PrivateBroker(redis=f"redis://127.0.0.1:{free_port()}").start(redis_up=False)
        self.addCleanup(broker.stop)
        with lockbroker.Client(broker.url) as c:
            self.assertEqual(c.ping()["redis"], "down")
            with self.assertRaises(lockbroker.Unavailable) as cm:
                c.acquire(unique("noredis"), wait_ms=0)
            self.assertIs(type(cm.exception), lockbroker.Unavailable)
            self.assertEqual(cm.exception.code, "unavailable")

    def test_shutting_down(self):
        env("LOCKBROKER_BIN")
        broker = PrivateBroker("--shutdown-grace-ms", "3000").start()
        self.addCleanup(broker.stop)
        with lockbroker.Client(broker.url) as c:
            lease = c.acquire(unique("stopping"), wait_ms=0)
            broker.kill(signal.SIGTERM)

            def refused():
                try:
                    c.acquire(unique("late"), wait_ms=0).release()
                    return False
                except lockbroker.ShuttingDown:
                    return True

            self.assertTrue(wait_until(refused, timeout=2))
            lease.release()


if __name__ == "__main__":
    unittest.main()
