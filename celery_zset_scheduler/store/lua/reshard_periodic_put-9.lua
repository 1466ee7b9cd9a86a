--[[
  Put moved periodic entries into their new shard (a reshard), once: each one put is marked with
  the digest of its packed form, so a run resumed after a crash puts nothing twice (a removal or
  a fire made here since is not undone).

  KEYS[1] periodic_names, KEYS[2] periodic_defs, KEYS[3] periodic_plan, KEYS[4] periodic_state,
  KEYS[5] periodic_tpl, KEYS[6] periodic_next, KEYS[7] periodic_run, KEYS[8] periodic_wake,
  KEYS[9] moved_in  HASH "p:" name -> digest of what a move put here
  ARGV[1] wake channel, ARGV[2] shard number, ARGV[3..] pairs: name, packed entry
  (as reshard_periodic_take packs it)

  Returns one value per entry: 1 put, 0 put by an earlier run, 2 an entry of that name was
  already here (written under the new layout meanwhile: it is kept).
]]
--- @include "wake"

local names, defs, plans, states, tpls, next_key, runs, pwake, moved_in = KEYS[1], KEYS[2], KEYS[3],
  KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local channel, shard = ARGV[1], ARGV[2]
local results = {}
for i = 3, #ARGV, 2 do
  local name, packed = ARGV[i], ARGV[i + 1]
  local digest = redis.sha1hex(packed)
  if redis.call('HGET', moved_in, 'p:' .. name) == digest then
    results[#results + 1] = 0
  elseif redis.call('ZSCORE', names, name) then
    redis.call('HSET', moved_in, 'p:' .. name, digest)
    results[#results + 1] = 2
  else
    local f = cmsgpack.unpack(packed)
    redis.call('ZADD', names, 0, name)
    if f[1] then redis.call('HSET', defs, name, f[1]) end
    if f[2] then redis.call('HSET', plans, name, f[2]) end
    if f[3] then redis.call('HSET', states, name, f[3]) end
    if f[4] then redis.call('HSET', tpls, name, f[4]) end
    if f[6] then redis.call('HSET', runs, name, f[6]) end
    if f[5] then
      redis.call('ZADD', next_key, f[5], name)
      wake_if_earlier(pwake, channel, 'p' .. shard, tonumber(f[5]))
    end
    redis.call('HSET', moved_in, 'p:' .. name, digest)
    results[#results + 1] = 1
  end
end
return results
