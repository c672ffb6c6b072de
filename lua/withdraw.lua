-- withdraw.lua: a waiter gives up (timeout, cancel, its session ended, the
-- broker stops). If it was granted meanwhile, the grant is given back.
-- Either way whoever now fits is woken.
-- KEYS: all seven. ARGV: the context, then id, then 'g' when a copy of
-- its acquire may still be on its way (a reply was lost): id is never
-- granted again (see tombstone in the prelude).
-- Returns {1} when id held the lock (now released), else {0}; grants for
-- the calling broker follow (GRANT_WIDTH values each, see the prelude).
local K = keys_of(KEYS)
local C, a = context_of(ARGV)
unsolo(K, C)
local id = ARGV[a]

purge(K.h, K.i, C.now_ms, K.hd, C)
purge_waiters(K, C.now_ms)

local status = 0
if holder_get(K.h, K.i, id) then
  C.changed = true
  redis.call('ZREM', K.h, id)
  redis.call('HDEL', K.i, id)
  redlock_wake(K, C)
  status = 1
elseif redis.call('ZSCORE', K.q, id) then
  local wi = info_get(K.w, id)
  dequeue(K, id, wi and wi[1])
  if not wi then recount_xw(K) end
end
if ARGV[a + 1] == 'g' then tombstone(K, C, id) end
return finish(K, C, {status}, promote(K, C))
