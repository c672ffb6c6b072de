-- inspect.lua: what a lock looks like now, without lease tokens; with
-- ARGV, also a watcher's mark (the `watch` op, see 'W' in the prelude).
-- KEYS: all seven. ARGV: none, or the context, then the watcher's channel
-- and how long its line lives in ms (0: it is dropped).
-- Returns {limit, fence or false, waiters, delay_ms, mode1, ttl1, count1,
-- owner1, client1, value1, mode2, ...} with holders in expiry order (a
-- value as the prelude keeps it: '' none, '=' .. V); limit comes from the
-- holders or else the queued waiters; delay_ms: how long the lock is
-- still held back by a lock delay (0: not).
local K = keys_of(KEYS)
local now_ms = clock()

-- A watcher (re)marks itself. The lock then leaves the solo layout (its
-- fast paths do not tell watchers) and the marks' lifetimes are kept.
if ARGV[1] then
  local C, a = context_of(ARGV)
  unsolo(K, C)
  purge(K.h, K.i, C.now_ms, K.hd, C)
  purge_waiters(K, C.now_ms)
  watch_mark(K, C, ARGV[a], tonumber(ARGV[a + 1]))
  finish(K, C, {}, {})
  now_ms = C.now_ms
end

-- Redlock's waiters are not queued: each broker counts its own in the
-- header ('W:'..broker, see acquire.lua) while its rounds go on.
local function redlock_waiters()
  local n = 0
  local all = redis.call('HGETALL', K.hd)
  for k = 1, #all, 2 do
    if string.sub(all[k], 1, 2) == 'W:' then
      local c, u = string.match(all[k + 1], '^(%d+) (%d+)$')
      if c and tonumber(u) > now_ms then n = n + tonumber(c) end
    end
  end
  return n
end

-- {f, dl, then SOLO}: a solo holder means the model is empty (see the
-- prelude).
local v = redis.call('HMGET', K.hd, 'f', 'dl', unpack(SOLO))
local dl = tonumber(v[2] or '0')
table.remove(v, 2)
if v[2] then
  local solo = {0, v[1] or false, redlock_waiters(), 0}
  local expiry = tonumber(v[3])
  if expiry > now_ms then
    solo[1] = tonumber(v[6])
    for _, x in ipairs({v[5], expiry - now_ms, tonumber(v[4]), v[8], v[9], v[11] or ''}) do
      solo[#solo + 1] = x
    end
  elseif delay_of(v[12], v[7], expiry) > 0 and expiry + delay_of(v[12], v[7], expiry) > dl then
    dl = expiry + delay_of(v[12], v[7], expiry) -- ended by its TTL: held back (not written here)
  end
  solo[4] = math.max(dl - now_ms, 0)
  return solo
end
local C = {now_ms = now_ms, dl = dl > 0 and dl or nil}
purge(K.h, K.i, now_ms, K.hd, C)
purge_waiters(K, now_ms)
local held = holders(K.h, K.i)
local out = {0, v[1] or false, redis.call('ZCARD', K.q) + redlock_waiters(),
             math.max((C.dl or 0) - now_ms, 0)}
local head = redis.call('ZRANGE', K.q, 0, 0)[1]
local hw = head and info_get(K.w, head)
if hw then out[1] = hw[2] end
for n = 1, #held do
  local info = held[n][3]
  out[1] = info[6]
  out[#out + 1] = info[1]
  out[#out + 1] = held[n][2] - now_ms
  out[#out + 1] = info[2]
  out[#out + 1] = info[4]
  out[#out + 1] = info[5]
  out[#out + 1] = info[9] or ''
end
return out
