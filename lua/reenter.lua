-- reenter.lua: a holder takes its lock once more (reentrancy).
-- KEYS: holders, info, header. ARGV: id, seq (the op seq, see the
-- prelude; 0: none)
-- Returns {count, ms left} or {-1, 0} when the holder is gone. A repeat of
-- a call that ran (same seq) returns the count and changes nothing.

-- The fast path: a solo holder lives in the header; when it is another id,
-- the model is empty and id holds nothing.
local hv = redis.call('HMGET', KEYS[3], 'o', 'x', 'c', 'r', 'W')
if hv[1] then
  if hv[1] ~= ARGV[1] then return {-1, 0} end
  local t = redis.call('TIME')
  local left = tonumber(hv[2]) - (t[1] * 1000 + math.floor(t[2] / 1000))
  if left <= 0 then return {-1, 0} end
  local count, seq = tonumber(hv[3]), tonumber(ARGV[2]) or 0
  if seq > 0 and seq <= tonumber(hv[4] or '0') then return {count, left} end
  redis.call('HSET', KEYS[3], 'c', count + 1, 'r', math.max(seq, tonumber(hv[4] or '0')))
  return {count + 1, left}
end
--@prelude
local h, i = KEYS[1], KEYS[2]
local id, seq = ARGV[1], tonumber(ARGV[2]) or 0
local now_ms = clock()
local info, expiry = live_holder(h, i, id, now_ms, KEYS[3])
if not info then return {-1, 0} end
if seq > 0 and seq <= (info[8] or 0) then return {info[2], expiry - now_ms} end
info[2] = info[2] + 1
info[8] = math.max(seq, info[8] or 0)
info_set(i, id, info)
if hv[5] then tell_watchers(KEYS[3], hv[5], now_ms) end
return {info[2], expiry - now_ms}
