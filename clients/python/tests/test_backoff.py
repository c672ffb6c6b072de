"""Reconnect backoff, as the clients do it (no broker needed): against a
listener of the test's own that closes every connection as soon as it has
accepted it, requests made in a loop for a while must space their connection
attempts as the documented policy says (README "Reconnects": a backoff from
50 ms doubling to 2 s; ``_core.Backoff``: each delay drawn from the upper
half of its step; the delay is the client's, so it carries over from one
request to the next until an attempt succeeds).

Only lower bounds on time are asserted: attempt k (0-based) cannot start
before ``earliest(k)`` seconds after the loop began, however loaded the
machine (each attempt fails only after the listener accepted and closed it,
and the next one waits its delay after that failure)."""

import asyncio
import time
import unittest

import lockbroker
from tests.support import FakeBroker, wait_until

FIRST, CAP = 0.05, 2.0  # the documented backoff: 50 ms doubling to 2 s
LOOP_S = 1.5  # how long the requests go on
CONNECT_TIMEOUT = 0.3  # small: some requests fail without an attempt of their own


def earliest(k: int) -> float:
    """The earliest start of attempt k (0-based), in seconds after the first:
    the sum of the lower halves of the delays before it."""
    return sum(min(CAP, FIRST * 2 ** j) / 2 for j in range(k))


class BackoffTests(unittest.TestCase):
    def setUp(self):
        self.listener = FakeBroker(slam=True)
        self.addCleanup(self.listener.close)

    def check_attempts(self, t0: float, elapsed: float, errors: list) -> None:
        self.assertTrue(errors)
        for e in errors:  # every request failed as documented
            self.assertIs(type(e), lockbroker.Disconnected, e)
        # The client retries: a few attempts in the time, whatever the load.
        self.assertTrue(wait_until(lambda: len(self.listener.accepts) >= 3, timeout=2),
                        f"only {len(self.listener.accepts)} connection attempts")
        starts = [t - t0 for t in self.listener.accepts]
        for k, t in enumerate(starts):
            self.assertGreaterEqual(
                t, earliest(k),
                f"attempt {k + 1} came {t:.3f} s after the first request, before the "
                f"backoff allows ({earliest(k):.3f} s); {len(starts)} attempts, the first at "
                + ", ".join(f"{s:.3f}" for s in starts[:10]))
        # Hence a bounded number of attempts: 6 in 1.5 s (hundreds without backoff).
        allowed = max(k + 1 for k in range(64) if earliest(k) <= elapsed)
        self.assertLessEqual(len(starts), allowed,
                             f"{len(starts)} attempts in {elapsed:.3f} s")

    def test_client_backs_off_between_attempts(self):
        client = lockbroker.Client(self.listener.url, connect_timeout=CONNECT_TIMEOUT)
        self.addCleanup(client.close)
        errors = []
        t0 = time.monotonic()
        while time.monotonic() - t0 < LOOP_S:
            try:
                client.ping()
                self.fail("a listener that closes every connection answered ping")
            except lockbroker.LockbrokerError as e:
                errors.append(e)
            time.sleep(0.005)
        elapsed = time.monotonic() - t0
        self.check_attempts(t0, elapsed, errors)

    def test_async_client_backs_off_between_attempts(self):
        errors = []

        async def run():
            client = lockbroker.AsyncClient(self.listener.url, connect_timeout=CONNECT_TIMEOUT)
            try:
                t0 = time.monotonic()
                while time.monotonic() - t0 < LOOP_S:
                    try:
                        await client.ping()
                        self.fail("a listener that closes every connection answered ping")
                    except lockbroker.LockbrokerError as e:
                        errors.append(e)
                    await asyncio.sleep(0.005)
                return t0, time.monotonic() - t0
            finally:
                await client.close()

        t0, elapsed = asyncio.run(run())
        self.check_attempts(t0, elapsed, errors)


if __name__ == "__main__":
    unittest.main()
