-- orphans.lua: the calling broker was woken for a lock it has no waiter
-- on. Any waiter of that broker still queued there is an orphan: its
-- acquire's reply never reached the broker (Redis went away meanwhile),
-- which answered its client and forgot it. Left alone it would reserve the
-- lock until its heartbeat deadline. Drops them, then grants or wakes
-- whoever fits.
-- KEYS: all seven. ARGV: the context.
-- Returns {n, the n ids dropped...}, then grants for the caller (none: it
-- had no waiters here when it sent this) as in every script.
-- The ids let the broker tell an orphan from a waiter of its own that
-- reached Redis first on another connection (after one failed) and was
-- dropped too: that one it queues again at once.
local K = keys_of(KEYS)
local C = context_of(ARGV)

unsolo(K, C)
purge(K.h, K.i, C.now_ms, K.hd, C)
purge_waiters(K, C.now_ms)

local queue = redis.call('ZRANGE', K.q, 0, -1)
local dropped = {0}
for n = 1, #queue, 100 do
  local ids = {unpack(queue, n, math.min(n + 99, #queue))}
  local infos = redis.call('HMGET', K.w, unpack(ids))
  for k = 1, #ids do
    local wi = infos[k] and cmsgpack.unpack(infos[k])
    if wi and wi[7] == C.broker then
      dequeue(K, ids[k], wi[1])
      dropped[1] = dropped[1] + 1
      dropped[#dropped + 1] = ids[k]
    end
  end
end
return finish(K, C, dropped, promote(K, C))
