--[[
  Begin (or find under way) a reshard of the store from one shard count to another.

  KEYS[1] meta  HASH
  ARGV[1] the shard count the store must have now, ARGV[2] the count to move to

  Returns {recorded shard count, the count of the move under way or false}: the move is under way
  (begun now or by an earlier run) when they are ARGV[1] and ARGV[2]; anything else was refused
  (another count recorded, or another move under way) and nothing was written.
]]
local shards, moving_to = unpack(redis.call('HMGET', KEYS[1], 'shards', 'moving_to'))
if shards ~= ARGV[1] or (moving_to and moving_to ~= ARGV[2]) then
  return {shards or false, moving_to or false}
end
redis.call('HSET', KEYS[1], 'moving_to', ARGV[2])
return {shards, ARGV[2]}
