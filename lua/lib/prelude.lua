-- prelude.lua: helpers shared by every lock script. The build prepends this
-- file to each lua/*.lua script before embedding it (deploy/embed-lua.sh);
-- it is never sent to Redis on its own.
--
-- Data model of one lock NAME under prefix P (all keys share the hash tag
-- {NAME}, so every script touches one Redis Cluster slot; a NAME starting
-- with '}' or '=' is written as '=' NAME so the tag is never empty):
--   P{NAME}:h  zset  holder id -> expiry, Redis time in ms
--   P{NAME}:i  hash  holder id -> cmsgpack {mode, count, max-hold deadline
--                    ms or 0, owner, client, limit}; mode 'x' exclusive,
--                    's' shared, 'p' semaphore permit (limit > 0)
--   P{NAME}:f  string the last fencing token issued
-- A holder id is the lease token. Invariants: every script drops expired
-- holders first; an expiry never passes its holder's max-hold deadline; :h
-- and :i expire with their last holder and :f a retention margin later.
-- Times come only from the Redis clock, so brokers on different hosts agree.

local function clock()
  local t = redis.call('TIME')
  local s, us = tonumber(t[1]), tonumber(t[2])
  return s * 1000 + math.floor(us / 1000), s * 1000000 + us
end

local function purge(h, i, now_ms)
  local dead = redis.call('ZRANGEBYSCORE', h, '-inf', now_ms)
  if #dead > 0 then
    redis.call('ZREMRANGEBYSCORE', h, '-inf', now_ms)
    for n = 1, #dead, 1000 do
      redis.call('HDEL', i, unpack(dead, n, math.min(n + 999, #dead)))
    end
  end
end

-- Sets the keys' lifetimes from the latest holder expiry; with no holder
-- left only the fence survives, for the retention margin.
local function retime(h, i, f, now_ms, retention)
  local top = redis.call('ZRANGE', h, -1, -1, 'WITHSCORES')
  if #top == 0 then
    redis.call('DEL', h, i)
    redis.call('PEXPIRE', f, retention)
    return
  end
  local keep = tonumber(top[2]) - now_ms
  redis.call('PEXPIRE', h, keep)
  redis.call('PEXPIRE', i, keep)
  redis.call('PEXPIRE', f, keep + retention)
end

local function info_get(i, id)
  local raw = redis.call('HGET', i, id)
  if not raw then return nil end
  return cmsgpack.unpack(raw)
end

-- A holder exists only when both its expiry and its info do. Half of one
-- (a key lost to eviction or a manual edit) is removed, never trusted: a
-- lease Redis does not fully hold is not held.
local function holder_get(h, i, id)
  local score = redis.call('ZSCORE', h, id)
  local info = info_get(i, id)
  if score and info then return info, tonumber(score) end
  if score then redis.call('ZREM', h, id) end
  if info then redis.call('HDEL', i, id) end
  return nil
end

-- The holders as {id, expiry, info} in expiry order, half holders removed.
local function holders(h, i)
  local held = redis.call('ZRANGE', h, 0, -1, 'WITHSCORES')
  local out = {}
  for n = 1, #held, 2 do
    local info = info_get(i, held[n])
    if info then
      out[#out + 1] = {held[n], tonumber(held[n + 1]), info}
    else
      redis.call('ZREM', h, held[n])
    end
  end
  return out
end

local function info_set(i, id, info)
  redis.call('HSET', i, id, cmsgpack.pack(info))
end
