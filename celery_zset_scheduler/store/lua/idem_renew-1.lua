--[[
  Extend the lease of a running idempotency key, only for its owner.

  KEYS[1] record (the idempotency key's)
  ARGV[1] owner, ARGV[2] lease (ms)
  Returns 1 when renewed, 0 when the lease was lost (expired, or taken by a redelivery).
]]
if redis.call('HGET', KEYS[1], 'state') == 'running' and redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
  return 1
end
return 0
