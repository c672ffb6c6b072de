-- prelude.lua: the data model and the helpers shared by every lock script.
-- The build inserts this file into each lua/*.lua script at its line
-- "--@prelude", or before its first line (deploy/embed-lua.sh); it is never
-- sent to Redis on its own. Code above the marker is a script's fast path:
-- it runs before any helper below exists, so it uses none of them.
--
-- One lock NAME under prefix P. All keys share the hash tag {NAME}, so every
-- script touches one Redis Cluster slot; a NAME starting with '}' or '=' is
-- written as '=' NAME so the tag is never empty. KEYS come in this order
-- (a script that needs fewer takes a prefix of the list):
--   1 P{NAME}:h  zset   holder id -> expiry, Redis time in ms
--   2 P{NAME}:i  hash   holder id -> cmsgpack {mode, count, max-hold
--                       deadline ms or 0, owner, client, limit, fence,
--                       op seq (absent: 0), value (absent: ''), lock
--                       delay ms (absent: 0)}
--   3 P{NAME}    hash   the lock's header:
--                         f  the last fencing token issued
--                         m  '1' while the full model (keys 1, 2, 4-7) is
--                            in use
--                         z  when present: a time (ms) the header does not
--                            expire before, so a fast path that needs no
--                            more skips its PEXPIRE. Fast paths set it with
--                            the lifetime they set; every other script that
--                            sets the header's lifetime deletes it first.
--                         W  the brokers watching the lock (the `watch`
--                            op): "\1" NAME, then for each watcher a
--                            line "\n" CHANNEL "\t" UNTIL (ms). A
--                            script that changes the holders (a grant, a
--                            release, a re-entry, a proclaim, a replay)
--                            publishes "\1" NAME on each CHANNEL whose
--                            UNTIL has not passed (see tell_watchers);
--                            the watchers renew their line every second.
--                            A watched lock never has a solo holder (the
--                            fast paths, which do not publish, step aside)
--                         g:ID  (for up to GRAVES ids) a time (ms) until
--                            which ID, an id that ended (released or
--                            given back) while a copy of its acquire may
--                            still be on its way (its reply was lost),
--                            is never granted again; gl lists those ids
--                            (see tombstone)
--                         o, x, c, k, l, e, w, n, r, V, D  the solo
--                            holder: id, expiry ms, count, mode, limit,
--                            max-hold deadline ms or 0, owner, client, op
--                            seq, value, lock delay ms; only 'o' says
--                            there is one (the others may be stale)
--                         dl  the lock is held back from every new holder
--                            until this time (ms): a holder with a lock
--                            delay ended without a release (its TTL ran
--                            out, its session or broker died, it was
--                            lost) at dl - its delay (see hold_back). The
--                            header lives at least until dl. A header
--                            with 'dl' takes the full path; the first
--                            script there after dl drops it
--                         Dm  the longest lock delay of the model's
--                            holders (absent: none): the holder keys and
--                            the header outlive the last expiry by it, so
--                            a holder that ends by its TTL is still there
--                            for the script that finds it ended (purge);
--                            a solo holder's header outlives its expiry by
--                            its 'D' so
--   4 P{NAME}:q  zset   waiter id -> arrival number (the FIFO queue)
--   5 P{NAME}:w  hash   waiter id -> cmsgpack {mode, limit, ttl, owner,
--                       client, max-hold ms, broker id, value, lock
--                       delay ms}
--   6 P{NAME}:d  zset   waiter id -> heartbeat deadline, Redis time in ms
--   7 P{NAME}:s  hash   'seq' last arrival number, 'xw' exclusive waiters,
--                       'wk:'B when broker B was last woken (ms), 'dx:'B
--                       when B's waiters here are dropped (B is deaf: see
--                       "Waking")
-- mode: 'x' exclusive, 's' shared, 'p' semaphore permit (limit > 0).
-- Holder and waiter ids are lease tokens: a waiter keeps its id when it is
-- granted.
-- A value (an election's leader's, acquire's and proclaim's `value`) is
-- kept as the broker sends it: '' for none, '=' .. V for the value V (an
-- empty value too), so that "none" needs no key of its own and a holder's
-- info is always a full array.
--
-- The op seq orders proclaim too: a proclaim whose seq is not above the
-- holder's ran already and changes nothing.
--
-- The op seq makes the count-changing calls (release, reenter) repeatable:
-- a broker numbers them per lease (1, 2, ...) and a holder keeps the last
-- one applied; a call whose seq is not above it ran already (its reply was
-- lost) and answers the count without changing it. Seq 0: no such check.
--
-- Two layouts, never both at once:
--   solo   one holder, nobody queued: it lives in the header alone, so an
--          uncontended acquire, renewal, re-entry or release is 3 Redis
--          calls (4 when the header's lifetime must grow: see 'z'): the
--          fast paths above the marker in acquire, release, extend and
--          reenter.
--   model  anything else: holders in :h/:i, waiters in :q/:w/:d/:s.
-- A fast acquire grants solo only when the header has no 'm' and no live
-- solo holder, and, if the header is missing altogether, none of :h :i :q
-- :d exists either (so a lost header never hides the model). Every other
-- script first moves a solo holder into the model (unsolo), and its
-- finish() sets 'm' while the model holds anyone and clears it when the
-- model is empty. So a solo holder and the model never coexist.
--
-- Invariants: every script drops expired holders and waiters whose broker
-- stopped heartbeating before anything else; a holder exists only when
-- both its expiry and its info do; an expiry never passes its holder's
-- max-hold deadline; a waiter is in :q, :w and :d or in none; the lock's
-- keys expire with their last holder or waiter, the header (and so the
-- fence) at least a retention margin later; fence = max(last + 1, Redis time in
-- us, the calling broker's floor + 1), so it increases even after the header
-- itself expired, and, for the fences one broker hands out, even after a
-- failover to a replica that missed the last ones and whose clock is behind
-- (the floor is the highest fence that broker has seen). Times come only
-- from the Redis clock.
--
-- Waking: promote() grants waiters in queue order while they fit. A waiter
-- of the broker running the script (C.broker) is granted at once and
-- returned to it; a waiter of another broker is only reserved (nobody
-- behind it passes it) and its broker is told by PUBLISH on its inbox
-- channel P 'inbox:' broker, with the lock name as message; that broker
-- then runs heartbeat.lua and grants it. So a grant is always made by a
-- script its own broker sent, and the broker's send time bounds the
-- lease's expiry from below.
--
-- A broker that died leaves its waiters queued until their heartbeat
-- deadline (seconds), and the one at the head reserves the lock for
-- nobody. PUBLISH says how many subscribers got the wake: none means the
-- broker's inbox is gone (it died, or its inbox is reconnecting). Then its
-- waiters here get DEAF_GRACE_MS: a live broker's own heartbeat (every
-- second) clears the mark and grants them; past it, the next promote drops
-- every one of them it meets. A woken broker that has not run promote
-- within REWAKE_MS is woken again by the next promote (which checks it
-- again; the live waiters' safety net runs one within a second). Scripts
-- that mark a broker deaf tell their caller when its grace ends
-- (C.look_at), so a live waiter behind a dead one is granted about
-- DEAF_GRACE_MS after the lock became free for it, and within 2 s when the
-- dead broker had been woken just before it died. No script is asked for
-- more often than the safety net's once a second, but for that one look.

-- Now in ms and in us, from t (a TIME reply a fast path already took) or
-- from a TIME call.
local function clock(t)
  t = t or redis.call('TIME')
  local s, us = tonumber(t[1]), tonumber(t[2])
  return s * 1000 + math.floor(us / 1000), s * 1000000 + us
end

local function keys_of(k)
  return {h = k[1], i = k[2], hd = k[3], q = k[4], w = k[5], d = k[6], s = k[7]}
end

-- The queue-aware scripts take these first: retention_ms, broker id, key
-- prefix, lock name, heartbeat_ms, fence floor (the highest fence the
-- calling broker has seen: a fence it grants exceeds it, see next_fence).
-- Returns the context and the index of the first script-specific
-- argument. t: as for clock().
local function context_of(argv, t)
  local now_ms, now_us = clock(t)
  return {retention = tonumber(argv[1]), broker = argv[2], prefix = argv[3],
          name = argv[4], heartbeat = tonumber(argv[5]), floor = tonumber(argv[6]) or 0,
          now_ms = now_ms, now_us = now_us}, 7
end

local function unpack_all(list, fn)
  for n = 1, #list, 1000 do
    fn(unpack(list, n, math.min(n + 999, #list)))
  end
end

local function info_get(i, id)
  local raw = redis.call('HGET', i, id)
  if not raw then return nil end
  return cmsgpack.unpack(raw)
end

local function info_set(i, id, info)
  redis.call('HSET', i, id, cmsgpack.pack(info))
end

-- A holder with a lock delay that ended without a release holds the lock
-- back from new holders until until_ms (see 'dl' in the header). C, when
-- given, learns the time (C.dl) and that the holders changed.
local function hold_back(hd, until_ms, now_ms, C)
  if C then C.changed = true end
  if until_ms <= now_ms then return end
  local dl = tonumber(redis.call('HGET', hd, 'dl') or '0')
  if until_ms > dl then
    redis.call('HSET', hd, 'dl', until_ms)
    if redis.call('PTTL', hd) < until_ms - now_ms then redis.call('PEXPIRE', hd, until_ms - now_ms) end
    dl = until_ms
  end
  if C and (not C.dl or dl > C.dl) then C.dl = dl end
end

-- How long a holder that ended at expiry holds the lock back: its lock
-- delay, unless it ended at its max-hold deadline (max_hold_ms frees the
-- lock at once, as a release does).
local function delay_of(delay, deadline, expiry)
  delay, deadline = tonumber(delay) or 0, tonumber(deadline) or 0
  if deadline > 0 and expiry >= deadline then return 0 end
  return delay
end

-- Drops the holders whose expiry passed; one with a lock delay holds the
-- lock back from its expiry on (hold_back; hd, C as there).
local function purge(h, i, now_ms, hd, C)
  local dead = redis.call('ZRANGEBYSCORE', h, '-inf', now_ms, 'WITHSCORES')
  if #dead == 0 then return end
  local ids, until_ms = {}, 0
  for n = 1, #dead, 2 do ids[#ids + 1] = dead[n] end
  if hd then
    for n = 1, #ids, 1000 do
      local infos = redis.call('HMGET', i, unpack(ids, n, math.min(n + 999, #ids)))
      for k = 1, #infos do
        local info = infos[k] and cmsgpack.unpack(infos[k])
        local e = tonumber(dead[2 * (n + k - 1)])
        local d = info and delay_of(info[10], info[3], e) or 0
        if d > 0 and e + d > until_ms then until_ms = e + d end
      end
    end
  end
  redis.call('ZREMRANGEBYSCORE', h, '-inf', now_ms)
  unpack_all(ids, function(...) redis.call('HDEL', i, ...) end)
  if C then C.changed = true end
  if until_ms > 0 then hold_back(hd, until_ms, now_ms, C) end
end

-- Sets the holder keys' lifetimes from the latest expiry, the header's a
-- retention margin longer; with no holder left only the header survives,
-- for the retention margin. Returns the ms the holders keep, nil for none.
-- Never called while a solo holder lives in the header (see unsolo).
-- The header lives at least until 'dl', and every key a 'Dm' longer (dl,
-- dm: their values, false for none; dl nil: both read here).
local function retime(h, i, hd, now_ms, retention, dl, dm)
  local top = redis.call('ZRANGE', h, -1, -1, 'WITHSCORES')
  if dl == nil then dl, dm = unpack(redis.call('HMGET', hd, 'dl', 'Dm')) end
  local floor = dl and tonumber(dl) - now_ms or 0
  local linger = dm and tonumber(dm) or 0
  if #top == 0 then
    redis.call('DEL', h, i)
    if dm then redis.call('HDEL', hd, 'Dm') end
    redis.call('PEXPIRE', hd, math.max(retention, floor))
    return nil
  end
  local keep = tonumber(top[2]) - now_ms
  redis.call('PEXPIRE', h, keep + linger)
  redis.call('PEXPIRE', i, keep + linger)
  redis.call('PEXPIRE', hd, math.max(keep + retention + linger, floor))
  return keep
end

-- A holder with a lock delay joins the model: 'Dm' covers it.
local function note_delay(hd, C, delay)
  if delay and delay > 0 and delay > (C.Dm or 0) then
    redis.call('HSET', hd, 'Dm', delay)
    C.Dm = delay
  end
end

-- The solo holder's fields in the header, in HMGET order.
local SOLO = {'o', 'x', 'c', 'k', 'l', 'e', 'w', 'n', 'r', 'V', 'D'}

-- Moves a solo holder (if any, and live) from the header into the model,
-- drops 'z' (this script may set the header's lifetime), and notes in C.m
-- whether the header says the model is in use, in C.W its watchers ('W').
-- Every script that works on the model with all seven keys starts with
-- this.
-- pre: what acquire's fast path read of the header ({m, o, x, f, z, ...,
-- W at 9}), so that a call with no solo holder reads nothing again.
-- C.dl: the 'dl' that has not passed yet (one that has is dropped).
local function unsolo(K, C, pre)
  local v
  if pre and not pre[2] then
    C.m = pre[1] ~= false
    C.W = pre[9]
    C.dl = tonumber(pre[10])
    C.Dm = tonumber(pre[12])
    if pre[5] then redis.call('HDEL', K.hd, 'z') end
  else
    v = redis.call('HMGET', K.hd, 'm', 'f', 'z', 'W', 'dl', 'Dm', unpack(SOLO))
    C.m = v[1] ~= false
    C.W = v[4]
    C.dl = tonumber(v[5])
    C.Dm = tonumber(v[6])
    table.remove(v, 6)
    table.remove(v, 5)
    table.remove(v, 4)
  end
  if C.dl and C.dl <= C.now_ms then
    redis.call('HDEL', K.hd, 'dl')
    C.dl = nil
  end
  if not v then return end
  local id = v[4]
  if id or v[3] then redis.call('HDEL', K.hd, 'o', 'z') end
  if not id then return end
  local expiry = tonumber(v[5])
  if expiry <= C.now_ms then
    -- it ended by its TTL: with a lock delay, the lock is held back
    local d = delay_of(v[14], v[9], expiry)
    if d > 0 then hold_back(K.hd, expiry + d, C.now_ms, C) end
    return
  end
  redis.call('ZADD', K.h, expiry, id)
  note_delay(K.hd, C, tonumber(v[14] or '0'))
  -- {mode, count, deadline, owner, client, limit, fence, seq, value, delay}
  redis.call('HSET', K.i, id, cmsgpack.pack({v[7], tonumber(v[6]), tonumber(v[9]), v[10],
                                             v[11], tonumber(v[8]), tonumber(v[2]),
                                             tonumber(v[12] or '0'), v[13] or '',
                                             tonumber(v[14] or '0')}))
end

-- Whether the lock is held back now (see 'dl'): nobody may be granted it.
local function held_back(C)
  return C.dl ~= nil and C.dl > C.now_ms
end

-- A holder exists only when both its expiry and its info do. Half of one
-- (a key lost to eviction or a manual edit) is removed, never trusted: a
-- lease Redis does not fully hold is not held.
local function holder_get(h, i, id)
  local score = redis.call('ZSCORE', h, id)
  local info = info_get(i, id)
  if score and info then return info, tonumber(score) end
  if score then redis.call('ZREM', h, id) end
  if info then redis.call('HDEL', i, id) end
  return nil
end

-- holder_get for a holder that must also still be live: an expired one is
-- removed and counts as not held, as if a purge had run first.
-- hd: the header, told of a lock delay (hold_back).
local function live_holder(h, i, id, now_ms, hd)
  local info, expiry = holder_get(h, i, id)
  if info and expiry <= now_ms then
    redis.call('ZREM', h, id)
    redis.call('HDEL', i, id)
    local d = delay_of(info[10], info[3], expiry)
    if d > 0 then hold_back(hd, expiry + d, now_ms) end
    return nil
  end
  return info, expiry
end

-- The holders as {id, expiry, info} in expiry order, half holders removed.
local function holders(h, i)
  local held = redis.call('ZRANGE', h, 0, -1, 'WITHSCORES')
  local out = {}
  for n = 1, #held, 2000 do
    local ids = {}
    for k = n, math.min(n + 1999, #held), 2 do ids[#ids + 1] = held[k] end
    local infos = redis.call('HMGET', i, unpack(ids))
    for k = 1, #ids do
      if infos[k] then
        out[#out + 1] = {ids[k], tonumber(held[n + 2 * k - 1]), cmsgpack.unpack(infos[k])}
      else
        redis.call('ZREM', h, ids[k])
      end
    end
  end
  return out
end

-- ---- the queue ----------------------------------------------------------

local function dequeue(K, id, mode)
  redis.call('ZREM', K.q, id)
  redis.call('ZREM', K.d, id)
  redis.call('HDEL', K.w, id)
  if mode == 'x' then redis.call('HINCRBY', K.s, 'xw', -1) end
end

-- Sets :s 'xw' from the waiters' info itself. For when a waiter went
-- whose info was already missing (evicted, edited): its mode is unknown,
-- so the count cannot just go down by one, and a count left too high
-- would hold back non-fair shared requests until the queue empties.
local function recount_xw(K)
  local n = 0
  for _, raw in ipairs(redis.call('HVALS', K.w)) do
    if cmsgpack.unpack(raw)[1] == 'x' then n = n + 1 end
  end
  redis.call('HSET', K.s, 'xw', n)
end

-- Marks in a hash, at most max of them (the oldest go first): field
-- prefix .. id = value for each, and field list naming them in order.
local function mark_add(key, prefix, list, id, value, max)
  local ids = {}
  for x in string.gmatch(redis.call('HGET', key, list) or '', '%S+') do
    if x ~= id then ids[#ids + 1] = x end
  end
  while #ids >= max do redis.call('HDEL', key, prefix .. table.remove(ids, 1)) end
  ids[#ids + 1] = id
  redis.call('HSET', key, prefix .. id, value, list, table.concat(ids, ' '))
end

local function mark_del(key, prefix, list, id)
  if redis.call('HDEL', key, prefix .. id) == 0 then return end
  local ids = {}
  for x in string.gmatch(redis.call('HGET', key, list) or '', '%S+') do
    if x ~= id then ids[#ids + 1] = x end
  end
  if #ids > 0 then
    redis.call('HSET', key, list, table.concat(ids, ' '))
  else
    redis.call('HDEL', key, list)
  end
end

-- A waiter dropped for its heartbeat deadline keeps its place: its
-- arrival number stays in :s ('a:'..id, the last PLACES of them, 'al'
-- lists them) while the queue lives, and acquire.lua queues it there again
-- when its broker, alive after all, sends it again (it could not refresh
-- its waiters: a slot on the move, the broker stalled), so it does not go
-- to the back. A broker that died never sends it again.
local PLACES = 32

-- Drops waiters whose broker stopped refreshing their heartbeat.
local function purge_waiters(K, now_ms)
  local dead = redis.call('ZRANGEBYSCORE', K.d, '-inf', now_ms)
  local missing = false
  for _, id in ipairs(dead) do
    local wi = info_get(K.w, id)
    local place = redis.call('ZSCORE', K.q, id)
    if place then mark_add(K.s, 'a:', 'al', id, place, PLACES) end
    dequeue(K, id, wi and wi[1])
    missing = missing or not wi
  end
  if missing then recount_xw(K) end
end

-- Every script that touched the queue ends with this: the queue keys live
-- as long as the last heartbeat deadline (plus a second), and go with the
-- last waiter. :s 'qz' records a time they live at least until; they are
-- only given more (a heartbeat more than needed, so most scripts skip the
-- four PEXPIREs) when the last deadline passes it. Returns whether anyone
-- waits. (The header outlives them: its retention margin is longer than a
-- heartbeat.)
local function retime_queue(K, C)
  local top = redis.call('ZRANGE', K.d, -1, -1, 'WITHSCORES')
  if #top == 0 then
    redis.call('DEL', K.q, K.w, K.d, K.s)
    return false
  end
  local until_ms = tonumber(top[2]) + 1000
  local qz
  if C.clear_wk then
    local v = redis.call('HMGET', K.s, 'qz', 'wk:' .. C.broker, 'dx:' .. C.broker)
    qz = v[1]
    if v[2] or v[3] then redis.call('HDEL', K.s, 'wk:' .. C.broker, 'dx:' .. C.broker) end
  else
    qz = redis.call('HGET', K.s, 'qz')
  end
  if tonumber(qz or '0') < until_ms then
    until_ms = until_ms + C.heartbeat
    redis.call('HSET', K.s, 'qz', until_ms)
    for _, k in ipairs({K.q, K.w, K.d, K.s}) do redis.call('PEXPIRE', k, until_ms - C.now_ms) end
  end
  return true
end

-- Whether a request of mode/limit fits next to the holders as counted by
-- nheld (all holders) and xheld (an exclusive one among them).
local function fits(mode, limit, nheld, xheld)
  if mode == 'x' then return nheld == 0 end
  if mode == 's' then return not xheld end
  return nheld < limit
end

local function count_holders(list)
  local xheld = false
  for _, hd in ipairs(list) do
    if hd[3][1] == 'x' then xheld = true end
  end
  return #list, xheld
end

-- The next fencing token: max(last + 1, Redis time in us). The last one is
-- read once per script (C.fence); the caller stores the new one in the
-- header ('f').
local function next_fence(K, C)
  if not C.fence then C.fence = tonumber(redis.call('HGET', K.hd, 'f') or '0') end
  local fence = C.now_us
  if C.redlock then fence = 0 end -- the broker's floor instead (acquire.lua)
  if C.fence + 1 > fence then fence = C.fence + 1 end
  if C.floor + 1 > fence then fence = C.floor + 1 end
  C.fence = fence
  return fence
end

-- A new holder's expiry and max-hold deadline (0 for none).
local function expiry_of(C, ttl, max_hold)
  local expiry, deadline = C.now_ms + ttl, 0
  if max_hold > 0 then
    deadline = C.now_ms + max_hold
    if deadline < expiry then expiry = deadline end
  end
  return expiry, deadline
end

-- The ms left until a max-hold deadline (0: none). Every grant and renewal
-- reports it beside the lifetime, so the broker bounds the lease's end by
-- what Redis holds, on the Redis clock, and never by its own guess: a grant
-- replayed after a lost reply is shorter than ttl_ms without being capped.
local function hold_left(C, deadline)
  if deadline > 0 then return math.max(deadline - C.now_ms, 1) end
  return 0
end

-- Makes id a holder (in the model); returns its fence, the lifetime granted
-- and the ms left of its max hold.
local function grant(K, C, id, mode, limit, ttl, owner, client, max_hold, value, delay)
  C.changed = true
  local expiry, deadline = expiry_of(C, ttl, max_hold)
  local fence = next_fence(K, C)
  redis.call('ZADD', K.h, expiry, id)
  note_delay(K.hd, C, delay)
  info_set(K.i, id, {mode, 1, deadline, owner, client, limit, fence, 0, value, delay})
  redis.call('HSET', K.hd, 'f', string.format('%.0f', fence))
  return fence, expiry - C.now_ms, hold_left(C, deadline)
end

-- Redlock: a lease that a master lost (it restarted empty) is held there
-- again as the solo holder while the lock is free there (the caller
-- checked), by a renewal or the data-loss check of the broker that still
-- holds it on a quorum (extend.lua, verify.lua): for ttl ms (never past
-- hold ms from now, 0 for none), at its count and op seq, with its fence
-- (the header's is raised to it, never lowered) and value. Returns {ms,
-- hold_ms} as extend does.
local function retake_solo(hd, id, now_ms, ttl, count, seq, fence, owner, client, hold, retention,
                           value, delay)
  local expiry, deadline = now_ms + ttl, 0
  if hold > 0 then
    deadline = now_ms + hold
    if deadline < expiry then expiry = deadline end
  end
  local last = tonumber(redis.call('HGET', hd, 'f') or '0')
  if fence < last then fence = last end
  local z = expiry + 2 * retention + (delay or 0)
  redis.call('HSET', hd, 'f', string.format('%.0f', fence), 'o', id, 'x', expiry, 'c', count,
             'k', 'x', 'l', '0', 'e', deadline, 'w', owner, 'n', client, 'r', seq, 'z', z,
             'V', value or '', 'D', delay or 0)
  redis.call('PEXPIRE', hd, z - now_ms)
  return {expiry - now_ms, deadline > 0 and deadline - now_ms or 0}
end

-- An id that ends while a copy of its acquire may still be on its way (a
-- reply of it was lost: the broker asks for this) must never be granted
-- again: that copy, run late on a stalled connection, would hold the lock
-- for nobody until its TTL. acquire.lua refuses an id with a mark
-- 'g:'..id in the header for retention ms. At most GRAVES marks are kept
-- (the oldest go first; 'gl' lists them), and the header lives at least
-- as long as the newest.
local GRAVES = 16
local function tombstone(K, C, id)
  mark_add(K.hd, 'g:', 'gl', id, C.now_ms + C.retention, GRAVES)
  if redis.call('PTTL', K.hd) < C.retention then redis.call('PEXPIRE', K.hd, C.retention) end
end

-- A grant for a waiter, in every script's reply: {id, fence, ttl_ms, hold_ms}.
local GRANT_WIDTH = 4

-- Redlock (--redlock; see acquire.lua): a holder went and a Redlock
-- broker waits ('v' in the header): every Redlock broker hears the lock's
-- name.
local function redlock_wake(K, C)
  if redis.call('HDEL', K.hd, 'v') == 1 then
    redis.call('PUBLISH', C.prefix .. 'redlock:wake', C.name)
  end
end

-- Redlock: the calling broker has n acquires of the lock waiting (see
-- acquire.lua): counted in the header for a few rounds' time.
local function redlock_waiting(K, C, n)
  if n > 0 then
    redis.call('HSET', K.hd, 'W:' .. C.broker, n .. ' ' .. (C.now_ms + 3000))
  else
    redis.call('HDEL', K.hd, 'W:' .. C.broker)
  end
end

-- See "Waking" above.
local REWAKE_MS = 300
local DEAF_GRACE_MS = 900

-- Broker b has a waiter at the front of the queue that fits: is b alive?
-- Wakes b (again, when its last wake is REWAKE_MS old), marks it deaf when
-- nobody got the wake, and notes in C.look_at when to look again. Returns
-- false when b's waiters here are to be dropped.
local function wake(K, C, b)
  local v = redis.call('HMGET', K.s, 'wk:' .. b, 'dx:' .. b)
  local wk, dx = tonumber(v[1]), tonumber(v[2])
  if dx and dx <= C.now_ms then return false end
  if not wk or C.now_ms - wk >= REWAKE_MS then
    wk = C.now_ms
    redis.call('HSET', K.s, 'wk:' .. b, wk)
    if redis.call('PUBLISH', C.prefix .. 'inbox:' .. b, C.name) == 0 and not dx then
      dx = C.now_ms + DEAF_GRACE_MS
      redis.call('HSET', K.s, 'dx:' .. b, dx)
    end
  end
  if dx and (not C.look_at or dx < C.look_at) then C.look_at = dx end
  return true
end

-- The queue is read QPAGE waiters at a time: reading all of a long queue
-- in every script made each script's cost grow with the queue.
local QPAGE = 32

-- Grants queued waiters in arrival order while they fit (see the header).
-- Looks at most about 1000 waiters ahead, reading them a page and their
-- info a few at a time; the grants and dequeues are written together at
-- the end (a batch of readers costs a few calls, not a few per reader). A
-- broker is told at most once until it runs promote itself (:s 'wk:'
-- broker), and a deaf broker's waiters are dropped (see wake). list: the
-- holders, queue: the first page of waiters (promote appends the pages it
-- reads on), first: the info of the first 4 of them, when the caller has
-- them. Returns the grants made for C.broker as a flat list of
-- GRANT_WIDTH values each {id, fence, ttl_ms, hold_ms (see hold_left)},
-- then how many were granted, whether one of them is exclusive, and how
-- many waiters were dropped (their info missing, their broker deaf).
local function promote(K, C, list, queue, first)
  -- Held back (a lock delay): nobody is granted or woken; the waiters'
  -- brokers look again when it ends (look_again).
  if held_back(C) then return {}, 0, false, 0 end
  local out, woken = {}, {}
  local nheld, xheld = count_holders(list or holders(K.h, K.i))
  queue = queue or redis.call('ZRANGE', K.q, 0, QPAGE - 1)
  -- C.broker is running promote itself: whatever wake it was sent is
  -- answered (its waiters that fit are granted below), so the next one may
  -- go out. Left set, it would silence the wake of its next waiter.
  -- (retime_queue clears the mark, in the call that reads :s anyway.)
  if #queue > 0 then C.clear_wk = true end
  local zadd, hset, gone, xgone, nmissing = {}, {}, {}, 0, 0
  local ngranted, xgranted = 0, false
  local infos, stop = {}, false
  local n = 1
  while n <= #queue do
    -- 4 first (an exclusive lock stops at the first that fits), then 32.
    if n == 1 and first then
      infos = first
    else
      infos = redis.call('HMGET', K.w, unpack(queue, n, math.min(n + (n == 1 and 3 or 31), #queue)))
    end
    for k = 1, #infos do
      local id = queue[n + k - 1]
      local wi = infos[k] and cmsgpack.unpack(infos[k])
      if not wi then
        gone[#gone + 1] = id
        nmissing = nmissing + 1
      elseif woken[wi[7]] == nil and wi[7] ~= C.broker and fits(wi[1], wi[2], nheld, xheld) then
        woken[wi[7]] = wake(K, C, wi[7])
      end
      if not wi then
        -- dropped above
      elseif woken[wi[7]] == false then
        gone[#gone + 1] = id -- its broker is deaf: dropped
        if wi[1] == 'x' then xgone = xgone + 1 end
      else
        if not fits(wi[1], wi[2], nheld, xheld) then stop = true; break end
        if wi[7] == C.broker then
          local expiry, deadline = expiry_of(C, wi[3], wi[6])
          local fence = next_fence(K, C)
          zadd[#zadd + 1] = expiry
          zadd[#zadd + 1] = id
          hset[#hset + 1] = id
          hset[#hset + 1] = cmsgpack.pack({wi[1], 1, deadline, wi[4], wi[5], wi[2], fence, 0,
                                           wi[8] or '', wi[9] or 0})
          note_delay(K.hd, C, wi[9])
          gone[#gone + 1] = id
          if wi[1] == 'x' then xgone = xgone + 1; xgranted = true end
          ngranted = ngranted + 1
          out[#out + 1] = id
          out[#out + 1] = fence
          out[#out + 1] = expiry - C.now_ms
          out[#out + 1] = hold_left(C, deadline)
        end
        nheld = nheld + 1
        if wi[1] == 'x' then xheld = true end
      end
    end
    if stop then break end
    n = n + #infos
    -- Every waiter read so far fits: the next page, while the last was full.
    if n > #queue and #queue % QPAGE == 0 and #queue < 1000 then
      for _, id in ipairs(redis.call('ZRANGE', K.q, #queue, #queue + QPAGE - 1)) do
        queue[#queue + 1] = id
      end
    end
  end
  if #zadd > 0 then
    C.changed = true
    redis.call('ZADD', K.h, unpack(zadd))
    redis.call('HSET', K.i, unpack(hset))
    redis.call('HSET', K.hd, 'f', string.format('%.0f', C.fence))
  end
  if #gone > 0 then
    redis.call('ZREM', K.q, unpack(gone))
    redis.call('ZREM', K.d, unpack(gone))
    redis.call('HDEL', K.w, unpack(gone))
    if nmissing > 0 then
      recount_xw(K)
    elseif xgone > 0 then
      redis.call('HINCRBY', K.s, 'xw', -xgone)
    end
  end
  return out, ngranted, xgranted, #gone - ngranted
end

-- The watchers of the lock ('W' in the header, w) hear that its holders
-- changed: "\1" NAME on each channel whose line has not run out. Lines
-- that ran out are dropped (the field with the last of them).
local function tell_watchers(hd, w, now_ms)
  local msg, lines = string.match(w, '^([^\n]*)(.*)$')
  local live, gone = {}, false
  for ch, u in string.gmatch(lines, '\n([^\t\n]+)\t(%d+)') do
    if tonumber(u) > now_ms then
      redis.call('PUBLISH', ch, msg)
      live[#live + 1] = '\n' .. ch .. '\t' .. u
    else
      gone = true
    end
  end
  if gone and #live == 0 then
    redis.call('HDEL', hd, 'W')
  elseif gone then
    redis.call('HSET', hd, 'W', msg .. table.concat(live))
  end
end

-- A watcher's line in 'W' (see the header): channel ch until now + keep
-- ms, or (keep 0) dropped; the header lives at least that long.
local function watch_mark(K, C, ch, keep)
  local lines = {}
  for c, u in string.gmatch(string.match(C.W or '', '^[^\n]*(.*)$'), '\n([^\t\n]+)\t(%d+)') do
    if c ~= ch and tonumber(u) > C.now_ms then lines[#lines + 1] = '\n' .. c .. '\t' .. u end
  end
  if keep > 0 then lines[#lines + 1] = '\n' .. ch .. '\t' .. (C.now_ms + keep) end
  if #lines == 0 then
    if C.W then redis.call('HDEL', K.hd, 'W') end
    C.W = nil
    return
  end
  C.W = '\1' .. C.name .. table.concat(lines)
  redis.call('HSET', K.hd, 'W', C.W)
  if redis.call('PTTL', K.hd) < keep then redis.call('PEXPIRE', K.hd, keep) end
end

-- The end of every queue-aware script: key lifetimes, the header's 'm'
-- (set while the model holds anyone, so no fast path grants past it), the
-- watchers told when the holders changed (C.changed), then the reply with
-- the grants for the calling broker appended.
local function finish(K, C, reply, granted)
  if C.changed and C.W then tell_watchers(K.hd, C.W, C.now_ms) end
  local keep = retime(K.h, K.i, K.hd, C.now_ms, C.retention, C.dl or false, C.Dm or false)
  local model = retime_queue(K, C) or keep ~= nil
  if model and not C.m then
    redis.call('HSET', K.hd, 'm', '1')
    redis.call('PEXPIRE', K.hd, (keep or 0) + C.retention)
  elseif C.m and not model then
    redis.call('HDEL', K.hd, 'm')
  end
  for _, v in ipairs(granted) do reply[#reply + 1] = v end
  return reply
end

-- When the caller should look again, in ms from now (0: no hint): when a
-- deaf broker's grace ends (C.look_at), or sooner when holding_ms (the
-- holders' expiry, 0 for none) comes first.
local function look_again(C, holding_ms)
  if held_back(C) and C.dl - C.now_ms > holding_ms then holding_ms = C.dl - C.now_ms end
  if not C.look_at then return holding_ms end
  local l = math.max(C.look_at - C.now_ms, 1)
  if holding_ms > 0 and holding_ms < l then return holding_ms end
  return l
end

-- The ms until the holders that block a request of mode may have expired:
-- a waiting broker retries then, in case nobody tells it.
local function blocked_for(list, mode, now_ms)
  if #list == 0 then return 0 end
  if mode == 'p' then return list[1][2] - now_ms end
  return list[#list][2] - now_ms
end
