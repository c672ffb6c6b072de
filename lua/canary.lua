-- canary.lua: did Redis lose this broker's writes? Each broker keeps one
-- key of its own (not lock data: no lock script reads it) whose value it
-- changes on every check, so a Redis that restarted empty, was flushed, or
-- failed over to a replica that missed the last writes shows a value (or
-- none) other than the one this broker wrote last.
-- KEYS[1]: the canary key. ARGV: the value written last, another value
-- that may have been written (its reply was lost; '' for none), the new
-- value, its lifetime in ms. An empty ARGV[1]: the first check, nothing
-- expected yet.
-- Returns 1 when the key held what was expected, 0 when it did not (data
-- lost); either way the key holds the new value afterwards.
local v = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[4])
if ARGV[1] == '' or v == ARGV[1] or (ARGV[2] ~= '' and v == ARGV[2]) then
  return 1
end
return 0
