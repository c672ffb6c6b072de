-- verify.lua: does Redis still hold this lease? Asked for every lease of a
-- broker when Redis may have lost data (a restart, a flush, a failover);
-- changes nothing.
-- KEYS: holders, info, header. ARGV: id
-- Returns {ms left, hold_ms (see hold_left in the prelude)} or {-1, 0}
-- when id holds nothing (or holds it no more).

-- A solo holder lives in the header; when it is another id, the model is
-- empty and id holds nothing.
local hv = redis.call('HMGET', KEYS[3], 'o', 'x', 'e')
local t = redis.call('TIME')
local now_ms = t[1] * 1000 + math.floor(t[2] / 1000)
if hv[1] then
  if hv[1] ~= ARGV[1] or tonumber(hv[2]) <= now_ms then return {-1, 0} end
  local deadline = tonumber(hv[3])
  return {tonumber(hv[2]) - now_ms, deadline > 0 and deadline - now_ms or 0}
end
--@prelude
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
local info = info_get(KEYS[2], ARGV[1])
if not expiry or not info or tonumber(expiry) <= now_ms then return {-1, 0} end
return {tonumber(expiry) - now_ms, hold_left({now_ms = now_ms}, info[3])}
