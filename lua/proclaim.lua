-- proclaim.lua: an exclusive holder (an election's leader) publishes a new
-- value without a new term: the fence stays.
-- KEYS: holders, info, header. ARGV: id, value ('' none, '=' .. V: see the
-- prelude), seq (the op seq, see the prelude; 0: none).
-- Returns {1, fence}; {-1, 0} when id holds nothing; {-2, 0} when it holds
-- the lock but not exclusively. A repeat of a call that ran (its seq not
-- above the holder's) answers the fence and changes nothing.

-- The fast path: a solo holder lives in the header; when it is another id,
-- the model is empty and id holds nothing.
local hv = redis.call('HMGET', KEYS[3], 'o', 'x', 'k', 'r', 'f', 'W')
local seq = tonumber(ARGV[3]) or 0
if hv[1] then
  if hv[1] ~= ARGV[1] then return {-1, 0} end
  local t = redis.call('TIME')
  if tonumber(hv[2]) <= t[1] * 1000 + math.floor(t[2] / 1000) then return {-1, 0} end
  if hv[3] ~= 'x' then return {-2, 0} end
  local last = tonumber(hv[4] or '0')
  if seq == 0 or seq > last then
    redis.call('HSET', KEYS[3], 'V', ARGV[2], 'r', math.max(seq, last))
  end
  return {1, tonumber(hv[5])}
end
--@prelude
local now_ms = clock()
local info = live_holder(KEYS[1], KEYS[2], ARGV[1], now_ms, KEYS[3])
if not info then return {-1, 0} end
if info[1] ~= 'x' then return {-2, 0} end
if seq == 0 or seq > (info[8] or 0) then
  info[8] = math.max(seq, info[8] or 0)
  info[9] = ARGV[2]
  info_set(KEYS[2], ARGV[1], info)
  if hv[6] then tell_watchers(KEYS[3], hv[6], now_ms) end
end
return {1, info[7]}
