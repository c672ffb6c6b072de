-- inspect.lua: what a lock looks like now, without lease tokens.
-- KEYS: holders, info, fence. ARGV: (none)
-- Returns {limit, fence or false, waiters, mode1, ttl1, count1, owner1,
-- client1, mode2, ...} with holders in expiry order.
local h, i, f = KEYS[1], KEYS[2], KEYS[3]
local now_ms = clock()
purge(h, i, now_ms)
local held = holders(h, i)
local out = {0, redis.call('GET', f) or false, 0}
for n = 1, #held do
  local info = held[n][3]
  out[1] = info[6]
  out[#out + 1] = info[1]
  out[#out + 1] = held[n][2] - now_ms
  out[#out + 1] = info[2]
  out[#out + 1] = info[4]
  out[#out + 1] = info[5]
end
return out
