-- reenter.lua: a holder takes its lock once more (reentrancy).
-- KEYS: holders, info, header. ARGV: id
-- Returns {count, ms left} or {-1, 0} when the holder is gone.

-- The fast path: a solo holder lives in the header; when it is another id,
-- the model is empty and id holds nothing.
local hv = redis.call('HMGET', KEYS[3], 'o', 'x')
if hv[1] then
  if hv[1] ~= ARGV[1] then return {-1, 0} end
  local t = redis.call('TIME')
  local left = tonumber(hv[2]) - (t[1] * 1000 + math.floor(t[2] / 1000))
  if left <= 0 then return {-1, 0} end
  return {redis.call('HINCRBY', KEYS[3], 'c', 1), left}
end
--@prelude
local h, i = KEYS[1], KEYS[2]
local id = ARGV[1]
local now_ms = clock()
local info, expiry = live_holder(h, i, id, now_ms)
if not info then return {-1, 0} end
info[2] = info[2] + 1
info_set(i, id, info)
return {info[2], expiry - now_ms}
