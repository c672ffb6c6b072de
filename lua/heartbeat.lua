-- heartbeat.lua: one broker's waiters on one lock are alive; grant those
-- that fit now. Run on a wake-up message, at the holders' expiry, and as
-- the slow safety net (so it doubles as the waiters' heartbeat).
-- KEYS: all seven. ARGV: the context, then the waiter ids.
-- Returns {retry_ms, nlost, lost ids..., grants...}: retry_ms until the
-- holders may expire or a deaf broker's waiters are dropped (0: neither);
-- lost ids are neither queued nor
-- holding (dropped, e.g. Redis restarted empty or the broker stalled past
-- its heartbeat): their broker queues them again. Grants follow,
-- GRANT_WIDTH values each, and include ids that hold the lock already
-- (granted by a script whose reply was lost).
local K = keys_of(KEYS)
local C, a = context_of(ARGV)
unsolo(K, C)

purge(K.h, K.i, C.now_ms, K.hd, C)
purge_waiters(K, C.now_ms)

-- Every listed id that still waits gets a new deadline, in one call when
-- all of them do (a waiter is in :d exactly when it is queued); otherwise
-- each id is looked at.
local lost, already = {}, {}
local n = #ARGV - a + 1
local refreshed = 0
if n > 0 then
  local args = {}
  for k = a, #ARGV do
    args[#args + 1] = C.now_ms + C.heartbeat
    args[#args + 1] = ARGV[k]
  end
  refreshed = redis.call('ZADD', K.d, 'XX', 'CH', unpack(args))
end
if refreshed < n then
  for k = a, #ARGV do
    local id = ARGV[k]
    if not redis.call('ZSCORE', K.q, id) then
      local info, expiry = holder_get(K.h, K.i, id)
      if info then
        already[#already + 1] = id
        already[#already + 1] = info[7]
        already[#already + 1] = expiry - C.now_ms
        already[#already + 1] = hold_left(C, info[3])
      else
        lost[#lost + 1] = id
      end
    end
  end
end

local granted = promote(K, C)
for _, v in ipairs(already) do granted[#granted + 1] = v end
-- The first expiry: the earliest moment anything may become free (a
-- permit, a shared holder), whatever the waiters want.
local first = redis.call('ZRANGE', K.h, 0, 0, 'WITHSCORES')
local reply = {look_again(C, #first > 0 and tonumber(first[2]) - C.now_ms or 0), #lost}
for _, id in ipairs(lost) do reply[#reply + 1] = id end
return finish(K, C, reply, granted)
