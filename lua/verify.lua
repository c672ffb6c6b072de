-- verify.lua: does Redis still hold this lease, as the broker knows it?
-- Asked for every lease of a broker when Redis may have lost data (a
-- restart, a flush, a failover), and, with retake, by a Redlock renewal.
-- KEYS: holders, info, header. ARGV: id, count, seq, value, then for a
-- retake (Redlock only, else absent) ttl_ms, fence, owner, client,
-- hold_ms, retention_ms, lock delay ms.
-- count, value and seq: the reentrancy count and the value ('' none, see
-- the prelude) the broker holds the lease at, and the op seq of the last
-- call that set them (see "op seq" in the prelude; 0: none). A holder
-- whose seq is below seq missed calls the broker had answered (a failover
-- to a replica that missed them, a restart from an older snapshot): they
-- are replayed at once, as their result: the count becomes count, the
-- value value, the seq seq. One whose seq is not below it is left alone
-- (later calls of the broker ran here already, or nothing was missed).
-- retake: the lease is missing here, and nobody holds the lock here (a
-- master restarted empty): it is held again here, as the solo holder, for
-- ttl_ms (never past hold_ms, 0 for none), with its count, seq and fence
-- (the header's fence is raised to it).
-- Returns {ms left, hold_ms (see hold_left in the prelude)} or {-1, 0}
-- when id holds nothing (or holds it no more).

-- The fast path: id is the live solo holder.
local hv = redis.call('HMGET', KEYS[3], 'o', 'x', 'e', 'r', 'W')
local t = redis.call('TIME')
local now_ms = t[1] * 1000 + math.floor(t[2] / 1000)
local count, seq = tonumber(ARGV[2]) or 0, tonumber(ARGV[3]) or 0
if hv[1] == ARGV[1] and tonumber(hv[2]) > now_ms then
  if seq > tonumber(hv[4] or '0') and count > 0 then
    redis.call('HSET', KEYS[3], 'c', count, 'r', seq, 'V', ARGV[4] or '')
  end
  local deadline = tonumber(hv[3])
  return {tonumber(hv[2]) - now_ms, deadline > 0 and deadline - now_ms or 0}
end
--@prelude
-- A live solo holder that is another id: the model is empty.
local live_solo = hv[1] and tonumber(hv[2]) > now_ms
if not live_solo then
  local info, expiry = holder_get(KEYS[1], KEYS[2], ARGV[1])
  if info and expiry > now_ms then
    if seq > (info[8] or 0) and count > 0 then
      info[2] = count
      info[8] = seq
      info[9] = ARGV[4] or ''
      info_set(KEYS[2], ARGV[1], info)
      if hv[5] then tell_watchers(KEYS[3], hv[5], now_ms) end
    end
    return {expiry - now_ms, hold_left({now_ms = now_ms}, info[3])}
  end
end
-- Retake (Redlock): the lock must be free here ('m': the model holds
-- someone or someone waits).
if ARGV[5] == nil or live_solo or count <= 0 or redis.call('HGET', KEYS[3], 'm')
    or redis.call('EXISTS', KEYS[1], KEYS[2]) > 0 then
  return {-1, 0}
end
return retake_solo(KEYS[3], ARGV[1], now_ms, tonumber(ARGV[5]), count, seq, tonumber(ARGV[6]),
                   ARGV[7], ARGV[8], tonumber(ARGV[9]), tonumber(ARGV[10]), ARGV[4],
                   tonumber(ARGV[11] or '0'))
