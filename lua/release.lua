-- release.lua: drop one reentrancy level of a holder; at zero the holder is
-- removed and whoever now fits in the queue is granted or woken.
-- KEYS: all seven. ARGV: the context, then id, all ('1': drop every level,
-- as when a session ends).
-- Returns {count left (0 = freed), grants...}, or {-1} when the id holds
-- nothing.
local K = keys_of(KEYS)
local C, a = context_of(ARGV)
local id, all = ARGV[a], ARGV[a + 1] == '1'

purge(K.h, K.i, C.now_ms)
purge_waiters(K, C.now_ms)

local info = holder_get(K.h, K.i, id)
if not info then return finish(K, C, {-1}, promote(K, C)) end
if info[2] > 1 and not all then
  info[2] = info[2] - 1
  info_set(K.i, id, info)
  return finish(K, C, {info[2]}, {})
end
redis.call('ZREM', K.h, id)
redis.call('HDEL', K.i, id)
return finish(K, C, {0}, promote(K, C))
