-- release.lua: drop one reentrancy level of a holder; at zero the holder is
-- removed and whoever now fits in the queue is granted or woken.
-- KEYS: all seven. ARGV: the context, then id, all ('1': drop every level,
-- as when a session ends).
-- Returns {count left (0 = freed), grants...}, or {-1} when the id holds
-- nothing.
local K = keys_of(KEYS)
local C, a = context_of(ARGV)
local id, all = ARGV[a], ARGV[a + 1] == '1'

-- Nobody queued (the common case): nothing to purge there, nobody to wake.
if redis.call('EXISTS', K.q) == 0 then
  local info = live_holder(K.h, K.i, id, C.now_ms)
  if info and info[2] > 1 and not all then
    info[2] = info[2] - 1
    info_set(K.i, id, info)
    return {info[2]}
  end
  if info then
    redis.call('ZREM', K.h, id)
    redis.call('HDEL', K.i, id)
    if redis.call('EXISTS', K.h) == 0 then
      -- The last holder: :h and :i went with it; the fence stays a while.
      redis.call('PEXPIRE', K.f, C.retention)
      return {0}
    end
  end
  retime(K.h, K.i, K.f, C.now_ms, C.retention)
  return {info and 0 or -1}
end

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
