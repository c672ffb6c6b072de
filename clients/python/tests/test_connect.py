"""Opening a session (no real broker needed). Before the client's first
session, a connect the system refuses (nothing listens on the port, the
Unix socket does not exist) fails the request at once with Disconnected,
as the Go and C clients do, instead of trying again until
``connect_timeout`` (it took the whole 5 s default); only a connect that
hangs waits for ``connect_timeout``. Once the client has had a session, a
refused connect is a broker restarting, and a request tries again (with
backoff) within ``connect_timeout``.

A connect that hangs: a listener whose backlog is full and that never
accepts (Linux drops the SYN; the test is skipped where a probe's connect
does not hang). A broker restarting: a fake broker closed, then another
brought back on its port."""

import asyncio
import os
import socket
import tempfile
import threading
import time
import unittest

import lockbroker
from tests.support import FakeBroker, free_port, wait_until

FAST = 1.0  # seconds: "at once" (it takes about a millisecond), on a loaded machine too


def answer_ok(msg):
    return [{"id": msg.get("id"), "ok": True, "redis": "up"}]


def refused_urls(test: unittest.TestCase) -> list:
    """(url, the OSError class the connect fails with)."""
    tmp = tempfile.TemporaryDirectory()
    test.addCleanup(tmp.cleanup)
    return [(f"tcp://127.0.0.1:{free_port()}", ConnectionRefusedError),
            (f"unix://{os.path.join(tmp.name, 'nobody.sock')}", FileNotFoundError)]


def hanging_port(test: unittest.TestCase) -> int:
    """A loopback port whose connects hang; skips the test where they do not."""
    listener = socket.socket()
    test.addCleanup(listener.close)
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    for _ in range(3):  # fill the backlog; never accepted
        s = socket.socket()
        test.addCleanup(s.close)
        s.setblocking(False)
        try:
            s.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
    probe = socket.socket()
    probe.settimeout(0.2)
    try:
        probe.connect(("127.0.0.1", port))
    except TimeoutError:
        return port
    except OSError:
        pass
    finally:
        probe.close()
    raise unittest.SkipTest("a connect to a full backlog does not hang here")


class ConnectTests(unittest.TestCase):
    def test_refused_fails_at_once(self):
        for url, cause in refused_urls(self):
            with self.subTest(url=url):
                client = lockbroker.Client(url)  # connect_timeout: the default, 5 s
                self.addCleanup(client.close)
                t0 = time.monotonic()
                with self.assertRaises(lockbroker.Disconnected) as cm:
                    client.ping()
                self.assertLess(time.monotonic() - t0, FAST)
                self.assertIn(f"cannot connect to {url}", cm.exception.message)
                self.assertIsInstance(cm.exception.__cause__, cause)

    def test_hanging_connect_waits_for_connect_timeout(self):
        url = f"tcp://127.0.0.1:{hanging_port(self)}"
        client = lockbroker.Client(url, connect_timeout=0.5)
        self.addCleanup(client.close)
        t0 = time.monotonic()
        with self.assertRaises(lockbroker.Disconnected) as cm:
            client.ping()
        elapsed = time.monotonic() - t0
        self.assertGreaterEqual(elapsed, 0.45)
        self.assertLess(elapsed, 0.5 + FAST)
        self.assertIn("timed out", cm.exception.message)
        self.assertIsInstance(cm.exception.__cause__, TimeoutError)

    def test_refused_after_a_session_is_tried_again(self):
        fake = FakeBroker(answer_ok)
        port = fake.port
        client = lockbroker.Client(fake.url, connect_timeout=5)
        self.addCleanup(client.close)
        self.assertEqual(client.ping(), {"redis": "up"})
        fake.close()  # the broker stops: connects to its port are refused
        self.assertTrue(wait_until(lambda: client.server is None))
        back = []
        restart = threading.Timer(0.3, lambda: back.append(FakeBroker(answer_ok, port=port)))
        restart.start()
        try:
            t0 = time.monotonic()
            self.assertEqual(client.ping(), {"redis": "up"})  # refused a while, then back
            self.assertGreaterEqual(time.monotonic() - t0, 0.25)
        finally:
            restart.join()
            for b in back:
                b.close()
        self.assertEqual(len(back[0].accepts), 1)


class AsyncConnectTests(unittest.IsolatedAsyncioTestCase):
    async def test_refused_fails_at_once(self):
        for url, cause in refused_urls(self):
            with self.subTest(url=url):
                client = lockbroker.AsyncClient(url)
                try:
                    t0 = time.monotonic()
                    with self.assertRaises(lockbroker.Disconnected) as cm:
                        await client.ping()
                    self.assertLess(time.monotonic() - t0, FAST)
                    self.assertIn(f"cannot connect to {url}", cm.exception.message)
                    self.assertIsInstance(cm.exception.__cause__, cause)
                finally:
                    await client.close()

    async def test_hanging_connect_waits_for_connect_timeout(self):
        port = await asyncio.to_thread(hanging_port, self)  # its probe blocks
        url = f"tcp://127.0.0.1:{port}"
        client = lockbroker.AsyncClient(url, connect_timeout=0.5)
        try:
            t0 = time.monotonic()
            with self.assertRaises(lockbroker.Disconnected) as cm:
                await client.ping()
            elapsed = time.monotonic() - t0
            self.assertGreaterEqual(elapsed, 0.45)
            self.assertLess(elapsed, 0.5 + FAST)
            self.assertIn("timed out", cm.exception.message)
            self.assertIsInstance(cm.exception.__cause__, TimeoutError)
        finally:
            await client.close()

    async def test_refused_after_a_session_is_tried_again(self):
        fake = FakeBroker(answer_ok)
        port = fake.port
        client = lockbroker.AsyncClient(fake.url, connect_timeout=5)
        back = []
        restart = threading.Timer(0.3, lambda: back.append(FakeBroker(answer_ok, port=port)))
        try:
            self.assertEqual(await client.ping(), {"redis": "up"})
            fake.close()
            for _ in range(300):
                if client.server is None:
                    break
                await asyncio.sleep(0.01)
            self.assertIsNone(client.server)
            restart.start()
            t0 = time.monotonic()
            self.assertEqual(await client.ping(), {"redis": "up"})
            self.assertGreaterEqual(time.monotonic() - t0, 0.25)
        finally:
            await client.close()
            if restart.ident is not None:  # started
                restart.join()
            for b in back:
                b.close()
        self.assertEqual(len(back[0].accepts), 1)


if __name__ == "__main__":
    unittest.main()
