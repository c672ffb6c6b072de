-- lease_index.lua: the token -> lock name pointer of a detached lease, so
-- that any session on any broker (also after a broker restart) can find the
-- lock a detached token names, and its end, so that a later release or
-- extend of a lease that ended can say why. It lives in its own slot (P +
-- "lease:{" + token + "}", and that key + ":e"), holds no lock state and
-- only ever outlives its lease by its own expiry; a stale pointer is
-- harmless because every lock script checks the holder itself.
-- KEYS: the pointer key, its end key. ARGV: op, then
--   'set' name ms    stores name for ms
--   'get' ms         returns the name (false when none) and makes it (and
--                    its end) live at least ms more
--   'end' life hold  records the lease's end as granted or extended: its
--                    life left and max hold left in ms (0: none), on the
--                    Redis clock; kept as long as the pointer
--   'why'            how the lease ended, as a lost event would say:
--                    'max_hold' when its max hold ran out, 'expired' when
--                    its life did, else 'gone' (Redis no longer holds it);
--                    false when its end is not known
--   'del'            removes both
local k, e, op = KEYS[1], KEYS[2], ARGV[1]
if op == 'set' then
  redis.call('SET', k, ARGV[2], 'PX', ARGV[3])
  return 1
elseif op == 'get' then
  local name = redis.call('GET', k)
  if name and redis.call('PTTL', k) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', k, ARGV[2])
    if redis.call('EXISTS', e) == 1 then redis.call('PEXPIRE', e, ARGV[2]) end
  end
  return name
elseif op == 'end' then
  local ttl = redis.call('PTTL', k)
  if ttl <= 0 then return 0 end
  local t = redis.call('TIME')
  local now = t[1] * 1000 + math.floor(t[2] / 1000)
  local hold = tonumber(ARGV[3])
  redis.call('SET', e, string.format('%.0f %.0f', now + tonumber(ARGV[2]), hold > 0 and now + hold or 0),
             'PX', ttl)
  return 1
elseif op == 'why' then
  local v = redis.call('GET', e)
  if not v then return false end
  local ends, held = string.match(v, '^(%d+) (%d+)$')
  if not ends then return false end
  local t = redis.call('TIME')
  local now = t[1] * 1000 + math.floor(t[2] / 1000)
  if tonumber(held) > 0 and now >= tonumber(held) then return 'max_hold' end
  if now >= tonumber(ends) then return 'expired' end
  return 'gone'
elseif op == 'del' then
  return redis.call('DEL', k, e)
end
return redis.error_reply('lease_index: unknown op')
