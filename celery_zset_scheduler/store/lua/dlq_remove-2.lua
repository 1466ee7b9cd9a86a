--[[
  Remove dead letters (after a requeue, or a purge).

  KEYS[1] dlq_index, KEYS[2] dlq_data
  ARGV ids
  Returns how many were removed.
]]
local removed = 0
for i = 1, #ARGV do
  removed = removed + redis.call('ZREM', KEYS[1], ARGV[i])
  redis.call('HDEL', KEYS[2], ARGV[i])
end
return removed
