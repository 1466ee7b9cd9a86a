--[[
  Cancel entries of one shard.

  KEYS[1] due, KEYS[2] msg, KEYS[3] inflight, KEYS[4] pending_keys, KEYS[5] id_keys, KEYS[6] big
  ARGV members (model/ids.py: a canonical UUID packed; its text, which an older version stored,
  is looked for too)
  Returns one value per id: 1 cancelled, -1 in flight (being published: too late to cancel here),
  0 not in this shard.
]]
--- @include "forget_key"
--- @include "ids"
--- @include "big"

local due, msg, inflight, pending_keys, id_keys, big = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local function cancel(id)
  if redis.call('ZREM', due, id) == 1 then
    redis.call('HDEL', msg, id)
    unmark_big(big, {id})
    forget_key(pending_keys, id_keys, id)
    return 1
  elseif redis.call('ZSCORE', inflight, id) then
    return -1
  end
  return 0
end

local results = {}
for i = 1, #ARGV do
  local result = cancel(ARGV[i])
  local legacy = legacy_of(ARGV[i])
  if result ~= 1 and legacy then
    local other = cancel(legacy)
    if other == 1 or result == 0 then result = other end
  end
  results[i] = result
end
return results
