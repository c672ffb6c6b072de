#!/usr/bin/env python3
"""takeover.py - how fast leadership moves (issue 27, "Takeover").

Three campaigners (each its own process, Python client, one per broker)
campaign for one election on one Redis; three observers (one per broker)
watch it. Per round, a fault hits the leader: its process is SIGKILLed
("process"), its broker is SIGKILLed and restarted ("broker"), or its
broker is SIGSTOPped past the TTL and resumed ("stop"). Measured from the
fault: the next leader's grant (taken in that campaigner's process) and
every observer's `changed` showing it. Printed: p50/p99 per fault kind,
with lock_delay_ms 0 and 2000, side by side in one run.

Usage: tests/bench/takeover.py [--rounds N] [--ttl-ms T] [--broker BIN]
(needs redis-server; the release build by default: build/lockbrokerd).
"""
import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(TOP, "clients", "python"))
import lockbroker  # noqa: E402

CAMPAIGNER = r'''
import sys, time, os
sys.path.insert(0, sys.argv[1])
import lockbroker
url, name, ttl, delay = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
c = lockbroker.Client(url, label="takeover-%d" % os.getpid())
for term in c.election(name).campaigns(str(os.getpid()), ttl_ms=ttl, lock_delay_ms=delay):
    print("elected %.6f %d" % (time.time(), term.fence), flush=True)
    term.lost.wait()
    print("lost %.6f" % time.time(), flush=True)
'''


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    def __init__(self, bin_, redis, d):
        self.bin, self.redis, self.port = bin_, redis, free_port()
        self.url = "tcp://127.0.0.1:%d" % self.port
        self.log = open(os.path.join(d, "broker-%d.log" % self.port), "ab")
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen([self.bin, "--redis", self.redis, "--listen", self.url,
                                      "--log-level", "warn"], stdout=self.log, stderr=self.log)
        for _ in range(200):
            try:
                with socket.create_connection(("127.0.0.1", self.port), 0.2) as s:
                    s.sendall(b'{"op":"ping"}\n')
                    if b'"up"' in s.recv(200):
                        return
            except OSError:
                pass
            time.sleep(0.02)
        raise RuntimeError("broker did not start")

    def kill(self, sig=signal.SIGKILL):
        self.proc.send_signal(sig)
        if sig == signal.SIGKILL:
            self.proc.wait()


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))] if v else float("nan")


def run(args, delay, d, redis):
    brokers = [Broker(args.broker, redis, d) for _ in range(3)]
    for b in brokers:
        b.start()
    name = "takeover-%d-%d" % (os.getpid(), delay)
    camps, elected = {}, []  # pid -> (proc, broker index); (time, pid, fence)
    lock = threading.Lock()

    def spawn(i):
        p = subprocess.Popen([sys.executable, "-c", CAMPAIGNER, os.path.join(TOP, "clients", "python"),
                              brokers[i].url, name, str(args.ttl_ms), str(delay)],
                             stdout=subprocess.PIPE, text=True)
        camps[p.pid] = (p, i)

        def read():
            for line in p.stdout:
                f = line.split()
                if f and f[0] == "elected":
                    with lock:
                        elected.append((float(f[1]), p.pid, int(f[2])))
        threading.Thread(target=read, daemon=True).start()

    for i in range(3):
        spawn(i)
    seen = [[] for _ in range(3)]  # per observer: (time, fence)

    def observe(i):
        while True:
            try:
                c = lockbroker.Client(brokers[i].url, label="observer")
                for info in c.watch(name):
                    if info.leader is not None:
                        with lock:
                            seen[i].append((time.time(), info.fence))
            except Exception:
                time.sleep(0.1)
    for i in range(3):
        threading.Thread(target=observe, args=(i,), daemon=True).start()

    def leader():
        with lock:
            return elected[-1] if elected else None

    while leader() is None:
        time.sleep(0.01)
    time.sleep(0.5)
    res = {k: ([], []) for k in ("process", "broker", "stop")}
    for kind in ("process", "broker", "stop"):
        for _ in range(args.rounds):
            t_el, pid, fence = leader()
            p, bi = camps[pid]
            t0 = time.time()
            if kind == "process":
                p.kill()
                p.wait()
                del camps[pid]
            elif kind == "broker":
                brokers[bi].kill()
            else:
                brokers[bi].kill(signal.SIGSTOP)
            deadline = t0 + 30
            while time.time() < deadline:
                cur = leader()
                if cur[2] > fence:
                    break
                time.sleep(0.002)
            new = leader()
            if new[2] <= fence:
                print("  %s: no new leader within 30 s" % kind)
                continue
            grant = new[0] - t0
            obs = None
            while time.time() < deadline:
                with lock:
                    ts = [next((t for t, f in s if f >= new[2]), None) for s in seen]
                live = [t for i, t in enumerate(ts) if not (kind in ("broker", "stop") and i == bi)]
                if all(t is not None for t in live):
                    obs = max(live) - t0
                    break
                time.sleep(0.005)
            res[kind][0].append(grant * 1000)
            if obs is not None:
                res[kind][1].append(obs * 1000)
            # mend: a new campaigner for a killed process, the broker back
            if kind == "process":
                spawn(bi)
            elif kind == "broker":
                brokers[bi].start()
                spawn(bi)  # its campaigner lost its broker: it reconnects itself too
                os.kill(p.pid, signal.SIGKILL)
                del camps[p.pid]
            else:
                brokers[bi].kill(signal.SIGCONT)
            time.sleep(0.3 + delay / 1000)
    for p, _ in list(camps.values()):
        p.kill()
    for b in brokers:
        b.kill()
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--ttl-ms", type=int, default=2000)
    ap.add_argument("--broker", default=os.path.join(TOP, "build", "lockbrokerd"))
    args = ap.parse_args()
    d = tempfile.mkdtemp(prefix="takeover-")
    port = free_port()
    rp = subprocess.Popen(["redis-server", "--port", str(port), "--save", "", "--appendonly", "no",
                           "--dir", d], stdout=subprocess.DEVNULL)
    time.sleep(0.3)
    try:
        out = {}
        for delay in (0, 2000):
            out[delay] = run(args, delay, d, "redis://127.0.0.1:%d" % port)
        print("takeover: %d rounds each, ttl_ms %d (ms from the fault; p50 / p99)" % (args.rounds, args.ttl_ms))
        print("%-10s %-12s %22s %22s" % ("fault", "lock_delay", "new leader granted", "every observer told"))
        for kind in ("process", "broker", "stop"):
            for delay in (0, 2000):
                g, o = out[delay][kind]
                print("%-10s %-12s %10.0f / %-9.0f %10.0f / %-9.0f" % (kind, delay, pct(g, 50), pct(g, 99),
                                                                    pct(o, 50), pct(o, 99)))
    finally:
        rp.kill()


if __name__ == "__main__":
    main()
