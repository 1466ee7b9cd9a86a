--[[
  Record the shard count and format version on first use and return the recorded ones.

  KEYS[1] meta  HASH
  ARGV[1] shard count, ARGV[2] format version, ARGV[3] the first format that stored task ids
  packed, ARGV[4..] the previous format versions, which this client reads and so upgrades to
  ARGV[2] (clients of a previous version then refuse to start)
  Returns {recorded shard count, recorded format version, the count of a reshard under way or
  false, the count before the last reshard or false, '1' when the store may hold task ids as text
  members (written by format 4 or before: set by the upgrade) or false, the version this call
  upgraded the store from or 0}.

  Reads first and writes only what is missing: on a full store (noeviction at maxmemory) a write
  would be refused even when it changes nothing, and a dispatcher started then must still start.
]]
local fields = {'shards', 'version', 'moving_to', 'resharded_from', 'text_ids'}
local recorded = redis.call('HMGET', KEYS[1], unpack(fields))
local upgraded = 0
for i = 4, #ARGV do
  if recorded[2] == ARGV[i] then
    redis.call('HSET', KEYS[1], 'version', ARGV[2])
    if tonumber(ARGV[i]) < tonumber(ARGV[3]) then
      -- Every version before packed ids stored them as text: the members it wrote stay as they are.
      redis.call('HSET', KEYS[1], 'text_ids', '1')
      recorded[5] = '1'
    end
    recorded[2], upgraded = ARGV[2], tonumber(ARGV[i])
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
