"""Test helpers: the environment tests/clients/with-broker.sh sets up, a
tiny RESP client for reaching behind the broker's back, and private brokers
that a test may kill and restart.

``FakeBroker`` is a pretend broker for what a real one will not do on
demand (answer any error code, close every connection at once);
``LoggingProxy`` sits in front of a real one and records every line a
client writes.

Tests that need a broker call ``need_broker()`` first: without the
environment (the suite run outside with-broker.sh) they are skipped, and the
unit tests still run.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
import unittest
import uuid


def env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise unittest.SkipTest(f"{name} is not set (run under tests/clients/with-broker.sh)")
    return value


def need_broker() -> str:
    """LOCKBROKER_URL, or skips the test."""
    return env("LOCKBROKER_URL")


def unique(what: str) -> str:
    """A lock name no other test uses."""
    return f"py-{what}-{uuid.uuid4().hex[:8]}"


def wait_until(cond, timeout: float = 3.0, step: float = 0.01) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(step)
    return bool(cond())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Resp:
    """A minimal Redis client (RESP2 over one socket), enough for tests."""

    def __init__(self, host: str | None = None, port: int | None = None):
        host = host or env("LOCKBROKER_REDIS_HOST")
        port = port or int(env("LOCKBROKER_REDIS_PORT"))
        self.sock = socket.create_connection((host, port), timeout=5)
        self.rf = self.sock.makefile("rb")

    def command(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            b = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(b), b))
        self.sock.sendall(b"".join(out))
        return self._reply()

    def _reply(self):
        line = self.rf.readline()
        if not line:
            raise ConnectionError("redis closed the connection")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.rf.read(n + 2)[:-2]
            return data
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._reply() for _ in range(n)]
        raise RuntimeError(f"bad RESP reply {line!r}")

    def delete_lock(self, name: str) -> int:
        """Deletes lock NAME's keys ("lb:{NAME}" and "lb:{NAME}:*")."""
        keys = [f"lb:{{{name}}}".encode()] + self.command("KEYS", f"lb:{{{name}}}:*")
        return self.command("DEL", *keys)

    def close(self) -> None:
        self.rf.close()
        self.sock.close()


class PrivateBroker:
    """A lockbrokerd of the test's own on a free port (LOCKBROKER_BIN),
    against the suite's Redis unless told otherwise."""

    def __init__(self, *extra: str, redis: str | None = None):
        self.bin = env("LOCKBROKER_BIN")
        self.redis = redis or "redis://%s:%s" % (env("LOCKBROKER_REDIS_HOST"),
                                                 env("LOCKBROKER_REDIS_PORT"))
        self.port = free_port()
        self.url = f"tcp://127.0.0.1:{self.port}"
        self.extra = extra
        self.proc: subprocess.Popen | None = None
        self.log = os.path.join(os.environ.get("LOCKBROKER_TMP", "/tmp"),
                                f"py-broker-{self.port}.log")

    def start(self, redis_up: bool = True) -> "PrivateBroker":
        """Starts it; returns once it answers ping (with Redis up, unless
        ``redis_up`` is False)."""
        with open(self.log, "ab") as logf:
            self.proc = subprocess.Popen(
                [self.bin, "--redis", self.redis, "--listen", self.url, "--log-level", "warn",
                 *self.extra], stdout=subprocess.DEVNULL, stderr=logf)
        want = b'"redis":"up"' if redis_up else b'"ok":true'
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b'{"id":1,"op":"ping"}\n')
                    if want in s.recv(4096):
                        return self
            except OSError:
                pass
            time.sleep(0.02)
        raise RuntimeError(f"private lockbrokerd did not start (see {self.log})")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            if sig == signal.SIGKILL:
                self.proc.wait(5)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


# ---- brokers and proxies of the tests' own, in this process ----------------


class _Server:
    """A listening loopback socket and its acceptor thread; ``serve(n,
    conn)`` handles accepted connection number n (1, 2, ...) on a thread of
    its own. ``accepts`` holds each accept's time.monotonic(), taken before
    the connection is handed on (so before it can be closed). ``close()``
    stops everything and closes every socket it made. ``port`` (default: a
    free one) lets a test bring a server back on the port of one it closed."""

    def __init__(self, port: int = 0) -> None:
        self.accepts: list[float] = []
        self._mu = threading.Lock()
        self._socks: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._stopping = False
        self._listener = socket.socket()
        # (on every listener: its connections in TIME_WAIT would hold the
        # port of a closed server against a new one unless both set it)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", port))
        self._listener.listen(64)
        self._listener.settimeout(0.05)  # polls _stopping
        self.port = self._listener.getsockname()[1]
        self.url = f"tcp://127.0.0.1:{self.port}"
        self._acceptor = threading.Thread(target=self._accept_loop, daemon=True,
                                          name=f"{type(self).__name__}-accept")
        self._acceptor.start()

    def _accept_loop(self) -> None:
        while not self._stopping:
            try:
                conn, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with self._mu:
                self.accepts.append(time.monotonic())
                n = len(self.accepts)
                if self._stopping:
                    conn.close()
                    return
            self.accepted(n, conn)

    def accepted(self, n: int, conn: socket.socket) -> None:
        """Takes connection n just accepted; by default serves it on a thread."""
        self._track(conn)
        self._spawn(self.serve, n, conn)

    def _spawn(self, fn, *args) -> None:
        t = threading.Thread(target=fn, args=args, daemon=True,
                             name=f"{type(self).__name__}-conn")
        with self._mu:
            self._threads.append(t)
        t.start()

    def _track(self, sock: socket.socket) -> None:
        with self._mu:
            self._socks.append(sock)

    def serve(self, n: int, conn: socket.socket) -> None:
        raise NotImplementedError

    @staticmethod
    def _cut(*socks: socket.socket) -> None:
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        self._stopping = True
        self._acceptor.join(5)
        self._listener.close()
        joined: set = set()
        while True:  # a connection's thread may still start another
            with self._mu:
                socks = list(self._socks)
                threads = [t for t in self._threads if t not in joined]
            self._cut(*socks)
            if not threads:
                break
            for t in threads:
                t.join(5)
                joined.add(t)
        for s in socks:
            s.close()


HELLO_LIMITS = {"max_line": 65536, "ttl_ms_min": 100, "ttl_ms_max": 86400000,
                "max_leases_per_session": 10000, "max_waiters_per_session": 1000,
                "max_inflight": 1024, "keepalive_ms_min": 500, "keepalive_ms_max": 600000}


def error_answer(rid, code: str, message: str) -> dict:
    return {"id": rid, "ok": False, "error": {"code": code, "message": message}}


class FakeBroker(_Server):
    """A pretend lockbrokerd on a free loopback port.

    Each connection's request lines are kept in ``lines`` as (connection
    number, decoded message). ``hello`` is answered as a real broker does
    (``server``, ``proto``, ``session``, ``broker``, ``limits``, the latter
    updated from ``limits``); every other request with what ``answer(msg)``
    returns: a list of messages to write (dicts, or bytes written as they
    are; a last item None closes the connection after them), or None to
    close it at once. With ``slam=True`` every
    connection is closed as soon as it is accepted, before reading anything.
    ``port``: as for ``_Server``.
    """

    SERVER = "lockbroker/0.0.0-fake"

    def __init__(self, answer=None, *, slam: bool = False, limits: dict | None = None,
                 port: int = 0):
        self.answer = answer
        self.slam = slam
        self.limits = dict(HELLO_LIMITS, **(limits or {}))
        self.lines: list[tuple[int, dict]] = []
        super().__init__(port)

    def accepted(self, n: int, conn: socket.socket) -> None:
        if self.slam:
            conn.close()  # unread data: the client may see a reset, not an EOF
        else:
            super().accepted(n, conn)

    def serve(self, n: int, conn: socket.socket) -> None:
        rf = conn.makefile("rb")
        try:
            for raw in rf:
                if not raw.strip():
                    continue
                msg = json.loads(raw)
                with self._mu:
                    self.lines.append((n, msg))
                if msg.get("op") == "hello":
                    out = [{"id": msg.get("id"), "ok": True, "server": self.SERVER, "proto": 1,
                            "session": f"s{n}", "broker": "fa4eb40c3e5f0001",
                            "limits": self.limits}]
                else:
                    out = self.answer(msg) if self.answer is not None else None
                if out is None:
                    break
                last = out[-1] is None if out else False
                conn.sendall(b"".join(m if isinstance(m, bytes) else
                                      json.dumps(m, ensure_ascii=False).encode() + b"\n"
                                      for m in out if m is not None))
                if last:
                    break
        except (OSError, ValueError):
            pass
        finally:
            rf.close()
            self._cut(conn)

    def ops(self, conn: int | None = None) -> list:
        """The ops received (on connection ``conn`` only, if given), in order."""
        with self._mu:
            return [m.get("op") for n, m in self.lines if conn is None or n == conn]


class LoggingProxy(_Server):
    """A TCP proxy on a free loopback port in front of 127.0.0.1:``upstream``
    that records every line a client writes through it: ``lines`` holds
    (connection number, raw line without its newline). A line is recorded
    before it is passed on, so once the client has the answer to a request,
    every line it wrote before that request on that connection is recorded.
    A connection whose upstream refuses it is closed at once; when either
    side ends, both are cut."""

    def __init__(self, upstream: int):
        self.upstream = upstream
        self.lines: list[tuple[int, bytes]] = []
        super().__init__()

    def serve(self, n: int, conn: socket.socket) -> None:
        try:
            up = socket.create_connection(("127.0.0.1", self.upstream), timeout=2)
        except OSError:
            self._cut(conn)
            return
        up.settimeout(None)
        self._track(up)
        self._spawn(self._pump, up, conn, None)
        self._pump(conn, up, n)

    def _pump(self, src: socket.socket, dst: socket.socket, n: int | None) -> None:
        buf = b""
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if n is not None:
                    buf += data
                    *done, buf = buf.split(b"\n")
                    with self._mu:
                        self.lines.extend((n, line) for line in done)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            self._cut(src, dst)

    def written(self, what: str | bytes, conn=None) -> list[bytes]:
        """The recorded lines holding ``what`` (on connections for which
        ``conn(n)`` is true, if given)."""
        needle = what.encode() if isinstance(what, str) else what
        with self._mu:
            return [line for n, line in self.lines
                    if needle in line and (conn is None or conn(n))]
