--[[
  Record the shard count and format version on first use and return the recorded ones.

  KEYS[1] meta  HASH
  ARGV[1] shard count, ARGV[2] format version, ARGV[3..] the previous format versions, which this
  client reads and so upgrades to ARGV[2] (clients of a previous version then refuse to start)
  Returns {recorded shard count, recorded format version, the count of a reshard under way or
  false, the count before the last reshard or false}.

  Reads first and writes only what is missing: on a full store (noeviction at maxmemory) a write
  would be refused even when it changes nothing, and a dispatcher started then must still start.
]]
local fields = {'shards', 'version', 'moving_to', 'resharded_from'}
local recorded = redis.call('HMGET', KEYS[1], unpack(fields))
for i = 3, #ARGV do
  if recorded[2] == ARGV[i] then
    redis.call('HSET', KEYS[1], 'version', ARGV[2])
    recorded[2] = ARGV[2]
    break
  end
end
if recorded[1] and recorded[2] then
  return recorded
end
redis.call('HSETNX', KEYS[1], 'shards', ARGV[1])
redis.call('HSETNX', KEYS[1], 'version', ARGV[2])
return redis.call('HMGET', KEYS[1], unpack(fields))
