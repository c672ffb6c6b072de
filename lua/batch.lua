-- batch.lua: K lock calls in one script call (the calls one Redis
-- connection got in one loop turn: broker/store/rpool_cmd.c), run in order,
-- each exactly as its own script would run alone: the build puts every
-- other script of lua/ here, whole (its prelude included), as a function
-- of its own KEYS and ARGV (deploy/embed-lua.sh, at "--@scripts"). Nothing
-- here comes from input: a call names its script, and a name that is no
-- script is an error of that call.
-- ARGV[1]: K. ARGV[2]: where the calls' keys are:
--   'k'  in KEYS, every call's keys, the calls in order;
--   's'  in ARGV, each call's right after its counts, and no key declared
--        (lua/batch_slots.lua, this text for a Redis Cluster master, whose
--        calls name keys of several slots). Before a call runs, one EXISTS
--        of all its keys asks Redis whether it serves them here now, as
--        the call's own EVALSHA would have been asked: a slot elsewhere,
--        on the move or down fails that call with LBSLOT and the Redis
--        error, before anything of it ran (the broker sends it again
--        alone, to hear MOVED, ASK, TRYAGAIN or CLUSTERDOWN).
-- Then for each call: its script's name, its number of keys, its number
-- of args, ('s': its keys), its args.
-- Returns the K replies in order. A call's error (an error reply, a Lua
-- error, a failed redis.call) is its reply alone and the calls after it
-- still run, as they would have, sent one by one; what a call wrote before
-- its error stays, as it would alone. A reply that is nil alone is false
-- here: Redis sends both as a null.
local S = {}
--@scripts
-- A call's error as Redis would send it alone. Redis 7.0 raises a failed
-- redis.call as its error text ("ERR ...", "READONLY ..."); later versions
-- as a table with err. A Lua error has no code: Redis puts ERR before it
-- when the script runs alone.
local function err_of(r)
  if type(r) == 'table' and r.err then return r.err end
  r = tostring(r)
  if not r:find('^%u[%u_]* ') then r = 'ERR ' .. r end
  return r
end
local out, ki, ai, slots = {}, 0, 3, ARGV[2] == 's'
for n = 1, tonumber(ARGV[1]) do
  local name, nk, na = ARGV[ai], tonumber(ARGV[ai + 1]), tonumber(ARGV[ai + 2])
  local f, keys, args = S[name]
  if slots then
    keys, args = {unpack(ARGV, ai + 3, ai + 2 + nk)}, {unpack(ARGV, ai + 3 + nk, ai + 2 + nk + na)}
    ai = ai + 3 + nk + na
  else
    keys, args = {unpack(KEYS, ki + 1, ki + nk)}, {unpack(ARGV, ai + 3, ai + 2 + na)}
    ki, ai = ki + nk, ai + 3 + na
  end
  local ok, r = true, nil
  if slots and nk > 0 then
    ok, r = pcall(redis.call, 'EXISTS', unpack(keys))
  end
  if not ok then
    r = {err = 'LBSLOT ' .. err_of(r)}
  else
    if f then
      ok, r = pcall(f, keys, args)
    else
      ok, r = false, 'ERR batch: no script named ' .. tostring(name)
    end
    if not ok then
      r = {err = err_of(r)}
    elseif r == nil then
      r = false
    end
  end
  out[n] = r
end
return out
