-- acquire.lua: try once to grant a new holder on a lock or semaphore.
-- KEYS: holders, info, fence (see prelude)
-- ARGV: id, mode ('x'|'s'|'p'), limit (0 for a lock), ttl_ms, owner, client,
--       max_hold_ms (0 = none), retention_ms
-- Returns {1, fence, ttl_ms} granted; {0, ms until the blockers may expire}
-- busy; {-1, 0} conflict (the name is held as another kind or limit).
-- fence = max(last + 1, Redis time in us): it increases also after the fence
-- key expired, with no per-name state kept beyond the retention margin.
local h, i, f = KEYS[1], KEYS[2], KEYS[3]
local id, mode, limit = ARGV[1], ARGV[2], tonumber(ARGV[3])
local ttl, owner, client = tonumber(ARGV[4]), ARGV[5], ARGV[6]
local max_hold, retention = tonumber(ARGV[7]), tonumber(ARGV[8])

local now_ms, now_us = clock()
purge(h, i, now_ms)

local held = holders(h, i)
if #held > 0 then
  local blocked = false
  for n = 1, #held do
    local info = held[n][3]
    if (info[1] == 'p') ~= (mode == 'p') or info[6] ~= limit then
      return {-1, 0}
    end
    if mode == 'x' or info[1] == 'x' then blocked = true end
  end
  if mode == 'p' and #held >= limit then
    return {0, held[1][2] - now_ms} -- the first permit to expire
  end
  if blocked then
    return {0, held[#held][2] - now_ms} -- every holder gone
  end
end

local expiry, deadline = now_ms + ttl, 0
if max_hold > 0 then
  deadline = now_ms + max_hold
  if deadline < expiry then expiry = deadline end
end

local fence = now_us
local last = tonumber(redis.call('GET', f) or '0')
if last + 1 > fence then fence = last + 1 end

redis.call('ZADD', h, expiry, id)
info_set(i, id, {mode, 1, deadline, owner, client, limit})
redis.call('SET', f, string.format('%.0f', fence))
retime(h, i, f, now_ms, retention)
return {1, fence, expiry - now_ms}
