--[[
  Refresh this dispatcher's membership and list the live dispatchers.

  KEYS[1] members  ZSET dispatcher id -> heartbeat deadline (ms)
  ARGV[1] dispatcher id, ARGV[2] ttl (ms), ARGV[3] most members listed
  Returns {now ms, {live dispatcher ids}}. Expired members are removed here, so a dead
  dispatcher leaves the membership (and its shards are reassigned) one ttl after its last beat.
]]
--- @include "now"

local now = now_ms()
-- Pruning first: a script that has already written may grow memory on a full store, so a
-- dispatcher keeps its membership (and the fair share) while the store is being drained.
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
return {now, redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'LIMIT', 0, tonumber(ARGV[3]))}
