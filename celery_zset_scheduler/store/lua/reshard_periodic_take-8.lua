--[[
  Take periodic entries out of a shard to move them to another one (a reshard): each given entry
  leaves every periodic key of the shard for the shard's moving area in one atomic step, so the
  leader (whose fire script is a compare-and-set on the entry's state) fires it here or, after
  this, never again here.

  KEYS[1] periodic_names, KEYS[2] periodic_defs, KEYS[3] periodic_plan, KEYS[4] periodic_state,
  KEYS[5] periodic_tpl, KEYS[6] periodic_next, KEYS[7] periodic_run,
  KEYS[8] moving_periodic  HASH name -> the entry, packed (MessagePack: defs, plan, state, tpl,
                           next look ms, overlap mark; false for a field it has none of)
  ARGV[1..] names

  Returns {name, packed} per entry taken; names that are not entries of the shard are left out.
]]
local names, defs, plans, states, tpls, next_key, runs, moving = KEYS[1], KEYS[2], KEYS[3], KEYS[4],
  KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local taken = {}
for i = 1, #ARGV do
  local name = ARGV[i]
  if redis.call('ZSCORE', names, name) then
    local packed = cmsgpack.pack({
      redis.call('HGET', defs, name) or false, redis.call('HGET', plans, name) or false,
      redis.call('HGET', states, name) or false, redis.call('HGET', tpls, name) or false,
      redis.call('ZSCORE', next_key, name) or false, redis.call('HGET', runs, name) or false,
    })
    redis.call('HSET', moving, name, packed)
    redis.call('ZREM', names, name)
    redis.call('ZREM', next_key, name)
    redis.call('HDEL', defs, name)
    redis.call('HDEL', plans, name)
    redis.call('HDEL', states, name)
    redis.call('HDEL', tpls, name)
    redis.call('HDEL', runs, name)
    taken[#taken + 1] = {name, packed}
  end
end
return taken
