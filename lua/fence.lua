-- fence.lua: Redlock (--redlock): the fence of a won round, written on the
-- masters that granted it (those that granted after the round was won
-- too) before its holder hears of it, so that the next round's majority,
-- which shares a master with this one, sees it.
-- KEYS: holders, info, header. ARGV: id, fence
-- Returns 1 when id holds the lock here (its fence and the header's 'f'
-- are now fence), else 0 and nothing is written (a header written without
-- its holder would outlive every lifetime set).
-- The header's 'f' is set, not raised: while id holds the lock here no
-- other fence was issued here since id's own, which no client was given
-- (the round's fence is above every fence the quorum issued, and so above
-- every fence given before), so fence is the highest given for this lock.
-- inspect then shows the holder's fence on every master that holds it.
local hv = redis.call('HMGET', KEYS[3], 'o', 'x')
local now_ms = clock()
local fence = tonumber(ARGV[2])
if not fence then return redis.error_reply('fence: not a number') end
if hv[1] then
  if hv[1] ~= ARGV[1] or tonumber(hv[2]) <= now_ms then return 0 end
else
  local info, expiry = holder_get(KEYS[1], KEYS[2], ARGV[1])
  if not info or expiry <= now_ms then return 0 end
  info[7] = fence
  info_set(KEYS[2], ARGV[1], info)
  -- A header lost while its holders live is not made again without a
  -- lifetime: the holder's fence alone then says it.
  if redis.call('EXISTS', KEYS[3]) == 0 then return 1 end
end
redis.call('HSET', KEYS[3], 'f', string.format('%.0f', fence))
return 1
