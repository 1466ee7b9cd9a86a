--[[
  Record the shard count and format version on first use and return the recorded ones.

  KEYS[1] meta  HASH
  ARGV[1] shard count, ARGV[2] format version
  Returns {recorded shard count, recorded format version}.
]]
redis.call('HSETNX', KEYS[1], 'shards', ARGV[1])
redis.call('HSETNX', KEYS[1], 'version', ARGV[2])
return redis.call('HMGET', KEYS[1], 'shards', 'version')
