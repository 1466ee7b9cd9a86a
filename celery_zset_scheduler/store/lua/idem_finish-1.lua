--[[
  Record how a running key ended: 'done' (or 'failed' when failures are kept), for a while.

  KEYS[1] record (the idempotency key's)
  ARGV[1] owner, ARGV[2] state ('done' | 'failed'), ARGV[3] outcome (JSON), ARGV[4] ttl (ms)
  Returns 1 when recorded; 0 when this owner no longer held the key (its lease expired and a
  redelivery took it), in which case nothing is overwritten.
]]
local owner = redis.call('HGET', KEYS[1], 'owner')
if owner and owner ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'state', ARGV[2], 'owner', ARGV[1], 'outcome', ARGV[3])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[4]))
return 1
