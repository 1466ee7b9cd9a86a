--[[
  Cancel entries of one shard.

  KEYS[1] due, KEYS[2] msg, KEYS[3] inflight, KEYS[4] pending_keys, KEYS[5] id_keys
  ARGV ids
  Returns one value per id: 1 cancelled, -1 in flight (being published: too late to cancel here),
  0 not in this shard.
]]
--- @include "forget_key"

local due, msg, inflight, pending_keys, id_keys = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local results = {}
for i = 1, #ARGV do
  local id = ARGV[i]
  if redis.call('ZREM', due, id) == 1 then
    redis.call('HDEL', msg, id)
    forget_key(pending_keys, id_keys, id)
    results[i] = 1
  elseif redis.call('ZSCORE', inflight, id) then
    results[i] = -1
  else
    results[i] = 0
  end
end
return results
