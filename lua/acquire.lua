-- acquire.lua: a request for a lock or semaphore permit: granted now, or
-- (wait) queued in arrival order.
-- KEYS: all seven. ARGV: the context (see context_of), then id, mode,
-- limit (0 for a lock), ttl_ms, owner, client, max_hold_ms (0 = none),
-- wait ('1': queue when busy; 'r': Redlock, see below), fair ('1'), max_queue,
-- with 'r' how many acquires of the lock wait on the calling broker, this
-- one included (else any number), the holder's value ('' none, '=' .. V:
-- see the prelude), and its lock delay in ms (0: none; see 'dl' in the
-- prelude: while the lock is held back, nobody is granted it and the
-- answer's retry_ms says when that ends).
-- Returns {1, fence, ttl_ms, hold_ms} granted (hold_ms: ms left of the
-- max hold, 0 for none); {0, retry_ms} busy (and queued when wait); {-1, 0}
-- conflict (held or awaited as another kind or limit); {-2, 0} the queue is
-- full. Grants for the calling broker's other waiters follow, GRANT_WIDTH
-- values each (see promote in the prelude).
--
-- fair: granted only when nobody is queued ahead. Not fair: may pass queued
-- waiters, except that a shared request never passes a queued exclusive
-- one (writers are not starved).
-- Redlock (--redlock): waiters never queue in Redis. A busy request with
-- wait 'r' is answered as a try and marks the header ('v'): the release
-- that frees the lock then publishes its name on P .. 'redlock:wake',
-- which every Redlock broker listens to on every master; 'R' is a try
-- that marks nothing. With either, a grant's fence is max(last + 1, floor
-- + 1), without this master's clock: the broker proposes the same floor
-- to every master, so when each granting master issues floor + 1 that
-- fence is on a majority already (broker/store/redlock.c). With 'r' the
-- header also counts the broker's waiters: 'W:'..broker = "N UNTIL" (N
-- waiting, until UNTIL ms, a few rounds' time: its rounds come at least
-- once a second), which inspect.lua adds up.
-- The fast path: nobody holds or awaits the lock (header without 'm' or a
-- live solo holder, and if the header is missing, no model keys either).
-- The request is granted as the solo holder: 3 Redis calls, 4 when the
-- header's lifetime must grow.
local t = redis.call('TIME')
local hv = redis.call('HMGET', KEYS[3], 'm', 'o', 'x', 'f', 'z', 'k', 'l', 'g:' .. ARGV[7], 'W',
                      'dl', 'D', 'Dm')
-- An id that ended while this copy was on its way (see tombstone in the
-- prelude): a late copy, whose broker answered long ago. Nothing to do.
if hv[8] and tonumber(hv[8]) > t[1] * 1000 then return {0, 0} end
-- A watched lock ('W') takes the full path, which tells its watchers; so
-- does one held back ('dl') or whose solo holder has a lock delay ('D').
if not hv[1] and not hv[9] and not hv[10] and (not hv[2] or (hv[11] or '0') == '0') then
  local now_ms = t[1] * 1000 + math.floor(t[2] / 1000)
  -- A try (no wait) against another live solo holder that it cannot join
  -- is answered here, and the holder stays solo: a conflict of kind or
  -- limit, else busy until the holder's expiry.
  if hv[2] and hv[2] ~= ARGV[7] and tonumber(hv[3]) > now_ms and ARGV[14] ~= '1' then
    local mode, limit = ARGV[8], tonumber(ARGV[9])
    if (hv[6] == 'p') ~= (mode == 'p') or tonumber(hv[7]) ~= limit then return {-1, 0} end
    if mode == 'x' or hv[6] == 'x' or (mode == 'p' and limit < 2) then
      if ARGV[14] == 'r' then
        redis.call('HSET', KEYS[3], 'v', '1', 'W:' .. ARGV[2], (ARGV[17] or '1') .. ' ' .. (now_ms + 3000))
      end
      return {0, tonumber(hv[3]) - now_ms}
    end
  end
  if (not hv[2] or tonumber(hv[3]) <= now_ms)
      and (hv[4] or redis.call('EXISTS', KEYS[1], KEYS[2], KEYS[4], KEYS[6]) == 0) then
    local ttl, max_hold, retention = tonumber(ARGV[10]), tonumber(ARGV[13]), tonumber(ARGV[1])
    local expiry, deadline = now_ms + ttl, 0
    if max_hold > 0 then
      deadline = now_ms + max_hold
      if deadline < expiry then expiry = deadline end
    end
    local fence = t[1] * 1000000 + t[2]
    if ARGV[14] == 'r' or ARGV[14] == 'R' then fence = 0 end -- Redlock: see above
    local last = tonumber(hv[4] or '0')
    if last + 1 > fence then fence = last + 1 end
    local floor = tonumber(ARGV[6]) or 0
    if floor + 1 > fence then fence = floor + 1 end
    local f = string.format('%.0f', fence)
    -- The header must live until expiry + retention (+ the lock delay:
    -- see 'Dm' in the prelude); when 'z' does not promise that, it gets
    -- twice that margin, so most grants skip this.
    retention = retention + tonumber(ARGV[19] or '0')
    if hv[5] and tonumber(hv[5]) >= expiry + retention then
      redis.call('HSET', KEYS[3], 'f', f, 'o', ARGV[7], 'x', expiry, 'c', '1', 'k', ARGV[8],
                 'l', ARGV[9], 'e', deadline, 'w', ARGV[11], 'n', ARGV[12], 'r', '0',
                 'V', ARGV[18] or '', 'D', ARGV[19] or '0')
    else
      local z = expiry + 2 * retention
      redis.call('HSET', KEYS[3], 'f', f, 'o', ARGV[7], 'x', expiry, 'c', '1', 'k', ARGV[8],
                 'l', ARGV[9], 'e', deadline, 'w', ARGV[11], 'n', ARGV[12], 'r', '0', 'z', z,
                 'V', ARGV[18] or '', 'D', ARGV[19] or '0')
      redis.call('PEXPIRE', KEYS[3], z - now_ms)
    end
    if ARGV[14] == 'r' then -- one of the broker's waiters less
      local n = tonumber(ARGV[17] or '1') - 1
      if n > 0 then
        redis.call('HSET', KEYS[3], 'W:' .. ARGV[2], n .. ' ' .. (now_ms + 3000))
      else
        redis.call('HDEL', KEYS[3], 'W:' .. ARGV[2])
      end
    end
    return {1, fence, expiry - now_ms, max_hold}
  end
end
--@prelude
local K = keys_of(KEYS)
local C, a = context_of(ARGV, t)
C.redlock = ARGV[a + 7] == 'r' or ARGV[a + 7] == 'R'
local id, mode, limit = ARGV[a], ARGV[a + 1], tonumber(ARGV[a + 2])
local ttl, owner, client = tonumber(ARGV[a + 3]), ARGV[a + 4], ARGV[a + 5]
local max_hold, wait, fair = tonumber(ARGV[a + 6]), ARGV[a + 7] == '1', ARGV[a + 8] == '1'
local max_queue = tonumber(ARGV[a + 9])
local value = ARGV[a + 11] or ''
local delay = tonumber(ARGV[a + 12] or '0')

unsolo(K, C, hv)
purge(K.h, K.i, C.now_ms, K.hd, C)
purge_waiters(K, C.now_ms)

-- Granted already, by a script whose reply never reached its broker?
local list = holders(K.h, K.i)
for _, hd in ipairs(list) do
  if hd[1] == id then
    return finish(K, C, {1, hd[3][7], hd[2] - C.now_ms, hold_left(C, hd[3][3])}, {})
  end
end

-- The first page of waiters, and the info of the first 4 (promote reads on
-- from there).
local queue = redis.call('ZRANGE', K.q, 0, QPAGE - 1)
local first = #queue > 0 and redis.call('HMGET', K.w, unpack(queue, 1, math.min(4, #queue)))
for _, hd in ipairs(list) do
  if (hd[3][1] == 'p') ~= (mode == 'p') or hd[3][6] ~= limit then
    return finish(K, C, {-1, 0}, (promote(K, C, list, queue, first)))
  end
end
local hw = first and first[1] and cmsgpack.unpack(first[1])
if hw and ((hw[1] == 'p') ~= (mode == 'p') or hw[2] ~= limit) then
  return finish(K, C, {-1, 0}, (promote(K, C, list, queue, first)))
end

-- Whatever became grantable meanwhile (an expired holder) goes first.
local granted, ngranted, xgranted, ngone = promote(K, C, list, queue, first)
for n = 1, #granted, GRANT_WIDTH do
  if granted[n] == id then
    local mine = {1}
    for k = 1, GRANT_WIDTH - 1 do mine[k + 1] = granted[n + k] end
    for _ = 1, GRANT_WIDTH do table.remove(granted, n) end
    return finish(K, C, mine, granted)
  end
end

-- Whether id waits already (a retried acquire), and how many do: from
-- the page read above unless promote changed the queue or it is longer.
local queued, nqueued
if ngranted + ngone == 0 and #queue < QPAGE then
  nqueued = #queue
  for _, q in ipairs(queue) do
    if q == id then queued = true; break end
  end
else
  queued = redis.call('ZSCORE', K.q, id)
  nqueued = redis.call('ZCARD', K.q)
end
local nheld, xheld = count_holders(list)
nheld, xheld = nheld + ngranted, xheld or xgranted
-- A waiter of this id dropped for its heartbeat deadline: its place (see
-- PLACES in the prelude).
local place = not queued and tonumber(redis.call('HGET', K.s, 'a:' .. id))
local may = fits(mode, limit, nheld, xheld) and not held_back(C)
if may and fair then
  local head = queue[1]
  if ngranted + ngone > 0 then head = redis.call('ZRANGE', K.q, 0, 0)[1] end
  may = head == nil or head == id or
        (place and place < tonumber(redis.call('ZSCORE', K.q, head))) or false
elseif may and mode == 's' then
  may = tonumber(redis.call('HGET', K.s, 'xw') or '0') <= 0
end
if place then mark_del(K.s, 'a:', 'al', id) end
if may then
  if queued then dequeue(K, id, mode) end
  if ARGV[a + 7] == 'r' then redlock_waiting(K, C, tonumber(ARGV[a + 10] or '1') - 1) end
  local fence, t, hold = grant(K, C, id, mode, limit, ttl, owner, client, max_hold, value, delay)
  return finish(K, C, {1, fence, t, hold}, granted)
end

local retry = look_again(C, held_back(C) and 0 or blocked_for(list, mode, C.now_ms))
if not wait then
  if ARGV[a + 7] == 'r' then
    redis.call('HSET', K.hd, 'v', '1')
    redlock_waiting(K, C, tonumber(ARGV[a + 10] or '1'))
  end
  return finish(K, C, {0, retry}, granted)
end
if not queued then
  if nqueued >= max_queue then
    return finish(K, C, {-2, 0}, granted)
  end
  -- The queue keys are created anew (this script may have emptied them):
  -- :s may have outlived them, with a 'qz' they never got.
  if nqueued == 0 then redis.call('HDEL', K.s, 'qz') end
  redis.call('ZADD', K.q, place or redis.call('HINCRBY', K.s, 'seq', 1), id)
  info_set(K.w, id, {mode, limit, ttl, owner, client, max_hold, C.broker, value, delay})
  if mode == 'x' then redis.call('HINCRBY', K.s, 'xw', 1) end
end
redis.call('ZADD', K.d, C.now_ms + C.heartbeat, id)
return finish(K, C, {0, retry}, granted)
