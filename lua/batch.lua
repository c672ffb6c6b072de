-- batch.lua: K lock calls in one script call (the calls one Redis
-- connection got in one loop turn: broker/store/rpool_cmd.c), run in order,
-- each exactly as its own script would run alone: the build puts every
-- other script of lua/ here, whole (its prelude included), as a function
-- of its own KEYS and ARGV (deploy/embed-lua.sh, at "--@scripts"). Nothing
-- here comes from input: a call names its script, and a name that is no
-- script is an error of that call.
-- KEYS: every call's keys, the calls in order. ARGV: K, then for each call
-- its script's name, its number of keys, its number of args, its args.
-- Returns the K replies in order. A call's error (an error reply, a Lua
-- error, a failed redis.call) is its reply alone and the calls after it
-- still run, as they would have, sent one by one; what a call wrote before
-- its error stays, as it would alone. A reply that is nil alone is false
-- here: Redis sends both as a null.
local S = {}
--@scripts
local out, ki, ai = {}, 0, 2
for n = 1, tonumber(ARGV[1]) do
  local f, nk, na = S[ARGV[ai]], tonumber(ARGV[ai + 1]), tonumber(ARGV[ai + 2])
  local keys, args = {unpack(KEYS, ki + 1, ki + nk)}, {unpack(ARGV, ai + 3, ai + 2 + na)}
  ki, ai = ki + nk, ai + 3 + na
  local ok, r
  if f then
    ok, r = pcall(f, keys, args)
  else
    ok, r = false, 'ERR batch: no script named ' .. tostring(ARGV[ai - 3 - na])
  end
  if not ok then
    -- Redis 7.0 raises a failed redis.call as its error text ("ERR ...",
    -- "READONLY ..."); later versions as a table with err. A Lua error has
    -- no code: Redis puts ERR before it when the script runs alone.
    if type(r) == 'table' and r.err then
      r = {err = r.err}
    else
      r = tostring(r)
      if not r:find('^%u[%u_]* ') then r = 'ERR ' .. r end
      r = {err = r}
    end
  elseif r == nil then
    r = false
  end
  out[n] = r
end
return out
