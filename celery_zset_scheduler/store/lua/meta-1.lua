--[[
  Record the shard count and format version on first use and return the recorded ones.

  KEYS[1] meta  HASH
  ARGV[1] shard count, ARGV[2] format version, ARGV[3..] the previous format versions, which this
  client reads and so upgrades to ARGV[2] (clients of a previous version then refuse to start)
  Returns {recorded shard count, recorded format version, the count of a reshard under way or
  false, the count before the last reshard or false, '1' when the store may hold task ids as text
  members (written by format 4 or before: set by the upgrade) or false, 1 when this call upgraded
  the store or 0}.

  Reads first and writes only what is missing: on a full store (noeviction at maxmemory) a write
  would be refused even when it changes nothing, and a dispatcher started then must still start.
]]
local fields = {'shards', 'version', 'moving_to', 'resharded_from', 'text_ids'}
local recorded = redis.call('HMGET', KEYS[1], unpack(fields))
local upgraded = 0
for i = 3, #ARGV do
  if recorded[2] == ARGV[i] then
    -- Every version before 5 stored task ids as text: the members it wrote stay as they are.
    redis.call('HSET', KEYS[1], 'version', ARGV[2], 'text_ids', '1')
    recorded[2], recorded[5], upgraded = ARGV[2], '1', 1
    break
  end
end
if recorded[1] and recorded[2] then
  recorded[6] = upgraded
  return recorded
end
redis.call('HSETNX', KEYS[1], 'shards', ARGV[1])
redis.call('HSETNX', KEYS[1], 'version', ARGV[2])
recorded = redis.call('HMGET', KEYS[1], unpack(fields))
recorded[6] = upgraded
return recorded
