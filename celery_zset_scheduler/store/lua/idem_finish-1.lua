--[[
  Record how a running key ended: 'done' (or 'failed' when failures are kept), for a while.

  KEYS[1] record (the idempotency key's)
  ARGV[1] owner, ARGV[2] state ('done' | 'failed'), ARGV[3] outcome (JSON), ARGV[4] ttl (ms),
  ARGV[5] the owner's fencing token
  Returns 1 when recorded under this owner's lease;
          2 when recorded although the lease had lapsed (the record was gone: nobody held the key,
            but another delivery may have run the body meanwhile);
          0 when another delivery holds or finished the key (a newer token): nothing is overwritten.
]]
local owner = redis.call('HGET', KEYS[1], 'owner')
if owner and owner ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'state', ARGV[2], 'owner', ARGV[1], 'outcome', ARGV[3], 'token', ARGV[5])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[4]))
if owner then
  return 1
end
return 2
