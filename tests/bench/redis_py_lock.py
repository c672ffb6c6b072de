#!/usr/bin/python3
"""redis_py_lock.py - the redis-py peer of the lockbroker benchmark (issue 6).

Drives redis-py's Lock (Debian package python3-redis) against the same
redis-server as the broker, in the shapes lbbench uses:

  uncontended  --procs N processes, each on its own lock name: acquire
               (blocking=False, the wait_ms 0 of the broker) + release
  convoy       --procs N processes on one lock, blocking acquire, hold
               --hold-ms, release, acquire again
  hot          the same with no hold

Every timestamp is time.monotonic() (CLOCK_MONOTONIC, shared by all
processes of the machine), so a release in one process pairs with the next
grant in another. The window starts after --warmup; Redis INFO
commandstats and the redis-server CPU are sampled at its start and end.
Output: "LABEL.metric: value unit" lines, like lbbench. Bounded in time:
a blocking acquire gives up after the window plus 5 s.
"""
import argparse
import math
import multiprocessing as mp
import os
import sys
import time

import redis


def cmdstats(r):
    info = r.info("commandstats")
    evalsha = total = 0
    for name, st in info.items():
        calls = int(st.get("calls", 0))
        total += calls
        if name == "cmdstat_evalsha":
            evalsha = calls
    return evalsha, total - 1  # minus this INFO


def cpu_ticks(pid):
    if not pid:
        return 0
    with open("/proc/%d/stat" % pid) as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return int(rest[11]) + int(rest[12])


def worker(args, idx, t0, q):
    r = redis.Redis(unix_socket_path=args.socket)
    end = t0 + args.warmup + args.seconds
    recs = []
    if args.shape == "uncontended":
        lock = r.lock("pyu:%d:%d" % (os.getppid(), idx), timeout=30, sleep=args.sleep)
        while time.monotonic() < t0:
            time.sleep(0.001)
        while True:
            s = time.monotonic()
            if s >= end:
                break
            ok = lock.acquire(blocking=False)
            g = time.monotonic()
            if ok:
                lock.release()
            recs.append((s, g, time.monotonic(), ok))
    else:
        lock = r.lock("pyc:%d:%s" % (os.getppid(), args.label), timeout=30, sleep=args.sleep,
                      blocking_timeout=args.seconds + args.warmup + 5)
        hold = args.hold_ms / 1000.0
        while time.monotonic() < t0:
            time.sleep(0.001)
        while True:
            s = time.monotonic()
            if s >= end:
                break
            ok = lock.acquire(blocking=True)
            g = time.monotonic()
            if not ok:
                recs.append((s, g, g, False))
                break
            if hold > 0:
                time.sleep(hold)
            rel = time.monotonic()
            lock.release()
            recs.append((s, g, rel, True))
    q.put((idx, recs))


def pct(v, p):
    """Nearest-rank percentile; nan when empty."""
    if not v:
        return float("nan")
    v = sorted(v)
    k = max(1, min(len(v), math.ceil(p / 100.0 * len(v))))
    return v[k - 1]


def fmt(v):
    if v != v:
        return "n/a"
    if v == int(v) and abs(v) < 1e15:
        return "%d" % v
    if abs(v) >= 100:
        return "%.1f" % v
    return "%.3f" % v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--shape", choices=["uncontended", "convoy", "hot"], required=True)
    ap.add_argument("--procs", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=3)
    ap.add_argument("--warmup", type=float, default=0.5)
    ap.add_argument("--sleep", type=float, default=0.1)
    ap.add_argument("--hold-ms", type=float, default=1.0)
    ap.add_argument("--redis-pid", type=int, default=0)
    ap.add_argument("--label", default="redispy")
    ap.add_argument("--fifo-tol-ms", type=float, default=0.2)
    args = ap.parse_args()
    if args.shape == "hot":
        args.hold_ms = 0

    r = redis.Redis(unix_socket_path=args.socket)
    r.ping()
    q = mp.Queue()
    t0 = time.monotonic() + 0.3 + 0.05 * args.procs  # after every fork
    procs = [mp.Process(target=worker, args=(args, k, t0, q)) for k in range(args.procs)]
    for p in procs:
        p.start()
    w0 = t0 + args.warmup
    w1 = w0 + args.seconds
    time.sleep(max(0, w0 - time.monotonic()))
    e0, c0, k0, m0 = *cmdstats(r), cpu_ticks(args.redis_pid), time.monotonic()
    time.sleep(max(0, w1 - time.monotonic()))
    e1, c1, k1, m1 = *cmdstats(r), cpu_ticks(args.redis_pid), time.monotonic()
    results = {}
    for _ in procs:
        idx, recs = q.get(timeout=args.seconds + args.warmup + 30)
        results[idx] = recs
    for p in procs:
        p.join(10)
    secs = m1 - m0
    hz = os.sysconf("SC_CLK_TCK")
    out = []

    def put(name, unit, v):
        out.append("%s.%s: %s %s" % (args.label, name, fmt(v), unit))

    put("procs", "procs", args.procs)
    put("sleep_s", "s", args.sleep)
    if args.shape == "uncontended":
        cycles = [rec for recs in results.values() for rec in recs if w0 <= rec[2] < w1 and rec[3]]
        lat = [(rec[1] - rec[0]) * 1e6 for rec in cycles]
        put("cycles_per_s", "cycles/s", len(cycles) / args.seconds)
        put("acquire_p50_us", "us", pct(lat, 50))
        put("acquire_p99_us", "us", pct(lat, 99))
        ops, what = len(cycles), "cycle"
    else:
        grants = sorted(((rec[1], rec[2], rec[0], idx) for idx, recs in results.items()
                         for rec in recs if rec[3]), key=lambda g: g[0])
        win = [g for g in grants if w0 <= g[0] < w1]
        handoff, handoff_other = [], []
        retakes = 0
        for a, b in zip(grants, grants[1:]):
            if w0 <= b[0] < w1:
                handoff.append((b[0] - a[1]) * 1e6)
                retakes += a[3] == b[3]
                if a[3] != b[3]:
                    handoff_other.append((b[0] - a[1]) * 1e6)
        wait = [(g[0] - g[2]) * 1e3 for g in win]
        holds = [(g[1] - g[0]) * 1e3 for g in win]
        entries = [(g[2], g[0], g[3]) for g in grants if g[0] >= w0 - 1]
        n = len(win)
        put("grants_per_s", "grants/s", n / args.seconds)
        hold_avg = sum(holds) / len(holds) if holds else float("nan")
        put("hold_avg_ms", "ms", hold_avg)
        put("handoff_p50_us", "us", pct(handoff, 50))
        put("handoff_p99_us", "us", pct(handoff, 99))
        put("handoff_max_us", "us", pct(handoff, 100))
        # to another process only (a retake hands the lock to itself at once)
        put("handoff_other_p50_us", "us", pct(handoff_other, 50))
        put("handoff_other_p99_us", "us", pct(handoff_other, 99))
        put("wait_p50_ms", "ms", pct(wait, 50))
        put("wait_p99_ms", "ms", pct(wait, 99))
        put("wait_max_ms", "ms", pct(wait, 100))
        put("clients_x_hold_ms", "ms", args.procs * hold_avg)
        # FIFO over the window's grants (earlier grants only as context)
        inwin = {(g[2], g[3]) for g in win}
        tol = args.fifo_tol_ms / 1000.0

        def passes(t):
            es = sorted(entries, key=lambda e: e[0])
            cnt, maxg, j = 0, -1.0, 0
            for k, (s, g, who) in enumerate(es):
                while j < k and es[j][0] + t < s:
                    maxg = max(maxg, es[j][1])
                    j += 1
                if (s, who) in inwin and maxg > g + t:
                    cnt += 1
            return cnt
        put("fifo_pct", "%", 100.0 * (1 - passes(tol) / n) if n else float("nan"))
        put("fifo_strict_pct", "%", 100.0 * (1 - passes(0) / n) if n else float("nan"))
        put("retake_pct", "%", 100.0 * retakes / len(handoff) if handoff else float("nan"))
        ops, what = n, "acq"
    put("cpu_redis", "%", (k1 - k0) / hz / secs * 100.0)
    put("evalsha_per_" + what, "calls", (e1 - e0) / ops if ops else float("nan"))
    put("redis_calls_per_" + what, "calls", (c1 - c0) / ops if ops else float("nan"))
    print("\n".join(out))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
