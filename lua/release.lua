-- release.lua: drop one reentrancy level of a holder; at zero the holder is
-- removed and whoever now fits in the queue is granted or woken.
-- KEYS: all seven. ARGV: the context, then id, all ('1': drop every level,
-- as when a session ends; 'u': undo the re-entry whose op seq is undo, only
-- if it ran and nothing after it did, and never the last level; 'G' and
-- 'g' as '1' and '0', and when the holder is gone afterwards (or was
-- already) its id is never granted again: see tombstone in the prelude),
-- seq (the op seq, see the prelude; 0: none), undo (with 'u'; else any),
-- died ('1': the holder's session or broker died, or it was lost: an end
-- without a release, so a lock delay holds the lock back, see 'dl' in the
-- prelude).
-- Returns {count left (0 = freed), grants...}, or {-1} when the id holds
-- nothing. A repeat of a call that ran (same seq) returns the count left
-- and changes nothing.

-- The fast path: id is the live solo holder (nobody waits: 3 Redis calls),
-- or another id is (so the model is empty and id holds nothing).
local hv = redis.call('HMGET', KEYS[3], 'o', 'x', 'c', 'r', 'v', 'W')
if hv[1] and not hv[6] and ARGV[8] ~= 'g' and ARGV[8] ~= 'G' and ARGV[11] ~= '1' then
  if hv[1] ~= ARGV[7] then return {-1} end
  local t = redis.call('TIME')
  if tonumber(hv[2]) > t[1] * 1000 + math.floor(t[2] / 1000) then
    local count, seq = tonumber(hv[3]), tonumber(ARGV[9]) or 0
    if seq > 0 and seq <= tonumber(hv[4] or '0') then return {count} end
    if ARGV[8] == 'u' and (count < 2 or tonumber(hv[4] or '0') ~= tonumber(ARGV[10])) then
      return {count}
    end
    if count > 1 and ARGV[8] ~= '1' then
      redis.call('HSET', KEYS[3], 'c', count - 1, 'r', math.max(seq, tonumber(hv[4] or '0')))
      return {count - 1}
    end
    -- Only 'o' says there is a solo holder: the other fields may stay, and
    -- the header keeps its lifetime (the holder's expiry plus retention).
    -- 'v': a Redlock broker waits (see acquire.lua): it is woken.
    if hv[5] then
      redis.call('HDEL', KEYS[3], 'o', 'v')
      redis.call('PUBLISH', ARGV[3] .. 'redlock:wake', ARGV[4])
    else
      redis.call('HDEL', KEYS[3], 'o')
    end
    return {0}
  end
end
--@prelude
local K = keys_of(KEYS)
local C, a = context_of(ARGV)
local id, seq = ARGV[a], tonumber(ARGV[a + 2]) or 0
local all, grave = ARGV[a + 1] == '1' or ARGV[a + 1] == 'G', ARGV[a + 1] == 'g' or ARGV[a + 1] == 'G'
local undo = ARGV[a + 1] == 'u' and (tonumber(ARGV[a + 3]) or -1) or nil
local died = ARGV[a + 4] == '1'

unsolo(K, C)
purge(K.h, K.i, C.now_ms, K.hd, C)
purge_waiters(K, C.now_ms)

local info = holder_get(K.h, K.i, id)
if not info then
  if grave then tombstone(K, C, id) end
  return finish(K, C, {-1}, promote(K, C))
end
if seq > 0 and seq <= (info[8] or 0) then return finish(K, C, {info[2]}, {}) end
if undo and (info[2] < 2 or (info[8] or 0) ~= undo) then return finish(K, C, {info[2]}, {}) end
C.changed = true
if info[2] > 1 and not all then
  info[2] = info[2] - 1
  info[8] = math.max(seq, info[8] or 0)
  info_set(K.i, id, info)
  return finish(K, C, {info[2]}, {})
end
redis.call('ZREM', K.h, id)
redis.call('HDEL', K.i, id)
if died and (tonumber(info[10]) or 0) > 0 then hold_back(K.hd, C.now_ms + info[10], C.now_ms, C) end
if grave then tombstone(K, C, id) end
redlock_wake(K, C)
return finish(K, C, {0}, promote(K, C))
