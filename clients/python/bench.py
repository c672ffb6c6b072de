#!/usr/bin/env python3
"""bench.py: uncontended acquire+release cycles/s, this client against a raw
socket loop, from 1 and from 16 threads.

Each thread takes and releases a lock of its own (``wait_ms`` 0, so nothing
ever waits) as fast as it can for --seconds; a run's figure is the cycles
of all threads over the elapsed time. Variants, run in turn within each
round so that they share the machine's conditions:

- raw: one socket per thread, blocking send / readline / ``json.loads``,
  no library: the floor of Python's cost;
- client: one :class:`lockbroker.Client` shared by every thread (one
  connection, one reader thread), ``with client.lock(...)``;
- client/thread: one ``Client`` per thread;
- redis-py: redis-py's ``Lock`` (Debian's python3-redis) straight on the
  broker's Redis (``$LOCKBROKER_REDIS_HOST``/``_PORT``), one
  ``redis.Redis`` shared by every thread, ``acquire(blocking=False)`` +
  ``release()``: the peer a Python user compares with (only when redis-py
  is installed).

Prints each run, then the median of --runs per variant: cycles/s, and the
CPU time of this Python process per cycle (all its threads; less sensitive
than cycles/s to what else the machine runs). Run it under the
test harness, against the release build:

    make build/lockbrokerd
    LB_BROKER_BIN=build/lockbrokerd sh tests/clients/with-broker.sh \\
        python3 clients/python/bench.py
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lockbroker  # noqa: E402
from lockbroker._wire import parse_url  # noqa: E402


def raw_connect(url: str) -> socket.socket:
    a = parse_url(url)
    if a.kind == "tcp":
        s = socket.create_connection((a.host, a.port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    else:
        s = socket.socket(socket.AF_UNIX)
        s.connect(a.path)
    return s


def raw_worker(url, name, stop, counts, i):
    s = raw_connect(url)
    rf = s.makefile("rb")
    acquire = json.dumps({"id": 1, "op": "acquire", "lock": name, "wait_ms": 0}).encode() + b"\n"
    n = 0
    while not stop.is_set():
        s.sendall(acquire)
        token = json.loads(rf.readline())["lease"]
        s.sendall(b'{"id":2,"op":"release","lease":"%s"}\n' % token.encode())
        if json.loads(rf.readline())["count"] != 0:
            raise RuntimeError("release did not free the lock")
        n += 1
    counts[i] = n
    rf.close()
    s.close()


def client_worker(client, name, stop, counts, i):
    n = 0
    while not stop.is_set():
        with client.lock(name, wait_ms=0):
            pass
        n += 1
    counts[i] = n


def redis_py_worker(r, name, stop, counts, i):
    n = 0
    lock = r.lock(name, timeout=30)
    while not stop.is_set():
        if not lock.acquire(blocking=False):
            raise RuntimeError("redis-py: an uncontended lock was busy")
        lock.release()
        n += 1
    counts[i] = n


def run(variant: str, url: str, threads: int, seconds: float, tag: str) -> tuple:
    """One run; returns (cycles/s, CPU microseconds per cycle)."""
    stop = threading.Event()
    counts = [0] * threads
    clients = []
    if variant == "client":
        clients = [lockbroker.Client(url).connect()]
    elif variant == "client/thread":
        clients = [lockbroker.Client(url).connect() for _ in range(threads)]
    workers = []
    for i in range(threads):
        name = f"bench-{tag}-{i}"
        if variant == "raw":
            args = (raw_worker, (url, name, stop, counts, i))
        elif variant == "redis-py":
            if not clients:
                import redis  # only this variant needs it

                clients = [redis.Redis(host=os.environ["LOCKBROKER_REDIS_HOST"],
                                       port=int(os.environ["LOCKBROKER_REDIS_PORT"]))]
            args = (redis_py_worker, (clients[0], name, stop, counts, i))
        else:
            args = (client_worker, (clients[i % len(clients)], name, stop, counts, i))
        workers.append(threading.Thread(target=args[0], args=args[1]))
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    for w in workers:
        w.start()
    time.sleep(seconds)
    stop.set()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    for c in clients:
        c.close()
    total = max(1, sum(counts))
    return total / elapsed, cpu * 1e6 / total


def main() -> int:
    ap = argparse.ArgumentParser(description="acquire+release cycles/s: client vs raw socket")
    ap.add_argument("--url", default=None, help="broker URL (default: $LOCKBROKER_URL, as lockctl)")
    ap.add_argument("--seconds", type=float, default=2.0, help="length of one run")
    ap.add_argument("--runs", type=int, default=5, help="runs per variant and thread count")
    ap.add_argument("--threads", default="1,16", help="comma-separated thread counts")
    args = ap.parse_args()
    url = args.url or lockbroker.default_url()
    variants = ("raw", "client", "client/thread")
    try:
        import redis  # noqa: F401
        if os.environ.get("LOCKBROKER_REDIS_PORT"):
            variants += ("redis-py",)
    except ImportError:
        pass
    counts = [int(t) for t in args.threads.split(",")]
    results = {(v, t): [] for v in variants for t in counts}
    for r in range(args.runs):
        for t in counts:
            for v in variants:
                cps, cpu = run(v, url, t, args.seconds, f"{r}-{t}-{v.replace('/', '')}")
                results[(v, t)].append((cps, cpu))
                print(f"run {r + 1}: {v:14s} {t:2d} threads {cps:9.0f} cycles/s "
                      f"{cpu:7.1f} CPU us/cycle", flush=True)
    print(f"\nmedians of {args.runs} runs of {args.seconds:g} s against {url}:")
    print(f"{'threads':>7s} {'variant':>14s} {'cycles/s':>9s} {'vs raw':>7s} {'CPU us/cycle':>13s}")
    for t in counts:
        raw = statistics.median(c for c, _ in results[("raw", t)])
        for v in variants:
            cps = statistics.median(c for c, _ in results[(v, t)])
            cpu = statistics.median(u for _, u in results[(v, t)])
            print(f"{t:7d} {v:>14s} {cps:9.0f} {cps / raw:7.2f} {cpu:13.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
