-- reenter.lua: a holder takes its lock once more (reentrancy).
-- KEYS: holders, info, fence. ARGV: id
-- Returns {count, ms left} or {-1, 0} when the holder is gone.
local h, i = KEYS[1], KEYS[2]
local id = ARGV[1]
local now_ms = clock()
purge(h, i, now_ms)
local info, expiry = holder_get(h, i, id)
if not info then return {-1, 0} end
info[2] = info[2] + 1
info_set(i, id, info)
return {info[2], expiry - now_ms}
