"""Test helpers: the environment tests/clients/with-broker.sh sets up, a
tiny RESP client for reaching behind the broker's back, and private brokers
that a test may kill and restart.

Tests that need a broker call ``need_broker()`` first: without the
environment (the suite run outside with-broker.sh) they are skipped, and the
unit tests still run.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
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
