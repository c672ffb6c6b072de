-- extend.lua: set a holder's remaining lifetime (the watchdog's renewal and
-- the extend op), never past its max-hold deadline.
-- KEYS: holders, info, header. ARGV: id, ttl_ms, retention_ms, then for a
-- retake (a Redlock renewal; else absent) count, seq, fence, owner,
-- client, hold_ms, value, lock delay ms: as verify.lua's retake, the lease missing here while
-- nobody holds the lock here (a master restarted empty) is held again
-- here, for ttl_ms.
-- Returns {ms, hold_ms}: the lifetime set in ms (-1 when the id holds
-- nothing) and the ms left of its max hold (0 for none; see hold_left).

-- The fast path: a solo holder lives in the header (3 Redis calls, 4 when
-- the header's lifetime must grow: see 'z' in the prelude); when it is
-- another id, the model is empty and id holds nothing.
local hv = redis.call('HMGET', KEYS[3], 'o', 'x', 'e', 'z', 'D')
if hv[1] then
  if hv[1] ~= ARGV[1] then return {-1, 0} end
  local t = redis.call('TIME')
  local now_ms = t[1] * 1000 + math.floor(t[2] / 1000)
  if tonumber(hv[2]) > now_ms then
    local expiry, deadline = now_ms + tonumber(ARGV[2]), tonumber(hv[3])
    if deadline > 0 and deadline < expiry then expiry = deadline end
    -- (the header outlives the expiry by the lock delay too: 'Dm')
    local retention = tonumber(ARGV[3]) + tonumber(hv[5] or '0')
    if hv[4] and tonumber(hv[4]) >= expiry + retention then
      redis.call('HSET', KEYS[3], 'x', expiry)
    else
      local z = expiry + 2 * retention
      redis.call('HSET', KEYS[3], 'x', expiry, 'z', z)
      redis.call('PEXPIRE', KEYS[3], z - now_ms)
    end
    return {expiry - now_ms, deadline > 0 and deadline - now_ms or 0}
  end
  -- Expired: only a retake (below) may hold it again.
  if not ARGV[4] then return {-1, 0} end
end
--@prelude
local h, i, hd = KEYS[1], KEYS[2], KEYS[3]
local id, ttl, retention = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local now_ms = clock()
local C = {now_ms = now_ms}
-- retime below sets the header's lifetime, which may end before 'z'.
if hv[4] then redis.call('HDEL', hd, 'z') end
-- No purge of the others: this is the watchdog's hot path, and retime
-- below only needs the latest expiry.
local info = live_holder(h, i, id, now_ms, hd)
if not info then
  retime(h, i, hd, now_ms, retention)
  if ARGV[4] and redis.call('ZCARD', h) == 0 and not redis.call('HGET', hd, 'm') then
    return retake_solo(hd, id, now_ms, ttl, tonumber(ARGV[4]), tonumber(ARGV[5]),
                       tonumber(ARGV[6]), ARGV[7], ARGV[8], tonumber(ARGV[9]), retention,
                       ARGV[10], tonumber(ARGV[11] or '0'))
  end
  return {-1, 0}
end
local expiry = now_ms + ttl
if info[3] > 0 and info[3] < expiry then expiry = info[3] end
redis.call('ZADD', h, 'XX', expiry, id)
retime(h, i, hd, now_ms, retention)
return {expiry - now_ms, hold_left(C, info[3])}
