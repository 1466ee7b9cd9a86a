--[[
  End a reshard: the store's shard count becomes the target's, and the move is no longer under way.

  KEYS[1] meta  HASH
  ARGV[1] the count moved from, ARGV[2] the count moved to

  Returns {recorded shard count, the count of a move under way or false} after the call: a re-run
  after the end finds {ARGV[2], false} and changes nothing.
]]
local shards, moving_to = unpack(redis.call('HMGET', KEYS[1], 'shards', 'moving_to'))
if shards == ARGV[1] and moving_to == ARGV[2] then
  redis.call('HSET', KEYS[1], 'shards', ARGV[2], 'resharded_from', ARGV[1])
  redis.call('HDEL', KEYS[1], 'moving_to')
  return {ARGV[2], false}
end
return {shards or false, moving_to or false}
