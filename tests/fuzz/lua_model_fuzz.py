#!/usr/bin/env python3
"""lua_model_fuzz.py - random multi-broker calls of the lock scripts, with
the data model's invariants checked after every call (no broker involved).

Several brokers (b1..b3) call acquire/release/extend/reenter/heartbeat/
withdraw/inspect on two locks (A: exclusive/shared, B: a semaphore of 2)
with short TTLs, random fairness and max-hold, sleeps, and one broker that
stops heartbeating now and then. After each call it checks, against what
the calls returned and against Redis itself:
- mutual exclusion (no two live exclusive holders, no more permits than
  the limit), fences strictly increasing, never repeated and above the
  calling broker's floor;
- solo and model never both in use; 'm' set whenever the model is;
- a waiter in :q, :w and :d or in none; the 'xw' count;
- every key has a TTL, and none ends before the holder or waiter that
  needs it (header past the holders, holder keys, queue keys past the
  last heartbeat deadline).
Usage: lua_model_fuzz.py SOCKET SCRIPTDIR SEED STEPS [batched|slots]
With "batched", every call goes inside a batch (lua/batch.lua, as the
broker sends the calls of one loop turn), between 0-2 reads (inspect) of
the locks placed at random before and after it, and its element of the
batch's reply is taken as its reply (an error element as its error).
With "slots", the same through lua/batch_slots.lua (a Redis Cluster
master's batches: no key declared, each call's keys passed as args).
(tests/fuzz/run.sh starts a private Redis and assembles the scripts.)
Exit 0 and "ok SEED" when clean; 1 and the violation with the lock's keys.
"""
import re
import random
import socket
import sys
import time


class R:
    """A minimal RESP client over a Unix socket."""

    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.connect(path)
        self.f = self.s.makefile('rb')

    def cmd(self, *a):
        out = b'*%d\r\n' % len(a)
        for x in a:
            x = x if isinstance(x, bytes) else str(x).encode()
            out += b'$%d\r\n%s\r\n' % (len(x), x)
        self.s.sendall(out)
        return self.rd()

    def rd(self, nested=False):
        line = self.f.readline()[:-2]
        t, rest = line[:1], line[1:]
        if t == b'+':
            return rest.decode()
        if t == b'-':
            if nested:
                return ErrorReply(rest.decode())
            raise Exception(rest.decode())
        if t == b':':
            return int(rest)
        if t == b'$':
            n = int(rest)
            return None if n < 0 else self.f.read(n + 2)[:-2].decode('latin1')
        if t == b'*':
            n = int(rest)
            return None if n < 0 else [self.rd(nested) for _ in range(n)]
        raise Exception('bad reply %r' % line)


class ErrorReply(str):
    """An error inside an array (a batch's element)."""


class Batched(R):
    """Sends each EVALSHA inside a batch with random reads around it."""

    def cmd(self, *a):
        if a[0] != 'EVALSHA' or 'batch' not in sha:
            return R.cmd(self, *a)
        name = by_sha[a[1]]
        nk = int(a[2])
        calls_mine = (name, list(a[3:3 + nk]), list(a[3 + nk:]))
        calls = [calls_mine]
        for _ in range(brnd.randint(0, 2)):
            read = ('inspect', keys7(brnd.choice(['A', 'B'])), [])
            calls.insert(brnd.randint(0, len(calls)), read)
        me = [k for k, c in enumerate(calls) if c == calls_mine][0]
        keys, args = [], [len(calls), 's' if slots else 'k']
        for n, ks, xs in calls:
            if slots:  # batch_slots.lua: no key declared, each call's after its counts
                args += [n, len(ks), len(xs)] + ks + xs
            else:
                keys += ks
                args += [n, len(ks), len(xs)] + xs
        out = b'*%d\r\n' % (3 + len(keys) + len(args))
        for x in ['EVALSHA', sha['batch'], len(keys)] + keys + args:
            x = x if isinstance(x, bytes) else str(x).encode()
            out += b'$%d\r\n%s\r\n' % (len(x), x)
        self.s.sendall(out)
        rep = self.rd(True)
        if isinstance(rep, ErrorReply):
            raise Exception(str(rep))
        assert isinstance(rep, list) and len(rep) == len(calls), 'a batch answered %r' % (rep,)
        mine = rep[me]
        if isinstance(mine, ErrorReply):
            raise Exception(str(mine))
        return mine


sock, scriptdir, seed, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
batched = len(sys.argv) > 5 and sys.argv[5] in ('batched', 'slots')
slots = len(sys.argv) > 5 and sys.argv[5] == 'slots'
brnd = random.Random(seed * 7919)
r = Batched(sock) if batched else R(sock)
r.cmd('FLUSHALL')
sha = {}
for n in ['acquire', 'release', 'extend', 'reenter', 'heartbeat', 'withdraw', 'inspect', 'proclaim']:
    with open('%s/%s.lua' % (scriptdir, n)) as fh:
        sha[n] = r.cmd('SCRIPT', 'LOAD', fh.read())
if batched:
    with open('%s/%s.lua' % (scriptdir, 'batch_slots' if slots else 'batch')) as fh:
        sha['batch'] = r.cmd('SCRIPT', 'LOAD', fh.read())
by_sha = {v: k for k, v in sha.items()}


def keys7(n): return ['P{%s}:h'%n,'P{%s}:i'%n,'P{%s}'%n,'P{%s}:q'%n,'P{%s}:w'%n,'P{%s}:d'%n,'P{%s}:s'%n]
HB = 300
# Each broker's fence floor: the highest fence it has seen; now and then one
# jumps far ahead, as after a failover to a replica behind on fences and time.
FLOOR = {}
def ctx(n, b): return [60000, b, 'P', n, HB, FLOOR.get(b, 0)]
def now():
    t = r.cmd('TIME'); return int(t[0])*1000 + int(t[1])//1000
random.seed(seed)
LOCKS = ['A','B']
BROKERS = ['b1','b2','b3']
nid = [0]
# beliefs: id -> dict(lock, mode, limit, exp)  (conservative expiry)
held = {}
waiting = {}   # id -> (lock, broker, mode, limit, ttl, value)
values = {}    # id -> the value Redis must show for it ('' none)
delays = {}    # id -> its lock delay ms
held_back = {} # lock -> no grant may come before this (ms): a holder with
               # a lock delay ended without a release (see 'dl')
lastfence = {}
viol = []
hist = []
opf = []
def grant(lock, id, fence, ttl, t0, mode, limit, src, hold=0):
    fence = int(fence); ttl = int(ttl); hold = int(hold)
    if id not in held and now() < held_back.get(lock, 0):
        viol.append('%s granted %s while held back by a lock delay (%d ms left)' % (lock, id, held_back[lock] - now()))
    if hold < 0 or (hold > 0 and ttl > hold): viol.append('lifetime %d past the hold %d %s' % (ttl, hold, src))
    if id not in held: opf.append((lock, fence, id, src))
    held[id] = dict(lock=lock, mode=mode, limit=limit, exp=t0 + ttl, fence=fence, seq=held.get(id, {}).get('seq', 0),
                    max_hold=hold > 0 or held.get(id, {}).get('max_hold', False))
    waiting.pop(id, None)
def check_me(t):
    for L in LOCKS:
        live = [(i, h) for i, h in held.items() if h['lock'] == L and h['exp'] > t + 2]
        xs = [i for i, h in live if h['mode'] == 'x']
        ps = [i for i, h in live if h['mode'] == 'p']
        if xs and len(live) > 1: viol.append('ME x %s %s' % (L, live))
        if ps:
            lim = held[ps[0]]['limit']
            if len(ps) > lim: viol.append('ME p %s %s' % (L, live))
def check_state(t):
    for L in LOCKS:
        k = keys7(L)
        for key in k:
            ty = r.cmd('TYPE', key)
            if ty != 'none' and r.cmd('PTTL', key) == -1:
                viol.append('no TTL %s' % key)
        hd = r.cmd('HGETALL', k[2]) or []
        hd = dict(zip(hd[::2], hd[1::2]))
        solo = 'o' in hd and int(float(hd['x'])) > t
        hz = r.cmd('ZRANGE', k[0], 0, -1, 'WITHSCORES')
        mh = [(hz[j], int(hz[j+1])) for j in range(0, len(hz), 2) if int(hz[j+1]) > t]
        q = set(r.cmd('ZRANGE', k[3], 0, -1)); w = set((r.cmd('HKEYS', k[4]) or [])); d = set(r.cmd('ZRANGE', k[5], 0, -1))
        if solo and (mh or q): viol.append('solo+model %s %s %s' % (L, mh, q))
        if solo and 'W' in hd and any(int(u) > t for u in re.findall(r'\t(\d+)', hd['W'])):
            viol.append('a solo holder on a watched lock %s %r' % (L, hd['W']))
        if not (q == w == d): viol.append('qwd mismatch %s %s %s %s' % (L, q, w, d))
        if (mh or q) and r.cmd('EXISTS', k[2]) and 'm' not in hd: viol.append('model without m %s' % L)
        # header lives past holders
        exps = [e for _, e in mh] + ([int(float(hd['x']))] if solo else [])
        if exps:
            pt = r.cmd('PEXPIRETIME', k[2])
            if pt >= 0 and pt < max(exps): viol.append('header TTL short %s' % L)
            if mh:
                for key in k[:2]:
                    pt = r.cmd('PEXPIRETIME', key)
                    if pt >= 0 and pt < max(e for _, e in mh): viol.append('holder key TTL short %s %s' % (key, pt))
        dz = r.cmd('ZRANGE', k[5], -1, -1, 'WITHSCORES')
        if dz:
            for key in (k[3], k[4], k[5]):
                pt = r.cmd('PEXPIRETIME', key)
                if pt >= 0 and pt < int(dz[1]): viol.append('queue TTL short %s' % key)
        # xw
        s = r.cmd('HGET', k[6], 'xw')
        nx = sum(1 for i in q if waiting.get(i, (0,0,''))[2] == 'x')
        if s is not None and int(s) != nx and all(i in waiting for i in q):
            viol.append('xw %s %s vs %d' % (L, s, nx))
def check_values(t):
    # One exclusive holder believed live: inspect shows its value.
    for L in LOCKS:
        live = [i for i, h in held.items() if h['lock'] == L and h['exp'] > t + 2 and h['mode'] == 'x']
        if len(live) != 1: continue
        ins = r.cmd('EVALSHA', sha['inspect'], 7, *keys7(L))
        if len(ins) != 10 or ins[4] != 'x': continue
        if ins[9] != values.get(live[0], ''):
            viol.append('value %s: inspect shows %r, expected %r' % (L, ins[9], values.get(live[0])))
def take_grants(L, lst, t0):
    for j in range(0, len(lst) - 3, 4):
        id_ = lst[j]
        wi = waiting.get(id_)
        if wi: grant(L, id_, lst[j+1], lst[j+2], t0, wi[2], wi[3], 'promote', lst[j+3])
        elif id_ in held: held[id_]['exp'] = t0 + int(lst[j+2])
        else: viol.append('grant of unknown %s' % id_)
for step in range(steps):
    L = random.choice(LOCKS); b = random.choice(BROKERS); op = random.random()
    if random.random() < 0.01: FLOOR[b] = max(lastfence.values() or [0]) + random.choice([1, 10**6, 10**9])
    floor = FLOOR.get(b, 0)
    t0 = now()
    hist.append((step, L, b, op, t0))
    try:
        if op < 0.35:
            nid[0] += 1; id_ = 'id%d' % nid[0]
            mode = random.choice(['x','x','s']) if L == 'A' else 'p'
            limit = 0 if L == 'A' else 2
            ttl = random.choice([30, 80, 200, 1000])
            wait = random.choice(['0','1','1','r','R'])
            fair = random.choice(['0','1'])
            mh = random.choice([0, 0, 50])
            value = random.choice(['', '=v' + id_, '=']) if mode == 'x' else ''
            values[id_] = value
            delays[id_] = random.choice([0, 0, 150])
            rep = r.cmd('EVALSHA', sha['acquire'], 7, *keys7(L), *ctx(L, b), id_, mode, limit, ttl, 'o', 'c', mh, wait, fair, 100, 1, value, delays[id_])
            if rep[0] == 1:
                waiting[id_] = (L, b, mode, limit, ttl, value); grant(L, id_, rep[1], rep[2], t0, mode, limit, 'acquire', rep[3]); take_grants(L, rep[4:], t0)
            elif rep[0] == 0:
                if wait == '1': waiting[id_] = (L, b, mode, limit, ttl, value)
                take_grants(L, rep[2:], t0)
            else: take_grants(L, rep[2:], t0)
        elif op < 0.55:
            cands = [i for i, h in held.items() if h['lock'] == L]
            if not cands: continue
            id_ = random.choice(cands)
            h = held[id_]; h['seq'] = h.get('seq', 0) + 1
            died = random.choice(['0', '0', '1'])
            args = (id_, random.choice(['0','1']), h['seq'], 0, died)
            rep = r.cmd('EVALSHA', sha['release'], 7, *keys7(L), *ctx(L, b), *args)
            d = delays.get(id_, 0)
            # (one that ran out at its max hold frees the lock at once)
            if d and ((rep[0] == 0 and died == '1') or (rep[0] == -1 and not h.get('max_hold'))):
                # an end without a release: no grant before it + the delay
                start = t0 if rep[0] == 0 else h['exp']
                held_back[L] = max(held_back.get(L, 0), start + d - 2)
                hist.append(('held back', L, id_, rep[0], died, start, d))
            if rep[0] > 0 and random.random() < 0.3:
                # a repeat (its first reply lost) changes nothing
                rep2 = r.cmd('EVALSHA', sha['release'], 7, *keys7(L), *ctx(L, b), *args)
                if rep2[0] != rep[0]: viol.append('release repeat %s -> %s' % (rep[0], rep2[0]))
            if rep[0] == 0: held.pop(id_, None)
            elif rep[0] == -1: held.pop(id_, None)
            take_grants(L, rep[1:], t0)
        elif op < 0.60:
            # proclaim: a new value, the fence unchanged; a repeat (same
            # seq, its first reply lost) changes nothing
            cands = [i for i, h in held.items() if h['lock'] == L]
            if not cands: continue
            id_ = random.choice(cands)
            h = held[id_]; h['seq'] = h.get('seq', 0) + 1
            value = '=p%d' % step
            rep = r.cmd('EVALSHA', sha['proclaim'], 3, *keys7(L)[:3], id_, value, h['seq'])
            if rep[0] == 1:
                if h['mode'] != 'x': viol.append('proclaim of a %s holder took' % h['mode'])
                if int(rep[1]) != h['fence']: viol.append('proclaim fence %s != %s' % (rep[1], h['fence']))
                values[id_] = value
                if random.random() < 0.3:
                    rep2 = r.cmd('EVALSHA', sha['proclaim'], 3, *keys7(L)[:3], id_, '=stale', h['seq'])
                    if rep2[0] == 1 and int(rep2[1]) != h['fence']: viol.append('proclaim repeat fence')
            elif rep[0] == -2:
                if h['mode'] == 'x': viol.append('proclaim of an x holder refused')
            else: held.pop(id_, None)
        elif op < 0.65:
            cands = [i for i, h in held.items() if h['lock'] == L]
            if not cands: continue
            id_ = random.choice(cands)
            ttl = random.choice([30, 100, 500])
            rep = r.cmd('EVALSHA', sha['extend'], 3, *keys7(L)[:3], id_, ttl, 60000)
            if rep[0] >= 0: held[id_]['exp'] = t0 + rep[0]
            else: held.pop(id_, None)
        elif op < 0.70:
            cands = [i for i, h in held.items() if h['lock'] == L]
            if not cands: continue
            id_ = random.choice(cands)
            h = held[id_]; h['seq'] = h.get('seq', 0) + 1
            rep = r.cmd('EVALSHA', sha['reenter'], 3, *keys7(L)[:3], id_, h['seq'])
            if rep[0] > 0 and random.random() < 0.3:
                rep2 = r.cmd('EVALSHA', sha['reenter'], 3, *keys7(L)[:3], id_, h['seq'])
                if rep2[0] != rep[0] and rep2[0] >= 0: viol.append('reenter repeat %s -> %s' % (rep[0], rep2[0]))
            if rep[0] < 0: held.pop(id_, None)
        elif op < 0.90:
            if b == 'b3' and (step // 200) % 2 == 1: continue
            ids = [i for i, wv in waiting.items() if wv[0] == L and wv[1] == b and i not in held]
            rep = r.cmd('EVALSHA', sha['heartbeat'], 7, *keys7(L), *ctx(L, b), *ids)
            nl = rep[1]
            for i in rep[2:2+nl]: waiting.pop(i, None)
            lst = rep[2+nl:]
            for j in range(0, len(lst), 4):
                id_ = lst[j]; wi = waiting.get(id_)
                if wi: grant(L, id_, lst[j+1], lst[j+2], t0, wi[2], wi[3], 'hb', lst[j+3])
                elif id_ in held: pass
                else: viol.append('hb grant of unknown %s' % id_)
        else:
            ids = [i for i, wv in waiting.items() if wv[0] == L and wv[1] == b] + [i for i, h in held.items() if h['lock'] == L]
            if random.random() < 0.2:
                r.cmd('EVALSHA', sha['inspect'], 7, *keys7(L)); ids = []
            elif random.random() < 0.2:
                # a watcher marks itself (or leaves): the lock leaves the
                # solo layout while marked (see check_state)
                keep = random.choice([0, 50, 3000])
                r.cmd('EVALSHA', sha['inspect'], 7, *keys7(L), *ctx(L, b), 'P:inbox:' + b, keep); ids = []
            if not ids: continue
            id_ = random.choice(ids)
            rep = r.cmd('EVALSHA', sha['withdraw'], 7, *keys7(L), *ctx(L, b), id_)
            waiting.pop(id_, None); held.pop(id_, None)
            lst = rep[1:]
            for j in range(0, len(lst), 4):
                g = lst[j]; wi = waiting.get(g)
                if wi: grant(L, g, lst[j+1], lst[j+2], t0, wi[2], wi[3], 'wd', lst[j+3])
    except Exception as e:
        viol.append('error %s' % e)
    for (lk, f, i, src) in opf:
        if f <= lastfence.get(lk, 0): viol.append('fence backwards %s %s %d <= %d %s' % (lk, i, f, lastfence[lk], src))
    if len(set(f for _, f, _, _ in opf)) != len(opf): viol.append('dup fence %s' % opf)
    for (lk, f, i, src) in opf:
        if f <= floor: viol.append('fence %d not above the floor %d %s %s' % (f, floor, i, src))
        FLOOR[b] = max(FLOOR.get(b, 0), f)
    for (lk, f, i, src) in opf: lastfence[lk] = max(lastfence.get(lk, 0), f)
    opf.clear()
    t = now()
    check_me(t); check_state(t); check_values(t)
    if viol:
        print('seed', seed, 'step', step, 'op', op, L, b); print('\n'.join(viol[:5]))
        for L2 in LOCKS:
            for key in keys7(L2):
                ty = r.cmd('TYPE', key); print(key, ty, r.cmd('PTTL', key), r.cmd('ZRANGE', key, 0, -1, 'WITHSCORES') if ty=='zset' else (r.cmd('HGETALL', key) if ty=='hash' else ''))
        print('now', t, 'hist', [x for x in hist if x[0] == 'held back'][-3:], hist[-6:]); sys.exit(1)
    if random.random() < 0.05: time.sleep(random.choice([0.03, 0.1, 0.25, 0.4]))
print('ok', seed)
