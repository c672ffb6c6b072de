-- release.lua: drop one reentrancy level of a holder; at zero the holder is
-- removed and its capacity freed.
-- KEYS: holders, info, fence. ARGV: id, retention_ms, all ('1': drop every
-- level at once, as when a session ends)
-- Returns the count left (0 = freed), or -1 when the id holds nothing.
local h, i, f = KEYS[1], KEYS[2], KEYS[3]
local id, retention, all = ARGV[1], tonumber(ARGV[2]), ARGV[3] == '1'
local now_ms = clock()
purge(h, i, now_ms)
local info = holder_get(h, i, id)
if not info then
  retime(h, i, f, now_ms, retention)
  return -1
end
if info[2] > 1 and not all then
  info[2] = info[2] - 1
  info_set(i, id, info)
  return info[2]
end
redis.call('ZREM', h, id)
redis.call('HDEL', i, id)
retime(h, i, f, now_ms, retention)
return 0
