-- extend.lua: set a holder's remaining lifetime (the watchdog's renewal and
-- the extend op), never past its max-hold deadline.
-- KEYS: holders, info, fence. ARGV: id, ttl_ms, retention_ms
-- Returns the lifetime set in ms, or -1 when the id holds nothing.
local h, i, f = KEYS[1], KEYS[2], KEYS[3]
local id, ttl, retention = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local now_ms = clock()
-- No purge of the others: this is the watchdog's hot path, and retime
-- below only needs the latest expiry.
local info = live_holder(h, i, id, now_ms)
if not info then
  retime(h, i, f, now_ms, retention)
  return -1
end
local expiry = now_ms + ttl
if info[3] > 0 and info[3] < expiry then expiry = info[3] end
redis.call('ZADD', h, 'XX', expiry, id)
retime(h, i, f, now_ms, retention)
return expiry - now_ms
