-- lease_index.lua: the token -> lock name pointer of a detached lease, so
-- that any session on any broker (also after a broker restart) can find the
-- lock a detached token names. It lives in its own slot (P + "lease:{" +
-- token + "}"), holds no lock state and only ever outlives its lease by its
-- own expiry; a stale pointer is harmless because every lock script checks
-- the holder itself.
-- KEYS[1]: the pointer key. ARGV: op ('set' name ms | 'get' ms | 'del')
-- 'set' stores name for ms; 'get' returns the name (false when none) and
-- makes it live at least ms more; 'del' removes it.
local k, op = KEYS[1], ARGV[1]
if op == 'set' then
  redis.call('SET', k, ARGV[2], 'PX', ARGV[3])
  return 1
elseif op == 'get' then
  local name = redis.call('GET', k)
  if name and redis.call('PTTL', k) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', k, ARGV[2])
  end
  return name
elseif op == 'del' then
  return redis.call('DEL', k)
end
return redis.error_reply('lease_index: unknown op')
