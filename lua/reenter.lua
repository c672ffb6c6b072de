-- reenter.lua: a holder takes its lock once more (reentrancy).
-- KEYS: holders, info, fence. ARGV: id
-- Returns {count, ms left} or {-1, 0} when the holder is gone.
local h, i = KEYS[1], KEYS[2]
local id = ARGV[1]
local now_ms = clock()
local info, expiry = live_holder(h, i, id, now_ms)
if not info then return {-1, 0} end
info[2] = info[2] + 1
info_set(i, id, info)
return {info[2], expiry - now_ms}
