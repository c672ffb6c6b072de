"""Every error code of protocol/PROTOCOL.md, sent by a broker over a
connection (no real broker needed): a fake broker (tests.support.FakeBroker)
answers hello as a real one does and then each request with
``{"id": N, "ok": false, "error": {"code": C, "message": M}}``; the caller
must get C's own exception class carrying M unchanged, the request's op
and the lock it is about (in ``lock`` and in its text), from every request
method, the lease's included, for Client and AsyncClient. Also what the client takes from hello (its ``limits.max_line``),
and a broker that ends the session after an error tied to no request (as
it does after ``line_too_long``)."""

import os
import unittest

import lockbroker
from tests.support import FakeBroker, error_answer
from tests.test_wire import CODES, PROTOCOL_MD

TOKEN = "5dfd82e0c99b9794e05ffdf3a0c8a0af"


def documented_codes() -> list[str]:
    """The codes of PROTOCOL.md's error table (test_wire checks that CODES
    is exactly that table); CODES' own when the file is not beside us."""
    if not os.path.exists(PROTOCOL_MD):
        return sorted(CODES)
    with open(PROTOCOL_MD, encoding="utf-8") as f:
        text = f.read()
    table = text[text.index("### Error codes"):text.index("### Ops")]
    return [line.split("|")[1].strip() for line in table.splitlines()
            if line.startswith("| ") and not line.startswith("| code")]


def message_for(code: str, op: str) -> str:
    return f"the fake broker's {code} for {op}: «détail» {{\"quoted\"}}"


class _Fake:
    """The fake broker and what it answers next: ``error`` (code, message),
    or None for success (a grant for acquire, an ok otherwise)."""

    def __init__(self, test: unittest.TestCase):
        self.error = None
        self.broker = FakeBroker(self.answer)
        test.addCleanup(self.broker.close)

    def answer(self, msg):
        rid, op = msg.get("id"), msg.get("op")
        if op == "oversize":  # as a real broker after line_too_long: id null, closing, close
            return [error_answer(None, "line_too_long",
                                 "the line is longer than max_line (65536 bytes)"),
                    {"event": "closing", "reason": "line_too_long"}, None]
        if self.error is not None:
            return [error_answer(rid, *self.error)]
        if op == "acquire":
            return [{"id": rid, "ok": True, "lease": TOKEN, "lock": msg["lock"],
                     "mode": "exclusive", "fence": 1795308363707125, "ttl_ms": 10000,
                     "count": 1}]
        if op == "release":
            return [{"id": rid, "ok": True, "count": 0}]
        return [{"id": rid, "ok": True, "redis": "up"}]


# Each request method of Client, by the op it sends.
SYNC_CALLS = {
    "acquire": lambda c: c.acquire("fake-lock", wait_ms=0),
    "inspect": lambda c: c.inspect("fake-lock"),
    "ping": lambda c: c.ping(),
    "stats": lambda c: c.stats(),
    "leases": lambda c: c.leases(),
    "release": lambda c: c.release_token(TOKEN),
    "extend": lambda c: c.extend_token(TOKEN, 1000),
    "frobnicate": lambda c: c.request("frobnicate", x=1),
}

# The lock each of those is about (its error's ``lock``); the others name
# none (release and extend by a token this client does not hold included).
NAMED = {"acquire": "fake-lock", "inspect": "fake-lock"}

ASYNC_CALLS = {
    "acquire": lambda c: c.acquire("fake-lock", wait_ms=0),
    "inspect": lambda c: c.inspect("fake-lock"),
    "ping": lambda c: c.ping(),
    "release": lambda c: c.release_token(TOKEN),
    "frobnicate": lambda c: c.request("frobnicate", x=1),
}


class FakeBrokerErrorTests(unittest.TestCase):
    def setUp(self):
        self.fake = _Fake(self)
        self.client = lockbroker.Client(self.fake.broker.url, connect_timeout=3)
        self.addCleanup(self.client.close)

    def assert_error(self, cm, code, op, lock=None):
        e = cm.exception
        self.assertIs(type(e), CODES[code], (code, op, e))
        self.assertEqual((e.code, e.message, e.op), (code, message_for(code, op), op))
        # The error names the lock it is about, and so does its text.
        self.assertEqual(e.lock, lock)
        where = f"{op} {lock!r}" if lock is not None else op
        self.assertEqual(str(e), f"{code} ({where}): {message_for(code, op)}")

    def test_every_code_reaches_the_caller_as_its_class(self):
        codes = documented_codes()
        self.assertEqual(set(codes), set(CODES))
        for code in codes:
            for op, call in SYNC_CALLS.items():
                with self.subTest(code=code, op=op):
                    self.fake.error = (code, message_for(code, op))
                    with self.assertRaises(lockbroker.LockbrokerError) as cm:
                        call(self.client)
                    self.assert_error(cm, code, op, NAMED.get(op))
                    # It travelled: the fake answered the request it received last.
                    self.assertEqual(self.fake.broker.ops()[-1], op)
        # None of them ended the session.
        self.assertEqual(len(self.fake.broker.accepts), 1)
        self.assertEqual(self.client.server["session"], "s1")

    def test_lease_calls_raise_the_codes_too(self):
        lease = self.client.acquire("fake-lock", wait_ms=0)
        self.assertEqual(lease.token, TOKEN)
        for code in documented_codes():
            if code == "not_held":
                continue  # a lease the broker no longer has: LeaseLost, below
            for op, call in (("extend", lambda: lease.extend(1000)), ("release", lease.release)):
                with self.subTest(code=code, op=op):
                    self.fake.error = (code, message_for(code, op))
                    with self.assertRaises(lockbroker.LockbrokerError) as cm:
                        call()
                    self.assert_error(cm, code, op, "fake-lock")  # the lease's
                    self.assertTrue(lease.held)  # an error is not a loss
        self.fake.error = ("not_held", message_for("not_held", "release"))
        with self.assertRaises(lockbroker.LeaseLost) as cm:
            lease.release()
        self.assertEqual(cm.exception.reason, "not_held")
        cause = cm.exception.__cause__
        self.assertIs(type(cause), lockbroker.NotHeld)
        self.assertEqual(cause.message, message_for("not_held", "release"))
        self.assertEqual(lease.lost_reason, "not_held")

    def test_unknown_code_is_a_plain_lockbroker_error(self):
        self.fake.error = ("brand_new_code", "a newer broker's")
        with self.assertRaises(lockbroker.LockbrokerError) as cm:
            self.client.ping()
        self.assertIs(type(cm.exception), lockbroker.LockbrokerError)
        self.assertEqual((cm.exception.code, cm.exception.message, cm.exception.op),
                         ("brand_new_code", "a newer broker's", "ping"))

    def test_hello_limits_max_line(self):
        self.fake.broker.limits["max_line"] = 300
        self.assertEqual(self.client.ping(), {"redis": "up"})
        server = self.client.server
        self.assertEqual((server["server"], server["proto"], server["session"]),
                         (FakeBroker.SERVER, 1, "s1"))
        self.assertEqual(server["limits"]["max_line"], 300)
        with self.assertRaises(lockbroker.LineTooLong):
            self.client.request("echo", pad="x" * 300)
        self.client.request("echo", pad="x" * 200)  # under the limit: sent
        self.assertEqual(self.fake.broker.ops(), ["hello", "ping", "echo"])
        self.assertEqual(len(self.fake.broker.accepts), 1)

    def test_error_tied_to_no_request_then_closing(self):
        with self.assertLogs("lockbroker", "WARNING") as logs:
            with self.assertRaises(lockbroker.Disconnected) as cm:
                self.client.request("oversize")
        self.assertIn("line_too_long", "\n".join(logs.output))
        self.assertIn("the broker closed it: line_too_long", cm.exception.message)
        # The next request opens a new session.
        self.assertEqual(self.client.ping(), {"redis": "up"})
        self.assertEqual(self.client.server["session"], "s2")


class AsyncFakeBrokerErrorTests(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        self.fake = _Fake(self)
        self.client = lockbroker.AsyncClient(self.fake.broker.url, connect_timeout=3)

    async def asyncTearDown(self):
        await self.client.close()

    def assert_error(self, cm, code, op, lock=None):
        e = cm.exception
        self.assertIs(type(e), CODES[code], (code, op, e))
        self.assertEqual((e.code, e.message, e.op), (code, message_for(code, op), op))
        # The error names the lock it is about, and so does its text.
        self.assertEqual(e.lock, lock)
        where = f"{op} {lock!r}" if lock is not None else op
        self.assertEqual(str(e), f"{code} ({where}): {message_for(code, op)}")

    async def test_every_code_reaches_the_caller_as_its_class(self):
        for code in documented_codes():
            for op, call in ASYNC_CALLS.items():
                with self.subTest(code=code, op=op):
                    self.fake.error = (code, message_for(code, op))
                    with self.assertRaises(lockbroker.LockbrokerError) as cm:
                        await call(self.client)
                    self.assert_error(cm, code, op, NAMED.get(op))
        self.assertEqual(len(self.fake.broker.accepts), 1)

    async def test_lease_calls_raise_the_codes_too(self):
        self.fake.error = None
        lease = await self.client.acquire("fake-lock", wait_ms=0)
        for code in documented_codes():
            if code == "not_held":
                continue
            with self.subTest(code=code):
                self.fake.error = (code, message_for(code, "extend"))
                with self.assertRaises(lockbroker.LockbrokerError) as cm:
                    await lease.extend(1000)
                self.assert_error(cm, code, "extend", "fake-lock")
                self.assertTrue(lease.held)
        self.fake.error = ("not_held", message_for("not_held", "release"))
        with self.assertRaises(lockbroker.LeaseLost) as cm:
            await lease.release()
        self.assertEqual(cm.exception.reason, "not_held")
        self.assertEqual(cm.exception.__cause__.message, message_for("not_held", "release"))


if __name__ == "__main__":
    unittest.main()
