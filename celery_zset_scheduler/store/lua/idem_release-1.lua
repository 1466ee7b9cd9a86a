--[[
  Give up a running key after a failure, so a retry (or redelivery) may run it again.

  KEYS[1] record (the idempotency key's)
  ARGV[1] owner
  Returns 1 when released, 0 when this owner did not hold it.
]]
if redis.call('HGET', KEYS[1], 'state') == 'running' and redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
