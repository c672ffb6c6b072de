#!/usr/bin/env python3
"""counter.py: a counter in Redis, incremented under lock "counter", with
fencing checked on every write.

Each of --iterations rounds takes lock "counter", reads "counter:value" and
"fence:last", sleeps a little (so that a missing lock would lose updates),
and writes value + 1 together with the lease's fence. A fence not greater
than the last one stored is a fencing violation: some earlier holder wrote
with a newer lease, so this one is stale. Run several copies at once: the
counter then grows by exactly the sum of their iterations.

    PYTHONPATH=clients/python python3 examples/python/counter.py --iterations 50

Options: --url (default $LOCKBROKER_URL, as lockctl), --redis HOST:PORT
(default $LOCKBROKER_REDIS_HOST:$LOCKBROKER_REDIS_PORT, else
127.0.0.1:6379). Exit status: 0 success, 1 fence violation, 2 any other
failure (broker error, lost lease, Redis error).
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import sys
import time

try:
    import lockbroker
except ImportError:  # run from a checkout without PYTHONPATH
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                    "..", "..", "clients", "python"))
    import lockbroker


class Redis:
    """Just enough RESP2 to GET and SET a few keys."""

    def __init__(self, host: str, port: int):
        self.sock = socket.create_connection((host, port), timeout=10)
        self.rf = self.sock.makefile("rb")

    def command(self, *args):
        parts = [b"*%d\r\n" % len(args)]
        for a in args:
            b = str(a).encode()
            parts.append(b"$%d\r\n%s\r\n" % (len(b), b))
        self.sock.sendall(b"".join(parts))
        return self._reply()

    def _reply(self):
        line = self.rf.readline()
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.rf.read(n + 2)[:-2].decode()
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._reply() for _ in range(n)]
        raise RuntimeError(f"redis: {line.decode(errors='replace').strip()}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--url", default=None, help="broker URL (default: as lockctl)")
    default_redis = "%s:%s" % (os.environ.get("LOCKBROKER_REDIS_HOST", "127.0.0.1"),
                               os.environ.get("LOCKBROKER_REDIS_PORT", "6379"))
    ap.add_argument("--redis", default=default_redis, help="HOST:PORT of the counter's Redis")
    args = ap.parse_args()
    host, _, port = args.redis.rpartition(":")

    redis = Redis(host, int(port))
    with lockbroker.Client(args.url, label="counter.py") as client:
        for _ in range(args.iterations):
            with client.lock("counter", ttl_ms=10000) as lease:
                value, last = redis.command("MGET", "counter:value", "fence:last")
                fence = lease.fence
                if last is not None and fence <= int(last):
                    print(f"counter.py: fence violation: {fence} after {last}", file=sys.stderr)
                    return 1
                time.sleep(random.uniform(0.001, 0.005))
                lease.check()  # never write under a lease that was lost meanwhile
                redis.command("MSET", "counter:value", int(value or 0) + 1, "fence:last", fence)
    print(f"counter.py: {args.iterations} increments, counter:value is "
          f"{redis.command('GET', 'counter:value')}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (lockbroker.LockbrokerError, OSError, RuntimeError) as e:
        print(f"counter.py: {e}", file=sys.stderr)
        sys.exit(2)
