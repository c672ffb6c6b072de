"""Unit tests without a broker: URLs, secrets, framing, encoding, the error
table, owners."""

import asyncio
import json
import os
import tempfile
import threading
import unittest
from unittest import mock

import lockbroker
from lockbroker import _wire

# Every code of PROTOCOL.md's error table, and the class it must become.
CODES = {
    "bad_json": lockbroker.BadJson,
    "bad_request": lockbroker.BadRequest,
    "line_too_long": lockbroker.LineTooLong,
    "unknown_op": lockbroker.UnknownOp,
    "invalid_argument": lockbroker.InvalidArgument,
    "unauthorized": lockbroker.Unauthorized,
    "timeout": lockbroker.LockTimeout,
    "cancelled": lockbroker.Cancelled,
    "not_held": lockbroker.NotHeld,
    "conflict": lockbroker.Conflict,
    "upgrade_unsupported": lockbroker.UpgradeUnsupported,
    "limit_exceeded": lockbroker.LimitExceeded,
    "unavailable": lockbroker.Unavailable,
    "shutting_down": lockbroker.ShuttingDown,
    "internal": lockbroker.InternalError,
}

PROTOCOL_MD = os.path.join(os.path.dirname(__file__), "..", "..", "..", "protocol", "PROTOCOL.md")


class TestErrors(unittest.TestCase):
    def test_every_code_has_its_class(self):
        for code, cls in CODES.items():
            e = lockbroker.error_for(code, "the broker's words", "acquire")
            self.assertIs(type(e), cls, code)
            self.assertIsInstance(e, lockbroker.LockbrokerError)
            self.assertEqual(e.code, code)
            self.assertEqual(e.message, "the broker's words")
            self.assertEqual(e.op, "acquire")
            self.assertIn("the broker's words", str(e))

    def test_table_matches_protocol_md(self):
        if not os.path.exists(PROTOCOL_MD):
            self.skipTest("protocol/PROTOCOL.md is not beside this checkout")
        with open(PROTOCOL_MD, encoding="utf-8") as f:
            text = f.read()
        table = text[text.index("### Error codes"):text.index("### Ops")]
        documented = {line.split("|")[1].strip() for line in table.splitlines()
                      if line.startswith("| ") and not line.startswith("| code")}
        self.assertEqual(documented, set(CODES))

    def test_unknown_code_stays_a_lockbroker_error(self):
        e = lockbroker.error_for("brand_new", "later broker")
        self.assertIs(type(e), lockbroker.LockbrokerError)
        self.assertEqual(e.code, "brand_new")

    def test_client_side_classes(self):
        self.assertTrue(issubclass(lockbroker.Disconnected, lockbroker.Unavailable))
        self.assertTrue(issubclass(lockbroker.LeaseLost, lockbroker.NotHeld))
        self.assertEqual(lockbroker.Disconnected("x").code, "disconnected")


class TestUrls(unittest.TestCase):
    def test_parse(self):
        a = _wire.parse_url("tcp://127.0.0.1:7380")
        self.assertEqual((a.kind, a.host, a.port), ("tcp", "127.0.0.1", 7380))
        a = _wire.parse_url("tcp://[::1]:9")
        self.assertEqual((a.kind, a.host, a.port), ("tcp", "::1", 9))
        self.assertEqual(str(a), "tcp://[::1]:9")
        a = _wire.parse_url("unix:///run/lockbroker/lockbroker.sock")
        self.assertEqual((a.kind, a.path), ("unix", "/run/lockbroker/lockbroker.sock"))

    def test_refused(self):
        for bad in ("", "http://x:1", "tcp://x", "tcp://x:0", "tcp://x:70000", "tcp://x:1/p",
                    "tcp://:1", "unix://rel/path", "unix:///dir/", "tcp://[::1]9"):
            with self.subTest(bad=bad), self.assertRaises(lockbroker.InvalidArgument):
                _wire.parse_url(bad)

    def test_default_is_lockctls(self):
        with mock.patch.dict(os.environ, {"LOCKBROKER_URL": "tcp://10.0.0.1:1"}):
            self.assertEqual(_wire.default_url(), "tcp://10.0.0.1:1")
        env = {k: v for k, v in os.environ.items() if k != "LOCKBROKER_URL"}
        with mock.patch.dict(os.environ, env, clear=True):
            with mock.patch("os.path.exists", return_value=False):
                self.assertEqual(_wire.default_url(), "tcp://127.0.0.1:7380")
            with mock.patch("os.path.exists", return_value=True):
                self.assertEqual(_wire.default_url(), "unix:///run/lockbroker/lockbroker.sock")


class TestSecret(unittest.TestCase):
    def test_one_trailing_newline_dropped(self):
        for raw, want in ((b"s3cret\n", "s3cret"), (b"s3cret\r\n", "s3cret"),
                          (b"s3cret", "s3cret"), (b"s3cret\n\n", "s3cret\n")):
            with tempfile.NamedTemporaryFile() as f:
                f.write(raw)
                f.flush()
                self.assertEqual(_wire.read_secret(f.name), want)


class TestFraming(unittest.TestCase):
    def test_split_at_every_byte(self):
        msgs = [{"id": 1, "ok": True}, {"event": "lost", "lease": "ab", "reason": "gone"},
                {"id": "x", "ok": False, "error": {"code": "timeout", "message": "é"}}]
        stream = b"".join(json.dumps(m, ensure_ascii=False).encode() + b"\n" for m in msgs)
        stream = b"\n  \n" + stream.replace(b"\n", b"\r\n", 1)
        for cut in range(len(stream) + 1):
            buf = _wire.LineBuffer()
            got = buf.feed(stream[:cut]) + buf.feed(stream[cut:])
            self.assertEqual(got, msgs, cut)

    def test_garbage_is_an_error(self):
        with self.assertRaises(ValueError):
            _wire.LineBuffer().feed(b"{not json\n")
        with self.assertRaises(ValueError):
            _wire.LineBuffer().feed(b'{"id":1}{"id":2}\n')  # extra data after the object
        with self.assertRaises(ValueError):
            _wire.LineBuffer().feed(b'{"id":1,"x":"\xff"}\n')  # not UTF-8

    def test_long_line_in_many_reads(self):
        msg = {"id": 1, "ok": True, "leases": [{"lock": "l%d" % i} for i in range(3000)]}
        line = json.dumps(msg).encode() + b"\n"
        buf = _wire.LineBuffer()
        got = []
        for i in range(0, len(line), 7):
            got += buf.feed(line[i:i + 7])
        self.assertEqual(got, [msg])
        self.assertEqual(buf.feed(b' {"id": 2}\r\n'), [{"id": 2}])  # whitespace around: json.loads' rules
        with mock.patch.object(_wire, "MAX_INCOMING", 100):
            buf = _wire.LineBuffer()
            self.assertEqual(buf.feed(b"{" + b" " * 60), [])
            with self.assertRaises(ValueError):
                buf.feed(b" " * 60)
            # sticky: the rest of the stream is never parsed
            with self.assertRaises(ValueError):
                buf.feed(b'"id": 1}\n{"id": 2}\n')
            # too long even when its end comes in the same read
            buf = _wire.LineBuffer()
            self.assertEqual(buf.feed(b"{" + b" " * 60), [])
            with self.assertRaises(ValueError):
                buf.feed(b" " * 60 + b'"id": 1}\n')

    def test_encode(self):
        line = _wire.encode({"id": 1, "op": "acquire", "lock": "ü"}, 100)
        self.assertTrue(line.endswith(b"\n") and line.count(b"\n") == 1)
        self.assertEqual(json.loads(line), {"id": 1, "op": "acquire", "lock": "ü"})
        with self.assertRaises(lockbroker.LineTooLong):
            _wire.encode({"id": 1, "op": "acquire", "lock": "x" * 200}, 100)
        with self.assertRaises(lockbroker.InvalidArgument):
            _wire.encode({"id": 1, "op": "acquire", "lock": "\ud800"}, 100)


class TestOwners(unittest.TestCase):
    def test_thread_and_task_owners_differ(self):
        mine = lockbroker.current_owner()
        self.assertEqual(mine, lockbroker.current_owner())
        other = []
        t = threading.Thread(target=lambda: other.append(lockbroker.current_owner()))
        t.start()
        t.join()

        async def tasks():
            async def one():
                return lockbroker.current_owner(), lockbroker.current_owner()
            return await asyncio.gather(one(), one())

        (a1, a2), (b1, b2) = asyncio.run(tasks())
        self.assertEqual(a1, a2)
        self.assertEqual(b1, b2)
        self.assertEqual(len({mine, other[0], a1, b1}), 4)
        for owner in (mine, other[0], a1, b1):
            self.assertLessEqual(len(owner.encode()), 128)


class TestBackoff(unittest.TestCase):
    def test_doubles_to_cap(self):
        from lockbroker._core import Backoff
        b = Backoff(0.05, 0.4)
        caps = []
        for _ in range(6):
            d = b.failed()
            caps.append(b.delay)
            self.assertTrue(b.delay / 2 <= d <= b.delay)
        self.assertEqual(caps, [0.05, 0.1, 0.2, 0.4, 0.4, 0.4])
        b.reset()
        self.assertLessEqual(b.failed(), 0.05)

if __name__ == "__main__":
    unittest.main()
